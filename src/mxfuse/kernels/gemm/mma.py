"""The MXFP8 GEMM's tensor-core kernels that promote inside the K loop: ``dq16`` and ``mma8``.

``out[M, N] = deq(a) @ deq(w).T`` (operands as in ``mxfuse.kernels.gemm``), fp32 accumulation:

* ``dq16``: both tiles dequantized to fp16 with their per-32 scales folded in relative to each row's
  largest in the step; one fp16 dot per ``32 * BLOCK_G`` of K, promoted by the two rows' largest scales
  (``steps.dq16_step``, exact for any scale bytes);
* ``mma8``: one FP8 dot per 32-wide group, promoted by the group's scale product
  (``steps.mma8_group``).

Both run their K range through the family's one K-loop, ``mainloop.mxfp8_mainloop``.

``SWAP_AB`` puts weight rows in the MMA's M slot. K may be split over programs (``mxfuse.kernels.splitk``). Measured on
an H200 (benchmarks/log/mxfp8-gemm.md): both are bound by the promotion each K step waits for,
0.2-0.9x of bf16 cuBLAS.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mxfuse.kernels.gemm.mainloop import mxfp8_mainloop
from mxfuse.kernels.splitk.device import finish_tile

__all__ = ["mxfp8_dq16_kernel", "mxfp8_mma_kernel"]


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def mxfp8_dq16_kernel(
    a_ptr,
    as_ptr,
    w_ptr,
    ws_ptr,
    out_ptr,
    work_ptr,
    cnt_ptr,
    M,
    N,
    K,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,  # 32-wide groups per step: BLOCK_K = 32 * BLOCK_G
    SPLIT_K: tl.constexpr,
    SWAP_AB: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    """Tensor-core path: both operands dequantized to fp16 in registers with their per-32 scales folded
    in relative to each row's largest scale in the step, one fp16 dot per BLOCK_K, and one promotion per
    step by the product of the two rows' largest scales."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    steps_per_split = ((n_groups + BLOCK_G - 1) // BLOCK_G + SPLIT_K - 1) // SPLIT_K
    s_begin = pid_k * steps_per_split
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + rows[:, None].to(tl.int64) * K
    w_rows = w_ptr + cols[:, None].to(tl.int64) * K
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc = mxfp8_mainloop(
        acc,
        a_rows,
        w_rows,
        as_ptr,
        ws_ptr,
        rows,
        cols,
        row_ok,
        col_ok,
        s_begin,
        s_begin + steps_per_split,
        0,
        n_groups,
        0,
        n_groups,
        rows4,
        n_k4,
        N,
        a_rows,
        cnt_ptr,
        A_LAYOUT,
        0,
        SWAP_AB,
        BLOCK_M,
        BLOCK_N,
        BLOCK_G,
        NUM_STAGES,
    )  # fmt: skip  (DOT 0: DOT_DQ16; the loop indices are the split's steps)
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)


@triton.jit(do_not_specialize=["M", "rows4", "n_k4"])
def mxfp8_mma_kernel(
    a_ptr,
    as_ptr,
    w_ptr,
    ws_ptr,
    out_ptr,
    work_ptr,
    cnt_ptr,
    M,
    N,
    K,
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SUB: tl.constexpr,  # 32-wide groups per loop step (one dot each)
    SPLIT_K: tl.constexpr,
    SWAP_AB: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    steps_per_split = ((n_groups + SUB - 1) // SUB + SPLIT_K - 1) // SPLIT_K
    g_begin = pid_k * steps_per_split * SUB
    g_end = min(g_begin + steps_per_split * SUB, n_groups)
    row_ok = rows < M
    col_ok = cols < N
    a_rows = a_ptr + rows[:, None].to(tl.int64) * K
    w_rows = w_ptr + cols[:, None].to(tl.int64) * K

    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc = mxfp8_mainloop(
        acc,
        a_rows,
        w_rows,
        as_ptr,
        ws_ptr,
        rows,
        cols,
        row_ok,
        col_ok,
        g_begin,
        g_end,
        0,
        g_end,
        0,
        n_groups,
        rows4,
        n_k4,
        N,
        a_rows,
        cnt_ptr,
        A_LAYOUT,
        1,
        SWAP_AB,
        BLOCK_M,
        BLOCK_N,
        SUB,
        NUM_STAGES,
        SUB,
        1,
        True,
    )  # fmt: skip  (DOT 1: DOT_FP8; the loop indices are group indices, SUB apart, masked at g_end)
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)
