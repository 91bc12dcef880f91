"""Launch configurations of the decode attention: ``MqaConfig`` and the checked-in table (``configs.json``
beside this file, written by ``benchmarks/attention.py --sweep``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import triton

__all__ = ["TABLE_FILE", "MqaConfig", "choose_mqa_config"]

TABLE_FILE = "configs.json"


@dataclass(frozen=True)
class MqaConfig:
    """One launch configuration: keys per tile, heads per program, output-dim parts, splits per sequence,
    the split kernel's warps and pipeline stages, whether the combine is a programmatic dependent launch
    of the split kernel (sm_90+), and the fewest key tiles a split takes (``splits`` is the most splits a
    sequence uses; a shorter one uses fewer)."""

    block_n: int = 32
    block_m: int = 64
    d_parts: int = 1
    splits: int = 32
    num_warps: int = 8
    num_stages: int = 2
    pdl: bool = False
    min_tiles: int = 1

    def __post_init__(self) -> None:
        for name in ("block_n", "block_m", "num_warps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"MqaConfig.{name} must be a positive power of two; got {value!r}")
        if self.block_n < 16 or self.block_m < 16:
            raise ValueError(f"MqaConfig block_n and block_m must be >= 16 (an MMA tile); got {self}")
        if self.d_parts not in (1, 2):
            raise ValueError(f"MqaConfig.d_parts must be 1 or 2; got {self.d_parts!r}")
        if not isinstance(self.splits, int) or not 1 <= self.splits <= 1024:
            raise ValueError(f"MqaConfig.splits must be an integer in [1, 1024]; got {self.splits!r}")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"MqaConfig.num_stages must be a positive integer; got {self.num_stages!r}")
        if not isinstance(self.min_tiles, int) or not 1 <= self.min_tiles <= 4096:
            raise ValueError(f"MqaConfig.min_tiles must be an integer in [1, 4096]; got {self.min_tiles!r}")
        if not isinstance(self.pdl, bool):
            raise ValueError(f"MqaConfig.pdl must be a bool; got {self.pdl!r}")


@lru_cache(maxsize=1)
def _config_table() -> dict:
    """The checked-in table written by ``benchmarks/attention.py --sweep`` (see its docstring)."""
    text = resources.files("mxfuse.kernels.attention").joinpath(TABLE_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def _bucket(value: int, edges: list[int]) -> int:
    for edge in edges:
        if value <= edge:
            return edge
    return edges[-1]


def choose_mqa_config(
    sequences: int, new_tokens: int, heads: int, head_dim: int, *, multiprocessors: int = 132
) -> MqaConfig:
    """The launch configuration for a shape, from the checked-in table.

    The table is keyed by the row count of one sequence (``new_tokens * heads``) and by a bucket of B;
    its splits are the best measured for that bucket on the device it was swept on, then scaled to
    ``multiprocessors``. Shapes the table lacks take its default row, with splits chosen so
    ``B x splits x programs per split`` is about two waves.
    """
    table = _config_table()
    rows = new_tokens * heads
    entry = dict(table["default"])
    key = f"rows{_bucket(rows, table['row_buckets'])}_b{_bucket(sequences, table['b_buckets'])}_d{head_dim}"
    entry.update(table["configs"].get(key, {}))
    block_m = min(entry["block_m"], max(16, triton.next_power_of_2(rows)))
    splits = entry.get("splits")
    if splits is None:
        programs = sequences * triton.cdiv(rows, block_m) * entry["d_parts"]
        splits = max(1, min(entry["max_splits"], math.ceil(2 * multiprocessors / programs)))
    return MqaConfig(
        block_n=entry["block_n"],
        block_m=block_m,
        d_parts=entry["d_parts"],
        splits=splits,
        num_warps=entry["num_warps"],
        num_stages=entry["num_stages"],
        pdl=entry.get("pdl", False),
        min_tiles=entry.get("min_tiles", 1),
    )
