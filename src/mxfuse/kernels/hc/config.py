"""Tile sizes and work split of the boundary kernel: ``HcConfig``, the default rule and the measured table
(``configs.json`` beside this file, written by ``benchmarks/hc_boundary.py --sweep``)."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import triton

__all__ = ["HcConfig", "choose_config", "default_config"]

_TABLE = Path(__file__).with_name("configs.json")


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
    """The measured configuration for (H, token bucket, ordering) from ``configs.json`` (written by
    ``benchmarks/hc_boundary.py --sweep`` on an H200), else ``default_config``. The fused boundary and
    the unfused chain take the same one, so their reductions run in the same order."""
    ordering = "shifted" if shifted else "normal"
    found = _table().get((hidden, _bucket(tokens), ordering)) if sms == 132 else None
    return found if found is not None else default_config(tokens, hidden, sms=sms)
