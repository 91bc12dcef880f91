"""Host side of the Gluon grouped wo_a (``gluon_device``, sm_90a): its configurations, the measured table,
the two launches.

``launch_grouped_wo_a_gluon(a, w, z=, pair=)`` runs, on one stream:

1. ``wo_a_gluon_prep_kernel`` (Triton, ``gluon_prep``): the activation ``[T, G*r]`` dequantized to bf16,
   a per-token flag, and the exact z of flagged tokens (scale bytes outside ``[W_LO, W_HI]``);
2. ``grouped_wo_a_gluon_kernel`` (Gluon): the Gluon decode GEMM's mainloop per group, split-K summed in
   split order by the last split to arrive, the epilogue writing z and/or wo_b's pair.

The weight's own scale bytes must lie in the window wherever its codes are nonzero (or be 0xFF):
``prepare_wo_a_weight`` checks that once, on the host, and records it in the ``WoAWeight``
(``in_window``); ``mxfuse.einsum`` refuses the Gluon kernel for other weights.

A launch's configuration is the decode GEMM's ``GluonConfig`` (``block_n`` 64 or 128 weight rows of one
group, ``block_t`` tokens, 128-wide K steps, which must divide r, ``split_k``, ``num_stages``). The
measured table ``gluon_configs.json`` beside this file has the Gluon GEMM table's format
(``gemm.gluon_launch.parse_gluon_table``), keyed by ``"{G*R}x{r}"`` (the programs' work depends on G and
R only through G*R: ``G*R / block_n`` tiles of r) with T buckets; it holds only the (device, shape, T)
where a GPU run (``benchmarks/grouped_wo_a.py --gluon-sweep --table``) measured this kernel faster than the
Triton grouped kernel.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import torch
import triton

from mxfuse.formats import MxTensor, ScaleRounding
from mxfuse.kernels.gemm.configs import device_entries
from mxfuse.kernels.gemm.gluon_launch import (
    GluonBuckets,
    GluonConfig,
    default_gluon_config,
    effective_split_k,
    operand_layouts,
    parse_gluon_table,
)
from mxfuse.kernels.grouped_wo_a.gluon_prep import wo_a_gluon_prep_kernel
from mxfuse.kernels.grouped_wo_a.weight import WoAWeight
from mxfuse.kernels.mxfp8 import LAYOUT_CODE
from mxfuse.kernels.splitk import split_workspace

__all__ = [
    "WO_A_GLUON_TABLE_FILE",
    "check_wo_a_gluon_config",
    "default_wo_a_gluon_config",
    "launch_grouped_wo_a_gluon",
    "launch_wo_a_gluon_prep",
    "measured_wo_a_gluon_win",
    "wo_a_gluon_table",
]

WO_A_GLUON_TABLE_FILE = "gluon_configs.json"


def default_wo_a_gluon_config(t: int, groups: int, n: int, k: int, *, num_sms: int = 132) -> GluonConfig:
    """The launch where the table has none: the decode GEMM's default for ``[G*R, r]`` at ``t`` tokens
    (``default_gluon_config``)."""
    return default_gluon_config(t, groups * n, k, num_sms=num_sms)


def check_wo_a_gluon_config(config: GluonConfig, *, groups: int, n: int, k: int) -> None:
    """ValueError naming what ``config`` breaks for ``groups`` x ``[n, k]`` weights: ``block_k`` must
    divide r (a K tile never reaches the next group's activation columns) and ``block_n`` divide R (a
    tile never spans two groups). The K step is 128 (``GluonConfig.block_k``): r must be a multiple of it."""
    if not isinstance(config, GluonConfig):
        raise TypeError(f"config must be a GluonConfig; got {type(config).__name__}")
    if k % config.block_k:
        raise ValueError(
            f"config.block_k = {config.block_k} must divide r = {k}: a K tile would read the next group's "
            "activation columns"
        )
    if n % config.block_n:
        raise ValueError(f"config.block_n = {config.block_n} must divide R = {n}")


@functools.cache
def wo_a_gluon_table() -> GluonBuckets:
    """The checked-in table (``gluon_configs.json``), parsed once."""
    text = resources.files("mxfuse.kernels.grouped_wo_a").joinpath(WO_A_GLUON_TABLE_FILE).read_text()
    return parse_gluon_table(json.loads(text), source=WO_A_GLUON_TABLE_FILE)


def measured_wo_a_gluon_win(
    device_name: str | None, groups: int, n: int, k: int, t: int
) -> GluonConfig | None:
    """The measured configuration where the table says the Gluon kernel wins for ``device_name``,
    ``groups`` x ``[n, k]`` and ``t`` tokens (``t`` within a bucket's ``[m_min, m_max]``), else None."""
    buckets = device_entries(wo_a_gluon_table(), device_name).get((groups * n, k), [])
    return next((c for m_min, m_max, c in buckets if m_min <= t <= m_max), None)


# The bf16 activation, the per-token flags and the flagged tokens' exact z, per (device, T, G*r, G*R):
# written by the first launch of a call, read by its second, in stream order. Never freed (CUDA graphs
# keep the pointers).
_BUFFERS: dict[tuple[torch.device, int, int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _buffers(
    device: torch.device, t: int, gk: int, gr: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    key = (device, t, gk, gr)
    if key not in _BUFFERS:
        _BUFFERS[key] = (
            torch.empty((t, gk), dtype=torch.bfloat16, device=device),
            torch.zeros((t,), dtype=torch.int32, device=device),
            torch.zeros((t, gr), dtype=torch.bfloat16, device=device),
        )
    return _BUFFERS[key]


def launch_wo_a_gluon_prep(
    a: MxTensor, w: WoAWeight, a16: torch.Tensor, skip: torch.Tensor, exact: torch.Tensor
) -> None:
    """The first launch alone (``gluon_prep``): ``a16`` bf16 ``[T, G*r]``, ``skip`` int32 ``[T]`` and the
    flagged tokens' rows of ``exact`` bf16 ``[T, G*R]`` written. Runs under the Triton interpreter too."""
    t = a.shape[0]
    groups, n, k = w.qweight.shape
    wo_a_gluon_prep_kernel[(t,)](
        a.data, a.scale_bytes(), a16, skip, w.qweight, w.scale, exact, t, groups, n, k,
        a.data.stride(0) if t > 1 else groups * k, -(-t // 4) * 4, -(-(groups * k // 32) // 4),
        A_LAYOUT=LAYOUT_CODE[a.scale_layout.value], BLOCK_G=32, BLOCK_FN=64, num_warps=4,
    )  # fmt: skip


def launch_grouped_wo_a_gluon(
    a: MxTensor,
    w: WoAWeight,
    *,
    z: torch.Tensor | None = None,
    pair: MxTensor | None = None,
    config: GluonConfig | None = None,
    num_sms: int = 132,
) -> GluonConfig:
    """The two launches (module docstring) on validated tensors; the configuration run.

    ``a``: ``[T, G*r]`` (contiguous rows, any scale layout); ``w``: the prepared weight. ``z`` bf16
    ``[T, G, R]`` contiguous and/or ``pair``, a ``[T, G*R]`` MxTensor with a rounding (its layout,
    padding rows and rounding say how its scales are written), each written in full when given.
    ``config`` (a ``GluonConfig``; default ``default_wo_a_gluon_config`` for ``num_sms``) overrides the
    choice; the benchmark times candidates through it.
    """
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from mxfuse.kernels.grouped_wo_a.gluon_device import grouped_wo_a_gluon_kernel

    t = a.shape[0]
    groups, n, k = w.qweight.shape
    if z is None and pair is None:
        raise ValueError("z or pair must be given")
    if pair is not None and pair.rounding is None:
        raise ValueError("pair.rounding must name the scales to write (rceil or floor); got None")
    cfg = config or default_wo_a_gluon_config(t, groups, n, k, num_sms=num_sms)
    check_wo_a_gluon_config(cfg, groups=groups, n=n, k=k)
    if t == 0:
        return cfg
    device = w.device
    gr = groups * n
    a16, skip, exact = _buffers(device, t, groups * k, gr)
    launch_wo_a_gluon_prep(a, w, a16, skip, exact)

    split = effective_split_k(cfg, k)
    w_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_n, 128], gl.float8e4nv)
    a_layout = gl.NVMMASharedLayout.get_default_for([cfg.block_t, 128], gl.bfloat16)
    w_desc = TensorDescriptor.from_tensor(w.qweight.view(gr, k), [cfg.block_n, 128], w_layout)
    a_desc = TensorDescriptor.from_tensor(a16, [cfg.block_t, 128], a_layout)
    load, codes3 = operand_layouts(cfg.num_warps)
    grid = (gr // cfg.block_n, triton.cdiv(t, cfg.block_t), split)
    tiles = grid[0] * grid[1]
    work, counters = split_workspace(device, tiles * split * cfg.block_n * cfg.block_t, tiles)
    q_arg, s_arg, o_layout, rows_padded, floor = w.qweight, w.scale, 0, t, False  # unused without a pair
    if pair is not None:
        q_arg, s_arg = pair.data, pair.scale_bytes()
        o_layout, rows_padded = LAYOUT_CODE[pair.scale_layout.value], pair.rows_padded
        floor = pair.rounding is ScaleRounding.FLOOR
    grouped_wo_a_gluon_kernel[grid](
        w_desc, a_desc, w.scale, a16 if z is None else z, q_arg, s_arg, exact, skip, work, counters,
        t, n, k, gr, rows_padded,
        O_LAYOUT=o_layout, STORE_Z=z is not None, STORE_PAIR=pair is not None, FLOOR=floor,
        BLOCK_N=cfg.block_n, BLOCK_T=cfg.block_t, SPLIT_K=split, NUM_STAGES=cfg.num_stages,
        LOAD=load, CODES3=codes3, num_warps=cfg.num_warps,
    )  # fmt: skip
    return cfg
