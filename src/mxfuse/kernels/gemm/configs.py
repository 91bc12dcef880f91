"""Launch configurations of the MXFP8 GEMM: the dataclass, the default rule, and the measured table.

``choose_config(m, n, k, device_name=...)`` returns the table's entry for the device, the weight's
``[N, K]`` and the smallest M bucket holding ``m`` (``configs.json`` beside this file, package
data), and ``default_config`` where the table has none. Nothing is timed at run time: the table is
written by ``benchmarks/mxfp8_gemm_sweep.py`` (its ``--table`` output) and checked in; it is read once,
on first use.

Table format::

    {"format": 1,
     "devices": {"NVIDIA H200": {"source": "...",
                                 "shapes": {"7168x16384": [{"m_max": 4, "config": {...}}, ...]}}}}

Entries of a shape are in increasing ``m_max``; ``m`` above the last bucket takes the last entry.
``config`` holds ``GemmConfig`` fields by name.

A device without entries of its own reads those of its stand-in (``TABLE_STANDINS``, used by every
measured table of the Hopper kernels through ``device_entries``) until a sweep on it lands;
``MXFUSE_TABLE_STANDINS=0`` turns the stand-ins off (a sweep's baseline, an A/B of the two tables).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, fields
from importlib import resources
from typing import TypeVar

import triton

from mxfuse.kernels.splitk import split_for

C = TypeVar("C")  # a launch-configuration dataclass
T = TypeVar("T")  # one device's entries

__all__ = [
    "KINDS",
    "TABLE_FILE",
    "TABLE_STANDINS",
    "GemmConfig",
    "choose_config",
    "config_table",
    "default_config",
    "device_entries",
    "entries_owner",
    "parse_table",
]

KINDS = ("gemv", "stream", "dq16", "mma8", "fold")
TABLE_FILE = "configs.json"

# The device whose measured entries a device without its own reads. The H100 SXM is the H200's GH100
# with the same 132 SMs and clocks (sm_90a, 1980 MHz); it has less and slower memory (80 GB HBM3 at
# 3.35 TB/s against 141 GB HBM3e at 4.8 TB/s), so an entry chosen on the H200 is a measured
# configuration for its SMs, not a measured win on the H100's memory. The same holds the other way: the
# H200 reads a table swept on the H100 alone (the grouped wo_a's first Gluon entries).
TABLE_STANDINS: dict[str, str] = {
    "NVIDIA H100 80GB HBM3": "NVIDIA H200",
    "NVIDIA H200": "NVIDIA H100 80GB HBM3",
}


def entries_owner(table: dict[str, T], device_name: str | None) -> str | None:
    """The device whose entries in ``table`` ``device_name`` reads: itself when listed, else its stand-in
    (``TABLE_STANDINS``) when listed and the environment does not set ``MXFUSE_TABLE_STANDINS=0``, else
    None."""
    name = device_name or ""
    if name in table:
        return name
    standin = TABLE_STANDINS.get(name)
    if standin is None or standin not in table or os.environ.get("MXFUSE_TABLE_STANDINS", "1") == "0":
        return None
    return standin


def device_entries(table: dict[str, T], device_name: str | None) -> T | dict:
    """``table``'s entries for ``device_name`` (``entries_owner``'s), else none (``{}``)."""
    owner = entries_owner(table, device_name)
    return {} if owner is None else table[owner]


@dataclass(frozen=True)
class GemmConfig:
    """One launch configuration.

    ``kind``: ``"gemv"`` (CUDA cores, M <= 4; ``block_g`` = 16-element chunks of K per step), ``"stream"``
    (CUDA cores, M <= 4, each thread one chunk of several rows: ``block_g`` = 16-element chunks of a row
    per step, ``block_n`` a multiple of ``32 * num_warps / block_g``: ``stream``), ``"dq16"``
    (fp16 dots on dequantized tiles promoted per step; ``block_g`` = 32-wide groups per step),
    ``"mma8"`` (one FP8 dot per 32-wide group; ``block_g`` = dots per step) or ``"fold"`` (16-bit dots
    with the scales folded into the operands, no promotion in the loop; ``block_g`` = groups per loop
    step). ``swap_ab`` puts weight rows in the MMA's M slot. ``bits``: the gemv converts E4M3 by moving
    bits. ``operand`` (``"f16"`` / ``"bf16"``), ``cvt`` (``"cast"`` / ``"bits"`` / ``"asm"``), ``act``
    (``"inloop"``: the activation folded in the K loop; ``"prefold"``: by a first launch), ``wscale``
    (``"operand"``: the weight's scales folded into its 16-bit operand, one dot per step; ``"acc"``: onto
    each group's fp32 sum, one dot per group), ``w_bias`` (operand mode, f16: the weight scale byte
    folded as 2**0; bytes outside [w_bias - 14, w_bias + 7] take the exact path) and ``pdl``
    (programmatic dependent launch) apply to ``fold``.
    """

    kind: str
    block_m: int
    block_n: int
    block_g: int
    split_k: int
    num_warps: int
    num_stages: int
    swap_ab: bool = False
    bits: bool = False
    operand: str = "f16"
    cvt: str = "cast"
    act: str = "inloop"
    wscale: str = "operand"
    w_bias: int = 120
    pdl: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"GemmConfig.kind must be one of {KINDS}; got {self.kind!r}")
        for name in ("block_m", "block_n", "block_g", "split_k", "num_warps", "num_stages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GemmConfig.{name} must be an int >= 1; got {value!r}")
        for name in ("block_m", "block_n", "num_warps"):
            value = getattr(self, name)
            if value & (value - 1):
                raise ValueError(f"GemmConfig.{name} must be a power of two; got {value}")
        if isinstance(self.w_bias, bool) or not isinstance(self.w_bias, int) or not 14 <= self.w_bias <= 247:
            raise ValueError(f"GemmConfig.w_bias must be an int in [14, 247]; got {self.w_bias!r}")
        if self.wscale not in ("operand", "acc"):
            raise ValueError(f"GemmConfig.wscale must be 'operand' or 'acc'; got {self.wscale!r}")
        if self.act not in ("inloop", "prefold") or (self.act == "prefold" and self.wscale != "operand"):
            raise ValueError(
                f"GemmConfig.act must be 'inloop' or 'prefold' (the latter with wscale 'operand'); "
                f"got {self.act!r} with wscale {self.wscale!r}"
            )
        if self.kind == "fold" and self.wscale == "acc" and self.block_g not in (1, 2, 4):
            raise ValueError(f"GemmConfig.block_g must be 1, 2 or 4 with wscale 'acc'; got {self.block_g}")
        threads = 32 * self.num_warps
        if self.kind == "stream" and (
            self.block_g > threads or threads % self.block_g or self.block_n % (threads // self.block_g)
        ):
            raise ValueError(
                f"GemmConfig.block_g ({self.block_g}) must divide 32 * num_warps ({threads}) and "
                f"block_n ({self.block_n}) be a multiple of their quotient for the stream kernel"
            )
        if self.operand not in ("f16", "bf16"):
            raise ValueError(f"GemmConfig.operand must be 'f16' or 'bf16'; got {self.operand!r}")
        if self.cvt not in ("cast", "bits", "asm") or (self.cvt != "cast" and self.operand != "f16"):
            raise ValueError(
                f"GemmConfig.cvt must be 'cast', 'bits' or 'asm' (the last two with operand 'f16'); "
                f"got {self.cvt!r} with operand {self.operand!r}"
            )

    def to_json(self) -> dict:
        return asdict(self)


def default_config(m: int, n: int, k: int, *, num_sms: int = 132) -> GemmConfig:
    """The configuration where the table has none, shaped like the H200 sweeps' winners
    (benchmarks/log/mxfp8-gemm.md):

    * m <= 4: the stream kernel, 4 weight rows per program, each row's 2048-byte step spread over the
      program's 128 threads, split-K only where 4-row programs would fill the GPU less than twice
      (every swept shape took no split: 20.1 us at M = 1 on 5120 x 8192 against 25.1 for bf16 cuBLAS);
    * m <= 32: one FP8 dot per 32-K group, weights in the MMA's M slot (64 rows), split-K until about
      3.4 programs per SM (11.4 us at m = 4 and 11.7 at m = 16 on 1792 x 5120 with split 16);
    * m <= 64: fp16 dots on dequantized 64 x 128 x 128 tiles, split-K to fill the GPU once (20.4 us on
      1792 x 5120, 100.7 on 7168 x 16384);
    * above: FP8 dots per group on 64 x 128 tiles.
    """
    groups = k // 32
    if m <= 4:
        split = split_for(triton.cdiv(n, 4), groups // 64, target=2 * num_sms)
        return GemmConfig("stream", triton.next_power_of_2(m), 4, 128, split, 4, 1)
    if m <= 32:
        block_m = max(16, triton.next_power_of_2(m))
        split = split_for(triton.cdiv(n, 64), groups // 4, target=448)
        return GemmConfig("mma8", block_m, 64, 4, split, 4, 3, swap_ab=True)
    if m <= 64:
        split = split_for(triton.cdiv(n, 128), groups // 4, target=3 * num_sms // 4)
        return GemmConfig("dq16", 64, 128, 4, split, 4, 3, swap_ab=True)
    tiles = triton.cdiv(n, 128) * triton.cdiv(m, 64)
    split = split_for(tiles, groups // 4, target=num_sms, most=2)
    return GemmConfig("mma8", 64, 128, 4, split, 4, 3)


def parse_table(
    data: object, *, source: str, config_type: type[C] = GemmConfig
) -> dict[str, dict[tuple[int, int], list[tuple[int, C]]]]:
    """``{device: {(n, k): [(m_max, config), ...]}}`` from a table's JSON, each config a ``config_type``
    (a frozen dataclass that checks its own fields: ``GemmConfig``, or the Gluon kernel's
    ``GluonConfig``); ValueError naming ``source`` and the entry for anything malformed."""
    if not isinstance(data, dict) or data.get("format") != 1 or not isinstance(data.get("devices"), dict):
        raise ValueError(f"{source}: expected an object with 'format': 1 and 'devices'")
    known = {f.name for f in fields(config_type)}
    table: dict[str, dict[tuple[int, int], list[tuple[int, C]]]] = {}
    for device, entry in data["devices"].items():
        shapes = entry.get("shapes") if isinstance(entry, dict) else None
        if not isinstance(shapes, dict):
            raise ValueError(f"{source}: devices[{device!r}] needs a 'shapes' object")
        table[device] = {}
        for shape, buckets in shapes.items():
            where = f"{source}: devices[{device!r}].shapes[{shape!r}]"
            try:
                n, k = (int(v) for v in shape.split("x"))
            except ValueError:
                raise ValueError(f"{where}: the key must be 'NxK'") from None
            if not isinstance(buckets, list) or not buckets:
                raise ValueError(f"{where}: expected a non-empty list of {{'m_max', 'config'}}")
            parsed = []
            for i, bucket in enumerate(buckets):
                cfg = bucket.get("config") if isinstance(bucket, dict) else None
                m_max = bucket.get("m_max") if isinstance(bucket, dict) else None
                if (
                    isinstance(m_max, bool)
                    or not isinstance(m_max, int)
                    or not isinstance(cfg, dict)
                    or set(cfg) - known
                ):
                    raise ValueError(
                        f"{where}[{i}]: needs an int 'm_max' and 'config' with {config_type.__name__} fields"
                    )
                try:
                    parsed.append((m_max, config_type(**cfg)))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{where}[{i}]: {exc}") from None
            if [b[0] for b in parsed] != sorted({b[0] for b in parsed}):
                raise ValueError(f"{where}: m_max must increase strictly")
            table[device][(n, k)] = parsed
    return table


@functools.cache
def config_table() -> dict[str, dict[tuple[int, int], list[tuple[int, GemmConfig]]]]:
    """The checked-in table, parsed once."""
    text = resources.files("mxfuse.kernels.gemm").joinpath(TABLE_FILE).read_text()
    return parse_table(json.loads(text), source=TABLE_FILE)


def choose_config(
    m: int,
    n: int,
    k: int,
    *,
    device_name: str | None = None,
    num_sms: int = 132,
    table: dict[str, dict[tuple[int, int], list[tuple[int, GemmConfig]]]] | None = None,
) -> GemmConfig:
    """The table's configuration for ``device_name`` and an ``[m, k] x [n, k]`` product, else
    ``default_config``. ``table``: a parsed table to read instead of the checked-in one (a sweep's new
    table, before it is merged)."""
    buckets = device_entries(config_table() if table is None else table, device_name).get((n, k))
    if buckets:
        config = next((c for m_max, c in buckets if m <= m_max), buckets[-1][1])
        if config.kind not in ("gemv", "stream") or m <= config.block_m:  # all M rows in one program
            return config
    return default_config(m, n, k, num_sms=num_sms)
