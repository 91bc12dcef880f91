"""Property tests of gpumatrix.compare: one NaN or one sign-flipped Inf fails every API."""

from __future__ import annotations

import math
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gpumatrix.compare._arrays as compare_arrays
from gpumatrix import register
from gpumatrix.compare import (
    assert_close,
    assert_diff,
    assert_same_bits,
    assert_ulp_close,
    best,
    calc_diff,
    rel_error,
    ulp_distance,
    worst,
)

register(on=("cpu",), est_time=5)

# Modest example counts: CI runners have 2 cores and the whole suite must stay within minutes.
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}
_SIGNED_VIEW = {2: np.int16, 4: np.int32}


def _route(lib: str):
    """CPU tensors are normally read through numpy; "torch-kernels" runs the torch code path that
    GPU tensors take."""
    return mock.patch.object(compare_arrays, "CPU_TENSORS_VIA_NUMPY", lib != "torch-kernels")


def _to_lib(array: np.ndarray, lib: str):
    if lib == "numpy":
        return array
    torch = pytest.importorskip("torch")
    # Through the bits: torch.from_numpy cannot read ml_dtypes' bfloat16.
    bits = torch.from_numpy(array.view(_SIGNED_VIEW[array.itemsize]).copy())
    return bits.view(getattr(torch, array.dtype.name))


@st.composite
def broken_pairs(draw):
    """(lib, expected, actual, broken index, mode): a passing pair with one element broken."""
    lib = draw(st.sampled_from(["numpy", "torch", "torch-kernels"]))
    dtype = draw(st.sampled_from(sorted(_DTYPES)))
    # |values| <= 1e4 is finite in every dtype here (float16 tops out at 65504).
    elements = st.floats(-1e4, 1e4, allow_nan=False, width=32)
    values = draw(hnp.arrays(np.float32, st.integers(1, 48), elements=elements))
    expected = values.astype(_DTYPES[dtype])
    index = draw(st.integers(0, expected.size - 1))
    mode = draw(st.sampled_from(["nan-actual", "nan-expected", "nan-both", "inf-flip"]))
    return lib, expected, index, mode


def _break(expected: np.ndarray, index: int, mode: str, sign: float) -> tuple[np.ndarray, np.ndarray]:
    actual, expected = expected.copy(), expected.copy()
    if mode in ("nan-actual", "nan-both"):
        actual[index] = math.nan
    if mode in ("nan-expected", "nan-both"):
        expected[index] = math.nan
    if mode == "inf-flip":
        actual[index], expected[index] = sign * math.inf, -sign * math.inf
    return actual, expected


@FAST
@given(pair=broken_pairs(), sign=st.sampled_from([1.0, -1.0]))
def test_one_nan_or_flipped_inf_fails_every_api(pair, sign):
    lib, clean, index, mode = pair
    with _route(lib):
        _check_every_api_fails(lib, clean, index, mode, sign)


def _check_every_api_fails(lib: str, clean: np.ndarray, index: int, mode: str, sign: float) -> None:
    good = _to_lib(clean, lib)
    # The pair passes every API before it is broken, so each failure below is the broken element's.
    assert_close(good, good)
    assert_diff(good, good, max_diff=0.0)
    assert_ulp_close(good, good, max_ulp=0)
    assert_same_bits(good, good)
    assert rel_error(good, good) == 0.0

    actual, expected = (_to_lib(x, lib) for x in _break(clean, index, mode, sign))
    generous = {"rtol": 1e30, "atol": 1e30, "max_mismatch": clean.size}
    for kwargs in ({}, generous, {**generous, "equal_nan": mode != "nan-both"}):
        with pytest.raises(AssertionError):
            assert_close(actual, expected, **kwargs)
    with pytest.raises(AssertionError):
        assert_diff(actual, expected, max_diff=math.inf)
    with pytest.raises(AssertionError):
        assert_ulp_close(actual, expected, max_ulp=2**40)
    if mode != "nan-both":  # the same NaN code on both sides is bitwise equal, rightly
        with pytest.raises(AssertionError):
            assert_same_bits(actual, expected)
    assert math.isnan(rel_error(actual, expected))
    assert math.isnan(calc_diff(actual, expected))
    assert math.isnan(worst(rel_error(actual, expected), 0.0))
    assert math.isinf(float(ulp_distance(actual, expected).reshape(-1)[index]))


@st.composite
def tolerance_pairs(draw):
    """float64 (expected, actual, rtol, atol), each element at 0..2x its tolerance from expected."""
    size = draw(st.integers(1, 32))
    # fill=nothing draws every element: hypothesis otherwise fills most of an array with one value.
    expected = draw(hnp.arrays(np.float64, size, elements=st.floats(-1e3, 1e3), fill=st.nothing()))
    rtol = draw(st.sampled_from([0.0, 1e-7, 1.3e-6, 1e-3, 1.6e-2, 0.125]))
    atol = draw(st.sampled_from([0.0, 1e-7, 1e-5, 2.0**-9, 0.5]))
    scale = draw(hnp.arrays(np.float64, size, elements=st.floats(-2.0, 2.0), fill=st.nothing()))
    actual = expected + scale * (atol + rtol * np.abs(expected))
    return expected, actual, rtol, atol


@FAST
@given(case=tolerance_pairs(), lib=st.sampled_from(["torch", "torch-kernels"]))
def test_assert_close_agrees_with_torch_testing(case, lib):
    torch = pytest.importorskip("torch")
    # The reference this property is about; the suite bans it everywhere else.
    from torch.testing import assert_close as torch_assert_close  # noqa: TID251

    expected, actual, rtol, atol = (torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in case)

    def passes(check, a, e) -> bool:
        try:
            with _route(lib):
                check(a, e, rtol=rtol, atol=atol)
        except AssertionError:
            return False
        return True

    # float64 on both sides: torch.testing computes in the inputs' dtype, so float32 inputs would
    # differ by float32 rounding at the boundary, which is not what this property is about.
    # Element by element as well as whole: a whole array fails as soon as one element does, which
    # hides most disagreements about where the boundary lies.
    for i in range(expected.numel()):
        pair = actual[i : i + 1], expected[i : i + 1]
        assert passes(assert_close, *pair) == passes(torch_assert_close, *pair), (i, *pair)
    assert passes(assert_close, actual, expected) == passes(torch_assert_close, actual, expected)


@FAST
@given(
    values=st.lists(st.floats(allow_nan=False), min_size=1, max_size=8),
    position=st.integers(0, 8),
    with_nan=st.booleans(),
)
def test_worst_and_best_are_nan_whenever_any_value_is(values, position, with_nan):
    if with_nan:
        values = [*values[:position], math.nan, *values[position:]]
        assert math.isnan(worst(*values))
        assert math.isnan(best(*values))
    else:
        assert worst(*values) == max(values)
        assert best(*values) == min(values)
