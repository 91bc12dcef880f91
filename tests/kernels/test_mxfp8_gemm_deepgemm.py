"""The deepgemm backend with the real DeepGEMM on Blackwell (sm_100 / sm_103), against float64 and torch.

This file is about the library itself: it imports ``deep_gemm`` at module top, so on a b200/gb300 runner
without it the file fails instead of skipping. Closeness as in ``mxfp8_gemm_cases``: against float64,
``|out - ref| <= 2**-8 |ref| + 2**-10 rms(ref)``; against the torch backend, ``2**-7`` instead of ``2**-8``.
"""

from __future__ import annotations

import deep_gemm  # noqa: F401  (the library under test; a missing install must fail this file)
import pytest
import torch
from mxfp8_gemm_cases import activation_pair, assert_gemm_close, random_codes, random_scales, reference_f64

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import witness
from mxfuse.gemm import backend_status, mxfp8_gemm, prepare_mxfp8_weight, select_backend

register(on=("b200", "gb300"), gpus=1, est_time=60)

POISON = 0xA5
# DeepSeek-V4 shapes, N = 1000 (N % 8 == 0 but no tile divides it), K = 2080 (not a multiple of 128: the
# last packed scale word holds one k-group and three zero pads).
SHAPES = ((1792, 5120), (5120, 2048), (7168, 16384), (1000, 2048), (2048, 2080))


def _operands(m: int, n: int, k: int, *, seed: int, limit: float = 448.0):
    aq = random_codes(m, k, seed=seed, device="cuda", limit=limit)
    wq = random_codes(n, k, seed=seed + 1, device="cuda", limit=limit)
    return (
        aq,
        random_scales(m, k, seed=seed + 2, device="cuda"),
        wq,
        random_scales(n, k, seed=seed + 3, device="cuda"),
    )


def _gemm(aq, as_, w, *, m: int, backend: str = "deepgemm") -> torch.Tensor:
    out = torch.empty((m, w.n), dtype=torch.bfloat16, device="cuda")
    out.view(torch.uint8).fill_(POISON)
    layout = "deepgemm" if backend == "deepgemm" else "e8m0"
    got = mxfp8_gemm(activation_pair(aq, as_, layout), w, out=out, backend=backend)
    torch.cuda.synchronize()
    return got


def test_deepgemm_runs_here_and_auto_takes_it():
    status = backend_status("cuda")["deepgemm"]
    assert status.ok, status.reason
    name, passed_over = select_backend("cuda", n=7168, k=16384)
    assert name == "deepgemm" and passed_over == {}


@pytest.mark.parametrize(("n", "k"), SHAPES, ids=[f"N{n}-K{k}" for n, k in SHAPES])
@pytest.mark.parametrize("m", [1, 2, 15, 64, 129, 2048])
def test_deepgemm_matches_float64(m, n, k):
    aq, as_, wq, ws = _operands(m, n, k, seed=m + n + k)
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    with witness.capture() as records:
        out = _gemm(aq, as_, w, m=m)
    assert records[-1]["path"] == "gemm.deepgemm"
    assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name=f"deepgemm m={m} [{n}, {k}]")


def test_deepgemm_matches_the_torch_backend():
    aq, as_, wq, ws = _operands(64, 2048, 7168, seed=1)
    got = _gemm(aq, as_, prepare_mxfp8_weight(wq, ws, backend="deepgemm"), m=64)
    want = _gemm(aq, as_, prepare_mxfp8_weight(wq, ws, backend="torch"), m=64, backend="torch")
    assert_gemm_close(got, want, name="deepgemm vs torch")


def test_nan_scale_byte_makes_exactly_its_rows_nan():
    aq, as_, wq, ws = _operands(33, 2048, 7168, seed=2)
    as_[5, 7] = 0xFF
    as_[32, 0] = 0xFF
    out = _gemm(aq, as_, prepare_mxfp8_weight(wq, ws, backend="deepgemm"), m=33)
    assert torch.isnan(out).any(dim=1).tolist() == [i in (5, 32) for i in range(33)]
    assert torch.isnan(out[[5, 32]]).all()
    assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name="out", equal_nan=True)


def test_extreme_scale_bytes_whose_products_stay_finite():
    m, n, k = 16, 2048, 7168
    aq, _, wq, _ = _operands(m, n, k, seed=3, limit=1.75)
    a_bytes = torch.tensor([0, 1, 253, 254], dtype=torch.int32, device="cuda").repeat(k // 128)
    as_, ws = a_bytes.to(torch.uint8).repeat(m, 1), (254 - a_bytes).to(torch.uint8).repeat(n, 1)
    out = _gemm(aq, as_, prepare_mxfp8_weight(wq, ws, backend="deepgemm"), m=m)
    assert torch.isfinite(out).all()
    assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name="out")


def test_cuda_graph_capture_and_replay():
    m, n, k = 16, 5120, 2048
    aq, as_, wq, ws = _operands(m, n, k, seed=4)
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    q_buf, s_buf = activation_pair(aq, as_, "deepgemm")
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    mxfp8_gemm((q_buf, s_buf), w, out=out)  # JIT-compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mxfp8_gemm((q_buf, s_buf), w, out=out)
    new_q, new_s, _, _ = _operands(m, n, k, seed=5)
    q_buf.copy_(new_q)
    s_buf.copy_(activation_pair(new_q, new_s, "deepgemm")[1])
    out.view(torch.uint8).fill_(POISON)
    graph.replay()
    torch.cuda.synchronize()
    assert_gemm_close(out, reference_f64(new_q, new_s, wq, ws), name="replay")


def test_repeatable():
    aq, as_, wq, ws = _operands(64, 7168, 16384, seed=6)
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    first = _gemm(aq, as_, w, m=64).clone()
    for _ in range(5):
        assert_same_bits(_gemm(aq, as_, w, m=64).view(torch.int16), first.view(torch.int16), name="repeat")
