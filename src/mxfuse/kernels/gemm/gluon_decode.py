"""The Gluon decode-M MXFP8 GEMM for Hopper (sm_90a): swap-AB, weights converted to bf16 in registers, no
promotion (device code; the host side is ``gluon_launch``).

``out[M, N] = deq(a) @ deq(w).T`` for a few tokens (the regime is M <= 64; any M runs, one token tile of
``BLOCK_T`` after another). The product is computed transposed, ``acc[n, t] = sum_k W[n, k] * A[t, k]``:

* the weight tile (``BLOCK_N`` = 64 rows per warpgroup, ``BLOCK_K`` of K) is wgmma's A operand: its E4M3
  bytes arrive by TMA in shared memory, are loaded into registers in the A-operand layout
  (``DotOperandLayout(0, parent=NVMMADistributedLayout([3, 0]), k_width=2)``), converted to fp32,
  multiplied by ``2**(s - 127)`` of their 32-block and rounded to bf16. That is exact: an E4M3 value has
  4 significant bits, and for scale bytes in the window ``[W_LO, W_HI]`` (``gluon_launch``) every nonzero
  product is a normal bf16; a 0xFF byte gives NaN;
* the tokens are wgmma's N (``BLOCK_T`` = 8, 16, 32 or 64): their bf16 rows, dequantized once per call by
  ``gluon_prep`` (exact, same window), arrive by TMA and are read K-major from shared memory (the
  transposed view of a ``[BLOCK_T, BLOCK_K]`` tile);
* one fp32 accumulator, bf16 x bf16 products (exact in fp32), no per-32 promotion at all.

Summation order: within a ``BLOCK_K`` step the tensor core's (16 K per wgmma instruction, in K order);
steps in K order within a split; splits in split order 0, 1, ..., S-1, summed by the last split to arrive
at the tile (an int32 ticket, acq_rel at GPU scope; partials through a workspace, never float atomics),
as ``mxfuse.kernels.splitk.device`` does for the Triton kernels. The same bits on every run.

NaN: a NaN weight block (or E4M3 NaN code) makes its weight row's bf16 values NaN, which reach exactly the
outputs of that row (column n of ``out``); a NaN activation block reaches exactly its token's row. Tokens
whose activation scales leave the window (``skip_ptr[t] != 0``) were computed exactly by ``gluon_prep``:
this kernel does not store them.

Pipeline (``gluon_mainloop.gluon_decode_mainloop``, shared with the Gluon grouped wo_a; one warpgroup, no
warp specialization yet): a ``NUM_STAGES`` ring of (weight, activation)
tiles filled by TMA, one mbarrier per stage. Step i waits for its stage, converts its weight tile while
the wgmma of step i - 1 still runs (``OVERLAP``: ``warpgroup_mma(is_async=True)`` then
``warpgroup_mma_wait(num_outstanding=1)``; the register operand of step i - 1 is kept alive through that
wait), then refills the stage step i - 1 used with step i + NUM_STAGES - 1. ``OVERLAP=False`` waits for
each wgmma before the next conversion (the conservative variant, kept to compare on the GPU).

Where it can be made faster (measure first): the scale bytes are gathered per element (32x redundant L1
reads; a [BLOCK_N, BLOCK_K / 32] load broadcast in registers would do), the E4M3 -> bf16 conversion goes
through fp32 (a byte-permute conversion in registers, as Marlin-family kernels do, avoids it), a
warp-specialized TMA producer (``gl.warp_specialize``) would run ahead of the conversion, two consumer
warpgroups would keep the tensor core busy while one converts, and the split-K reduction could move to
a cluster (DSMEM) instead of a global workspace.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from mxfuse.kernels.gemm.gluon_mainloop import gluon_decode_mainloop

__all__ = ["mxfp8_gluon_decode_kernel"]


@gluon.jit
def mxfp8_gluon_decode_kernel(
    w_desc,  # TMA descriptor: E4M3 [N, K], block [BLOCK_N, BLOCK_K]
    a_desc,  # TMA descriptor: bf16 [M, K] (the dequantized activation), block [BLOCK_T, BLOCK_K]
    ws_ptr,  # uint8 [K/32, N]: the weight's scale bytes, K-group-major
    out_ptr,  # bf16 [M, N]
    work_ptr,  # fp32 split-K partials [tiles, SPLIT_K, BLOCK_N, BLOCK_T]
    cnt_ptr,  # int32 arrival counters, one per tile, zero between launches
    skip_ptr,  # int32 [M]: nonzero for tokens computed exactly by the fallback (not stored here)
    M,
    N,
    K,
    BLOCK_N: gl.constexpr,
    BLOCK_T: gl.constexpr,
    BLOCK_K: gl.constexpr,
    SPLIT_K: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    OVERLAP: gl.constexpr,
):
    pid_n = gl.program_id(0)
    pid_t = gl.program_id(1)
    pid_k = gl.program_id(2)
    off_n = pid_n * BLOCK_N
    off_t = pid_t * BLOCK_T
    steps = gl.cdiv(K, BLOCK_K)
    per_split = gl.cdiv(steps, SPLIT_K)
    k_begin = pid_k * per_split
    n_steps = gl.minimum(per_split, steps - k_begin)  # >= 1: the launcher keeps every split non-empty

    acc = gluon_decode_mainloop(w_desc, a_desc, ws_ptr, off_n, off_n, off_t, 0, N, K, k_begin, n_steps,
                                BLOCK_N, BLOCK_T, BLOCK_K, NUM_STAGES, OVERLAP)  # fmt: skip
    mma_layout: gl.constexpr = acc.type.layout

    # acc[n, t] is out[t, n]; tokens the fallback computed are not stored.
    n_idx = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma_layout))
    t_idx = off_t + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, mma_layout))
    skip = gl.load(skip_ptr + t_idx, mask=t_idx < M, other=1)
    mask = (n_idx[:, None] < N) & (t_idx[None, :] < M) & (skip[None, :] == 0)
    dst = out_ptr + t_idx[None, :].to(gl.int64) * N + n_idx[:, None]
    if SPLIT_K == 1:
        gl.store(dst, acc.to(gl.bfloat16), mask=mask)
    else:
        tile = pid_t * gl.num_programs(0) + pid_n
        base = work_ptr + tile.to(gl.int64) * (SPLIT_K * BLOCK_N * BLOCK_T)
        local = (n_idx - off_n)[:, None] * BLOCK_T + (t_idx - off_t)[None, :]
        gl.store(base + pid_k * (BLOCK_N * BLOCK_T) + local, acc)
        gl.thread_barrier()  # every thread's partial is issued before the arrival is published
        ticket = gl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if ticket == SPLIT_K - 1:
            total = gl.load(base + local, cache_modifier=".cg")
            for p in range(1, SPLIT_K):
                total += gl.load(base + p * (BLOCK_N * BLOCK_T) + local, cache_modifier=".cg")
            gl.store(dst, total.to(gl.bfloat16), mask=mask)
            gl.atomic_xchg(cnt_ptr + tile, 0)
