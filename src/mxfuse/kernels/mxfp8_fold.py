"""The folded-scale MXFP8 GEMM: 16-bit tensor-core dots with no promotion inside the K loop.

``out[M, N] = deq(a) @ deq(w).T`` for E4M3 ``a [M, K]`` (scales in any of the three layouts) and a
prepared E4M3 weight ``w [N, K]`` (scales K-group-major ``[K/32, N]``). Every power-of-two scale is
folded into its operand as it becomes fp16 or bf16, relative to references fixed for a program's whole
K range; one fp32 accumulator takes every dot and is scaled once after the loop
(``mxfp8_fold_steps.fold_mainloop``, which also holds the exactness argument and the exact path for
scale bytes outside the window). With ``act="prefold"`` a first launch (``_fold_activation_kernel``)
writes the activation's folded 16-bit copy and per-row references into a cached workspace, and the GEMM
reads it. Numerics: exact products, fp32 accumulation by the tensor core in K order within a program,
split-K partials summed in split order (``splitk``): bitwise repeatable, no float atomics.

Regime choices (tile, operand order, 16-bit type, conversion, where the scales go, split-K, PDL): every
one is a candidate pending measurement; ``benchmarks/mxfp8_gemm_sweep.py`` times them on the GPU and
writes the winners into the launcher's table (``mxfp8_configs``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mxfuse.kernels.mxfp8_fold_steps import (
    ACT_CODE,
    CVT_CODE,
    OPERAND_CODE,
    WSCALE_CODE,
    fold_activation_row,
    fold_mainloop,
)
from mxfuse.kernels.splitk import finish_tile

__all__ = ["check_fold_options", "launch_fold", "launch_fold_activation"]


@triton.jit(do_not_specialize=["M", "rows4", "n_k4", "SPLIT_K"])
def _mxfp8_fold_kernel(
    a_ptr,  # E4M3 [M, K] contiguous (uint8 codes with CVT_BITS)
    as_ptr,  # uint8 view of a's scale storage
    w_ptr,  # E4M3 [N, K] contiguous (uint8 codes with CVT_BITS)
    ws_ptr,  # uint8 [K/32, N]
    p_ptr,  # ACT_PREFOLD: a's folded 16-bit copy [M, K]
    pref_ptr,  # ACT_PREFOLD: int32 [M] reference bytes (-1: the row does not fold)
    out_ptr,  # bf16 [M, N]
    work_ptr,  # fp32 split-K partials
    cnt_ptr,  # int32 arrival counters, one per output tile
    path_ptr,  # PATH_LOG: int32 per (tile, split): 1 where the folded loop's result was kept, 0 exact path
    M,
    N,
    K,
    rows4,
    n_k4,
    SPLIT_K,  # a run-time value: one compiled kernel serves every split
    A_LAYOUT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_G: tl.constexpr,
    SWAP_AB: tl.constexpr,
    OP: tl.constexpr,
    CVT: tl.constexpr,
    ACT: tl.constexpr,
    WSCALE: tl.constexpr,
    W_BIAS: tl.constexpr,
    EVEN: tl.constexpr,
    PDL: tl.constexpr,
    PATH_LOG: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    if PDL:
        # Launched before the previous kernel finished: wait until its writes (our activation, the
        # split counters it reset) are visible, then let the next launch start its own prologue.
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    n_groups = K // 32
    steps_per_split = tl.cdiv(tl.cdiv(n_groups, BLOCK_G), SPLIT_K)
    g_begin = pid_k * steps_per_split * BLOCK_G
    g_end = tl.minimum(g_begin + steps_per_split * BLOCK_G, n_groups)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc, folded = fold_mainloop(
        a_ptr + rows[:, None].to(tl.int64) * K,
        w_ptr + cols[:, None].to(tl.int64) * K,
        as_ptr,
        ws_ptr,
        p_ptr + rows[:, None].to(tl.int64) * K,
        pref_ptr,
        rows,
        cols,
        rows < M,
        cols < N,
        g_begin,
        g_end,
        0,
        n_groups,
        rows4,
        n_k4,
        N,
        A_LAYOUT,
        SWAP_AB,
        BLOCK_M,
        BLOCK_N,
        BLOCK_G,
        OP,
        CVT,
        ACT,
        WSCALE,
        W_BIAS,
        EVEN,
        NUM_STAGES,
    )
    if SWAP_AB:
        acc = tl.trans(acc)
    tile_id = pid_m * tl.num_programs(0) + pid_n
    if PATH_LOG:
        tl.store(path_ptr + tile_id * SPLIT_K + pid_k, folded.to(tl.int32))
    finish_tile(acc, out_ptr, work_ptr, cnt_ptr, rows, cols, M, N, tile_id, pid_k, BLOCK_M, BLOCK_N, SPLIT_K)


@triton.jit(do_not_specialize=["rows4", "n_k4"])
def _fold_activation_kernel(
    a_ptr,  # uint8 codes [T, stride_a] (a group's slice starts at column a_group0 * 32)
    as_ptr,
    p_ptr,  # 16-bit [T, stride_a]
    pref_ptr,  # int32 [n_slices, T]
    stride_a,
    n_groups,  # groups per slice
    a_n_groups,  # groups per row of a's scale storage
    rows4,
    n_k4,
    A_LAYOUT: tl.constexpr,
    OP: tl.constexpr,
    CHUNK_G: tl.constexpr,
):
    """One program per (row, slice): ``fold_activation_row`` on that slice of the row."""
    row = tl.program_id(0)
    sl = tl.program_id(1)
    base = row.to(tl.int64) * stride_a + sl * n_groups * 32
    ref = fold_activation_row(
        a_ptr + base, as_ptr, p_ptr + base, row, n_groups, sl * n_groups, a_n_groups, rows4, n_k4,
        A_LAYOUT, OP, CHUNK_G,
    )  # fmt: skip
    tl.store(pref_ptr + sl * tl.num_programs(0) + row, ref)


def check_fold_options(*, operand: str, cvt: str, act: str, wscale: str) -> None:
    """ValueError naming the option for a combination the fold kernels do not have."""
    for name, value, codes in (
        ("operand", operand, OPERAND_CODE),
        ("cvt", cvt, CVT_CODE),
        ("act", act, ACT_CODE),
        ("wscale", wscale, WSCALE_CODE),
    ):
        if value not in codes:
            raise ValueError(f"{name} must be one of {sorted(codes)}; got {value!r}")
    if cvt != "cast" and operand != "f16":
        raise ValueError(f"cvt {cvt!r} converts to f16 only; got operand {operand!r}")
    if act == "prefold" and wscale != "operand":
        raise ValueError(f"act 'prefold' folds the weight's scales into its operand; got wscale {wscale!r}")


def launch_fold_activation(
    a_q: torch.Tensor,
    a_scale_bytes: torch.Tensor,
    a_layout_code: int,
    folded: torch.Tensor,
    refs: torch.Tensor,
    *,
    slices: int = 1,
) -> None:
    """Fold ``a_q`` (fp8 ``[T, S * k]``, contiguous rows, scales ``a_scale_bytes``) slice by slice into
    ``folded`` (fp16 or bf16, same shape) and ``refs`` (int32 ``[S, T]``): see ``fold_activation_row``."""
    t, width = a_q.shape
    if t == 0:
        return
    if folded.stride(0) != a_q.stride(0) and t > 1:
        raise ValueError(f"folded must have a_q's row stride {a_q.stride(0)}; got {folded.stride(0)}")
    groups = width // 32 // slices
    op = OPERAND_CODE["f16" if folded.dtype == torch.float16 else "bf16"]
    _fold_activation_kernel[(t, slices)](
        a_q.view(torch.uint8), a_scale_bytes, folded, refs, a_q.stride(0), groups, width // 32,
        -(-t // 4) * 4, -(-(width // 32) // 4),
        A_LAYOUT=a_layout_code, OP=op, CHUNK_G=min(32, triton.next_power_of_2(groups)), num_warps=4,
    )  # fmt: skip


# Folded activation copies and their references, per (device, dtype, shape): written by each call's
# first launch and read by its second, in stream order. Never freed (CUDA graphs keep pointers).
_FOLDED: dict[tuple[torch.device, torch.dtype, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _folded_buffers(
    device: torch.device, dtype: torch.dtype, m: int, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    key = (device, dtype, m, k)
    if key not in _FOLDED:
        _FOLDED[key] = (
            torch.empty(m, k, dtype=dtype, device=device),
            torch.empty(m, dtype=torch.int32, device=device),
        )
    return _FOLDED[key]


def launch_fold(
    a_q: torch.Tensor,
    a_scale_bytes: torch.Tensor,
    a_layout_code: int,
    w_q: torch.Tensor,
    w_scale_t: torch.Tensor,
    out: torch.Tensor,
    work: torch.Tensor,
    counters: torch.Tensor,
    *,
    block_m: int,
    block_n: int,
    block_g: int,
    split_k: int,
    swap_ab: bool,
    operand: str,
    cvt: str,
    act: str,
    wscale: str,
    w_bias: int,
    pdl: bool,
    num_warps: int,
    num_stages: int,
    path_log: torch.Tensor | None = None,
) -> None:
    """Launch on validated tensors: ``a_q`` fp8 ``[M, K]``, ``a_scale_bytes`` every byte of its scale
    storage, ``w_q`` fp8 ``[N, K]``, ``w_scale_t`` uint8 ``[K/32, N]``, ``out`` bf16 ``[M, N]``; ``work``
    and ``counters`` a split-K workspace for ``cdiv(M, block_m) * cdiv(N, block_n)`` tiles. ``w_bias``:
    the weight scale byte folded as 2**0 by an fp16 operand-mode fold (its bytes in [w_bias - 14,
    w_bias + 7] fold exactly; others take the exact path). ``path_log`` (int32, one per (tile, split),
    tile-major): where each program says whether its folded loop's result was kept (1) or the exact path
    ran (0), for tests."""
    check_fold_options(operand=operand, cvt=cvt, act=act, wscale=wscale)
    m, k = a_q.shape
    n = w_q.shape[0]
    if act == "prefold":
        folded, refs = _folded_buffers(
            out.device, torch.float16 if operand == "f16" else torch.bfloat16, m, k
        )
        launch_fold_activation(a_q, a_scale_bytes, a_layout_code, folded, refs)
    else:
        folded, refs = work, counters  # not read
    codes = (lambda x: x.view(torch.uint8)) if cvt == "bits" else (lambda x: x)
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), split_k)
    _mxfp8_fold_kernel[grid](
        codes(a_q), a_scale_bytes, codes(w_q), w_scale_t, folded, refs, out, work, counters,
        counters if path_log is None else path_log, m, n, k, -(-m // 4) * 4, -(-(k // 32) // 4), split_k,
        A_LAYOUT=a_layout_code, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g, SWAP_AB=swap_ab,
        OP=OPERAND_CODE[operand], CVT=CVT_CODE[cvt], ACT=ACT_CODE[act], WSCALE=WSCALE_CODE[wscale],
        W_BIAS=w_bias if operand == "f16" else 127, EVEN=n % block_n == 0 and (k // 32) % (block_g * split_k) == 0,
        PDL=pdl, PATH_LOG=path_log is not None, NUM_STAGES=num_stages, num_warps=num_warps,
        **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
