"""What a boundary launch needs decided on the host: tile config, work split, ticket plan, workspace.

``default_config`` picks tiles per shape; ``Plan`` turns a config into item counts, the ticket layout
of the phases (see ``hc_boundary``) and workspace sizes; ``HcWorkspace`` owns the counters and scratch.
``HcParams``, the boundary's scalar parameters, lives here so the launchers can take it; it is public
as ``mxfuse.hc.HcParams``.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from mxfuse import MxfuseError

__all__ = [
    "RECORD",
    "HcConfig",
    "HcParams",
    "HcProjection",
    "HcWorkspace",
    "Plan",
    "choose_config",
    "default_config",
    "sm_count",
    "workspace_for",
]

RECORD = 32  # floats per phase-A record and per row of logits: the 24 partial logits, sum(R'^2) at 24

_TABLE = Path(__file__).with_name("hc_configs.json")


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
class HcProjection:
    """The mixes' projection weight ``fn`` prepared once (at model load) for the tensor-core mixes.

    ``weight``: fp32 [n(n+2), n*H], as given. ``pieces``: bf16 [3, n(n+2), n*H], the weight split into
    three bf16 values (``hi`` the nearest, then the nearest of each remainder: 8 + 8 + 8 significant
    bits, exact for |w| >= 2^-110, where every piece is a normal bf16), the split the kernel otherwise
    cuts from fp32 again in every step of every block of tokens.
    Both give the same products, so the same bits out. Make one with ``HcProjection.prepare(fn)`` and pass
    it as ``fn`` to ``mhc_boundary``; the torch reference and the CUDA-core mixes read ``weight``.
    """

    weight: torch.Tensor
    pieces: torch.Tensor

    def __post_init__(self) -> None:
        w, p = self.weight, self.pieces
        if not isinstance(w, torch.Tensor) or not isinstance(p, torch.Tensor):
            raise TypeError("HcProjection.weight and .pieces must be torch.Tensors; make it with prepare(fn)")
        if w.dtype != torch.float32 or w.dim() != 2:
            raise ValueError(f"HcProjection.weight must be 2-D float32; got {w.dtype} {tuple(w.shape)}")
        if (
            p.dtype != torch.bfloat16
            or tuple(p.shape) != (3, *w.shape)
            or p.device != w.device
            or not p.is_contiguous()
        ):
            raise ValueError(
                f"HcProjection.pieces must be contiguous bfloat16 [3, {w.shape[0]}, {w.shape[1]}] on {w.device}; "
                f"got {p.dtype} {tuple(p.shape)} on {p.device} (make it with HcProjection.prepare(fn))"
            )

    @classmethod
    def prepare(cls, fn: torch.Tensor) -> HcProjection:
        """The projection of ``fn`` (fp32, 2-D; kept, not copied) with its three bf16 pieces."""
        if not isinstance(fn, torch.Tensor):
            raise TypeError(f"fn must be a torch.Tensor; got {type(fn).__name__}")
        if fn.dtype != torch.float32 or fn.dim() != 2 or not fn.is_contiguous():
            raise ValueError(f"fn must be a contiguous 2-D float32 tensor; got {fn.dtype} {tuple(fn.shape)}")
        hi = fn.to(torch.bfloat16)
        rest = fn - hi.float()
        mid = rest.to(torch.bfloat16)
        lo = (rest - mid.float()).to(torch.bfloat16)
        return cls(fn, torch.stack([hi, mid, lo]).contiguous())


@dataclass(frozen=True)
class HcConfig:
    """Tile sizes and work split of the boundary kernel (``choose_config`` picks one per shape).

    block_t: tokens per block (the M of the mixes dot: 16, 32, 64 or 128; 1 to 16 with ``mix="fma"``).
    block_h: columns per step of phase A (the dot's K, a power of two 16..128). steps_a: steps per A
    item (block_h * steps_a must divide H). rows_s: rows per Sinkhorn item (a power of two <= block_t). words_f: 128-column
    words per step of a row's finish (a power of two <= 64; the row takes ceil(H / 128 / words_f)
    steps, and keeps the collapse in registers when it takes one). lag: blocks between a block's
    phase A and its finish in ticket order. launches: 1 (every phase in one launch, the finish waits on
    counters) or 2 (phase A, then the finish and Sinkhorn as a programmatic dependent launch).
    mix: how phase A multiplies R' by the projection weight: ``"dot"`` (three bf16 tensor-core
    products, exact; a block of at least 16 tokens) or ``"fma"`` (fp32 multiply-adds on the CUDA cores
    for blocks of 1 to 16 tokens: no operand staging, at most block_t * block_h = 256). stages: the
    software pipelining of phase A's steps (Triton's ``num_stages``; 1 turns it off and frees the shared
    memory its buffers hold). warps_f: the warps of a launch without A items (the second of two
    launches, and the unfused chain's finish): one row's finish is a program's serial work, which more
    warps shorten; 0 takes ``num_warps``. words_n: the shifted ordering's finish, split over items of
    ``words_n`` 128-column words of a row (a power of two <= 64; 0 takes ``words_f``): there the A items
    write the collapse and its partial sums of squares, so a row's finish is split over programs.
    """

    block_t: int
    block_h: int
    steps_a: int
    rows_s: int
    words_f: int
    lag: int
    num_warps: int = 4
    launches: int = 1
    mix: str = "dot"
    stages: int = 3
    warps_f: int = 0
    words_n: int = 0

    def check(self, hidden: int) -> None:
        """ValueError naming the field that does not fit ``hidden`` (a positive multiple of 128)."""

        def pow2(v: int) -> bool:
            return isinstance(v, int) and v >= 1 and v & (v - 1) == 0

        problems = []
        if self.mix not in ("dot", "fma"):
            problems.append(f"mix must be 'dot' or 'fma'; got {self.mix!r}")
        elif self.mix == "dot" and self.block_t not in (16, 32, 64, 128):
            problems.append(f"block_t must be 16, 32, 64 or 128 with mix='dot'; got {self.block_t}")
        elif self.mix == "fma" and not (pow2(self.block_t) and self.block_t <= 16):
            problems.append(f"block_t must be a power of two <= 16 with mix='fma'; got {self.block_t}")
        elif self.mix == "fma" and self.block_t * self.block_h > 256:
            problems.append(
                f"block_t * block_h must be <= 256 with mix='fma'; got {self.block_t} * {self.block_h}"
            )
        if not (pow2(self.block_h) and 16 <= self.block_h <= 128):
            problems.append(f"block_h must be a power of two in [16, 128]; got {self.block_h}")
        elif self.steps_a < 1 or hidden % (self.block_h * self.steps_a):
            problems.append(
                f"block_h * steps_a must divide H = {hidden}; got {self.block_h} * {self.steps_a}"
            )
        if not (pow2(self.rows_s) and self.rows_s <= self.block_t):
            problems.append(f"rows_s must be a power of two <= block_t; got {self.rows_s}")
        if not (pow2(self.words_f) and self.words_f <= 64):
            problems.append(f"words_f must be a power of two <= 64; got {self.words_f}")
        if self.lag < 0 or self.num_warps not in (1, 2, 4, 8, 16):
            problems.append(
                f"lag must be >= 0 and num_warps a power of two <= 16; got {self.lag}, {self.num_warps}"
            )
        if self.launches not in (1, 2):
            problems.append(f"launches must be 1 or 2; got {self.launches}")
        if not (self.words_n == 0 or (pow2(self.words_n) and self.words_n <= 64)):
            problems.append(f"words_n must be 0 or a power of two <= 64; got {self.words_n}")
        if self.warps_f not in (0, 1, 2, 4, 8, 16):
            problems.append(f"warps_f must be 0 or a power of two <= 16; got {self.warps_f}")
        if self.stages not in (1, 2, 3, 4):
            problems.append(f"stages must be 1, 2, 3 or 4; got {self.stages}")
        if problems:
            raise ValueError("config: " + "; ".join(problems))

    def to_json(self) -> dict:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


def _divisor_at_least(n: int, quotient_at_most: int) -> int:
    """The smallest divisor d of n with n / d <= quotient_at_most."""
    return next(d for d in range(1, n + 1) if n % d == 0 and n // d <= max(quotient_at_most, 1))


def default_config(tokens: int, hidden: int, *, sms: int = 132) -> HcConfig:
    """The config used when the table has none: the shape of the winners measured on an H200 at H = 5120
    (normal ordering, T = 1, 4, 16, 64 and 2048; benchmarks/hc_boundary_sweep.py, RESULTS.md), carried
    to the other hiddens, orderings and token counts.

    All of them launch twice (the A items, then the F and S items as a programmatic dependent launch)
    on 4 warps. Up to 4 tokens: phase A on the CUDA cores, blocks of 1, 2 or 4 rows, 32 columns a step
    (one step an item: 160 items at H = 5120), the finish in one step (v kept in registers). Up to 16:
    a tensor-core block of 16 with 16-column steps, two pipeline stages, about two A items per SM.
    Larger T: tensor-core blocks of 16 with 32-column steps, three stages, about one A item per SM; the
    finish in 32-word steps. The shifted ordering's split finish: items of one word up to 16 tokens (40
    items a row at H = 5120), four up to 128, else ``words_f``.
    """
    words = hidden // 128
    one_step = min(64, triton.next_power_of_2(words))
    if tokens <= 4:
        block_t = triton.next_power_of_2(max(tokens, 1))
        block_h, mix, stages, words_f, target = 32, "fma", 1, one_step, 2 * sms
    elif tokens <= 16:
        block_t, block_h, mix, stages, words_f, target = 16, 16, "dot", 2, min(32, one_step), 2 * sms
    else:
        block_t, block_h, mix, stages, words_f, target = 16, 32, "dot", 3, min(32, one_step), sms
    blocks = -(-max(tokens, 1) // block_t)
    steps_a = _divisor_at_least(hidden // block_h, max(1, round(target / blocks)))
    return HcConfig(
        block_t=block_t,
        block_h=block_h,
        steps_a=steps_a,
        rows_s=block_t,
        words_f=words_f,
        lag=0,
        num_warps=4,
        launches=2,
        mix=mix,
        stages=stages,
        words_n=1 if tokens <= 16 else (min(4, one_step) if tokens <= 128 else 0),
    )


def _bucket(tokens: int) -> int:
    """The table's token bucket of ``tokens``: the smallest listed T at least as large (powers of two)."""
    return 1 if tokens <= 1 else triton.next_power_of_2(tokens)


@functools.cache
def _table() -> dict[tuple[int, int, str], HcConfig]:
    if not _TABLE.exists():
        return {}
    data = json.loads(_TABLE.read_text(encoding="utf-8"))
    table = {}
    for entry in data.get("entries", []):
        config = HcConfig(**entry["config"])
        config.check(entry["hidden"])
        table[(entry["hidden"], entry["tokens"], entry["ordering"])] = config
    return table


def choose_config(tokens: int, hidden: int, *, shifted: bool, sms: int = 132) -> HcConfig:
    """The measured configuration for (H, token bucket, ordering) from ``hc_configs.json`` (written by
    ``benchmarks/hc_boundary.py --sweep`` on an H200), else ``default_config``. The fused boundary and
    the unfused chain take the same one, so their reductions run in the same order."""
    ordering = "shifted" if shifted else "normal"
    found = _table().get((hidden, _bucket(tokens), ordering)) if sms == 132 else None
    return found if found is not None else default_config(tokens, hidden, sms=sms)


@dataclass(frozen=True)
class Plan:
    """Item counts, ticket layout and workspace sizes of one launch of phases (A, F, S)."""

    blocks: int
    splits_a: int
    items_f: int
    items_s: int
    round_size: int
    offsets: tuple[int, int]
    lag: int
    total: int
    n_counters: int
    n_scratch: int
    mix_offset: int

    @staticmethod
    def make(
        tokens: int, hidden: int, config: HcConfig, *, phases: tuple[int, int, int], split: bool = False
    ) -> Plan:
        """``split``: the finish split over ``split_chunks`` items a row (the shifted ordering)."""
        has_a, has_f, has_s = phases
        bt = config.block_t
        blocks = -(-tokens // bt)
        splits_a = hidden // (config.block_h * config.steps_a)
        rows_f = min(bt, tokens)
        items_f = rows_f * (split_chunks(hidden, config) if split else 1)
        items_s = -(-rows_f // config.rows_s)
        sizes = (splits_a * has_a, items_f * has_f, items_s * has_s)
        lag = config.lag if has_a and (has_f or has_s) else 0
        rounds = blocks + lag
        part_a = blocks * splits_a * bt * RECORD
        return Plan(
            blocks=blocks,
            splits_a=splits_a,
            items_f=items_f,
            items_s=items_s,
            round_size=sum(sizes),
            offsets=(sizes[0], sizes[0] + sizes[1]),
            lag=lag,
            total=rounds * sum(sizes),
            n_counters=2 + 3 * blocks,
            n_scratch=part_a + blocks * bt * RECORD,
            mix_offset=part_a,
        )


def split_words(config: HcConfig) -> int:
    """128-column words per item of the split finish (the shifted ordering)."""
    return config.words_n or config.words_f


def split_chunks(hidden: int, config: HcConfig) -> int:
    """Items of the split finish per row."""
    return -(-(hidden // 128) // split_words(config))


# ---------------------------------------------------------------------------------------------
# Workspace: counters and partial records, per device, grown on demand and never freed.


class HcWorkspace:
    """Counters, partial records, the collapse buffer and its partial sums of squares of the boundary
    kernels on one device.

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
        self._vp = torch.empty(0, dtype=torch.float32, device=self.device)
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

    def partials(self, n: int) -> torch.Tensor:
        """At least ``n`` fp32 partial sums of squares of the collapse (16 columns each)."""
        self._vp = self._grow(self._vp, max(n, 1), "partial sums of squares")
        return self._vp

    def reserve(self, tokens: int, hidden: int, config: HcConfig | None = None) -> None:
        """Grow now to what a boundary of ``tokens`` x ``hidden`` (pair only, either ordering) needs."""
        plan = Plan.make(tokens, hidden, config or default_config(tokens, hidden), phases=(1, 1, 1))
        self.buffers(plan.n_counters, plan.n_scratch, tokens * hidden)
        self.partials(tokens * (hidden // 16))


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
