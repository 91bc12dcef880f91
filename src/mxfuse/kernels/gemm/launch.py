"""Launchers of the MXFP8 GEMM's kernels on validated tensors (host code): stream, dq16 / mma8, fold
(and the activation-folding first launch), gemv. ``mxfuse.kernels.gemm.launch_mxfp8_gemm`` picks one.

Each takes the launch's tensors as one ``GemmOperands``, its split-K workspace (``splitk.SplitWorkspace``)
and the ``GemmConfig`` that names the kernel and its tiles.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from mxfuse.formats import MxTensor
from mxfuse.kernels.gemm.configs import GemmConfig
from mxfuse.kernels.gemm.fold import fold_activation_kernel, mxfp8_fold_kernel
from mxfuse.kernels.gemm.fold_steps import ACT_CODE, CVT_CODE, OPERAND_CODE, WSCALE_CODE
from mxfuse.kernels.gemm.gemv import mxfp8_gemv_kernel
from mxfuse.kernels.gemm.mma import mxfp8_dq16_kernel, mxfp8_mma_kernel
from mxfuse.kernels.gemm.stream import mxfp8_stream_kernel
from mxfuse.kernels.mxfp8 import LAYOUT_CODE
from mxfuse.kernels.pdl import pdl_policy
from mxfuse.kernels.splitk import SplitWorkspace

__all__ = [
    "GemmOperands",
    "check_fold_options",
    "device_facts",
    "launch_fold",
    "launch_fold_activation",
    "launch_gemv",
    "launch_mma",
    "launch_stream",
    "stream_shape",
]


@dataclass(frozen=True, eq=False)
class GemmOperands:
    """The tensors of one GEMM launch, validated by ``mxfuse.gemm``: ``a`` (an ``[M, K]`` MxTensor, scales
    in any layout), ``w_q`` fp8 ``[N, K]``, ``w_scale_t`` uint8 ``[K/32, N]``
    (``weight_scale_kgroup_major``), ``out`` bf16 ``[M, N]``, and ``w_scale_rows``: the weight's scales
    row-major (uint8 ``[N, K/32]``), which the stream kernel reads faster when given."""

    a: MxTensor
    w_q: torch.Tensor
    w_scale_t: torch.Tensor
    out: torch.Tensor
    w_scale_rows: torch.Tensor | None = None

    @property
    def a_scale_bytes(self) -> torch.Tensor:
        """Every byte of ``a``'s scale storage, padding included."""
        return self.a.scale_bytes()

    @property
    def a_layout_code(self) -> int:
        return LAYOUT_CODE[self.a.scale_layout.value]


def stream_shape(block_n: int, block_g: int, num_warps: int) -> tuple[int, int]:
    """(rows per sub-tile, sub-tiles per program) of a stream configuration: one 16-byte chunk of one row
    per thread in a sub-tile (``SUB_N * block_g == 32 * num_warps``); ValueError naming the fields when
    ``block_n`` rows do not split into whole sub-tiles."""
    threads = 32 * num_warps
    if block_g > threads or threads % block_g or block_n % (threads // block_g):
        raise ValueError(
            f"a stream config needs block_g (16-byte chunks per row per step, {block_g}) to divide "
            f"32 * num_warps ({threads}) and block_n ({block_n}) to be a multiple of their quotient"
        )
    sub_n = threads // block_g
    return sub_n, block_n // sub_n


def launch_stream(ops: GemmOperands, workspace: SplitWorkspace, config: GemmConfig) -> None:
    """Launch the stream kernel (``config.kind == "stream"``); ``workspace`` holds
    ``cdiv(N, block_n) * split_k * block_m * block_n`` floats and one counter per row tile. It reads
    ``ops.w_scale_rows`` instead of ``w_scale_t`` when given: a thread group on one row then reads
    adjacent bytes, not one 32-byte sector per group."""
    a_q, a_scale_bytes, a_layout_code = ops.a.data, ops.a_scale_bytes, ops.a_layout_code
    w_q, w_scale_t, out, w_scale_rows = ops.w_q, ops.w_scale_t, ops.out, ops.w_scale_rows
    work, counters = workspace
    block_m, block_n, block_g, split_k = config.block_m, config.block_n, config.block_g, config.split_k
    num_warps, num_stages = config.num_warps, config.num_stages
    m, k = a_q.shape
    n = w_q.shape[0]
    if block_m not in (1, 2, 4) or block_m < m:
        raise ValueError(
            f"config.block_m must be 1, 2 or 4 and >= M ({m}) for the stream kernel; got {block_m}"
        )
    sub_n, r = stream_shape(block_n, block_g, num_warps)
    pdl = pdl_policy(out.device, gemm=True)
    steps = -(-(k // 16) // block_g)
    even = n % block_n == 0 and (k // 16) % block_g == 0 and steps % split_k == 0
    groups = k // 32
    mxfp8_stream_kernel[(triton.cdiv(n, block_n), split_k)](
        a_q, a_scale_bytes, w_q, w_scale_t if w_scale_rows is None else w_scale_rows, out, work, counters, m, n,
        k, -(-m // 4) * 4, -(-groups // 4),
        A_LAYOUT=a_layout_code, BLOCK_M=block_m, R=r, SUB_N=sub_n, CHUNKS=block_g, SPLIT_K=split_k,
        EVEN=even, NUM_STAGES=num_stages,
        WS_ROWS=w_scale_rows is not None,
        PDL_WAIT=pdl.wait, PDL_PREFETCH=pdl.prefetch,
        num_warps=num_warps,
        **({"launch_pdl": True} if pdl.wait else {}),
    )  # fmt: skip


def launch_mma(ops: GemmOperands, workspace: SplitWorkspace, config: GemmConfig) -> None:
    """Launch ``config.kind`` (``"dq16"`` or ``"mma8"``) on validated tensors (see ``launch_fold``)."""
    a_q, a_scale_bytes, a_layout_code = ops.a.data, ops.a_scale_bytes, ops.a_layout_code
    w_q, w_scale_t, out = ops.w_q, ops.w_scale_t, ops.out
    work, counters = workspace
    kind, block_m, block_n, block_g, split_k = (
        config.kind,
        config.block_m,
        config.block_n,
        config.block_g,
        config.split_k,
    )
    swap_ab, num_warps, num_stages = config.swap_ab, config.num_warps, config.num_stages
    if kind not in ("dq16", "mma8"):
        raise ValueError(f"config.kind must be 'dq16' or 'mma8'; got {kind!r}")
    m, k = a_q.shape
    n = w_q.shape[0]
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), split_k)
    args = (
        a_q,
        a_scale_bytes,
        w_q,
        w_scale_t,
        out,
        work,
        counters,
        m,
        n,
        k,
        -(-m // 4) * 4,
        -(-(k // 32) // 4),
    )
    common = dict(
        A_LAYOUT=a_layout_code,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        SPLIT_K=split_k,
        SWAP_AB=swap_ab,
        NUM_STAGES=num_stages,
        num_warps=num_warps,
    )
    if kind == "dq16":
        mxfp8_dq16_kernel[grid](*args, BLOCK_G=block_g, **common)
    else:
        mxfp8_mma_kernel[grid](*args, SUB=block_g, **common)


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
    fold_activation_kernel[(t, slices)](
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
    ops: GemmOperands, workspace: SplitWorkspace, config: GemmConfig, *, path_log: torch.Tensor | None = None
) -> None:
    """Launch the fold kernel (``config.kind == "fold"``; with ``act="prefold"`` after the activation's
    folding launch) on validated tensors; ``workspace`` is a split-K workspace for ``cdiv(M, block_m) *
    cdiv(N, block_n)`` tiles. ``config.w_bias``: the weight scale byte folded as 2**0 by an fp16
    operand-mode fold (its bytes in [w_bias - 14, w_bias + 7] fold exactly; others take the exact path).
    ``path_log`` (int32, one per (tile, split), tile-major): where each program says whether its folded
    loop's result was kept (1) or the exact path ran (0), for tests."""
    a_q, a_scale_bytes, a_layout_code = ops.a.data, ops.a_scale_bytes, ops.a_layout_code
    w_q, w_scale_t, out = ops.w_q, ops.w_scale_t, ops.out
    work, counters = workspace
    block_m, block_n, block_g, split_k = config.block_m, config.block_n, config.block_g, config.split_k
    swap_ab, operand, cvt, act, wscale = config.swap_ab, config.operand, config.cvt, config.act, config.wscale
    w_bias, pdl, num_warps, num_stages = config.w_bias, config.pdl, config.num_warps, config.num_stages
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
    mxfp8_fold_kernel[grid](
        codes(a_q), a_scale_bytes, codes(w_q), w_scale_t, folded, refs, out, work, counters,
        counters if path_log is None else path_log, m, n, k, -(-m // 4) * 4, -(-(k // 32) // 4), split_k,
        A_LAYOUT=a_layout_code, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_G=block_g, SWAP_AB=swap_ab,
        OP=OPERAND_CODE[operand], CVT=CVT_CODE[cvt], ACT=ACT_CODE[act], WSCALE=WSCALE_CODE[wscale],
        W_BIAS=w_bias if operand == "f16" else 127, EVEN=n % block_n == 0 and (k // 32) % (block_g * split_k) == 0,
        PDL=pdl, PATH_LOG=path_log is not None, NUM_STAGES=num_stages, num_warps=num_warps,
        **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip


def launch_gemv(ops: GemmOperands, workspace: SplitWorkspace, config: GemmConfig) -> None:
    """Launch the gemv kernel (``config.kind == "gemv"``; ``config.block_m`` 1, 2 or 4, at least M)."""
    a_q, a_scale_bytes, a_layout_code = ops.a.data, ops.a_scale_bytes, ops.a_layout_code
    w_q, w_scale_t, out = ops.w_q, ops.w_scale_t, ops.out
    work, counters = workspace
    m, k = a_q.shape
    n = w_q.shape[0]
    groups = k // 32
    mxfp8_gemv_kernel[(triton.cdiv(n, config.block_n), config.split_k)](
        a_q, a_scale_bytes, w_q, w_scale_t, out, work, counters, m, n, k,
        -(-m // 4) * 4, -(-groups // 4),
        A_LAYOUT=a_layout_code, BLOCK_M=config.block_m, BLOCK_N=config.block_n, CHUNKS=config.block_g,
        SPLIT_K=config.split_k, NUM_STAGES=config.num_stages, BITS=config.bits, num_warps=config.num_warps,
    )  # fmt: skip


@functools.cache
def device_facts(device: torch.device) -> tuple[str | None, int]:
    """(name, SM count) of a CUDA device, read once; (None, 132) elsewhere (compile checks, interpreter)."""
    if device.type != "cuda":
        return None, 132
    props = torch.cuda.get_device_properties(device)
    return props.name, props.multi_processor_count
