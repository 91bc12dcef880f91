"""``exact_sum`` (mxfuse.kernels.hc.tile) under the Triton interpreter: a sum whose bits do not depend on
the order of its terms, close to the exactly rounded sum, with infinities and NaNs as a plain sum has them.

The fused boundary and the unfused steps reduce the same rows in different kernels, where Triton may give
the same tensor different register layouts, and ``tl.sum``'s order follows the layout. The interpreter
adds in array order, so permuting the terms is how a test sees an order-dependent sum here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from interpreter import run_interpreted

from gpumatrix import register

register(on=("cpu",), est_time=20)

_CHILD = r"""
import sys
import numpy as np
import torch
import triton
import triton.language as tl
from mxfuse.kernels.hc.tile import exact_sum, exact_total3

@triton.jit
def rows_kernel(x_ptr, out_ptr, plain_ptr, N: tl.constexpr, M: tl.constexpr):
    i = tl.arange(0, N)[:, None] * M + tl.arange(0, M)[None, :]
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + tl.arange(0, M), exact_sum(x, 0))
    tl.store(plain_ptr + tl.arange(0, M), tl.sum(x, axis=0))

@triton.jit
def total_kernel(x_ptr, out_ptr, A: tl.constexpr, B: tl.constexpr, C: tl.constexpr):
    i = (tl.arange(0, A)[:, None, None] * B + tl.arange(0, B)[None, :, None]) * C + tl.arange(0, C)[None, None, :]
    tl.store(out_ptr, exact_total3(tl.load(x_ptr + i)))

data = torch.load(sys.argv[1], weights_only=False)
out = {}
for key in data:
    x = torch.from_numpy(data[key])
    if key.startswith("rows"):
        got, plain = torch.empty(x.shape[1]), torch.empty(x.shape[1])
        rows_kernel[(1,)](x, got, plain, N=x.shape[0], M=x.shape[1])
        out[key], out[key + ":plain"] = got.numpy(), plain.numpy()
    else:
        got = torch.empty(1)
        total_kernel[(1,)](x, got, A=x.shape[0], B=x.shape[1], C=x.shape[2])
        out[key] = got.numpy()
torch.save(out, sys.argv[2])
"""


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal((64, 8)) * np.exp2(rng.integers(-30, 30, (64, 8)))).astype(np.float32)
    cancel = rng.standard_normal((32, 8)).astype(np.float32)
    cancel[16:] = -cancel[:16]  # every column sums to exactly 0
    cancel[0, 1], cancel[16, 1] = 1e-30, 0.0  # ... but column 1: 1e-30 beside terms of order 1
    tiny = (rng.standard_normal((16, 8)) * np.float32(1e-42)).astype(np.float32)  # subnormal terms
    huge = np.full((16, 8), np.float32(3e38))  # the total overflows
    special = rng.standard_normal((16, 8)).astype(np.float32)
    special[3, 0] = np.inf
    special[5, 1] = -np.inf
    special[2, 2], special[7, 2] = np.inf, -np.inf
    special[9, 3] = np.nan
    squares = (rng.standard_normal((8, 4, 32)).astype(np.float32)) ** 2
    return {"rows_wide": wide, "rows_cancel": cancel, "rows_tiny": tiny, "rows_huge": huge,
            "rows_special": special, "total_squares": squares.astype(np.float32)}  # fmt: skip


def _permuted(cases: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    out = {}
    for key, x in cases.items():
        if key.startswith("rows"):
            out[key] = np.stack([x[rng.permutation(x.shape[0]), j] for j in range(x.shape[1])], axis=1)
        else:
            out[key] = rng.permutation(x.reshape(-1)).reshape(x.shape)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict, dict]:
    cases = _cases()
    a = run_interpreted(tmp_path_factory, "hc_exact_sum_a", _CHILD, lambda: cases, timeout=300)
    b = run_interpreted(tmp_path_factory, "hc_exact_sum_b", _CHILD, lambda: _permuted(cases), timeout=300)
    return cases, a, b


def test_permuting_the_terms_leaves_every_bit(runs):
    cases, a, b = runs
    for key in cases:
        np.testing.assert_array_equal(a[key].view(np.uint32), b[key].view(np.uint32), err_msg=key)


def test_the_plain_sum_does_depend_on_the_order(runs):
    """What the test above would catch: the interpreter's tl.sum of the same permuted columns differs."""
    _, a, b = runs
    assert not np.array_equal(a["rows_wide:plain"].view(np.uint32), b["rows_wide:plain"].view(np.uint32))


def test_close_to_the_exactly_rounded_sum(runs):
    cases, a, _ = runs
    for key in ("rows_wide", "rows_cancel", "rows_tiny"):
        x = cases[key].astype(np.float64)
        for j in range(x.shape[1]):
            exact = math.fsum(x[:, j])
            largest = np.abs(x[:, j]).max()
            # One rounding of the total plus truncated bits below 2^-47 of the largest term, per term.
            bound = abs(exact) * 2.0**-24 + x.shape[0] * largest * 2.0**-47 + 2.0**-149
            assert abs(float(a[key][j]) - exact) <= bound, (key, j, a[key][j], exact)
    assert (a["rows_cancel"][[0, 2, 3, 4, 5, 6, 7]] == 0).all()
    squares = cases["total_squares"].astype(np.float64)
    exact = math.fsum(squares.reshape(-1))
    assert abs(float(a["total_squares"][0]) - exact) <= exact * 2.0**-24


def test_overflow_infinities_and_nan(runs):
    _, a, _ = runs
    assert np.isinf(a["rows_huge"]).all() and (a["rows_huge"] > 0).all()
    special = a["rows_special"]
    assert special[0] == np.inf and special[1] == -np.inf
    assert np.isnan(special[2]) and np.isnan(special[3])
    assert np.isfinite(special[4:]).all()
