"""The Gluon decode-M MXFP8 GEMM for Hopper (sm_90a): swap-AB, weights converted to bf16 in registers, no
promotion (device code; the host side is ``gluon_launch``).

``out[M, N] = deq(a) @ deq(w).T`` for a few tokens (the regime is M <= 64; any M runs, one token tile of
``BLOCK_T`` after another). The product is computed transposed, ``acc[n, t] = sum_k W[n, k] * A[t, k]``,
128 K per step:

* the weight tile (``BLOCK_N`` = 64 rows per warpgroup) is wgmma's A operand. Its E4M3 bytes arrive by
  TMA in shared memory; each thread loads 32 contiguous bytes, one whole 32-group, of two rows (two
  16-byte loads per row, ``LOAD``), so that it needs one scale byte per row and step, and converts them
  four at a time (``_CVT_ASM``: a byte-permute and integer arithmetic that give ``e4m3 * 2**-120`` as
  bf16 bits, then two exact bf16x2 multiplies, by ``2**120`` and by the block's ``2**(s - 127)``). That
  is exact: an E4M3 value has 4 significant bits, and for scale bytes in the window ``[W_LO, W_HI]``
  (``gluon_launch``) every nonzero product is a normal bf16; a 0xFF byte gives NaN;
* the operand's K order. wgmma's A layout (``DotOperandLayout(0, NVMMA v3, k_width=2)``) gives lane
  ``4 r + c`` the columns ``2c, 2c + 1, 2c + 8, 2c + 9`` of each 16-wide slice; the loaded registers hold
  physical columns ``32 c .. 32 c + 31`` instead. The converted tile is relabelled, without moving a
  register (a reshape to 7 index bits, ``OPERAND_ORDER``, a reshape back), so that operand column ``l``
  holds physical column ``phys(l) = l0 + 2 l3 + 4 l4 + 8 l5 + 16 l6 + 32 l1 + 64 l2`` of the step, and the
  activation is written in the same order (``gluon_prep.operand_column``): the dot product pairs the
  same K on both sides, in another order;
* the tokens are wgmma's N (``BLOCK_T`` = 8, 16, 32 or 64): their bf16 rows, dequantized once per call by
  ``gluon_prep`` (exact, same window, each 128 K in the operand order, zeros past K), arrive by TMA and
  are read K-major from shared memory (the transposed view of a ``[BLOCK_T, 128]`` tile);
* one fp32 accumulator, bf16 x bf16 products (exact in fp32), no per-32 promotion at all.

Summation order: within a step the tensor core's (16 operand columns per wgmma instruction, in the
operand's K order); steps in K order within a split; splits in split order 0, 1, ..., S-1, summed by the
last split to arrive at the tile (an int32 ticket, acq_rel at GPU scope; partials through a workspace,
never float atomics), as ``mxfuse.kernels.splitk.device`` does for the Triton kernels. The same bits on
every run.

NaN: a NaN weight block makes its weight row's bf16 values NaN, which reach exactly the outputs of that
row (column n of ``out``). The conversion does not look for E4M3 NaN codes: a weight prepared for this
backend carries scale byte 0xFF on every block that holds one (``mxfuse.gemm.api.FOLDS_NAN_CODES``),
which reaches the same outputs. A NaN activation block reaches exactly its token's row. Tokens whose
activation scales leave the window (``skip_ptr[t] != 0``) were computed exactly by ``gluon_prep``: this
kernel does not store them.

Pipeline (one warpgroup per 64 rows, no warp specialization): a ``NUM_STAGES`` ring of (weight,
activation) tiles filled by TMA, one mbarrier per stage, every stage in flight; the scale bytes of step
i + 1 are loaded while step i converts. Each step's wgmma is waited for before the next conversion: a
register-operand wgmma still in flight would have its registers overwritten by the next step's
conversion (ptxas does not keep them, triton-lang/triton#9433), so the tensor core's work overlaps the
conversion of the other programs resident on the SM, not this program's.

Programmatic dependent launch (``PDL_WAIT``, the launch policy's ``wait``): the first launch signals
right after its own wait, so this kernel's programs start while it runs; they request the ring's first
weight tiles and load their first scale bytes (weights: written by no kernel), then wait for the first
launch's grid before the activation's tiles and everything else it wrote.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from mxfuse.kernels.gemm.gluon_mainloop import gdc_wait, gluon_decode_mainloop, split_k_arrive, split_k_total

__all__ = ["mxfp8_gluon_decode_kernel"]


@gluon.jit
def mxfp8_gluon_decode_kernel(
    w_desc,  # TMA descriptor: E4M3 [N, K], block [BLOCK_N, 128]
    a_desc,  # TMA descriptor: bf16 [M, Kp] (the dequantized activation, K permuted per 128), block [BLOCK_T, 128]
    ws_ptr,  # uint8 [K/32, N]: the weight's scale bytes, K-group-major (NaN codes folded to 0xFF)
    out_ptr,  # bf16 [M, N]
    work_ptr,  # fp32 split-K partials [tiles, SPLIT_K, BLOCK_N, BLOCK_T]
    cnt_ptr,  # int32 arrival counters, one per tile, zero between launches
    skip_ptr,  # int32 [M]: nonzero for tokens computed exactly by the fallback (not stored here)
    M,
    N,
    K,
    BLOCK_N: gl.constexpr,
    BLOCK_T: gl.constexpr,
    SPLIT_K: gl.constexpr,
    NUM_STAGES: gl.constexpr,
    LOAD: gl.constexpr,  # the codes' register layout: 32 contiguous bytes of two rows per thread
    CODES3: gl.constexpr,  # LOAD seen as [BLOCK_N, 4, 32] (row, 32-group in the step, byte in the group)
    PRODUCER: gl.constexpr,  # a 1-warp TMA partition fills the ring (gluon_mainloop)
    PDL_WAIT: gl.constexpr,  # a programmatic dependent of the first launch: the weight's first tiles before its wait
):
    BLOCK_K: gl.constexpr = 128
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
                                BLOCK_N, BLOCK_T, NUM_STAGES, LOAD, CODES3, PRODUCER, PDL_WAIT)  # fmt: skip
    mma_layout: gl.constexpr = acc.type.layout
    if PDL_WAIT:
        gdc_wait()  # every thread, before skip, the output and the split-K workspace (a no-op once waited)

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
        if split_k_arrive(acc, base, local, cnt_ptr + tile, pid_k, SPLIT_K, BLOCK_N * BLOCK_T):
            total = split_k_total(base, local, SPLIT_K, BLOCK_N * BLOCK_T)
            gl.store(dst, total.to(gl.bfloat16), mask=mask)
            gl.atomic_xchg(cnt_ptr + tile, 0)
