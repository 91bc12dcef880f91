"""The Gluon MXFP8 family's one mainloop for Hopper (sm_90a): swap-AB, the weight converted to bf16 in
registers as wgmma's A operand, bf16 activation tiles by TMA as B, one fp32 accumulator (device code).

``gluon_decode_mainloop`` returns ``acc[n, t] = sum over the split's 128-wide K steps of W[n, k] * A[t, k]``
for one ``[BLOCK_N, BLOCK_T]`` tile, in ``NVMMADistributedLayout([3, 0])`` with ``warps_per_cta =
[num_warps, 1]`` and ``instr_shape = [16, BLOCK_T, 16]`` (a caller reads it back as ``acc.type.layout``).
Its callers are the Gluon decode GEMM (``gluon_decode``: one weight ``[N, K]``) and the Gluon grouped
wo_a (``mxfuse.kernels.grouped_wo_a.gluon_device``: group ``g``'s rows of a ``[G*R, r]`` weight against
columns ``g*r ..`` of the ``[T, G*r]`` activation), as the Triton kernels share ``gemm.mainloop``. The
numerics (the exact conversion, the operand's K order, the summation order, NaN) and the pipeline are
``gluon_decode``'s docstring's; the host side builds ``LOAD`` and ``CODES3``
(``gluon_launch.operand_layouts``).

Where a tile is (all in elements):

* ``w_row``: the TMA row of the tile's first weight row in the weight descriptor;
* ``s_row``: the same row's index in the K-group-major scale bytes ``ws_ptr[(k // 32) * N + row]``
  (``ws_ptr`` already at the weight's, or the group's, first byte), rows ``>= N`` masked;
* ``a_row``, ``a_col``: the TMA row of the tile's first token and the column of its K = 0 in the
  activation descriptor (a multiple of 128: the activation's operand order is per 128 columns);
* ``k_begin``, ``n_steps``: the split's first 128-wide step and its step count (>= 1); K is the
  reduction length, scale groups ``>= K / 32`` read as 1 (TMA fills the codes past K with zeros).
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

__all__ = [
    "OPERAND_ORDER",
    "gdc_wait",
    "gluon_decode_mainloop",
    "split_k_arrive",
    "split_k_total",
]


@gluon.jit
def gdc_wait():
    """``griddepcontrol.wait``: the previous grid complete and its writes visible (a no-op when the kernel
    was not launched as a programmatic dependent)."""
    gl.inline_asm_elementwise(
        "griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


@gluon.jit
def _issue_weight(w_desc, a_desc, w_bufs, bars, step, k_begin, w_row, pred, NUM_STAGES: gl.constexpr):
    """The stage of ``step`` (counted from the split's first) expects both tiles; its weight tile's TMA."""
    s = step % NUM_STAGES
    bar = bars.index(s)
    mbarrier.expect(bar, w_desc.block_type.nbytes + a_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(w_desc, [w_row, (k_begin + step) * 128], bar, w_bufs.index(s), pred=pred)


@gluon.jit
def _issue_activation(a_desc, a_bufs, bars, step, k_begin, a_row, a_col, pred, NUM_STAGES: gl.constexpr):
    """The activation tile of ``step`` into its stage (after ``_issue_weight`` of the same step)."""
    s = step % NUM_STAGES
    k = (k_begin + step) * 128
    tma.async_copy_global_to_shared(a_desc, [a_row, a_col + k], bars.index(s), a_bufs.index(s), pred=pred)


@gluon.jit
def _issue_step(w_desc, a_desc, w_bufs, a_bufs, bars, step, k_begin, w_row, a_row, a_col, pred,
                NUM_STAGES: gl.constexpr):  # fmt: skip
    """TMA the weight and activation tiles of ``step`` (counted from the split's first) into its stage."""
    _issue_weight(w_desc, a_desc, w_bufs, bars, step, k_begin, w_row, pred, NUM_STAGES)
    _issue_activation(a_desc, a_bufs, bars, step, k_begin, a_row, a_col, pred, NUM_STAGES)


@gluon.jit
def _issue_first_round(w_desc, a_desc, w_bufs, a_bufs, bars, k_begin, w_row, a_row, a_col, n_steps,
                       NUM_STAGES: gl.constexpr, PDL_WAIT: gl.constexpr):  # fmt: skip
    """The ring's first round (its slots are free): every stage's weight tile first, then, after the
    programmatic-launch wait when the kernel is a dependent (the activation is the previous kernel's
    output; the weight is written by no kernel), the activation tiles."""
    for j in gl.static_range(NUM_STAGES):
        _issue_weight(w_desc, a_desc, w_bufs, bars, j, k_begin, w_row, j < n_steps, NUM_STAGES)
    if PDL_WAIT:
        gdc_wait()
    for j in gl.static_range(NUM_STAGES):
        _issue_activation(a_desc, a_bufs, bars, j, k_begin, a_row, a_col, j < n_steps, NUM_STAGES)


# E4M3 bytes -> bf16 pairs times their block's factor, four bytes per instance. Byte b becomes the bf16
# bits ``(b & 0x7F) << 4 | (b & 0x80) << 8``, which is exactly ``e4m3(b) * 2**-120`` (a normal code's
# exponent field lands in bf16's, a subnormal code becomes the bf16 subnormal of the same ratio): ``prmt``
# spreads two bytes into the low bytes of two 16-bit lanes, ``t + 15 * (t & 0x80)`` moves the sign from
# bit 7 to bit 11, the shift by 4 places it at bit 15. Two exact bf16x2 multiplies follow: by 2**120
# (0x7B80), which gives the E4M3 value itself, a normal bf16, and by the block's ``2**(s - 127)`` ($3,
# $4), a power of two whose product is a normal bf16 for every byte in the window (NaN for 0xFF).


def _cvt_pair(out: str, selector: str, factor: str) -> str:
    """Two of the four bytes in ``$2`` (``prmt`` selector) to a bf16x2 ``out``, times ``factor``."""
    return (
        f"prmt.b32 u, $2, 0, {selector};\n"
        "and.b32 g, u, 0x00800080;\n"
        "mad.lo.u32 u, g, 15, u;\n"
        "shl.b32 u, u, 4;\n"
        "mul.rn.bf16x2 u, u, c;\n"
        f"mul.rn.bf16x2 {out}, u, {factor};\n"
    )


_CVT_ASM = gl.constexpr(
    "{\n.reg .b32 u, g, c;\nmov.b32 c, 0x7B807B80;\n"
    + _cvt_pair("$0", "0x4140", "$3")
    + _cvt_pair("$1", "0x4342", "$4")
    + "}\n"
)


# The relabelling of a step's 128 physical K (split into 7 bits, most significant first, after the row
# dimension) into the operand's K order: l6..l0 = p4 p3 p2 p1 p6 p5 p0 (``gluon_decode``'s docstring).
OPERAND_ORDER = gl.constexpr([0, 3, 4, 5, 6, 1, 2, 7])


@gluon.jit
def _scale_index(s_row, BLOCK_N: gl.constexpr, CODES3: gl.constexpr):
    """The tile's scale-byte rows and the step's four 32-groups, in the layout the factors broadcast from
    (``CODES3`` without its byte dimension: lane ``4 r + c`` holds group ``c`` of rows ``r`` and ``r + 8``)."""
    scale_layout: gl.constexpr = gl.SliceLayout(2, CODES3)
    rows = s_row + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, scale_layout))
    quads = gl.arange(0, 4, layout=gl.SliceLayout(0, scale_layout))
    return rows, quads


@gluon.jit
def _block_factor(ws_ptr, rows, groups, N, K):
    """``bf16(2**(s - 127))`` per (weight row, 32-group), NaN for byte 0xFF; groups past K read 127."""
    ok = (rows[:, None] < N) & (groups[None, :] < K // 32)
    s = gl.load(ws_ptr + groups[None, :].to(gl.int64) * N + rows[:, None], mask=ok, other=127).to(gl.int32)
    bits = gl.where(s == 255, 0x7FC0, s << 7).to(gl.int16)
    return bits.to(gl.bfloat16, bitcast=True)


@gluon.jit
def _weight_operand(w_buf, factor, BLOCK_N: gl.constexpr, LOAD: gl.constexpr, CODES3: gl.constexpr,
                    w_layout: gl.constexpr):  # fmt: skip
    """The weight tile in shared memory as wgmma's bf16 A operand, its columns in the kernel's K order.

    Each thread loads 32 contiguous E4M3 bytes (one whole 32-group) of two rows (``LOAD``), converts them
    with its block's factor (``_CVT_ASM``), and the result is relabelled, without moving a register, from
    physical K ``p`` to the operand's K ``l`` (``phys(l)``, ``gluon_decode``'s docstring)."""
    codes = gl.convert_layout(gl.reshape(w_buf.load(LOAD), [BLOCK_N, 4, 32]), CODES3, assert_trivial=True)
    w = gl.inline_asm_elementwise(
        _CVT_ASM, "=r,=r,r,r,r", [codes, gl.expand_dims(factor, 2)], dtype=gl.bfloat16, is_pure=True, pack=4
    )
    # [n, c, j] with c = K bits 5-6 and j = K bits 0-4 (p6 p5 | p4 p3 p2 p1 p0) -> [n, l6 .. l0].
    bits = gl.reshape(w, [BLOCK_N, 2, 2, 2, 2, 2, 2, 2])
    logical = gl.reshape(gl.permute(bits, OPERAND_ORDER.value), [BLOCK_N, 128])
    return gl.convert_layout(logical, w_layout)


@gluon.jit
def gluon_decode_mainloop(
    w_desc,  # TMA descriptor: E4M3 weight rows, block [BLOCK_N, 128]
    a_desc,  # TMA descriptor: bf16 activation rows in the operand's K order, block [BLOCK_T, 128]
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
    NUM_STAGES: gl.constexpr,
    LOAD: gl.constexpr,  # the codes' register layout: 32 contiguous bytes of two rows per thread
    CODES3: gl.constexpr,  # LOAD seen as [BLOCK_N, 4, 32] (row, 32-group in the step, byte in the group)
    PRODUCER: gl.constexpr = False,  # a 1-warp TMA partition (gl.warp_specialize) fills the ring
    PDL_WAIT: gl.constexpr = False,  # a programmatic dependent: the activation's TMA after gdc_wait
):
    """The tile's fp32 accumulator ``[BLOCK_N, BLOCK_T]`` over the split's steps (module docstring). With
    PDL_WAIT the ring's first weight tiles are requested before the kernel's programmatic-launch wait,
    the activation's after it; the caller waits again before it reads anything else the previous kernel
    wrote (with PRODUCER only the producer warp has waited)."""
    if PRODUCER:
        return _mainloop_specialized(w_desc, a_desc, ws_ptr, w_row, s_row, a_row, a_col, N, K, k_begin, n_steps,
                                     BLOCK_N, BLOCK_T, NUM_STAGES, LOAD, CODES3, PDL_WAIT)  # fmt: skip
    BLOCK_K: gl.constexpr = 128
    NUM_WARPS: gl.constexpr = gl.num_warps()
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_T, 16]
    )
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    rows, quads = _scale_index(s_row, BLOCK_N, CODES3)

    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [NUM_STAGES, BLOCK_N, BLOCK_K], w_desc.layout)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_T, BLOCK_K], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(b), count=1)

    # The scale bytes run one step ahead of their use, so that their load latency hides behind a step;
    # the first step's are the weight's, loaded before the first round's wait.
    factor = _block_factor(ws_ptr, rows, k_begin * 4 + quads, N, K)
    _issue_first_round(w_desc, a_desc, w_bufs, a_bufs, bars, k_begin, w_row, a_row, a_col, n_steps, NUM_STAGES,
                       PDL_WAIT)  # fmt: skip

    acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, layout=mma_layout)
    for i in range(n_steps):
        stage = i % NUM_STAGES
        factor_next = _block_factor(ws_ptr, rows, (k_begin + i + 1) * 4 + quads, N, K)
        mbarrier.wait(bars.index(stage), (i // NUM_STAGES) & 1)
        w = _weight_operand(w_bufs.index(stage), factor, BLOCK_N, LOAD, CODES3, w_layout)
        acc = warpgroup_mma(w, a_bufs.index(stage).permute((1, 0)), acc, is_async=True)
        # Waited for before the next step converts: ptxas does not keep an in-flight wgmma's register
        # operand from being overwritten (triton-lang/triton#9433), so the overlap comes from the other
        # programs on the SM, not from this one.
        acc, w = warpgroup_mma_wait(num_outstanding=0, deps=(acc, w))
        gl.thread_barrier()  # every warp has read this stage (codes and, through the wgmma, tokens)
        _issue_step(w_desc, a_desc, w_bufs, a_bufs, bars, i + NUM_STAGES, k_begin, w_row, a_row, a_col,
                    i + NUM_STAGES < n_steps, NUM_STAGES)  # fmt: skip
        factor = factor_next
    for b in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(b))
    return acc


@gluon.jit
def _producer(w_desc, a_desc, w_bufs, a_bufs, ready, empty, w_row, a_row, a_col, k_begin, n_steps,
              NUM_STAGES: gl.constexpr, PDL_WAIT: gl.constexpr):  # fmt: skip
    """The TMA partition (one warp): step i's tiles into slot i % NUM_STAGES once the consumers have freed
    it (``empty``). The first round's slots are free (``_issue_first_round``); from the second, each
    waits for its slot (mbarriers start with their previous phase complete: the parity below)."""
    _issue_first_round(w_desc, a_desc, w_bufs, a_bufs, ready, k_begin, w_row, a_row, a_col, n_steps, NUM_STAGES,
                       PDL_WAIT)  # fmt: skip
    for i in range(NUM_STAGES, n_steps):
        s = i % NUM_STAGES
        mbarrier.wait(empty.index(s), ((i // NUM_STAGES) & 1) ^ 1)
        _issue_step(w_desc, a_desc, w_bufs, a_bufs, ready, i, k_begin, w_row, a_row, a_col, True, NUM_STAGES)


@gluon.jit
def _consumer(w_bufs, a_bufs, ready, empty, ws_ptr, s_row, N, K, k_begin, n_steps, BLOCK_N: gl.constexpr,
              BLOCK_T: gl.constexpr, NUM_STAGES: gl.constexpr, LOAD: gl.constexpr, CODES3: gl.constexpr):  # fmt: skip
    """The converting partition (the kernel's warps), two steps per iteration: step i converted and its
    wgmma issued, then step i + 1 converted while that wgmma runs and its own issued, then both waited
    for and their slots freed. Nothing is in flight across the loop's back edge, where ptxas would not
    keep a register operand alive (triton-lang/triton#9433); inside the iteration the two operands are
    distinct values that ptxas keeps, or waits for. No CTA-wide barrier: the slots' mbarriers order the
    shared memory (an mbarrier arrive releases the partition's earlier reads)."""
    rows, quads = _scale_index(s_row, BLOCK_N, CODES3)
    NUM_WARPS: gl.constexpr = gl.num_warps()
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_T, 16]
    )
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_layout, k_width=2)
    acc = gl.zeros([BLOCK_N, BLOCK_T], gl.float32, layout=mma_layout)
    f0 = _block_factor(ws_ptr, rows, k_begin * 4 + quads, N, K)
    f1 = _block_factor(ws_ptr, rows, (k_begin + 1) * 4 + quads, N, K)
    for i in range(0, n_steps, 2):
        s0 = i % NUM_STAGES
        s1 = (i + 1) % NUM_STAGES
        # The next pair's scale bytes, loaded a pair ahead.
        g0 = _block_factor(ws_ptr, rows, (k_begin + i + 2) * 4 + quads, N, K)
        g1 = _block_factor(ws_ptr, rows, (k_begin + i + 3) * 4 + quads, N, K)
        mbarrier.wait(ready.index(s0), (i // NUM_STAGES) & 1)
        if i + 1 < n_steps:
            w0 = _weight_operand(w_bufs.index(s0), f0, BLOCK_N, LOAD, CODES3, w_layout)
            acc = warpgroup_mma(w0, a_bufs.index(s0).permute((1, 0)), acc, is_async=True)
            mbarrier.wait(ready.index(s1), ((i + 1) // NUM_STAGES) & 1)
            w1 = _weight_operand(w_bufs.index(s1), f1, BLOCK_N, LOAD, CODES3, w_layout)
            acc = warpgroup_mma(w1, a_bufs.index(s1).permute((1, 0)), acc, is_async=True)
            acc, w0, w1 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, w0, w1))
            mbarrier.arrive(empty.index(s0), count=1)
            mbarrier.arrive(empty.index(s1), count=1)
        else:  # the split's last step when it has an odd count
            w0 = _weight_operand(w_bufs.index(s0), f0, BLOCK_N, LOAD, CODES3, w_layout)
            acc = warpgroup_mma(w0, a_bufs.index(s0).permute((1, 0)), acc, is_async=True)
            acc, w0 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, w0))
            mbarrier.arrive(empty.index(s0), count=1)
        f0 = g0
        f1 = g1
    return (acc,)  # a partition returns a tuple of its results


@gluon.jit
def _mainloop_specialized(w_desc, a_desc, ws_ptr, w_row, s_row, a_row, a_col, N, K, k_begin, n_steps,
                          BLOCK_N: gl.constexpr, BLOCK_T: gl.constexpr, NUM_STAGES: gl.constexpr,
                          LOAD: gl.constexpr, CODES3: gl.constexpr, PDL_WAIT: gl.constexpr):  # fmt: skip
    """``gluon_decode_mainloop`` with the TMA issued by a one-warp worker partition."""
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [NUM_STAGES, BLOCK_N, 128], w_desc.layout)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_T, 128], a_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for b in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(b), count=1)
        mbarrier.init(empty.index(b), count=1)
    results = gl.warp_specialize(
        [
            (_consumer, (w_bufs, a_bufs, ready, empty, ws_ptr, s_row, N, K, k_begin, n_steps, BLOCK_N, BLOCK_T,
                         NUM_STAGES, LOAD, CODES3)),
            (_producer, (w_desc, a_desc, w_bufs, a_bufs, ready, empty, w_row, a_row, a_col, k_begin, n_steps,
                         NUM_STAGES, PDL_WAIT)),
        ],
        [1],
        [24],
    )  # fmt: skip
    for b in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(b))
        mbarrier.invalidate(empty.index(b))
    return results[0]


@gluon.jit
def split_k_arrive(acc, base, local, counter, pid_k, SPLIT_K: gl.constexpr, TILE: gl.constexpr):
    """Split ``pid_k``'s fp32 partial ``acc`` stored at ``base + pid_k * TILE + local`` (the tile's
    workspace), then its arrival counted on ``counter`` (acq_rel, GPU scope); whether this program
    arrived last (it then sums the tile with ``split_k_total`` and resets ``counter`` to 0)."""
    gl.store(base + pid_k * TILE + local, acc)
    gl.thread_barrier()  # every thread's partial is issued before the arrival is published
    ticket = gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
    return ticket == SPLIT_K - 1


@gluon.jit
def split_k_total(base, local, SPLIT_K: gl.constexpr, TILE: gl.constexpr):
    """The tile's partials summed in split order 0, 1, ..., SPLIT_K - 1 whoever arrived last: the same
    bits every run."""
    total = gl.load(base + local, cache_modifier=".cg")
    for p in range(1, SPLIT_K):
        total += gl.load(base + p * TILE + local, cache_modifier=".cg")
    return total
