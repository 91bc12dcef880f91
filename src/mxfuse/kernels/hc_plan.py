"""What a boundary launch needs decided on the host: tile config, work split, ticket plan, workspace.

``default_config`` picks tiles per shape; ``Plan`` turns a config into item counts, the ticket layout
of the phases (see ``hc_boundary``) and workspace sizes; ``HcWorkspace`` owns the counters and scratch.
``HcParams``, the boundary's scalar parameters, lives here so the launchers can take it; it is public
as ``mxfuse.hc.HcParams``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import triton

from mxfuse import MxfuseError

__all__ = [
    "RECORD",
    "HcConfig",
    "HcParams",
    "HcWorkspace",
    "Plan",
    "default_config",
    "sm_count",
    "workspace_for",
]

RECORD = 32  # floats per phase-A record: the 24 partial logits, then sum(R'^2) at 24, sum(v^2) at 25


@dataclass(frozen=True)
class HcParams:
    """The boundary's scalar parameters, validated once here (the defaults are DeepSeek-V4's).

    hc_norm_eps: added to the mean square of R' before the mixes' rsqrt (step 2). hc_pre_eps: added to
    ``sigmoid`` of the pre logits (step 3). hc_post_scale: multiplies ``sigmoid`` of the post logits
    (2.0 in every V4/V4.1 config). sinkhorn_eps: added to the softmax and to every row/column sum of
    the Sinkhorn normalisation. sinkhorn_iters: Sinkhorn iterations (the first is a column step alone).
    rms_eps, rms_scale: the RMSNorm's eps and the factor on its weight (step 5). V4's configs set
    ``hc_eps`` = 1e-6 and ``rms_norm_eps`` = 1e-6 (V4.1-Flash: 1e-20). Fields hold Python ``float``
    and ``int`` (other real numbers are converted); eps values must be finite and >= 0, the scales
    finite, sinkhorn_iters an int >= 1. Bad values raise TypeError or ValueError naming the field.
    """

    hc_norm_eps: float = 1e-6
    hc_pre_eps: float = 1e-6
    hc_post_scale: float = 2.0
    sinkhorn_eps: float = 1e-6
    sinkhorn_iters: int = 20
    rms_eps: float = 1e-6
    rms_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("hc_norm_eps", "hc_pre_eps", "sinkhorn_eps", "rms_eps"):
            object.__setattr__(self, name, _finite_real(self, name, non_negative=True))
        for name in ("hc_post_scale", "rms_scale"):
            object.__setattr__(self, name, _finite_real(self, name, non_negative=False))
        iters = self.sinkhorn_iters
        if isinstance(iters, bool) or not isinstance(iters, numbers.Integral):
            raise TypeError(f"HcParams.sinkhorn_iters must be an int; got {iters!r}")
        if iters < 1:
            raise ValueError(f"HcParams.sinkhorn_iters must be >= 1; got {iters!r}")
        object.__setattr__(self, "sinkhorn_iters", int(iters))


def _finite_real(params: HcParams, name: str, *, non_negative: bool) -> float:
    value = getattr(params, name)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise TypeError(f"HcParams.{name} must be a finite real number; got {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"HcParams.{name} must be >= 0; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class HcConfig:
    """Tile sizes and work split of the boundary kernel (``default_config`` picks one per shape).

    block_t: tokens per block (the M of the mixes dot; 16, 32, 64 or 128). block_h: columns per step
    of phase A (the dot's K, a power of two 16..128). steps_a: steps per A item (block_h * steps_a
    must divide H). rows_r / splits_r: rows and records per load of phase R (powers of two, rows_r
    dividing block_t). rows_n / words_n: rows and 128-column scale words per step of phases N1/N2
    (powers of two; rows_n divides block_t, words_n divides H / 128). steps_n: steps per N item
    (words_n * steps_n divides H / 128). lag: blocks between consecutive phases in ticket order.
    """

    block_t: int
    block_h: int
    steps_a: int
    rows_r: int
    splits_r: int
    rows_n: int
    words_n: int
    steps_n: int
    lag: int
    num_warps: int = 4

    def check(self, hidden: int) -> None:
        """ValueError naming the field that does not fit ``hidden`` (a positive multiple of 128)."""

        def pow2(v: int) -> bool:
            return v >= 1 and v & (v - 1) == 0

        problems = []
        if self.block_t not in (16, 32, 64, 128):
            problems.append(f"block_t must be 16, 32, 64 or 128; got {self.block_t}")
        if not (pow2(self.block_h) and 16 <= self.block_h <= 128):
            problems.append(f"block_h must be a power of two in [16, 128]; got {self.block_h}")
        elif self.steps_a < 1 or hidden % (self.block_h * self.steps_a):
            problems.append(
                f"block_h * steps_a must divide H = {hidden}; got {self.block_h} * {self.steps_a}"
            )
        if not (pow2(self.rows_r) and self.rows_r <= self.block_t and pow2(self.splits_r)):
            problems.append(
                f"rows_r (<= block_t) and splits_r must be powers of two; got {self.rows_r}, {self.splits_r}"
            )
        if not (pow2(self.rows_n) and self.rows_n <= self.block_t):
            problems.append(f"rows_n must be a power of two <= block_t; got {self.rows_n}")
        if not pow2(self.words_n) or self.steps_n < 1 or (hidden // 128) % (self.words_n * self.steps_n):
            problems.append(
                f"words_n * steps_n must divide H / 128 = {hidden // 128}; got {self.words_n} * {self.steps_n}"
            )
        if self.lag < 0 or self.num_warps not in (1, 2, 4, 8, 16):
            problems.append(
                f"lag must be >= 0 and num_warps a power of two <= 16; got {self.lag}, {self.num_warps}"
            )
        if problems:
            raise ValueError("config: " + "; ".join(problems))


def _divisor_at_least(n: int, quotient_at_most: int) -> int:
    """The smallest divisor d of n with n / d <= quotient_at_most."""
    return next(d for d in range(1, n + 1) if n % d == 0 and n // d <= max(quotient_at_most, 1))


def default_config(tokens: int, hidden: int, *, sms: int = 132) -> HcConfig:
    """The config used when none is given: about two post-step items per SM, ~2K-element tiles.

    A first guess from the shapes (not yet measured on a GPU); benchmarks/hc_boundary.py --sweep times
    the alternatives. Blocks of 64 tokens use 32-column steps and 8 warps so the five [64, 32] input
    tiles and the four R' tiles of a step stay in registers.
    """
    block_t = 16 if tokens <= 16 else 32 if tokens <= 64 else 64
    blocks = -(-max(tokens, 1) // block_t)
    block_h, num_warps = (32, 8) if block_t == 64 else (64, 4)
    want = max(1, round(2 * sms / blocks))
    steps_a = _divisor_at_least(hidden // block_h, want)
    splits = hidden // (block_h * steps_a)
    splits_r = min(128, triton.next_power_of_2(splits))
    rows_r = max(1, min(block_t, 4096 // (splits_r * RECORD)))
    words = hidden // 128
    words_n = 1
    while words_n < 8 and words % (2 * words_n) == 0 and blocks * words // (2 * words_n) >= sms:
        words_n *= 2
    steps_n = _divisor_at_least(words // words_n, want)
    rows_n = min(block_t, max(1, 2048 // (128 * words_n)))
    return HcConfig(
        block_t=block_t,
        block_h=block_h,
        steps_a=steps_a,
        rows_r=rows_r,
        splits_r=splits_r,
        rows_n=rows_n,
        words_n=words_n,
        steps_n=steps_n,
        lag=0 if blocks <= 2 else 1,
        num_warps=num_warps,
    )


@dataclass(frozen=True)
class Plan:
    """Item counts, ticket layout and workspace sizes of one launch."""

    blocks: int
    splits_a: int
    items_r: int
    splits_n: int
    round_size: int
    offsets: tuple[int, int, int]
    lags: tuple[int, int, int]
    total: int
    n_counters: int
    n_scratch: int
    part_n_offset: int
    stat_offset: int

    @staticmethod
    def make(tokens: int, hidden: int, config: HcConfig, *, phases: tuple[int, int, int, int]) -> Plan:
        has_a, has_r, has_n1, has_n2 = phases
        bt = config.block_t
        blocks = -(-tokens // bt)
        splits_a = hidden // (config.block_h * config.steps_a)
        items_r = -(-min(bt, tokens) // config.rows_r)
        splits_n = hidden // (128 * config.words_n * config.steps_n)
        sizes = (splits_a * has_a, items_r * has_r, splits_n * has_n1, splits_n * has_n2)
        offsets = (sizes[0], sizes[0] + sizes[1], sizes[0] + sizes[1] + sizes[2])
        present = [bool(p) for p in phases]
        lag_of = [config.lag * sum(present[:q]) for q in range(4)]
        rounds = blocks + config.lag * (sum(present) - 1)
        part_a = blocks * splits_a * bt * RECORD * has_a
        part_n = blocks * splits_n * bt * has_n1
        return Plan(
            blocks=blocks,
            splits_a=splits_a,
            items_r=items_r,
            splits_n=splits_n,
            round_size=sum(sizes),
            offsets=offsets,
            lags=(lag_of[1], lag_of[2], lag_of[3]),
            total=rounds * sum(sizes),
            n_counters=1 + 4 * blocks,
            n_scratch=part_a + part_n + blocks * bt,
            part_n_offset=part_a,
            stat_offset=part_a + part_n,
        )


# ---------------------------------------------------------------------------------------------
# Workspace: counters and partial records, per device, grown on demand and never freed.


class HcWorkspace:
    """Counters, partial records and the collapse buffer of the boundary kernels on one device.

    Counters start at zero and the kernels leave them at zero. Buffers grow when a call needs more;
    a grown-out buffer is kept alive, because a captured CUDA graph may still point at it. Growing
    during CUDA-graph capture is refused: run the same shape once before capturing, or ``reserve``.
    Two launches running at the same time on different streams need two workspaces.
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self._counters = torch.zeros(0, dtype=torch.int32, device=self.device)
        self._scratch = torch.empty(0, dtype=torch.float32, device=self.device)
        self._v = torch.empty(0, dtype=torch.bfloat16, device=self.device)
        self._retired: list[torch.Tensor] = []

    def _grow(self, have: torch.Tensor, need: int, what: str) -> torch.Tensor:
        if have.numel() >= need:
            return have
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise MxfuseError(
                f"the hyper-connection workspace needs {need} elements of {what} and holds {have.numel()}: "
                "it cannot grow during CUDA-graph capture; run the boundary once at this shape before "
                "capturing, or call HcWorkspace.reserve"
            )
        self._retired.append(have)
        size = max(need, 2 * have.numel())
        if have.dtype == torch.int32:
            return torch.zeros(size, dtype=have.dtype, device=self.device)
        return torch.empty(size, dtype=have.dtype, device=self.device)

    def buffers(self, counters: int, scratch: int, v: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Views of at least the given numbers of int32 counters, fp32 scratch and bf16 collapse values."""
        self._counters = self._grow(self._counters, max(counters, 1), "counters")
        self._scratch = self._grow(self._scratch, max(scratch, 1), "scratch")
        self._v = self._grow(self._v, max(v, 1), "collapse values")
        return self._counters, self._scratch, self._v

    def reserve(self, tokens: int, hidden: int, config: HcConfig | None = None) -> None:
        """Grow now to what a boundary of ``tokens`` x ``hidden`` (pair only) needs."""
        plan = Plan.make(tokens, hidden, config or default_config(tokens, hidden), phases=(1, 1, 1, 1))
        self.buffers(plan.n_counters, plan.n_scratch, tokens * hidden)


_WORKSPACES: dict[torch.device, HcWorkspace] = {}


def workspace_for(device: torch.device | str) -> HcWorkspace:
    """The workspace the boundary uses on ``device`` when the caller passes none."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in _WORKSPACES:
        _WORKSPACES[device] = HcWorkspace(device)
    return _WORKSPACES[device]


_SM_COUNTS: dict[torch.device, int] = {}


def sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (132 on an H200; what a MIG slice or another GPU has otherwise)."""
    if device.type != "cuda":
        return 132
    if device not in _SM_COUNTS:
        _SM_COUNTS[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNTS[device]
