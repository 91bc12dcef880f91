"""The Gluon MXFP8 family's one mainloop for Hopper (sm_90a): swap-AB, the weight converted to bf16 in
registers as wgmma's A operand, bf16 activation tiles by TMA as B, one fp32 accumulator (device code).

``gluon_decode_mainloop`` returns ``acc[n, t] = sum over the split's K steps of W[n, k] * A[t, k]`` for
one ``[BLOCK_N, BLOCK_T]`` tile, in ``NVMMADistributedLayout([3, 0])`` with ``warps_per_cta =
[num_warps, 1]`` and ``instr_shape = [16, BLOCK_T, 16]`` (a caller reads it back as
``acc.type.layout``). Its callers are the Gluon decode GEMM (``gluon_decode``: one weight ``[N, K]``)
and the Gluon grouped wo_a (``mxfuse.kernels.grouped_wo_a.gluon_device``: group ``g``'s rows of a
``[G*R, r]`` weight against columns ``g*r ..`` of the ``[T, G*r]`` activation), as the Triton kernels
share ``gemm.mainloop``. The numerics (the exact conversion, the summation order, NaN) and the pipeline
are ``gluon_decode``'s docstring's.

Where a tile is (all in elements):

* ``w_row``: the TMA row of the tile's first weight row in the weight descriptor;
* ``s_row``: the same row's index in the K-group-major scale bytes ``ws_ptr[(k // 32) * N + row]``
  (``ws_ptr`` already at the weight's, or the group's, first byte), rows ``>= N`` masked;
* ``a_row``, ``a_col``: the TMA row of the tile's first token and the column of its K = 0 in the
  activation descriptor;
* ``k_begin``, ``n_steps``: the split's first ``BLOCK_K`` step and its step count (>= 1); K is the
  reduction length, columns ``>= K`` masked in the weight's scale lookup (TMA fills them with zeros).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

__all__ = ["gluon_decode_mainloop"]


@gluon.jit
def _issue_step(w_desc, a_desc, w_bufs, a_bufs, bars, step, k_begin, w_row, a_row, a_col, pred,
                BLOCK_K: gl.constexpr, NUM_STAGES: gl.constexpr):  # fmt: skip
    """TMA the weight and activation tiles of ``step`` (counted from the split's first) into its stage."""
    s = step % NUM_STAGES
    k = (k_begin + step) * BLOCK_K
    bar = bars.index(s)
    mbarrier.expect(bar, w_desc.block_type.nbytes + a_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(w_desc, [w_row, k], bar, w_bufs.index(s), pred=pred)
    tma.async_copy_global_to_shared(a_desc, [a_row, a_col + k], bar, a_bufs.index(s), pred=pred)


@gluon.jit
def _weight_bf16(w_buf, ws_ptr, rows, kk, k0, N, K, w_layout: gl.constexpr):
    """The weight tile in shared memory as bf16 in wgmma's A-operand layout, each element times its
    block's ``2**(s - 127)`` (exact inside the scale window; byte 0xFF gives NaN)."""
    codes = w_buf.load(w_layout)
    k = k0 + kk
    ok = (rows[:, None] < N) & (k[None, :] < K)
    s = gl.load(ws_ptr + (k[None, :] // 32).to(gl.int64) * N + rows[:, None], mask=ok, other=127)
    s = s.to(gl.int32)
    bits = gl.where(s == 255, 0x7FC00000, s << 23)
    factor = bits.to(gl.float32, bitcast=True)
    return (codes.to(gl.float32) * factor).to(gl.bfloat16)


@gluon.jit
def gluon_decode_mainloop(
    w_desc,  # TMA descriptor: E4M3 weight rows, block [BLOCK_N, BLOCK_K]
    a_desc,  # TMA descriptor: bf16 activation rows, block [BLOCK_T, BLOCK_K]
    ws_ptr,  # uint8 K-group-major scale bytes of the weight (or of its group): [K/32, N]
    w_row,
    s_row,
    a_row,
    a_col,
    N,
    K,
    k_begin,
    n_steps,
    BLOCK_N: gl.constexpr,
    BLOCK_T: gl.constexpr,
    BLOCK_K: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    OVERLAP: gl.constexpr,
):
    """The tile's fp32 accumulator ``[BLOCK_N, BLOCK_T]`` over the split's steps (module docstring)."""
    NUM_WARPS: gl.constexpr = gl.num_warps()
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_T, 16]
    )
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    rows = s_row + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, w_layout))
    kk = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, w_layout))

    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_T, BLOCK_K], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(b), count=1)

    for j in gl.static_range(NUM_STAGES - 1):
        _issue_step(w_desc, a_desc, w_bufs, a_bufs, bars, j, k_begin, w_row, a_row, a_col, j < n_steps,
                    BLOCK_K, NUM_STAGES)  # fmt: skip

    acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, layout=mma_layout)
    held = gl.zeros([BLOCK_N, BLOCK_K], gl.bfloat16, layout=w_layout)  # the in-flight wgmma's operand
    for i in range(n_steps):
        stage = i % NUM_STAGES
        mbarrier.wait(bars.index(stage), (i // NUM_STAGES) & 1)
        w = _weight_bf16(w_bufs.index(stage), ws_ptr, rows, kk, (k_begin + i) * BLOCK_K, N, K, w_layout)
        acc = warpgroup_mma(w, a_bufs.index(stage).permute((1, 0)), acc, is_async=True)
        if OVERLAP:
            # Step i - 1's wgmma is done: its registers and its stage may be reused.
            acc, held = warpgroup_mma_wait(num_outstanding=1, deps=(acc, held))
            held = w
        else:
            acc, w = warpgroup_mma_wait(num_outstanding=0, deps=(acc, w))
        gl.thread_barrier()  # every warp has read the stage step i - 1 used before TMA refills it
        _issue_step(w_desc, a_desc, w_bufs, a_bufs, bars, i + NUM_STAGES - 1, k_begin, w_row, a_row, a_col,
                    i + NUM_STAGES - 1 < n_steps, BLOCK_K, NUM_STAGES)  # fmt: skip
    acc, held = warpgroup_mma_wait(num_outstanding=0, deps=(acc, held))
    for b in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(b))
    return acc
