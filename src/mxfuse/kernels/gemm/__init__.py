"""MXFP8 x MXFP8 -> bf16 GEMM in Triton for GPUs with FP8 but no MXFP8 tensor-core instruction (sm_89+,
Hopper included): the launcher, and the decode GEMV kernel.

``out[M, N] = sum_k deq(a)[m, k] * deq(w)[n, k]``. ``a``: E4M3 ``[M, K]`` with UE8M0 scales per 32 K in any
of the three layouts; ``w``: E4M3 ``[N, K]`` with UE8M0 scales stored K-group-major, uint8 ``[K/32, N]``
(``weight_scale_kgroup_major``). Products of E4M3 values (and of E4M3 values times powers of two inside the
exact windows the kernels check) are exact; sums are fp32 (inside one FP8 MMA of the ``mma8`` kernel,
Hopper's narrower accumulation); a NaN scale byte 0xFF reaches every output of its row of ``a`` (or
column, for ``w``).

``launch_mxfp8_gemm`` runs one of five kernels, named by the configuration's ``kind``
(``configs.GemmConfig``), which comes from ``configs.choose_config``: the measured table for
the device and ``[N, K]`` when it has an entry, else ``default_config`` (its docstring gives the M
thresholds and the measurements behind them). The kernels:

* ``stream`` (``stream``): CUDA cores for M <= 4 (the default rule and the H200 table take it
  there), each thread one 16-byte chunk of several weight rows at one K position, so the activation's
  chunk is converted once for all of them; it reads the weight's row-major scales when given them.
* ``gemv`` (``gemv``): the earlier CUDA-core kernel for M <= 4, kept for configurations that name it: each
  thread streams 16 weight bytes of one row per chunk, converting the activation once per row.
* ``dq16`` / ``mma8`` (``mma``): tensor-core dots promoted inside the K loop.
* ``fold`` (``fold``): 16-bit tensor-core dots with every scale folded into the operands, one
  accumulator, scaled once after the loop.

Beside them, for sm_90 only, the Gluon decode kernel (``gluon_decode``, host side ``gluon_launch``, run by
the ``gluon`` backend): weights converted to bf16 in registers as wgmma's A operand, no promotion.

Every kernel may split K over programs; the partials are summed in split order by the last program to
arrive (``mxfuse.kernels.splitk``): one launch, no float atomics, the same bits on every run.
"""

from __future__ import annotations

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.gemm.configs import GemmConfig, choose_config
from mxfuse.kernels.gemm.launch import (
    GemmOperands,
    device_facts,
    launch_fold,
    launch_gemv,
    launch_mma,
    launch_stream,
)
from mxfuse.kernels.splitk import split_workspace

__all__ = ["GemmConfig", "GemmOperands", "choose_config", "launch_mxfp8_gemm", "weight_scale_kgroup_major"]


def weight_scale_kgroup_major(scale_e8m0: torch.Tensor) -> torch.Tensor:
    """Row-major uint8 ``[N, K/32]`` weight scales -> the kernels' K-group-major uint8 ``[K/32, N]``."""
    return scale_e8m0.t().contiguous()


def launch_mxfp8_gemm(
    a: MxTensor,
    w_q: torch.Tensor,
    w_scale_t: torch.Tensor,
    out: torch.Tensor,
    *,
    config: GemmConfig | None = None,
    w_scale_rows: torch.Tensor | None = None,
) -> GemmConfig | None:
    """Run the GEMM of ``a`` (an ``[M, K]`` MxTensor, scales in any layout) and the weight ``w_q`` into
    ``out`` (bf16 ``[M, N]``); returns the configuration it ran (None for M = 0). Arguments are validated
    by ``mxfuse.gemm``.

    ``w_scale_t``: uint8 ``[K/32, N]`` (``weight_scale_kgroup_major``). ``config`` overrides
    ``choose_config`` (the sweep times candidates through it). ``w_scale_rows``: the same scales row-major
    (uint8 ``[N, K/32]``, ``MxWeight.scale_e8m0``), which the stream kernel reads faster when given.
    """
    m, k = a.shape
    n = w_q.shape[0]
    if m == 0:
        return None
    if config is None:
        name, sms = device_facts(out.device)
        config = choose_config(m, n, k, device_name=name, num_sms=sms)
    cfg = config
    if cfg.kind in ("gemv", "stream"):
        if cfg.block_m < m or cfg.block_m not in (1, 2, 4):
            raise ValueError(
                f"config.block_m must be 1, 2 or 4 and >= M ({m}) for the {cfg.kind} kernel; got {cfg.block_m}"
            )
        grid_m = 1
    else:
        grid_m = triton.cdiv(m, cfg.block_m)
    grid_n = triton.cdiv(n, cfg.block_n)
    tiles = grid_n * grid_m
    workspace = split_workspace(out.device, tiles * cfg.split_k * cfg.block_m * cfg.block_n, tiles)
    ops = GemmOperands(a, w_q, w_scale_t, out, w_scale_rows)
    launch = {"fold": launch_fold, "stream": launch_stream, "dq16": launch_mma, "mma8": launch_mma}
    launch.get(cfg.kind, launch_gemv)(ops, workspace, cfg)
    return cfg
