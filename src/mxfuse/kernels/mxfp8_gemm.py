"""MXFP8 x MXFP8 -> bf16 GEMM in Triton for GPUs with FP8 but no MXFP8 tensor-core instruction (sm_89+,
Hopper included): the launcher, and the decode GEMV kernel.

``out[M, N] = sum_k deq(a)[m, k] * deq(w)[n, k]``. ``a``: E4M3 ``[M, K]`` with UE8M0 scales per 32 K in any
of the three layouts; ``w``: E4M3 ``[N, K]`` with UE8M0 scales stored K-group-major, uint8 ``[K/32, N]``
(``weight_scale_kgroup_major``). Products of E4M3 values (and of E4M3 values times powers of two inside the
exact windows the kernels check) are exact; sums are fp32 (inside one FP8 MMA of the ``mma8`` kernel,
Hopper's narrower accumulation); a NaN scale byte 0xFF reaches every output of its row of ``a`` (or
column, for ``w``).

``launch_mxfp8_gemm`` runs one of five kernels, named by the configuration's ``kind``
(``mxfp8_configs.GemmConfig``), which comes from ``mxfp8_configs.choose_config``: the measured table for
the device and ``[N, K]`` when it has an entry, else ``default_config`` (its docstring gives the M
thresholds and the measurements behind them). The kernels:

* ``stream`` (``mxfp8_stream``): CUDA cores for M <= 4 (the default rule and the H200 table take it
  there), each thread one 16-byte chunk of several weight rows at one K position, so the activation's
  chunk is converted once for all of them; it reads the weight's row-major scales when given them.
* ``gemv`` (here): the earlier CUDA-core kernel for M <= 4, kept for configurations that name it: each
  thread streams 16 weight bytes of one row per chunk, converting the activation once per row.
* ``dq16`` / ``mma8`` (``mxfp8_mma``): tensor-core dots promoted inside the K loop.
* ``fold`` (``mxfp8_fold``): 16-bit tensor-core dots with every scale folded into the operands, one
  accumulator, scaled once after the loop.

Every kernel may split K over programs; the partials are summed in split order by the last program to
arrive (``splitk``): one launch, no float atomics, the same bits on every run.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from mxfuse.kernels.mxfp8_configs import GemmConfig, choose_config
from mxfuse.kernels.mxfp8_fold import launch_fold
from mxfuse.kernels.mxfp8_mma import launch_mma
from mxfuse.kernels.mxfp8_steps import act_scale_offsets, e8m0_to_f32
from mxfuse.kernels.mxfp8_stream import launch_stream
from mxfuse.kernels.mxfp8_tile import LAYOUT_CODE
from mxfuse.kernels.splitk import split_arrive, split_release, split_sum, split_workspace

__all__ = ["GemmConfig", "choose_config", "launch_mxfp8_gemm", "weight_scale_kgroup_major"]


@triton.jit
def _e4m3_bits_to_f32(q):
    """E4M3 values ``q`` as fp32 times 2**-120, by moving their bits (no conversion instruction, which
    runs at a quarter of the FMA rate on sm_90): exponent and mantissa shift into place; E4M3
    subnormals land on fp32 subnormals, which are linear too. NaN bytes are not mapped (a NaN block's
    scale byte 0xFF makes its factor NaN)."""
    b = q.to(tl.uint8, bitcast=True).to(tl.int32)
    return (((b & 0x7F) << 20) | ((b & 0x80) << 24)).to(tl.float32, bitcast=True)


@triton.jit
def _gemv_row(
    acc,
    w3,
    a_ptr,
    as_ptr,
    row,
    koff3,
    k_ok3,
    k_ok,
    grp,
    fw,
    M,
    n_groups,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BITS: tl.constexpr,
):
    """acc [BN, C] += the 16-wide partial dots of activation row ``row`` with the weight tile ``w3``."""
    ok = row < M
    # The activation is read through a [BN, C, 16] pointer (stride 0 along N): the same layout as the
    # weight tile, so the product needs no layout conversion; the repeated bytes are L1 broadcasts.
    a3 = tl.load(a_ptr + row * n_groups * 32 + koff3, mask=k_ok3 & ok, other=0.0)
    sa = tl.load(
        as_ptr + act_scale_offsets(row, grp, n_groups, rows4, n_k4, A_LAYOUT), mask=k_ok & ok, other=0
    )
    if BITS:
        # w3 holds weights * 2**-120; the activation side is exact fp32, so products stay exact (E4M3
        # products are multiples of 2**-138 here) and the group sum is scaled back by 2**120.
        a3 = _e4m3_bits_to_f32(a3) * 1.329227995784916e36  # 2**120
        part = tl.sum(w3 * a3, axis=2) * 1.329227995784916e36
    else:
        part = tl.sum(w3 * a3.to(tl.float32), axis=2)  # in-thread: each thread holds 16 consecutive elements
    return acc + part * (fw * e8m0_to_f32(sa.to(tl.int32))[None, :])


@triton.jit
def _store_row(acc, out_ptr, ws_row_ptr, row, cols, M, N, SPLIT_K: tl.constexpr):
    total = tl.sum(acc, axis=1)  # [BN]: the one cross-thread reduction, after the K loop
    if SPLIT_K == 1:
        tl.store(out_ptr + row * N + cols, total.to(tl.bfloat16), mask=(cols < N) & (row < M))
    else:
        tl.store(ws_row_ptr, total)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def _mxfp8_gemv_kernel(
    a_ptr,  # E4M3 [M, K] contiguous
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous
    ws_ptr,  # uint8 [K/32, N] contiguous
    out_ptr,  # bf16 [M, N] contiguous
    work_ptr,  # fp32 split-K partials
    cnt_ptr,  # int32 arrival counters, one per output tile
    M,
    N,
    K,
    rows4,  # align(M, 4): deepgemm word stride
    n_k4,  # align(K/32, 4) / 4: swizzled tile stride
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,  # 1, 2 or 4 (>= M)
    BLOCK_N: tl.constexpr,
    CHUNKS: tl.constexpr,  # 16-element chunks of K per step
    SPLIT_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    BITS: tl.constexpr,  # convert E4M3 by moving bits (integer pipe) instead of cvt instructions
):
    """Decode GEMV: each thread streams 16 weight bytes of one row per chunk and keeps elementwise partial
    sums; the only cross-thread reduction is after the K loop."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    n_groups = K // 32
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    chunk = tl.arange(0, CHUNKS)
    elem = tl.arange(0, 16)
    n_chunks = n_groups * 2
    steps_per_split = ((n_chunks + CHUNKS - 1) // CHUNKS + SPLIT_K - 1) // SPLIT_K
    s_begin = pid_k * steps_per_split
    col_ok = cols < N
    w_rows = w_ptr + cols[:, None, None].to(tl.int64) * K
    zero_n = tl.zeros([BLOCK_N, 1, 1], tl.int32)

    acc0 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc1 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc2 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    acc3 = tl.zeros([BLOCK_N, CHUNKS], tl.float32)
    for step in tl.range(s_begin, s_begin + steps_per_split, num_stages=NUM_STAGES):
        kc = step * CHUNKS + chunk  # [C] chunk indices
        k_ok = kc < n_chunks
        koff3 = zero_n + kc[None, :, None] * 16 + elem[None, None, :]  # [BN, C, 16]
        k_ok3 = (zero_n == 0) & k_ok[None, :, None]
        w3 = tl.load(w_rows + koff3, mask=col_ok[:, None, None] & k_ok3, other=0.0)
        if BITS:
            w3 = _e4m3_bits_to_f32(w3)
        else:
            w3 = w3.to(tl.float32)
        grp = kc // 2
        sw = tl.load(
            ws_ptr + grp[None, :].to(tl.int64) * N + cols[:, None],
            mask=col_ok[:, None] & k_ok[None, :],
            other=0,
        )
        fw = e8m0_to_f32(sw.to(tl.int32))  # [BN, C]
        acc0 = _gemv_row(
            acc0, w3, a_ptr, as_ptr, 0, koff3, k_ok3, k_ok, grp, fw, M, n_groups, rows4, n_k4, A_LAYOUT, BITS
        )
        if BLOCK_M > 1:
            acc1 = _gemv_row(
                acc1,
                w3,
                a_ptr,
                as_ptr,
                1,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
        if BLOCK_M > 2:
            acc2 = _gemv_row(
                acc2,
                w3,
                a_ptr,
                as_ptr,
                2,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )
            acc3 = _gemv_row(
                acc3,
                w3,
                a_ptr,
                as_ptr,
                3,
                koff3,
                k_ok3,
                k_ok,
                grp,
                fw,
                M,
                n_groups,
                rows4,
                n_k4,
                A_LAYOUT,
                BITS,
            )

    base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N) + pid_k * (BLOCK_M * BLOCK_N)
    _store_row(acc0, out_ptr, base + cols % BLOCK_N, 0, cols, M, N, SPLIT_K)
    if BLOCK_M > 1:
        _store_row(acc1, out_ptr, base + BLOCK_N + cols % BLOCK_N, 1, cols, M, N, SPLIT_K)
    if BLOCK_M > 2:
        _store_row(acc2, out_ptr, base + 2 * BLOCK_N + cols % BLOCK_N, 2, cols, M, N, SPLIT_K)
        _store_row(acc3, out_ptr, base + 3 * BLOCK_N + cols % BLOCK_N, 3, cols, M, N, SPLIT_K)
    if SPLIT_K > 1:
        tile_base = work_ptr + pid_n.to(tl.int64) * (SPLIT_K * BLOCK_M * BLOCK_N)
        if split_arrive(cnt_ptr, pid_n, SPLIT_K):
            local = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            total = split_sum(tile_base, BLOCK_M * BLOCK_N, local, local >= 0, SPLIT_K)
            rows = tl.arange(0, BLOCK_M)
            mask = (rows[:, None] < M) & (cols[None, :] < N)
            tl.store(
                out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], total.to(tl.bfloat16), mask=mask
            )
            split_release(cnt_ptr, pid_n)


def weight_scale_kgroup_major(scale_e8m0: torch.Tensor) -> torch.Tensor:
    """Row-major uint8 ``[N, K/32]`` weight scales -> the kernels' K-group-major uint8 ``[K/32, N]``."""
    return scale_e8m0.t().contiguous()


@functools.cache
def _device_facts(device: torch.device) -> tuple[str | None, int]:
    """(name, SM count) of a CUDA device, read once; (None, 132) elsewhere (compile checks, interpreter)."""
    if device.type != "cuda":
        return None, 132
    props = torch.cuda.get_device_properties(device)
    return props.name, props.multi_processor_count


def launch_mxfp8_gemm(
    a_q: torch.Tensor,
    a_scale_bytes: torch.Tensor,
    a_layout: str,
    w_q: torch.Tensor,
    w_scale_t: torch.Tensor,
    out: torch.Tensor,
    *,
    config: GemmConfig | None = None,
    w_scale_rows: torch.Tensor | None = None,
) -> GemmConfig | None:
    """Run the GEMM into ``out`` (bf16 ``[M, N]``); returns the configuration it ran (None for M = 0).
    Arguments are validated by ``mxfuse.gemm``.

    ``a_scale_bytes``: a uint8 view of every byte of ``a``'s scale storage (padding included);
    ``w_scale_t``: uint8 ``[K/32, N]`` (``weight_scale_kgroup_major``). ``config`` overrides
    ``choose_config`` (the sweep times candidates through it). ``w_scale_rows``: the same scales row-major
    (uint8 ``[N, K/32]``, ``MxWeight.scale_e8m0``), which the stream kernel reads faster when given.
    """
    m, k = a_q.shape
    n = w_q.shape[0]
    if m == 0:
        return None
    if config is None:
        name, sms = _device_facts(out.device)
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
    work, counters = split_workspace(out.device, tiles * cfg.split_k * cfg.block_m * cfg.block_n, tiles)
    code = LAYOUT_CODE[a_layout]
    if cfg.kind == "fold":
        launch_fold(
            a_q, a_scale_bytes, code, w_q, w_scale_t, out, work, counters,
            block_m=cfg.block_m, block_n=cfg.block_n, block_g=cfg.block_g, split_k=cfg.split_k,
            swap_ab=cfg.swap_ab, operand=cfg.operand, cvt=cfg.cvt, act=cfg.act, wscale=cfg.wscale,
            w_bias=cfg.w_bias, pdl=cfg.pdl,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    elif cfg.kind == "stream":
        launch_stream(
            a_q, a_scale_bytes, code, w_q, w_scale_t, out, work, counters,
            block_m=cfg.block_m, block_n=cfg.block_n, block_g=cfg.block_g, split_k=cfg.split_k,
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, w_scale_rows=w_scale_rows,
        )  # fmt: skip
    elif cfg.kind in ("dq16", "mma8"):
        launch_mma(
            a_q, a_scale_bytes, code, w_q, w_scale_t, out, work, counters,
            kind=cfg.kind, block_m=cfg.block_m, block_n=cfg.block_n, block_g=cfg.block_g,
            split_k=cfg.split_k, swap_ab=cfg.swap_ab, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        )  # fmt: skip
    else:
        groups = k // 32
        _mxfp8_gemv_kernel[(grid_n, cfg.split_k)](
            a_q, a_scale_bytes, w_q, w_scale_t, out, work, counters, m, n, k,
            -(-m // 4) * 4, -(-groups // 4),
            A_LAYOUT=code, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CHUNKS=cfg.block_g,
            SPLIT_K=cfg.split_k, NUM_STAGES=cfg.num_stages, BITS=cfg.bits, num_warps=cfg.num_warps,
        )  # fmt: skip
    return cfg
