"""Host side of the Gluon decode GEMM (``gluon_decode``, sm_90a): its configuration, the measured table, the
two launches.

``launch_gluon_decode(ops)`` runs, on one stream:

1. ``gluon_prep_kernel`` (Triton): the activation dequantized to bf16 (exact inside the scale window
   ``[W_LO, W_HI]``), a per-token flag, and the exact fallback for flagged tokens (``gluon_prep``);
2. ``mxfp8_gluon_decode_kernel`` (Gluon): TMA ring, weights converted to bf16 in registers, async wgmma,
   split-K summed in split order by the last split to arrive.

The weight's own scale bytes must lie in the window wherever its codes are nonzero (or be 0xFF): that is
checked once, on the host, when a weight is prepared for the ``gluon`` backend (``weight_in_window``);
the backend refuses other weights, and the automatic route passes over it for them. A prepared weight
written in place afterwards is refused by ``mxfp8_gemm`` until prepared again (``MxWeight.checked``).

Configurations are data: ``gluon_configs.json`` beside this file holds, per device and ``[N, K]``, the
M buckets where a GPU sweep (``benchmarks/mxfp8_gemm_sweep.py --kernel gluon``) measured this kernel
faster than the Triton kernel, with the configuration it measured (``GluonConfig`` fields). The Triton
table's format, with one more bucket key: ``m_min`` (default: the previous bucket's ``m_max`` + 1, or 1),
so that a bucket covers ``[m_min, m_max]`` and the Triton kernel keeps the M between buckets (a sweep
that finds it faster at M = 1 and 4 but slower at 16 writes ``{"m_min": 5, "m_max": 16}``). M outside
every bucket is not this kernel's. The table is empty until such a sweep has run; ``mxfuse.gemm`` never
picks this kernel automatically for a shape the table does not name. Where a call names the backend and
the table has no entry, ``default_gluon_config`` gives the launch (no autotuning at run time).
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from importlib import resources

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.gemm.configs import device_entries, parse_table
from mxfuse.kernels.gemm.gluon_prep import W_HI, W_LO, gluon_prep_kernel
from mxfuse.kernels.gemm.launch import device_facts
from mxfuse.kernels.mxfp8 import LAYOUT_CODE
from mxfuse.kernels.pdl import pdl_policy
from mxfuse.kernels.splitk import split_workspace

__all__ = [
    "GLUON_TABLE_FILE",
    "W_HI",
    "W_LO",
    "GluonBuckets",
    "GluonConfig",
    "GluonOperands",
    "choose_gluon_config",
    "default_gluon_config",
    "effective_split_k",
    "fold_nan_codes",
    "gluon_table",
    "gluon_weight_scale",
    "launch_gluon_decode",
    "launch_gluon_prep",
    "measured_gluon_win",
    "operand_layouts",
    "padded_k",
    "prep_chunks",
    "parse_gluon_table",
    "token_tile",
    "weight_in_window",
]

GLUON_TABLE_FILE = "gluon_configs.json"
_TOKEN_TILES = (8, 16, 32, 64)
# Registers per thread for a launch with the producer partition: the kernel has num_warps + 4 warps, the
# worker's warpgroup is cut to 24, the converting warps get the rest (about 100 at 4 warps): 4 programs of
# 4 + 4 warps fit an SM's 64K registers.
PRODUCER_MAXNREG = 64  # wgmma's N: a multiple of 8; 64 keeps the fp32 accumulator at 32 registers


@dataclass(frozen=True)
class GluonConfig:
    """One launch of the Gluon decode kernel: ``block_n`` weight rows per program (64 per warpgroup,
    ``num_warps = block_n / 16``), ``block_t`` tokens (wgmma's N: 8, 16, 32 or 64), ``block_k`` K per
    step (128 only: one 128-byte TMA row of E4M3, the span of the operand's K order), ``split_k`` programs along K, ``num_stages`` ring slots,
    ``overlap``: False only. Converting step i while step i - 1's register-operand wgmma runs needs
    ptxas to keep that wgmma's operand registers until its wait, which it does not
    (triton-lang/triton#9433: the next step's conversion may overwrite them); the kernel waits for each
    step's wgmma and gets its overlap from the other programs resident on the SM. ``producer``: a
    one-warp worker partition (``gl.warp_specialize``) issues the TMA and the converting warps only wait
    on the slots' mbarriers (no CTA-wide barrier per step); the launch then caps registers at
    ``PRODUCER_MAXNREG`` per thread (the worker's warpgroup keeps 24)."""

    block_n: int = 64
    block_t: int = 16
    block_k: int = 128
    split_k: int = 1
    num_stages: int = 4
    overlap: bool = False
    producer: bool = False

    def __post_init__(self) -> None:
        for name in ("block_n", "block_t", "block_k", "split_k", "num_stages"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GluonConfig.{name} must be an int >= 1; got {value!r}")
        if self.block_n not in (64, 128):
            raise ValueError(
                f"GluonConfig.block_n must be 64 or 128 (one or two warpgroups); got {self.block_n}"
            )
        if self.block_t not in _TOKEN_TILES:
            raise ValueError(f"GluonConfig.block_t must be one of {_TOKEN_TILES}; got {self.block_t}")
        if self.block_k != 128:
            raise ValueError(
                f"GluonConfig.block_k must be 128 (the kernel's operand K order is defined per 128); "
                f"got {self.block_k}"
            )
        if self.num_stages < 2:
            raise ValueError(f"GluonConfig.num_stages must be >= 2; got {self.num_stages}")
        if not isinstance(self.producer, bool):
            raise ValueError(f"GluonConfig.producer must be a bool; got {self.producer!r}")
        if self.overlap is not False:
            raise ValueError(
                f"GluonConfig.overlap must be False (an in-flight register-operand wgmma's registers are "
                f"not protected from the next step's conversion: triton-lang/triton#9433); got {self.overlap!r}"
            )

    @property
    def num_warps(self) -> int:
        return self.block_n // 16

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, eq=False)
class GluonOperands:
    """The tensors of one launch, validated by ``mxfuse.gemm``: ``a`` (an ``[M, K]`` MxTensor, scales in
    any layout), ``w_q`` E4M3 ``[N, K]`` contiguous, ``w_scale_t`` uint8 ``[K/32, N]`` (K-group-major, as
    the Triton kernels read it), ``out`` bf16 ``[M, N]`` contiguous."""

    a: MxTensor
    w_q: torch.Tensor
    w_scale_t: torch.Tensor
    out: torch.Tensor


def padded_k(k: int) -> int:
    """The bf16 activation's row length: K rounded up to the kernel's 128-wide steps."""
    return -(-k // 128) * 128


def token_tile(m: int) -> int:
    """The smallest token tile (``GluonConfig.block_t``) holding ``m`` tokens; 64 above 64."""
    return next((t for t in _TOKEN_TILES if t >= m), _TOKEN_TILES[-1])


def effective_split_k(config: GluonConfig, k: int) -> int:
    """The split-K count a launch of ``config`` runs at reduction length ``k``: at most one split per
    ``block_k`` step, and no empty split (6 steps asked for 4 splits run as 3 of 2 steps)."""
    steps = triton.cdiv(k, config.block_k)
    split = max(1, min(config.split_k, steps))
    return triton.cdiv(steps, triton.cdiv(steps, split))


def default_gluon_config(m: int, n: int, k: int, *, num_sms: int = 132) -> GluonConfig:
    """The launch where the table has none: the smallest token tile holding ``m`` (at most 64), one
    warpgroup of 64 weight rows with the TMA producer partition, 4 slots, and split-K until about two
    programs per SM, each split keeping at least 4 steps of 128 K (the configuration the 2026-12-05 H200
    sweep chose for most buckets)."""
    block_t = token_tile(m)
    tiles = triton.cdiv(n, 64) * triton.cdiv(m, block_t)
    steps = triton.cdiv(k, 128)
    split = 1
    while tiles * split < 2 * num_sms and split < 16 and steps // (split * 2) >= 4:
        split *= 2
    return GluonConfig(64, block_t, 128, split, 4, False, True)


GluonBuckets = dict[str, dict[tuple[int, int], list[tuple[int, int, GluonConfig]]]]


def parse_gluon_table(data: object, *, source: str) -> GluonBuckets:
    """``{device: {(n, k): [(m_min, m_max, config), ...]}}``, buckets in increasing M and disjoint;
    ValueError naming ``source`` and the entry (the Triton GEMM's table reader with ``GluonConfig``
    entries, then each bucket's ``m_min``)."""
    parsed = parse_table(data, source=source, config_type=GluonConfig)
    table: GluonBuckets = {}
    for device, shapes in parsed.items():
        table[device] = {}
        for key, raw in data["devices"][device]["shapes"].items():  # type: ignore[index]
            n, k = (int(v) for v in key.split("x"))
            if key != f"{n}x{k}":
                raise ValueError(f"{source}: devices[{device!r}].shapes[{key!r}]: write the key as '{n}x{k}'")
            ranges, low = [], 1
            for i, ((m_max, config), bucket) in enumerate(zip(shapes[(n, k)], raw, strict=True)):
                m_min = bucket.get("m_min", low)
                if isinstance(m_min, bool) or not isinstance(m_min, int) or not low <= m_min <= m_max:
                    raise ValueError(
                        f"{source}: devices[{device!r}].shapes[{key!r}][{i}]: 'm_min' must be an int from "
                        f"{low} (past the previous bucket) to m_max = {m_max}; got {m_min!r}"
                    )
                ranges.append((m_min, m_max, config))
                low = m_max + 1
            table[device][(n, k)] = ranges
    return table


@functools.cache
def gluon_table() -> GluonBuckets:
    """The checked-in table (``gluon_configs.json``), parsed once."""
    text = resources.files("mxfuse.kernels.gemm").joinpath(GLUON_TABLE_FILE).read_text()
    return parse_gluon_table(json.loads(text), source=GLUON_TABLE_FILE)


def measured_gluon_win(device_name: str | None, n: int, k: int, m: int | None = None) -> GluonConfig | None:
    """The measured configuration where the table says the Gluon kernel wins for ``device_name`` and
    ``[n, k]`` (at ``m`` tokens when given: ``m`` within a bucket's ``[m_min, m_max]``; without ``m``:
    any bucket), else None."""
    buckets = device_entries(gluon_table(), device_name).get((n, k))
    if not buckets:
        return None
    if m is None:
        return buckets[0][2]
    return next((c for m_min, m_max, c in buckets if m_min <= m <= m_max), None)


def choose_gluon_config(
    m: int, n: int, k: int, *, device_name: str | None = None, num_sms: int = 132
) -> GluonConfig:
    """The table's configuration for this device, ``[n, k]`` and ``m``, else ``default_gluon_config``."""
    return measured_gluon_win(device_name, n, k, m) or default_gluon_config(m, n, k, num_sms=num_sms)


def weight_in_window(w_q: torch.Tensor, scale_e8m0: torch.Tensor) -> tuple[bool, str]:
    """Whether every 32-block of an E4M3 weight ``[N, K]`` with row-major scale bytes ``[N, K/32]``
    converts to bf16 exactly in the kernel: its byte in ``[W_LO, W_HI]``, or 0xFF (NaN), or all its
    codes zero. Reads the tensors on the host once (a weight is prepared once)."""
    n, k = w_q.shape
    s = scale_e8m0.to(torch.int32)
    nonzero = (w_q.view(torch.uint8).view(n, k // 32, 32) & 0x7F).amax(dim=2) != 0
    bad = nonzero & (s != 255) & ((s < W_LO) | (s > W_HI))
    count = int(bad.sum())
    if count == 0:
        return True, f"every nonzero block's scale byte is in [{W_LO}, {W_HI}] or 0xFF"
    lo, hi = int(s[bad].min()), int(s[bad].max())
    return False, (
        f"{count} blocks with nonzero codes have scale bytes outside [{W_LO}, {W_HI}] (from {lo} to "
        f"{hi}): their bf16 conversion would not be exact"
    )


def fold_nan_codes(w_q: torch.Tensor, scale_e8m0: torch.Tensor) -> torch.Tensor:
    """Row-major uint8 ``[N, K/32]`` scale bytes of an E4M3 weight ``[N, K]`` with the byte of every block
    that holds an E4M3 NaN code (0x7F or 0xFF) set to 0xFF, the others unchanged (a new tensor). The
    Gluon mainloop's conversion does not look for NaN codes; a NaN scale makes the whole block NaN, which
    reaches exactly the outputs the NaN code reaches (every token's output of that weight row)."""
    n, k = w_q.shape
    has_nan = ((w_q.view(torch.uint8).view(n, k // 32, 32) & 0x7F) == 0x7F).any(dim=2)
    return torch.where(has_nan, 255, scale_e8m0.to(torch.uint8)).to(torch.uint8)


def gluon_weight_scale(w_q: torch.Tensor, scale_e8m0: torch.Tensor) -> torch.Tensor:
    """The scale bytes the decode kernel reads: K-group-major uint8 ``[K/32, N]`` (the Triton kernels'
    layout, so that a call the table hands to them reads the same tensor), NaN-code blocks at 0xFF
    (``fold_nan_codes``)."""
    from mxfuse.kernels.gemm import weight_scale_kgroup_major

    return weight_scale_kgroup_major(fold_nan_codes(w_q, scale_e8m0))


# The bf16 activation, the per-token flags, and the first launch's per-chunk flags and arrival tickets,
# per (device, M, K): written by the first launch of a call, read by its second, in stream order. Never
# freed (CUDA graphs keep the pointers); the tickets are zero between launches.
_BUFFERS: dict[tuple[torch.device, int, int], tuple[torch.Tensor, ...]] = {}
PREP_GROUPS = 32  # 32-wide groups per program of the first launch: 1024 K


def prep_chunks(k: int) -> int:
    """Programs per token row in the first launch: ``padded_k(k) / 32`` groups, ``PREP_GROUPS`` each."""
    return -(-(padded_k(k) // 32) // PREP_GROUPS)


def _buffers(device: torch.device, m: int, k: int) -> tuple[torch.Tensor, ...]:
    key = (device, m, k)
    if key not in _BUFFERS:
        _BUFFERS[key] = (
            torch.empty((m, padded_k(k)), dtype=torch.bfloat16, device=device),
            torch.zeros((m,), dtype=torch.int32, device=device),
            torch.zeros((m, prep_chunks(k)), dtype=torch.int32, device=device),
            torch.zeros((m,), dtype=torch.int32, device=device),
        )
    return _BUFFERS[key]


def launch_gluon_prep(
    ops: GluonOperands,
    a16: torch.Tensor,
    skip: torch.Tensor,
    flags: torch.Tensor | None = None,
    tickets: torch.Tensor | None = None,
    *,
    pdl: bool = False,
) -> None:
    """The first launch alone (``gluon_prep``): ``a16`` bf16 ``[M, padded_k(K)]`` and ``skip`` int32 ``[M]``
    written, and ``ops.out``'s rows of flagged tokens. ``flags`` (int32 ``[M, prep_chunks(K)]``) and
    ``tickets`` (int32 ``[M]``, zeros, left zero) are made here when not given. ``pdl``: launched as a
    programmatic dependent that lets the Gluon kernel launch once it has waited. Runs under the Triton
    interpreter too (``pdl`` False)."""
    a, w_q, w_scale_t, out = ops.a, ops.w_q, ops.w_scale_t, ops.out
    m, k = a.shape
    n = w_q.shape[0]
    chunks = prep_chunks(k)
    if flags is None:
        flags = torch.zeros((m, chunks), dtype=torch.int32, device=a16.device)
    if tickets is None:
        tickets = torch.zeros((m,), dtype=torch.int32, device=a16.device)
    gluon_prep_kernel[(m, chunks)](
        a.data, a.scale_bytes(), a16, skip, flags, tickets, w_q, w_scale_t, out, m, n, k,
        -(-m // 4) * 4, -(-(k // 32) // 4), a16.shape[1],
        A_LAYOUT=LAYOUT_CODE[a.scale_layout.value], BLOCK_G=PREP_GROUPS,
        CHUNKS_POW2=triton.next_power_of_2(chunks), BLOCK_FN=64, PDL=pdl, num_warps=4,
        **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip


def launch_gluon_decode(ops: GluonOperands, *, config: GluonConfig | None = None) -> GluonConfig | None:
    """The two launches (module docstring) into ``ops.out``; the configuration run (None for M = 0).
    ``config`` overrides ``choose_gluon_config`` (the sweep times candidates through it)."""
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from mxfuse.kernels.gemm.gluon_decode import mxfp8_gluon_decode_kernel

    a, w_q, w_scale_t, out = ops.a, ops.w_q, ops.w_scale_t, ops.out
    m, k = a.shape
    n = w_q.shape[0]
    if m == 0:
        return None
    if config is None:
        name, sms = device_facts(out.device)
        config = choose_gluon_config(m, n, k, device_name=name, num_sms=sms)
    cfg = config
    a16, skip, flags, tickets = _buffers(out.device, m, k)
    # Both launches take part in programmatic dependent launch under the policy (``mxfuse.kernels.pdl``):
    # the first waits for the previous kernel and then signals, the second streams its first weight
    # tiles before it waits for the first. Neither signals the kernel after: it launches as they exit.
    pdl = pdl_policy(out.device, gemm=True).wait
    launch_gluon_prep(ops, a16, skip, flags, tickets, pdl=pdl)

    split = effective_split_k(cfg, k)
    w_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_n, 128], gl.float8e4nv)
    a_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_t, 128], gl.bfloat16)
    w_desc = TensorDescriptor.from_tensor(w_q, [cfg.block_n, 128], w_layout)
    a_desc = TensorDescriptor.from_tensor(a16, [cfg.block_t, 128], a_layout)
    load, codes3 = operand_layouts(cfg.num_warps)
    grid = (triton.cdiv(n, cfg.block_n), triton.cdiv(m, cfg.block_t), split)
    tiles = grid[0] * grid[1]
    work, counters = split_workspace(out.device, tiles * split * cfg.block_n * cfg.block_t, tiles)
    mxfp8_gluon_decode_kernel[grid](
        w_desc, a_desc, w_scale_t, out, work, counters, skip, m, n, k,
        BLOCK_N=cfg.block_n, BLOCK_T=cfg.block_t, SPLIT_K=split, NUM_STAGES=cfg.num_stages,
        LOAD=load, CODES3=codes3, PRODUCER=cfg.producer, PDL_WAIT=pdl, num_warps=cfg.num_warps,
        **({"maxnreg": PRODUCER_MAXNREG} if cfg.producer else {}), **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    return cfg


@functools.cache
def operand_layouts(num_warps: int) -> tuple[object, object]:
    """The register layouts the decode kernel loads its weight codes in (``LOAD``, ``[BLOCK_N, 128]``) and
    views them as (``CODES3``, ``[BLOCK_N, 4, 32]``): lane ``4 r + c`` of warp ``w`` holds the 32 bytes
    ``32 c .. 32 c + 31`` (one whole 32-group) of rows ``16 w + r`` and ``16 w + r + 8``, registers in byte
    order, so that each row is two 16-byte shared-memory loads."""
    from triton.experimental.gluon import language as gl

    rows = 16 * num_warps
    warps = [[16 << i, 0] for i in range(num_warps.bit_length() - 1)]
    load = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16], [8, 0]],
        lane_bases=[[0, 32], [0, 64], [1, 0], [2, 0], [4, 0]],
        warp_bases=warps,
        block_bases=[],
        shape=[rows, 128],
    )
    codes3 = gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 1], [0, 0, 2], [0, 0, 4], [0, 0, 8], [0, 0, 16], [8, 0, 0]],
        lane_bases=[[0, 1, 0], [0, 2, 0], [1, 0, 0], [2, 0, 0], [4, 0, 0]],
        warp_bases=[[w, 0, 0] for w, _ in warps],
        block_bases=[],
        shape=[rows, 4, 32],
    )
    return load, codes3
