"""Deterministic split-K without float atomics, shared by the MXFP8 GEMM kernels and the grouped wo_a.

Each of a tile's S splits stores its fp32 partial with plain stores, then takes a ticket from the tile's
int32 counter (``split_arrive``: a block barrier, so every thread's partial is issued first, then an
acq_rel atomic add at GPU scope). The split that takes ticket S-1 sums the partials in split order
0, 1, ..., S-1 (``split_sum``, loads through L2 with ``.cg``, never a stale L1 line), writes the result
and puts the counter back to 0 (``split_release``) for the next launch or CUDA-graph replay. One launch,
no zeroing kernel, and the same bits whoever arrives last.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["finish_tile", "split_arrive", "split_release", "split_sum"]


@triton.jit
def split_arrive(cnt_ptr, tile_id, SPLIT):
    """True for the split that arrives last at ``tile_id``, after every split's partial was stored."""
    # Every thread's partial is stored before the arrival is published (bar.sync, then a release).
    tl.debug_barrier()
    arrived = tl.atomic_add(cnt_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
    return arrived == SPLIT - 1


@triton.jit
def split_sum(base, split_stride, offs, mask, SPLIT):
    """The sum, in split order, of the SPLIT partials at ``base + s * split_stride + offs`` (SPLIT may
    be a run-time value: one compiled kernel then serves every split)."""
    total = tl.load(base + offs, mask=mask, other=0.0, cache_modifier=".cg")
    for s in tl.range(1, SPLIT):
        total += tl.load(base + s * split_stride + offs, mask=mask, other=0.0, cache_modifier=".cg")
    return total


@triton.jit
def split_release(cnt_ptr, tile_id):
    """Ready the tile's counter for the next launch (or CUDA-graph replay)."""
    tl.atomic_xchg(cnt_ptr + tile_id, 0)


@triton.jit
def finish_tile(
    acc,
    out_ptr,
    ws_ptr,
    cnt_ptr,
    rows,
    cols,
    M,
    N,
    tile_id,
    pid_k,
    BM: tl.constexpr,
    BN: tl.constexpr,
    SPLIT_K,
):
    """Write ``acc`` ([BM, BN] fp32) as bf16 into ``out`` [M, N], or, split over K, store it as split
    ``pid_k``'s partial of the tile (tile-contiguous workspace ``[tiles, SPLIT_K, BM, BN]``) and let the
    last split write the sum. ``SPLIT_K`` may be a constant or a run-time value."""
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    dst = out_ptr + rows[:, None].to(tl.int64) * N + cols[None, :]
    if SPLIT_K == 1:
        tl.store(dst, acc.to(tl.bfloat16), mask=mask)
    else:
        base = ws_ptr + tile_id.to(tl.int64) * (SPLIT_K * BM * BN)
        local = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        tl.store(base + pid_k * (BM * BN) + local, acc)
        if split_arrive(cnt_ptr, tile_id, SPLIT_K):
            total = split_sum(base, BM * BN, local, local >= 0, SPLIT_K)
            tl.store(dst, total.to(tl.bfloat16), mask=mask)
            split_release(cnt_ptr, tile_id)
