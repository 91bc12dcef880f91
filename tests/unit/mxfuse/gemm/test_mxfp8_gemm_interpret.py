"""The Triton MXFP8 GEMM's logic on CPU: every kernel kind under the Triton interpreter against the torch
backend (dequantize + fp32 matmul), at small shapes with odd N, K not a multiple of the step, split-K,
all three activation scale layouts, NaN blocks and extreme scale bytes, and (``mxfp8_operands``) a
32x32-block weight whose small rows are E4M3 subnormal codes with subnormal, zero and tiny tokens, checked
row by row and element by element against float64 (``assert_gemm_matches_float64``).

The interpreter runs in one child process (``interpreter.run_interpreted``: Triton decides
interpretation at import), once per session under xdist.
"""

from __future__ import annotations

import pytest
import torch
from interpreter import run_interpreted
from mxfp8_gemm_cases import RTOL_VS_BF16, assert_gemm_matches_float64
from mxfp8_operands import activation_rows, checkpoint_weight

from gpumatrix import register
from gpumatrix.compare import assert_close
from mxfuse.formats import dequantize_mxfp8, scale_to_layout

register(on=("cpu",), est_time=60)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
# (kind, block_m, block_n, block_g, split_k, flag): flag is swap_ab (dq16, mma8), bits (gemv) or, for
# stream, Triton's software pipeline over 2 stages (num_stages 2)
CONFIGS = {
    "gemv m1": ("gemv", 1, 8, 4, 1, False),
    "gemv m1 bits": ("gemv", 1, 4, 8, 2, True),
    "gemv m2 bits": ("gemv", 2, 8, 4, 1, True),
    "gemv m2 split3": ("gemv", 2, 4, 8, 3, False),
    "gemv m4 split2": ("gemv", 4, 8, 2, 2, False),
    # stream with 4 warps: 32 * 4 / block_g rows per sub-tile, block_n / that sub-tiles per program
    "stream m1 r2": ("stream", 1, 32, 8, 1, False),
    "stream m2 split2": ("stream", 2, 64, 4, 2, False),
    "stream m4 split3": ("stream", 4, 32, 8, 3, False),
    "stream m1 even": ("stream", 1, 64, 8, 2, False),
    "stream m1 rows 2 stages, scale rows": ("stream", 1, 8, 128, 1, True),
    "stream m1 rows split2, scale rows": ("stream", 1, 4, 128, 2, False),
    "stream m2 2 stages split2": ("stream", 2, 32, 8, 2, True),
    "stream m4 rows 2 stages even, scale rows": ("stream", 4, 4, 128, 2, True),
    "dq16 swap split2": ("dq16", 16, 16, 2, 2, True),
    "dq16": ("dq16", 16, 16, 4, 1, False),
    "mma8 swap": ("mma8", 16, 16, 2, 1, True),
    "mma8 split3": ("mma8", 16, 32, 2, 3, False),
}
# (M, N, K) per config kind; N odd and not a multiple of any block, K not a multiple of every step.
SHAPES = {
    "gemv": [(1, 37, 288), (2, 24, 64)],
    # the last is unmasked for "stream m1 even": N a multiple of 64, K of 2 splits of whole 128-wide steps
    "stream": [(1, 37, 288), (2, 24, 64), (4, 40, 160), (1, 128, 512)],
    "dq16": [(5, 37, 288), (17, 24, 160)],
    "mma8": [(3, 37, 224)],
}

_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels import gemm as mk
cases = torch.load(sys.argv[1])
from mxfuse.kernels.gemm.gemv import mxfp8_gemv_kernel
results = {"interpreted": type(mxfp8_gemv_kernel).__name__}
for key, (a_q, a_scale, layout, w_q, w_scale_t, config) in cases.items():
    m, k = a_q.shape
    out = torch.full((m, w_q.shape[0]), float("nan"), dtype=torch.bfloat16)
    kind, bm, bn, bg, split, flag = config
    stages = 2 if flag and kind == "stream" else 1  # stream: Triton's pipeline
    cfg = mk.GemmConfig(kind, bm, bn, bg, split, 4, stages, swap_ab=flag and kind in ("dq16", "mma8"),
                        bits=flag and kind == "gemv")
    rows = w_scale_t.t().contiguous() if "scale rows" in key[0] else None
    mk.launch_mxfp8_gemm(MxTensor(a_q, a_scale, layout), w_q, w_scale_t, out, config=cfg, w_scale_rows=rows)
    results[key] = out
torch.save(results, sys.argv[2])
"""


def _operands(m: int, n: int, k: int, seed: int, *, special: bool):
    """Random E4M3 operands with per-block scale bytes; ``special`` adds a NaN block, a zero block and
    extreme scale bytes (0, 1, 253, 254) paired so every product stays finite."""
    g = torch.Generator().manual_seed(seed)
    groups = k // 32
    a = (torch.randn(m, k, generator=g) * 16).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=g) * 16).to(torch.float8_e4m3fn)
    sa = torch.randint(110, 140, (m, groups), generator=g, dtype=torch.int32)
    sw = torch.randint(110, 140, (n, groups), generator=g, dtype=torch.int32)
    if special:
        # Extreme scales paired so that every dequantized element and every product stays finite: the
        # elements under scale 254 or 253 are at most 1 in magnitude.
        sa[0, 0], sw[:, 0] = 254, 1  # 2**127 * 2**-126
        a[0, :32] = (a[0, :32].float() / 512).to(torch.float8_e4m3fn)
        sa[:, 1], sw[:, 1] = 1, 253  # every row: a weight scale of 2**126 meets 2**-126
        w[:, 32:64] = (w[:, 32:64].float() / 512).to(torch.float8_e4m3fn)
        sw[0, groups - 1] = 0
        a[m - 1, 32:64] = 0.0  # a zero block
        if m > 1:
            sa[1, groups - 1] = 0xFF  # NaN block: row 1 must come out NaN, and only row 1
            a.view(torch.uint8)[1, (groups - 1) * 32 :] = 0x7F
    return a, sa.to(torch.uint8), w, sw.to(torch.uint8)


def _cases() -> dict:
    cases = {}
    for name, config in CONFIGS.items():
        for m, n, k in SHAPES[config[0]]:
            if config[0] in ("gemv", "stream") and m > config[1]:
                continue
            for layout in LAYOUTS:
                for special in (False, True):
                    a, sa, w, sw = _operands(m, n, k, seed=len(cases), special=special)
                    key = (name, m, n, k, layout, special)
                    cases[key] = (
                        a,
                        scale_to_layout(sa, scale_layout=layout),
                        layout,
                        w,
                        sw.t().contiguous(),
                        config,
                    )
    kinds = ("subnormal", "tiny", "zero", "gaussian")
    for name, config in CONFIGS.items():
        m, n, k = SHAPES[config[0]][0]
        m = min(m, config[1]) if config[0] in ("gemv", "stream") else m
        a, sa = activation_rows([kinds[i % 4] for i in range(m)], k, seed=len(cases))
        w, sw32 = checkpoint_weight(n, k, seed=len(cases) + 1)
        sw = sw32.repeat_interleave(32, dim=0)[:n]
        cases[(name, m, n, k, "e8m0", "operands")] = (a, sa, "e8m0", w, sw.t().contiguous(), config)
    return cases


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> tuple[dict, dict]:
    cases = _cases()
    return cases, run_interpreted(tmp_path_factory, "mxfp8_gemm_interpret", _WORKER, lambda: cases)


def test_worker_ran_the_interpreter(interpreted):
    assert interpreted[1]["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("key", list(_cases()), ids=lambda key: " ".join(map(str, key)))
def test_interpreted_gemm_matches_a_float64_reference(interpreted, key):
    cases, results = interpreted
    a, a_scale, layout, w, w_scale_t, _ = cases[key]
    if key[-1] == "operands":
        assert_gemm_matches_float64(
            results[key], a, a_scale, w, w_scale_t.t().contiguous(), rtol=RTOL_VS_BF16, name="out"
        )
        return
    got = results[key].double()
    a64 = dequantize_mxfp8(a, a_scale, scale_layout=layout).double()
    w64 = dequantize_mxfp8(w, w_scale_t.t().contiguous(), scale_layout="e8m0").double()
    want = a64 @ w64.t()
    special = key[-1]
    if special and a.shape[0] > 1:
        # The NaN block of row 1 poisons exactly row 1.
        assert bool(torch.isnan(got[1]).all()), "row 1 holds a NaN block: every output of it must be NaN"
        keep = torch.ones(a.shape[0], dtype=torch.bool)
        keep[1] = False
        got, want = got[keep], want[keep]
    # The kernel sums exact E4M3 products in fp32 and rounds once to bf16. The interpreter's fp32 -> bf16
    # cast truncates (the GPU rounds to nearest), so allow one bf16 ulp (2**-7 relative) plus fp32
    # summation error, which for outputs that cancel to near zero is bounded by 1e-6 of the row's rms:
    # row-local, so a row of subnormal or tiny operands is held to its own size (a whole-tensor atol
    # let a kernel that flushes E4M3 subnormals pass).
    assert_close(got, want, rtol=2**-7, atol_of_row_rms=1e-6, name="out")
