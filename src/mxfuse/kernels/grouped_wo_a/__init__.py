"""Grouped wo_a projection with an MXFP8 epilogue: ``z[t, g, :] = deq(a)[t, g*r:(g+1)*r] @ deq(w[g]).T``.

``a`` is an MXFP8 activation ``[T, G*r]`` (scales in any of the three layouts), ``w`` an E4M3 weight
``[G, R, r]`` with one E8M0 byte per row and 32 K, stored K-group-major (``[G, r/32, R]``) so that a
tile's scales load as contiguous bytes. The kernel writes bf16 ``z`` ``[T, G, R]`` and/or the MXFP8 pair
of ``z`` viewed ``[T, G*R]`` (wo_b's input), quantized from the bf16-rounded ``z`` with the
``mxfuse.kernels.mxfp8`` building blocks, so the pair is bit for bit ``quantize_mxfp8`` of the ``z`` it writes.

One program per (K split, group, BLOCK_N columns of R, BLOCK_M rows of T). BLOCK_N is a multiple of 128
that divides R, so a program owns whole scale words and no word straddles two groups. The K loop is
the MXFP8 GEMM family's one K-loop, ``gemm.mainloop.mxfp8_mainloop``. At small T the work is
streaming G*R*r weight bytes (32 MiB at G = 8, R = 1024, r = 4096) and what matters is enough programs
in flight: G * R / BLOCK_N tiles is 16 at G = 2, so K is split. Split-K is deterministic without float
atomics: each split stores its fp32 partial, takes a ticket from an integer counter, and the split that
arrives last sums the partials in split order (0, 1, ..., S-1), writes the outputs and resets the
counter to 0 for the next call (the counters belong to the prepared weight; calls sharing a weight must
be ordered on one stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from mxfuse.formats import MxTensor, align
from mxfuse.kernels.gemm.fold_steps import ACT_CODE, CVT_CODE, OPERAND_CODE, WSCALE_CODE
from mxfuse.kernels.gemm.launch import check_fold_options, launch_fold_activation
from mxfuse.kernels.gemm.mainloop import DOT_CODE
from mxfuse.kernels.grouped_wo_a.device import grouped_wo_a_kernel
from mxfuse.kernels.grouped_wo_a.weight import TICKETS, WORD_COLUMNS, WoAWeight
from mxfuse.kernels.mxfp8 import LAYOUT_CODE, mx_target
from mxfuse.kernels.pdl import OFF, pdl_policy
from mxfuse.kernels.splitk import split_for

__all__ = [
    "TICKETS",
    "WORD_COLUMNS",
    "WoAConfig",
    "WoAWeight",
    "check_config",
    "default_config",
    "launch_grouped_wo_a",
]


@dataclass(frozen=True)
class WoAConfig:
    """One launch configuration: tile shape, K splits, warps, pipeline stages, dot mode, operand order.

    ``dot`` is ``"stream"`` (CUDA cores, ``gemm.stream``'s mainloop, for ``block_m`` 1, 2 or 4 tokens: each
    thread one 16-byte chunk of ``block_n / (32 * num_warps * 16 / block_k)`` weight rows per ``block_k``
    step), ``"dq16"`` (fp16 tensor-core dots on dequantized tiles, one per ``block_k``), ``"fp8"``
    (one fp8 tensor-core dot per 32-wide group), ``"fold"`` (16-bit dots with the scales folded into the
    operands, the GEMM's ``fold`` mainloop; ``operand`` ``"f16"`` / ``"bf16"``, ``cvt`` ``"cast"`` /
    ``"bits"`` / ``"asm"``, ``act``, ``wscale`` and ``w_bias`` as in ``gemm.configs.GemmConfig``) or ``"fp32"`` (E4M3 decoded by bits, IEEE fp32 dot: the interpreter's
    exact path). ``swap_ab`` puts weight rows in the MMA's M slot (see ``gemm.mainloop``).
    """

    block_m: int
    block_n: int
    block_k: int
    split: int
    num_warps: int
    num_stages: int
    dot: str = "dq16"
    swap_ab: bool = False
    operand: str = "f16"
    cvt: str = "cast"
    act: str = "inloop"
    wscale: str = "operand"
    w_bias: int = 120


def default_config(t: int, groups: int, n: int, k: int, *, sm_count: int, stream: bool = True) -> WoAConfig:
    """The configuration for ``t`` tokens and ``groups`` x ``[n, k]`` weights on ``sm_count`` SMs.

    Up to 4 tokens (unless ``stream`` is False), the stream mode (CUDA cores, as the MXFP8 GEMM takes at
    M <= 4). Above, the MXFP8
    GEMM's tensor-core choices (``mxfp8_gemm.choose_config`` for M > 4, measured on an H200):
    fp16 dots on dequantized tiles, weight rows in the MMA's M slot up to 64 tokens, 128-wide K steps
    there and 64-wide above; K split until the tiles fill the SMs, keeping >= 4 steps per split. The
    columns per tile are 128 (whole scale words) where the GEMM uses 64. ``benchmarks/grouped_wo_a.py
    --sweep`` measures the alternatives for this operator.
    """
    if stream and 0 < t <= 4:
        # CUDA cores: the MXFP8 GEMM's stream kernel measured 1.9-2.1x bf16 at M = 1 on the large
        # shapes; 128 columns a program (whole scale words for the pair). The H200 sweep of 2026-12-02
        # (G = 2 and 8, r = 4096, R = 1024) was fastest with the K split to at most four waves of
        # programs (the largest power of two up to 32 that stays within), whole 128-wide K steps at one
        # token or when a split holds only one, and 64-wide steps otherwise (four rows of activations).
        tiles = groups * (n // 128)
        unit = 64 if k % 64 == 0 else 32
        split = 1
        while tiles * split * 2 <= 4 * sm_count and split < 32 and k % (split * 2 * unit) == 0:
            split *= 2
        block_k = 128 if (t == 1 or k // split <= 128) and (k // split) % 128 == 0 else unit
        return WoAConfig(triton.next_power_of_2(t), 128, block_k, split, 4, 1, "stream", False)
    if t <= 64:
        block_m, block_k, warps, stages, swap = max(16, triton.next_power_of_2(max(t, 1))), 128, 4, 3, True
    elif t <= 256:
        block_m, block_k, warps, stages, swap = 64, 64, 8, 3, False
    else:
        block_m, block_k, warps, stages, swap = 128, 64, 8, 3, False
    while k % block_k:
        block_k //= 2
    if block_k < 32:
        raise ValueError(f"k must be a multiple of 32; got {k}")
    block_n = 128
    tiles = groups * (n // block_n) * triton.cdiv(max(t, 1), block_m)
    split = split_for(tiles, k // block_k, target=sm_count)
    while k % (split * block_k):
        split //= 2
    if tiles * split > TICKETS:
        split = 1
    return WoAConfig(block_m, block_n, block_k, split, warps, stages, "dq16", swap)


def check_config(config: WoAConfig, *, t: int, groups: int, n: int, k: int) -> None:
    """ValueError naming what ``config`` breaks for this shape (tile divisibility, dot mode, tickets)."""
    if config.dot not in DOT_CODE:
        raise ValueError(f"config.dot must be one of {sorted(DOT_CODE)}; got {config.dot!r}")
    try:
        check_fold_options(operand=config.operand, cvt=config.cvt, act=config.act, wscale=config.wscale)
    except ValueError as exc:
        raise ValueError(f"config.{exc}") from None
    if config.dot == "fold" and config.wscale == "acc" and config.block_k not in (32, 64, 128):
        raise ValueError(f"config.block_k must be 32, 64 or 128 with wscale 'acc'; got {config.block_k}")
    for name in ("block_m", "block_n", "block_k"):
        value = getattr(config, name)
        if config.dot == "stream" and name == "block_m":
            if value not in (1, 2, 4):
                raise ValueError(f"config.block_m must be 1, 2 or 4 with dot 'stream'; got {value}")
        elif value < 16 or value & (value - 1):
            raise ValueError(f"config.{name} must be a power of two >= 16; got {value}")
    if config.dot == "stream":
        threads = 32 * config.num_warps
        chunks = config.block_k // 16
        if config.swap_ab or threads % chunks or config.block_n % (threads // chunks):
            raise ValueError(
                f"config with dot 'stream' needs swap_ab False, block_k / 16 ({chunks}) dividing 32 * num_warps "
                f"({threads}) and block_n ({config.block_n}) a multiple of their quotient"
            )
    if config.block_n % 128 or n % config.block_n:
        raise ValueError(f"config.block_n must be a multiple of 128 dividing R = {n}; got {config.block_n}")
    if config.block_k < 32 or config.split < 1 or k % (config.split * config.block_k):
        raise ValueError(
            f"config.split * config.block_k must divide r = {k} (block_k >= 32); "
            f"got split {config.split}, block_k {config.block_k}"
        )
    tiles = groups * (n // config.block_n) * triton.cdiv(t, config.block_m)
    if config.split > 1 and tiles > TICKETS:
        raise ValueError(f"a split launch has {tiles} output tiles; the weight carries {TICKETS} tickets")


def launch_grouped_wo_a(
    a: MxTensor,
    w: WoAWeight,
    *,
    z: torch.Tensor | None = None,
    pair: MxTensor | None = None,
    hw_cvt: bool = True,
    config: WoAConfig | None = None,
) -> WoAConfig:
    """Run the kernel on validated tensors; returns the configuration it used.

    ``a``: ``[T, G*r]`` (contiguous rows, any scale layout); ``w``: the prepared weight, its ``tickets``
    zero. ``z`` bf16 ``[T, G, R]`` and/or ``pair``, a ``[T, G*R]`` MxTensor (its layout, padding rows and
    rounding say how its scales are written), each written in full when given. ``hw_cvt=False`` rounds
    to bf16 and encodes E4M3 with integer arithmetic and, unless ``config`` says otherwise, takes the
    fp32 dot: all of it exact under the Triton interpreter.
    """
    t = a.shape[0]
    a_q, w_q, w_scale, tickets = a.data, w.qweight, w.scale, w.tickets
    groups, n, k = w_q.shape
    if z is None and pair is None:
        raise ValueError("z or pair must be given")
    if config is None:
        sm_count = 1
        if a_q.is_cuda:
            sm_count = torch.cuda.get_device_properties(a_q.device).multi_processor_count
        config = default_config(t, groups, n, k, sm_count=sm_count, stream=hw_cvt)
        if not hw_cvt:
            config = WoAConfig(**{**config.__dict__, "dot": "fp32"})
    check_config(config, t=t, groups=groups, n=n, k=k)
    if t == 0:
        return config
    as_codes = config.dot == "fp32" or (config.dot == "fold" and config.cvt == "bits")
    codes = (lambda x: x.view(torch.uint8)) if as_codes else (lambda x: x)
    a_groups = groups * k // 32
    a_s = a.scale_bytes()
    gr = groups * n
    dummy = w_scale  # any tensor on the device, for outputs this launch does not write
    z_arg = dummy if z is None else (z if hw_cvt else z.view(torch.int16))
    q_arg, s_arg, o_layout, o_rows, floor = dummy, dummy, 0, t, False
    if pair is not None:
        q_arg, s_arg, o_layout, o_rows, floor = mx_target(pair, hw_cvt=hw_cvt)
    n_m_tiles = triton.cdiv(t, config.block_m)
    n_n_tiles = n // config.block_n
    work = dummy
    if config.split > 1:
        # Scratch for the partials: from the caching allocator (the graph's pool under capture).
        work = torch.empty((config.split, t, gr), dtype=torch.float32, device=a_q.device)
    folded, refs = dummy, tickets  # read only by a prefolded fold
    if config.dot == "fold" and config.act == "prefold":
        dtype = torch.float16 if config.operand == "f16" else torch.bfloat16
        row = a_q.stride(0) if t > 1 else groups * k  # the copy is addressed like a_q
        folded = torch.empty((t, row), dtype=dtype, device=a_q.device)
        refs = torch.empty((groups, t), dtype=torch.int32, device=a_q.device)
        launch_fold_activation(a_q, a_s, LAYOUT_CODE[a.scale_layout.value], folded, refs, slices=groups)
    grid = (config.split * groups * n_n_tiles * n_m_tiles,)
    pdl = pdl_policy(a_q.device, gemm=True) if hw_cvt else OFF
    grouped_wo_a_kernel[grid](
        codes(a_q),
        a_s,
        codes(w_q),
        w_scale,
        z_arg,
        q_arg,
        s_arg,
        work,
        folded,
        refs,
        tickets,
        t,
        groups,
        n,
        k,
        a_q.stride(0),
        align(t, 4),
        -(-a_groups // 4),
        o_rows,
        n_m_tiles,
        n_n_tiles,
        A_LAYOUT=LAYOUT_CODE[a.scale_layout.value],
        O_LAYOUT=o_layout,
        STORE_Z=z is not None,
        STORE_PAIR=pair is not None,
        FLOOR=floor,
        HW_CVT=hw_cvt,
        DOT=DOT_CODE[config.dot],
        SWAP_AB=config.swap_ab,
        SPLIT=config.split,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        BLOCK_K=config.block_k,
        K_ITERS=k // (config.split * config.block_k),
        NUM_STAGES=config.num_stages,
        FOLD_OP=OPERAND_CODE[config.operand],
        FOLD_CVT=CVT_CODE[config.cvt],
        FOLD_ACT=ACT_CODE[config.act],
        FOLD_WSCALE=WSCALE_CODE[config.wscale],
        FOLD_W_BIAS=config.w_bias if config.operand == "f16" else 127,
        STREAM_SUB=max(1, 32 * config.num_warps // (config.block_k // 16)),
        PDL_WAIT=pdl.wait,
        PDL_PREFETCH=pdl.prefetch,
        num_warps=config.num_warps,
        **({"launch_pdl": True} if pdl.wait else {}),
    )
    return config
