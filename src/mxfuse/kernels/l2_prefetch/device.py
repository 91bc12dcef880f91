"""L2 prefetch requests in Triton: inside a kernel (``prefetch_rows_l2``) and as a kernel of their own
(``prefetch_l2_kernel``, launched by ``mxfuse.kernels.l2_prefetch.launch_prefetch_l2``)."""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["prefetch_l2_kernel", "prefetch_rows_l2"]


@triton.jit
def prefetch_rows_l2(ptrs, nbytes, ok):
    """In a kernel: one bulk L2 prefetch request of ``nbytes`` (a multiple of 16, 16-byte aligned
    addresses) at each of ``ptrs`` where ``ok`` (tensors of one shape; ``nbytes`` may be a scalar)."""
    size = (tl.zeros(ptrs.shape, tl.int32) + nbytes).to(tl.int32)
    go = (ok & (size > 0)).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r,r",
        [ptrs, size, go],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def prefetch_l2_kernel(base_ptr, nbytes, CHUNK: tl.constexpr, PER_PROGRAM: tl.constexpr, MODE: tl.constexpr):
    """Program p requests bytes ``[p * PER_PROGRAM * CHUNK, (p + 1) * PER_PROGRAM * CHUNK)`` of
    ``base_ptr`` (uint8), clipped to ``nbytes``: one request per CHUNK bytes."""
    idx = tl.program_id(0).to(tl.int64) * PER_PROGRAM + tl.arange(0, PER_PROGRAM)
    off = idx * CHUNK
    ptr = base_ptr + off
    if MODE == 0:
        # Whole 16-byte units only: the bulk prefetch's size must be a multiple of 16.
        size = (tl.minimum(nbytes - off, CHUNK) // 16 * 16).to(tl.int32)
        go = ((off < nbytes) & (size > 0)).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r,r",
            [ptr, size, go],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    elif MODE == 1:
        go = (off < nbytes).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
            "=r,l,r",
            [ptr, go],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
    else:
        go = (off < nbytes).to(tl.int32)
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2::evict_last [$1]; mov.u32 $0, 0; }",
            "=r,l,r",
            [ptr, go],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
