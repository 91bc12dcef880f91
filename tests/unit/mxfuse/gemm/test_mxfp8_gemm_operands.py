"""The GEMM checks the GPU and interpreter tests use, proven on CPU: the operands hold what they promise,
the torch backend passes, and a kernel that flushes subnormals or misapplies one scale fails.

The "kernels" that put a bug in are the torch backend fed the operands the bug would read (subnormal
codes flushed to zero, one block scale doubled, one row's scales shifted), so each check is shown to fail
on exactly the error it is for, and the whole-tensor rule it replaces is shown to let that error pass.
"""

from __future__ import annotations

import pytest
import torch
from mxfp8_gemm_cases import activation_pair, assert_gemm_matches_float64, random_codes, random_scales
from mxfp8_operands import (
    SUBNORMAL_CODES,
    activation_rows,
    checkpoint_weight,
    is_subnormal,
    with_subnormals_flushed,
)

from gpumatrix import register
from gpumatrix.compare import assert_diff
from mxfuse.gemm import mxfp8_gemm, prepare_mxfp8_weight

register(on=("cpu",), est_time=10)

KINDS = ["gaussian", "subnormal", "zero", "tiny"] * 3
N, K = 96, 256


def _per_row(scale_32x32: torch.Tensor, n: int) -> torch.Tensor:
    return scale_32x32.repeat_interleave(32, dim=0)[:n]


def _gemm(a_q, a_s, w_q, w_s, layout: str = "e8m0") -> torch.Tensor:
    w = prepare_mxfp8_weight(w_q, w_s, backend="torch")
    return mxfp8_gemm(activation_pair(a_q, a_s, layout), w, backend="torch")


def test_the_operands_hold_what_they_promise():
    w_q, w_s = checkpoint_weight(N, K, seed=1)
    sub = is_subnormal(w_q)
    assert 0.05 < float(sub.float().mean()) < 0.25  # about one weight code in eight
    small_rows = (sub | (w_q.view(torch.uint8) & 0x7F == 0)).float().mean(dim=1) > 0.75
    assert int(small_rows.sum()) >= 3  # output columns made of subnormal products nearly alone
    a_q, a_s = activation_rows(KINDS, K, seed=2)
    for row, kind in enumerate(KINDS):
        codes, scales = a_q[row].view(torch.uint8), a_s[row]
        if kind == "subnormal":
            assert set(codes.tolist()) <= set(SUBNORMAL_CODES) and is_subnormal(a_q[row]).all()
        elif kind == "zero":
            assert not codes.any() and not scales.any()
        elif kind == "tiny":
            assert 40 < int(scales.min()) and int(scales.max()) < 80
        else:
            assert 100 < int(scales.min()) and int(scales.max()) < 150
    assert is_subnormal(with_subnormals_flushed(w_q)).sum() == 0


@pytest.mark.parametrize("layout", ["e8m0", "deepgemm", "swizzled_128x4"])
def test_the_torch_backend_passes(layout):
    w_q, w_s = checkpoint_weight(N, K, seed=3)
    a_q, a_s = activation_rows(KINDS, K, seed=4)
    out = _gemm(a_q, a_s, w_q, w_s, layout)
    assert_gemm_matches_float64(out, a_q, a_s, w_q, _per_row(w_s, N), name=f"torch {layout}")
    for row, kind in enumerate(KINDS):
        if kind == "zero":
            assert not (out[row].view(torch.int16) & 0x7FFF).any(), "a zero token's outputs are 0"


@pytest.mark.parametrize("flushed", ["weight", "activation"])
def test_a_kernel_that_flushes_subnormals_fails(flushed):
    w_q, w_s = checkpoint_weight(N, K, seed=5)
    a_q, a_s = activation_rows(KINDS, K, seed=6)
    reads_a = with_subnormals_flushed(a_q) if flushed == "activation" else a_q
    reads_w = with_subnormals_flushed(w_q) if flushed == "weight" else w_q
    out = _gemm(reads_a, a_s, reads_w, w_s)
    with pytest.raises(AssertionError, match="not close"):
        assert_gemm_matches_float64(out, a_q, a_s, w_q, _per_row(w_s, N), name="flushing kernel")


def test_one_doubled_block_scale_in_one_row_of_2048_fails():
    """The issue's example: a linear's whole-tensor calc_diff <= 1e-5 does not see it."""
    m, n, k = 2048, 64, 2048
    a_q, a_s = random_codes(m, k, seed=7), random_scales(m, k, seed=8)
    w_q, w_s = random_codes(n, k, seed=9), random_scales(n, k, seed=10)
    wrong = a_s.clone()
    wrong[1234, 17] += 1  # one block scale of one row doubled
    out = _gemm(a_q, wrong, w_q, w_s)
    right = _gemm(a_q, a_s, w_q, w_s)
    assert_diff(out, right, max_diff=1e-5, name="whole-tensor calc_diff")
    with pytest.raises(AssertionError, match=r"first at \(1234, "):
        assert_gemm_matches_float64(out, a_q, a_s, w_q, w_s, name="doubled scale")
    with pytest.raises(AssertionError, match=r"first failing row: \(1234,\)"):
        assert_diff(out, right, max_diff=1e-5, per_row=True, name="per-row calc_diff")


def test_a_tiny_token_with_a_wrong_scale_fails():
    w_q, w_s = checkpoint_weight(N, K, seed=11)
    a_q, a_s = activation_rows(KINDS, K, seed=12)
    tiny = KINDS.index("tiny")
    wrong = a_s.clone()
    wrong[tiny] += 1  # the tiny token's scales one step off: every output of it doubled
    out = _gemm(a_q, wrong, w_q, w_s)
    with pytest.raises(AssertionError, match=rf"first at \({tiny}, 0\)"):
        assert_gemm_matches_float64(out, a_q, a_s, w_q, _per_row(w_s, N), name="tiny token")
