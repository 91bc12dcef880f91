"""Table-driven tests of gpumatrix.compare: every rule, on numpy arrays and on torch tensors."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import gpumatrix.compare._arrays as compare_arrays
from gpumatrix import register
from gpumatrix.compare import (
    assert_close,
    assert_diff,
    assert_same_bits,
    assert_ulp_close,
    best,
    calc_diff,
    calc_diff_rows,
    rel_error,
    ulp_distance,
    worst,
)

register(on=("cpu",), est_time=5)

NAN, INF = math.nan, math.inf
BF16_MAX = 3.3895313892515355e38  # largest finite bfloat16, 0x7F7F
_ML_DTYPES = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz"}
_CODE_VIEWS = {1: ("uint8", "uint8"), 2: ("uint16", "int16"), 4: ("uint32", "int32")}


@pytest.fixture(params=["numpy", "torch", "torch-kernels"])
def lib(request, monkeypatch) -> str:
    """The library inputs are made in. CPU tensors are normally read through numpy; "torch-kernels"
    turns that off so the torch code path that GPU tensors take runs here too."""
    if request.param == "torch-kernels":
        monkeypatch.setattr(compare_arrays, "CPU_TENSORS_VIA_NUMPY", False)
    return "numpy" if request.param == "numpy" else "torch"


def _numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, dtype)) if dtype in _ML_DTYPES else np.dtype(dtype)


def make(lib: str, values: list, dtype: str):
    """values (Python numbers, NaN and Inf included) as a numpy array or CPU tensor of dtype."""
    array = np.array(values, dtype=_numpy_dtype(dtype))
    if lib == "numpy":
        return array
    if dtype in _ML_DTYPES:
        codes = array.reshape(-1).view(_CODE_VIEWS[array.itemsize][0])
        return from_codes(lib, codes, dtype).reshape(array.shape)
    torch = pytest.importorskip("torch")
    return torch.from_numpy(array.copy())


def from_codes(lib: str, codes, dtype: str):
    """Bit patterns (unsigned ints) as an array of dtype: the only way to name a specific NaN code."""
    unsigned, signed = _CODE_VIEWS[_numpy_dtype(dtype).itemsize]
    raw = np.array(codes, dtype=unsigned)
    if lib == "numpy":
        return raw.view(_numpy_dtype(dtype))
    torch = pytest.importorskip("torch")
    # torch reads fp8 codes through uint8 and wider ones through the signed integer of their width.
    return torch.from_numpy(raw.view(signed).copy()).view(getattr(torch, dtype))


def failure_message(check, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as caught:
        check(*args, **kwargs)
    return str(caught.value)


def assert_float(result: float, expected: float) -> None:
    """Exact for 0 and inf, NaN only when NaN was expected, else to 12 significant digits."""
    assert isinstance(result, float), type(result)
    if math.isnan(expected):
        assert math.isnan(result), result
    else:
        assert result == expected or math.isclose(result, expected, rel_tol=1e-12), (result, expected)


# ---------------------------------------------------------------------------------------------
# assert_close

CLOSE_PASSES = [
    ("identical-float32", [1.0, -2.5, 3.0], [1.0, -2.5, 3.0], "float32", {}),
    ("within-default-float32", [1.000001], [1.0], "float32", {}),
    ("negative-zero", [-0.0, 0.0], [0.0, -0.0], "float32", {}),
    ("same-infinities", [INF, -INF, 1.0], [INF, -INF, 1.0], "float32", {}),
    ("equal-nan-both-sides", [NAN, 1.0], [NAN, 1.0], "float32", {"equal_nan": True}),
    ("empty", [], [], "float32", {}),
    ("budget-absorbs-finite-miss", [1.0, 2.0, 3.5], [1.0, 2.0, 3.0], "float32", {"max_mismatch": 1}),
    ("explicit-tolerance", [1.05], [1.0], "float32", {"rtol": 0.0, "atol": 0.1}),
    ("numpy-int-budget", [1.0, 2.5], [1.0, 2.0], "float32", {"max_mismatch": np.int64(1)}),
    ("float64-default", [1.00000005], [1.0], "float64", {}),
    ("float16-default", [1.0009765625], [1.0], "float16", {}),
    ("bfloat16-one-step", [1.0078125], [1.0], "bfloat16", {}),
    ("e4m3-one-step", [1.125], [1.0], "float8_e4m3fn", {}),
    ("e5m2-one-step", [1.25], [1.0], "float8_e5m2", {}),
    ("int-exact", [1, 2, 3], [1, 2, 3], "int32", {}),
    ("bool-exact", [True, False], [True, False], "bool", {}),
]

CLOSE_FAILURES = [
    ("nan-first", [NAN, 1.0, 2.0], [0.0, 1.0, 2.0], "float32", {}, ["1 unexpected NaN (first at (0,))"]),
    ("nan-last", [0.0, 1.0, NAN], [0.0, 1.0, 2.0], "float32", {}, ["1 unexpected NaN (first at (2,))"]),
    ("nan-only-element", [NAN], [0.0], "float32", {}, ["1 / 1 (100%) elements mismatched"]),
    ("nan-in-expected", [1.0], [NAN], "float32", {}, ["expected: 1 unexpected NaN (first at (0,))"]),
    (
        "nan-under-generous-budget",
        [NAN, 1.0, 2.0, 3.0],
        [0.0, 1.0, 2.0, 3.0],
        "float32",
        {"max_mismatch": 1000},
        ["(max_mismatch=1000)", "NaN/Inf failures, which no tolerance or max_mismatch absorbs: 1"],
    ),
    (
        "nan-under-infinite-tolerance",
        [NAN, 5.0],
        [1.0, 1.0],
        "float32",
        {"rtol": INF, "atol": INF},
        ["actual:   1 unexpected NaN (first at (0,))"],
    ),
    (
        "nan-both-sides-without-equal-nan",
        [1.0, NAN],
        [1.0, NAN],
        "float32",
        {},
        ["actual:   1 unexpected NaN (first at (1,))", "expected: 1 unexpected NaN (first at (1,))"],
    ),
    ("equal-nan-one-side", [NAN], [1.0], "float32", {"equal_nan": True}, ["actual:   1 unexpected NaN"]),
    (
        "plus-inf-vs-minus-inf",
        [1.0, INF],
        [1.0, -INF],
        "float32",
        {"max_mismatch": 5},
        [
            "actual:   0 unexpected NaN, 1 unmatched Inf (first at (1,))",
            "expected: 0 unexpected NaN, 1 unmatched",
        ],
    ),
    (
        "inf-vs-nan",
        [INF],
        [NAN],
        "float32",
        {"equal_nan": True},
        ["actual:   0 unexpected NaN, 1 unmatched Inf (first at (0,))", "expected: 1 unexpected NaN"],
    ),
    (
        "inf-vs-finite-under-huge-tolerance",
        [INF],
        [1.0],
        "float32",
        {"rtol": 1e300, "atol": 1e300},
        ["1 unmatched Inf (first at (0,))"],
    ),
    (
        "finite-vs-inf-rtol-one",
        [1.0],
        [INF],
        "float32",
        {"rtol": 1.0, "atol": 0.0},
        ["expected: 0 unexpected"],
    ),
    (
        "bf16-inf-vs-largest-finite",
        [INF],
        [BF16_MAX],
        "bfloat16",
        {"max_mismatch": 1},
        ["actual:   0 unexpected NaN, 1 unmatched Inf (first at (0,))"],
    ),
    ("float32-beyond-default", [1.0001], [1.0], "float32", {}, ["1 pairs of finite values (first at (0,))"]),
    ("bfloat16-beyond-default", [1.03125], [1.0], "bfloat16", {}, ["rtol=0.016, atol=1e-05"]),
    ("e4m3-beyond-default", [1.25], [1.0], "float8_e4m3fn", {}, ["rtol=0.125, atol=0.001953125"]),
    ("int-off-by-one", [1, 2, 3], [1, 2, 4], "int32", {}, ["1 / 3 (33.33%)", "(exact for int32)"]),
    ("bool-flip", [True, True], [True, False], "bool", {}, ["first at (1,)"]),
    ("budget-exceeded", [1.5, 2.5, 3.0], [1.0, 2.0, 3.0], "float32", {"max_mismatch": 1}, ["2 / 3 (66.67%)"]),
]


@pytest.mark.parametrize(
    ("case", "actual", "expected", "dtype", "kwargs"), CLOSE_PASSES, ids=[row[0] for row in CLOSE_PASSES]
)
def test_assert_close_passes(lib, case, actual, expected, dtype, kwargs):
    assert_close(make(lib, actual, dtype), make(lib, expected, dtype), **kwargs)


@pytest.mark.parametrize(
    ("case", "actual", "expected", "dtype", "kwargs", "fragments"),
    CLOSE_FAILURES,
    ids=[row[0] for row in CLOSE_FAILURES],
)
def test_assert_close_fails(lib, case, actual, expected, dtype, kwargs, fragments):
    message = failure_message(assert_close, make(lib, actual, dtype), make(lib, expected, dtype), **kwargs)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


def test_assert_close_message_carries_every_field():
    actual = np.array([[1.0, NAN, 3.0], [INF, 5.0, 6.5]], dtype=np.float32)
    expected = np.array([[1.0, 2.0, 3.0], [-INF, 5.0, 6.0]], dtype=np.float32)
    message = failure_message(assert_close, actual, expected, name="logits")
    assert message.splitlines() == [
        "logits: not close: 3 / 6 (50%) elements mismatched (max_mismatch=0)",
        "  NaN/Inf failures, which no tolerance or max_mismatch absorbs: 2",
        "    actual:   1 unexpected NaN (first at (0, 1)), 1 unmatched Inf (first at (1, 0))",
        "    expected: 0 unexpected NaN, 1 unmatched Inf (first at (1, 0))",
        "  outside tolerance: 1 pairs of finite values (first at (1, 2))",
        "  worst absolute difference: 0.5 at (1, 2): actual 6.5, expected 6.0",
        "  worst relative difference: 0.08333333333333333 at (1, 2): actual 6.5, expected 6.0",
        "  actual: numpy float32; expected: numpy float32; shape (2, 3)",
        "  tolerance: |actual - expected| <= atol + rtol * |expected|, rtol=1.3e-06, atol=1e-05 "
        "(defaults for float32), equal_nan=False",
    ]


@pytest.mark.parametrize(
    ("case", "fp8", "actual_codes", "expected_codes", "kwargs", "passes"),
    [
        ("e4m3-nan-0x7f-vs-448", "float8_e4m3fn", [0x7F], [0x7E], {"rtol": 1e6, "atol": 1e6}, False),
        ("e4m3-nan-0xff-vs-448", "float8_e4m3fn", [0xFF], [0x7E], {"max_mismatch": 1}, False),
        ("e4m3-nan-vs-nan", "float8_e4m3fn", [0x7F], [0x7F], {}, False),
        ("e4m3-nan-vs-nan-equal-nan", "float8_e4m3fn", [0x7F, 0x7E], [0xFF, 0x7E], {"equal_nan": True}, True),
        ("e4m3-minus-448", "float8_e4m3fn", [0xFE], [0xFE], {}, True),
        ("e5m2-inf-vs-largest", "float8_e5m2", [0x7C], [0x7B], {"max_mismatch": 1}, False),
        ("e5m2-inf-vs-minus-inf", "float8_e5m2", [0x7C], [0xFC], {}, False),
        ("e5m2-same-inf", "float8_e5m2", [0x7C], [0x7C], {}, True),
    ],
)
def test_assert_close_fp8_codes(lib, case, fp8, actual_codes, expected_codes, kwargs, passes):
    actual, expected = from_codes(lib, actual_codes, fp8), from_codes(lib, expected_codes, fp8)
    if passes:
        assert_close(actual, expected, **kwargs)
    else:
        assert "NaN/Inf failures" in failure_message(assert_close, actual, expected, **kwargs)


@pytest.mark.parametrize(
    ("case", "actual_shape", "expected_shape"),
    [("row-vs-column", (3,), (1, 3)), ("transposed", (2, 3), (3, 2)), ("scalar-vs-one", (), (1,))],
)
@pytest.mark.parametrize("check", [assert_close, assert_same_bits], ids=["assert_close", "assert_same_bits"])
def test_shape_mismatch_fails(case, actual_shape, expected_shape, check):
    message = failure_message(check, np.zeros(actual_shape, np.float32), np.zeros(expected_shape, np.float32))
    assert f"shape mismatch: actual {actual_shape} vs expected {expected_shape}" in message


@pytest.mark.parametrize(
    ("case", "actual", "expected", "passes"),
    [
        ("float-scalars", 1.0, 1.0, True),
        ("float-scalars-differ", 1.0, 1.001, False),
        ("int-scalars-differ", 3, 4, False),
        ("int64-above-2**53", np.array([2**53 + 1]), np.array([2**53]), False),
        (
            "numpy-vs-torch-bf16",
            np.array([1.0, 2.0], ml_dtypes.bfloat16),
            ("torch", [1.0, 2.0], "bfloat16"),
            True,
        ),
        ("torch-vs-numpy-nan", ("torch", [1.0, NAN], "float32"), np.array([1.0, 2.0], np.float32), False),
        ("torch-vs-scalar", ("torch", 2.5, "float32"), 2.5, True),
        ("torch-int64-above-2**53", ("torch", [2**53 + 1], "int64"), ("torch", [2**53], "int64"), False),
    ],
)
def test_assert_close_mixed_inputs(lib, case, actual, expected, passes):
    # lib only picks how CPU tensors are read (through numpy or by torch); inputs are as listed.
    actual, expected = (make(*v) if isinstance(v, tuple) else v for v in (actual, expected))
    if passes:
        assert_close(actual, expected)
    else:
        failure_message(assert_close, actual, expected)


@pytest.mark.parametrize(
    ("case", "call", "error", "fragment"),
    [
        ("rtol-alone", lambda x: assert_close(x, x, rtol=1e-3), ValueError, "atol is missing"),
        ("negative-atol", lambda x: assert_close(x, x, rtol=0.0, atol=-1.0), ValueError, "atol must be"),
        ("nan-rtol", lambda x: assert_close(x, x, rtol=NAN, atol=0.0), ValueError, "rtol must be"),
        ("string-rtol", lambda x: assert_close(x, x, rtol="0.1", atol=0.0), TypeError, "rtol must be"),
        ("negative-budget", lambda x: assert_close(x, x, max_mismatch=-1), ValueError, "max_mismatch"),
        ("fractional-budget", lambda x: assert_close(x, x, max_mismatch=1.5), TypeError, "max_mismatch"),
        ("bool-budget", lambda x: assert_close(x, x, max_mismatch=True), TypeError, "max_mismatch"),
        ("int-equal-nan", lambda x: assert_close(x, x, equal_nan=1), TypeError, "equal_nan"),
        ("int-name", lambda x: assert_close(x, x, name=3), TypeError, "name"),
        ("list-actual", lambda x: assert_close([1.0], x), TypeError, "actual must be a torch.Tensor"),
        ("str-expected", lambda x: assert_close(x, "1.0"), TypeError, "expected must be a torch.Tensor"),
        ("complex", lambda x: assert_close(x.astype(np.complex64), x), TypeError, "float, integer or bool"),
        (
            "no-default-tolerance",
            lambda x: assert_close(x, x.astype(ml_dtypes.float8_e4m3fnuz)),
            ValueError,
            "no default tolerance",
        ),
        (
            "ulp-float64",
            lambda x: ulp_distance(x.astype(np.float64), x.astype(np.float64)),
            TypeError,
            "dtypes",
        ),
        ("ulp-mixed-dtypes", lambda x: ulp_distance(x, x.astype(np.float16)), TypeError, "share a dtype"),
        ("ulp-shapes", lambda x: ulp_distance(x, x[:1]), ValueError, "same shape"),
        ("negative-max-ulp", lambda x: assert_ulp_close(x, x, max_ulp=-1), ValueError, "max_ulp"),
        ("nan-max-diff", lambda x: assert_diff(x, x, max_diff=NAN), ValueError, "max_diff"),
        ("rel-error-shapes", lambda x: rel_error(x, x[:1]), ValueError, "same shape"),
        ("calc-diff-shapes", lambda x: calc_diff(x, x[:1]), ValueError, "x and y"),
    ],
)
def test_bad_arguments_are_rejected(case, call, error, fragment):
    with pytest.raises(error, match=fragment):
        call(np.array([1.0, 2.0], dtype=np.float32))


@pytest.mark.parametrize("chunk", [1, 3, 4096])
def test_chunked_scans_report_global_indices(lib, monkeypatch, chunk):
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", chunk)
    expected = make(lib, list(range(10)), "float32")
    actual = make(lib, [0.0, 1.0, 2.0, 3.0, 4.5, 5.0, 6.0, NAN, 10.0, 9.0], "float32")
    message = failure_message(assert_close, actual, expected)
    assert "1 unexpected NaN (first at (7,))" in message
    assert "outside tolerance: 2 pairs of finite values (first at (4,))" in message
    assert "worst absolute difference: 2.0 at (8,): actual 10.0, expected 8.0" in message
    assert "3 / 10 (30%)" in message
    assert_float(rel_error(make(lib, list(range(1, 11)), "float32"), expected), math.sqrt(10 / 285))
    assert_float(calc_diff(make(lib, [1.0] * 10, "float32"), make(lib, [1.0] * 10, "float32")), 0.0)
    bits = failure_message(assert_same_bits, actual, expected)
    assert bits.splitlines()[1:4] == [
        "  first 3 differing (index: actual vs expected):",
        "    (4,): 0x40900000 (4.5) vs 0x40800000 (4.0)",
        "    (7,): 0x7fc00000 (nan) vs 0x40e00000 (7.0)",
    ]
    ulp = failure_message(assert_ulp_close, actual, expected, max_ulp=1)
    assert "infinite distances (a NaN, or an Inf not met by the same Inf): 1 elements (first at (7,))" in ulp


# ---------------------------------------------------------------------------------------------
# rel_error, calc_diff, assert_diff

METRIC_CASES = [
    # id, actual, expected, rel_error, calc_diff
    ("identical", [1.0, 2.0], [1.0, 2.0], 0.0, 0.0),
    ("orthogonal", [1.0, 0.0], [0.0, 1.0], math.sqrt(2.0), 1.0),
    ("opposite", [1.0], [-1.0], 2.0, 2.0),
    ("three-vs-one", [3.0], [1.0], 2.0, 0.4),
    ("known-norms", [3.0, 0.0], [0.0, 4.0], 1.25, 1.0),
    ("both-all-zero", [0.0, -0.0], [0.0, 0.0], 0.0, 0.0),
    ("empty", [], [], 0.0, 0.0),
    ("expected-all-zero", [1.0, 2.0], [0.0, 0.0], INF, 1.0),
    ("nan-in-actual", [NAN, 1.0], [1.0, 1.0], NAN, NAN),
    ("nan-in-expected", [1.0, 1.0], [1.0, NAN], NAN, NAN),
    ("plus-inf-vs-minus-inf", [INF, 1.0], [-INF, 1.0], NAN, NAN),
    ("inf-vs-finite", [INF], [1.0], NAN, NAN),
    ("same-inf-left-out", [INF, 1.0], [INF, 2.0], 0.5, NAN),
]


@pytest.mark.parametrize(
    ("case", "actual", "expected", "rel", "diff"), METRIC_CASES, ids=[row[0] for row in METRIC_CASES]
)
def test_metrics(lib, case, actual, expected, rel, diff):
    a, e = make(lib, actual, "float32"), make(lib, expected, "float32")
    assert_float(rel_error(a, e), rel)
    assert_float(calc_diff(a, e), diff)


@pytest.mark.parametrize(
    ("case", "actual", "expected", "max_diff", "fragment"),
    [
        ("within", [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], 1e-9, None),
        ("metric-over", [3.0], [1.0], 1e-3, "output: calc_diff 0.4 > max_diff 0.001"),
        ("nan-under-infinite-max-diff", [1.0, NAN], [1.0, 2.0], INF, "1 / 2 (50%) elements hold NaN or Inf"),
        ("same-inf-still-fails", [INF], [INF], 1.0, "actual:   0 NaN, 1 Inf (first at (0,))"),
    ],
)
def test_assert_diff(lib, case, actual, expected, max_diff, fragment):
    a, e = make(lib, actual, "float32"), make(lib, expected, "float32")
    if fragment is None:
        assert_diff(a, e, max_diff=max_diff)
    else:
        assert fragment in failure_message(assert_diff, a, e, max_diff=max_diff)


# ---------------------------------------------------------------------------------------------
# worst / best


@pytest.mark.parametrize(
    ("case", "values", "largest", "smallest"),
    [
        ("ordered", (1.0, 3.0, 2.0), 3.0, 1.0),
        ("nan-last", (0.0, NAN), NAN, NAN),
        ("nan-first", (NAN, 0.0), NAN, NAN),
        ("nan-middle", (1.0, NAN, -1.0), NAN, NAN),
        ("single", (5.0,), 5.0, 5.0),
        ("infinities", (-INF, INF, 0.0), INF, -INF),
        ("ints", (1, 2), 2.0, 1.0),
        ("numpy-scalars", (np.float32(0.5), np.float64(0.25)), 0.5, 0.25),
        ("numpy-nan", (np.float32(0.5), np.float64(NAN)), NAN, NAN),
    ],
)
def test_worst_and_best(case, values, largest, smallest):
    assert_float(worst(*values), largest)
    assert_float(best(*values), smallest)


@pytest.mark.parametrize(
    ("case", "values", "error"),
    [
        ("nothing", (), ValueError),
        ("string", ("1.0",), TypeError),
        ("list", ([1.0, 2.0],), TypeError),
        ("array", (np.array([1.0, 2.0]),), TypeError),
    ],
)
@pytest.mark.parametrize("function", [worst, best], ids=["worst", "best"])
def test_worst_and_best_reject(case, values, error, function):
    with pytest.raises(error):
        function(*values)


# ---------------------------------------------------------------------------------------------
# ulp_distance, assert_ulp_close, assert_same_bits

ULP_CASES = [
    # id, dtype, actual codes, expected codes, distances
    (
        "e4m3",
        "float8_e4m3fn",
        [0x7F, 0xFF, 0x7E, 0x00, 0x01, 0x7F, 0xFE],
        [0x7E, 0x7E, 0x7D, 0x80, 0x81, 0x7F, 0x7E],
        [INF, INF, 1, 0, 2, INF, 2 * 0x7E],
    ),
    (
        "e5m2",
        "float8_e5m2",
        [0x7C, 0x7C, 0x7C, 0x7D, 0x3C],
        [0x7B, 0xFC, 0x7C, 0x7D, 0x3D],
        [INF, INF, 0, INF, 1],
    ),
    (
        "bfloat16",
        "bfloat16",
        [0x7F80, 0x3F80, 0x8000, 0x0001, 0xFF80, 0x7FC0],
        [0x7F7F, 0x3F81, 0x0000, 0x8001, 0xFF80, 0x7F7F],
        [INF, 1, 0, 2, 0, INF],
    ),
    ("float16", "float16", [0x7C00, 0x3C00, 0x7E00], [0x7BFF, 0x3C02, 0x7E00], [INF, 2, INF]),
    (
        "float32",
        "float32",
        [0x7F800000, 0x3F800000, 0x7FC00000, 0x00000000, 0x3F800000, 0xBF800000],
        [0x7F7FFFFF, 0x3F800001, 0x7F800000, 0x80000000, 0x40000000, 0x3F800000],
        [INF, 1, INF, 0, 0x800000, 2 * 0x3F800000],
    ),
]


@pytest.mark.parametrize(
    ("case", "dtype", "actual", "expected", "distances"), ULP_CASES, ids=[row[0] for row in ULP_CASES]
)
def test_ulp_distance(lib, case, dtype, actual, expected, distances):
    result = ulp_distance(from_codes(lib, actual, dtype), from_codes(lib, expected, dtype))
    assert type(result).__module__.split(".")[0] == lib
    assert str(result.dtype).removeprefix("torch.") == "float64"
    assert result.tolist() == distances


def test_ulp_distance_keeps_shape(lib):
    actual = make(lib, [[1.0, 2.0], [3.0, NAN]], "float32")
    result = ulp_distance(actual, make(lib, [[1.0, 2.0], [3.0, 4.0]], "float32"))
    assert tuple(result.shape) == (2, 2)
    assert result.tolist() == [[0.0, 0.0], [0.0, INF]]


@pytest.mark.parametrize(
    ("case", "dtype", "actual", "expected", "max_ulp", "fragments"),
    [
        ("one-step", "bfloat16", [0x3F80, 0x3F81], [0x3F81, 0x3F80], 1, None),
        ("zero-signs", "float32", [0x80000000], [0x00000000], 0, None),
        ("same-inf", "float16", [0x7C00], [0x7C00], 0, None),
        ("two-steps", "bfloat16", [0x3F80, 0x3F82], [0x3F80, 0x3F80], 1, ["worst distance: 2.0 ulp at (1,)"]),
        (
            "e4m3-nan-next-to-448",
            "float8_e4m3fn",
            [0x7E, 0x7F],
            [0x7E, 0x7E],
            10**6,
            ["1 / 2 (50%)", "actual nan [0x7f], expected 448.0 [0x7e]", "actual:   1 NaN (first at (1,))"],
        ),
        ("same-nan-code", "float8_e4m3fn", [0x7F], [0x7F], 10**6, ["infinite distances"]),
        (
            "bf16-inf-vs-largest",
            "bfloat16",
            [0x7F80],
            [0x7F7F],
            10**6,
            ["actual:   0 NaN, 1 Inf (first at (0,))", "[0x7f80]", "[0x7f7f]"],
        ),
    ],
)
def test_assert_ulp_close(lib, case, dtype, actual, expected, max_ulp, fragments):
    a, e = from_codes(lib, actual, dtype), from_codes(lib, expected, dtype)
    if fragments is None:
        assert_ulp_close(a, e, max_ulp=max_ulp)
        return
    message = failure_message(assert_ulp_close, a, e, max_ulp=max_ulp)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in:\n{message}"


@pytest.mark.parametrize(
    ("case", "actual", "expected", "line"),
    [
        ("e4m3-equal-codes-nan-included", ("float8_e4m3fn", [0x7F, 0x7E, 0xFF]), None, None),
        (
            "e4m3-nan-vs-448",
            ("float8_e4m3fn", [0x00, 0x7F]),
            ("float8_e4m3fn", [0x00, 0x7E]),
            "(1,): 0x7f (nan) vs 0x7e (448.0)",
        ),
        ("e8m0-bytes", ("uint8", [127, 0xFF]), ("uint8", [127, 0xFE]), "(1,): 0xff (255) vs 0xfe (254)"),
        (
            "packed-int32",
            ("int32", [0x7F7F7F7F]),
            ("int32", [0x7F7F7F7E]),
            "(0,): 0x7f7f7f7f (2139062143) vs 0x7f7f7f7e",
        ),
        (
            "negative-zero",
            ("float32", [-0.0]),
            ("float32", [0.0]),
            "(0,): 0x80000000 (-0.0) vs 0x00000000 (0.0)",
        ),
        ("dtype-mismatch", ("float8_e4m3fn", [0x7E]), ("float8_e5m2", [0x7E]), "dtype mismatch"),
    ],
)
def test_assert_same_bits(lib, case, actual, expected, line):
    def build(spec):
        dtype, values = spec
        return from_codes(lib, values, dtype) if dtype.startswith("float8") else make(lib, values, dtype)

    a = build(actual)
    e = build(actual if expected is None else expected)
    if line is None:
        assert_same_bits(a, e)
    else:
        assert line in failure_message(assert_same_bits, a, e)


# ---------------------------------------------------------------------------------------------
# numpy without torch

_WITHOUT_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys

    class BlockTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError("torch is blocked")
            return None

    sys.meta_path.insert(0, BlockTorch())
    try:
        import torch
    except ImportError:
        print("torch blocked")
    import gpumatrix.compare as compare
    import ml_dtypes, numpy as np

    compare.assert_close(np.ones(3, np.float32), np.ones(3, np.float32))
    compare.assert_close(np.ones(2, ml_dtypes.bfloat16), np.ones(2, ml_dtypes.bfloat16))
    try:
        compare.assert_close(np.array([np.nan], np.float32), np.array([1.0], np.float32))
    except AssertionError as exc:
        print("nan rejected:", "1 unexpected NaN" in str(exc))
    codes = np.array([0x7F], np.uint8).view(ml_dtypes.float8_e4m3fn)
    print("ulp:", compare.ulp_distance(codes, np.array([0x7E], np.uint8).view(ml_dtypes.float8_e4m3fn)))
    print("torch loaded:", "torch" in sys.modules)
    """
)


def test_numpy_inputs_work_where_torch_cannot_be_imported():
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "torch blocked",
        "nan rejected: True",
        "ulp: [inf]",
        "torch loaded: False",
    ]


# ---------------------------------------------------------------------------------------------
# Row-local checks: assert_close(atol_of_row_rms=...), assert_diff(per_row=True), calc_diff_rows

# Three rows of four: a large row, a row 1000 times smaller, a zero row.
ROWS_EXPECTED = [[4.0, -4.0, 4.0, -4.0], [0.004, 0.004, -0.004, 0.004], [0.0, 0.0, 0.0, 0.0]]


def _rows_with(changes: dict[tuple[int, int], float]) -> list[list[float]]:
    rows = [list(row) for row in ROWS_EXPECTED]
    for (r, c), value in changes.items():
        rows[r][c] = value
    return rows


@pytest.mark.parametrize(
    ("case", "changes", "passes", "fragment"),
    [
        ("identical", {}, True, None),
        ("large-row-within-its-slack", {(0, 1): -4.003}, True, None),
        # 0.002 off in the small row: inside 2**-10 x the whole tensor's rms (2.31, a slack of 2.3e-3),
        # outside 2**-10 x the small row's (0.004, a slack of 3.9e-6).
        ("small-row-off-by-its-size", {(1, 2): -0.002}, False, "1 pairs of finite values (first at (1, 2))"),
        ("zero-row-must-stay-zero", {(2, 3): 1e-30}, False, "first at (2, 3)"),
        ("nan-under-a-huge-factor", {(0, 0): NAN}, False, "1 unexpected NaN (first at (0, 0))"),
        ("inf-in-a-zero-row", {(2, 0): INF}, False, "1 unmatched Inf (first at (2, 0))"),
    ],
)
def test_assert_close_with_a_row_local_atol(lib, case, changes, passes, fragment):
    expected = make(lib, ROWS_EXPECTED, "float64")
    actual = make(lib, _rows_with(changes), "float64")
    factor = 1e300 if case == "nan-under-a-huge-factor" else 2.0**-10
    if passes:
        assert_close(actual, expected, rtol=0.0, atol_of_row_rms=factor)
        return
    message = failure_message(assert_close, actual, expected, rtol=0.0, atol_of_row_rms=factor)
    assert fragment in message and "x the rms of each row of expected" in message
    if case == "small-row-off-by-its-size":  # the same error passes a whole-tensor rms slack
        rms = math.sqrt(sum(v * v for row in ROWS_EXPECTED for v in row) / 12)
        assert_close(actual, expected, rtol=0.0, atol=2.0**-10 * rms)


def test_row_local_atol_rows_span_chunks(lib, monkeypatch):
    """Rows of 4 read in chunks of 3: every row's rms is its own, wherever the chunk edges fall."""
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", 3)
    expected = make(lib, ROWS_EXPECTED, "float32")
    assert_close(
        make(lib, _rows_with({(1, 3): 0.0040000035}), "float32"), expected, rtol=0.0, atol_of_row_rms=1e-3
    )
    message = failure_message(
        assert_close,
        make(lib, _rows_with({(1, 3): 0.00401}), "float32"),
        expected,
        rtol=0.0,
        atol_of_row_rms=1e-3,
    )
    assert "1 pairs of finite values (first at (1, 3))" in message


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"atol_of_row_rms": 1e-3}, ValueError, "atol_of_row_rms needs rtol and replaces atol"),
        ({"rtol": 0.0, "atol": 0.0, "atol_of_row_rms": 1e-3}, ValueError, "replaces atol"),
        ({"rtol": 0.0, "atol_of_row_rms": -1.0}, ValueError, "atol_of_row_rms must be a number >= 0"),
        ({"rtol": 0.0, "atol_of_row_rms": NAN}, ValueError, "atol_of_row_rms must be a number >= 0"),
        ({"rtol": "0", "atol_of_row_rms": 1.0}, TypeError, "rtol must be a real number"),
    ],
)
def test_row_local_atol_arguments(kwargs, error, fragment):
    x = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(error, match=fragment):
        assert_close(x, x, **kwargs)


@pytest.mark.parametrize(
    ("case", "actual", "expected", "values"),
    [
        ("one-row-each", [[1.0, 2.0], [3.0, 0.0]], [[1.0, 2.0], [1.0, 0.0]], [0.0, 0.4]),
        ("orthogonal-and-opposite", [[1.0, 0.0], [1.0, 1.0]], [[0.0, 1.0], [-1.0, -1.0]], [1.0, 2.0]),
        ("zero-row", [[0.0, 0.0], [1.0, 1.0]], [[0.0, -0.0], [1.0, 1.0]], [0.0, 0.0]),
        ("nan-row", [[NAN, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]], [NAN, 0.0]),
        ("inf-row", [[1.0, 1.0], [1.0, INF]], [[1.0, 1.0], [1.0, INF]], [0.0, NAN]),
    ],
)
def test_calc_diff_rows(lib, case, actual, expected, values):
    got = calc_diff_rows(make(lib, actual, "float32"), make(lib, expected, "float32"))
    assert tuple(got.shape) == (2,) and type(got).__module__.split(".")[0] == lib
    for value, want in zip(got.tolist(), values, strict=True):
        assert_float(value, want)


def test_calc_diff_rows_shapes(lib, monkeypatch):
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", 5)
    a = make(lib, [[[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], [[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]]], "float32")
    e = make(lib, [[[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], [[0.0, 0.0, 0.0], [2.0, 2.0, 1.0]]], "float32")
    got = calc_diff_rows(a, e)
    assert tuple(got.shape) == (2, 2)
    assert got.tolist()[0] == [0.0, 0.0] and got.tolist()[1][0] == 0.0
    assert_float(float(got[1][1]), 1.0 - 2.0 * 10.0 / 21.0)
    scalar = calc_diff_rows(make(lib, 2.0, "float32"), make(lib, 2.0, "float32"))
    assert tuple(scalar.shape) == () and float(scalar) == 0.0
    with pytest.raises(ValueError, match="x and y must have the same shape"):
        calc_diff_rows(a, e[:1])


@pytest.mark.parametrize(
    ("case", "changes", "max_diff", "fragments"),
    [
        ("within", {}, 1e-12, None),
        ("large-row-small-error-within", {(0, 0): 4.001}, 1e-6, None),
        # The small row's error is 0.4 of its own energy, and nothing against the whole tensor's.
        (
            "small-row-wrong",
            {(1, 0): 0.008},
            1e-3,
            [
                "calc_diff over max_diff 0.001 in 1 / 3 (33.33%) rows",
                "first failing row: (1,), calc_diff 0.0909",
            ],
        ),
        (
            "nan-row-under-infinite-max-diff",
            {(2, 1): NAN},
            INF,
            [
                "first failing row: (2,), calc_diff nan",
                "rows holding NaN or Inf on a side (calc_diff NaN): 1",
            ],
        ),
        (
            "zero-row-made-nonzero",
            {(2, 1): 1e-30},
            0.5,
            ["first failing row: (2,), calc_diff 1.0", "worst finite row: (2,), calc_diff 1.0"],
        ),
    ],
)
def test_assert_diff_per_row(lib, case, changes, max_diff, fragments):
    expected = make(lib, ROWS_EXPECTED, "float64")
    actual = make(lib, _rows_with(changes), "float64")
    if fragments is None:
        assert_diff(actual, expected, max_diff=max_diff, per_row=True)
        return
    message = failure_message(assert_diff, actual, expected, max_diff=max_diff, per_row=True)
    for fragment in fragments:
        assert fragment in message, message
    if case == "small-row-wrong":  # the whole tensor's calc_diff does not see it
        assert_diff(actual, expected, max_diff=1e-3)


def test_assert_diff_per_row_arguments():
    x = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(TypeError, match="per_row must be a bool"):
        assert_diff(x, x, max_diff=1.0, per_row=1)
    with pytest.raises(AssertionError, match="shape mismatch"):
        assert_diff(x, x[:1], max_diff=1.0, per_row=True)


# ---------------------------------------------------------------------------------------------
# Failure messages line by line, argument messages word for word


def _codes_as(dtype: str, codes: list[list[int]]) -> np.ndarray:
    unsigned = _CODE_VIEWS[_numpy_dtype(dtype).itemsize][0]
    return np.array(codes, dtype=unsigned).view(_numpy_dtype(dtype))


def test_assert_diff_message_of_a_finite_pair_carries_every_field():
    # 1.5 against 1.0 is inside rtol=1 or atol=1: the differing count must come from an exact comparison.
    actual = np.array([[1.5, 1.0], [2.0, 2.0]], dtype=np.float32)
    expected = np.array([[1.0, 1.0], [2.0, 2.0]], dtype=np.float32)
    value = 1.0 - 2.0 * (1.5 + 1.0 + 4.0 + 4.0) / (2.25 + 1.0 + 1.0 + 1.0 + 4.0 + 4.0 + 4.0 + 4.0)
    assert failure_message(assert_diff, actual, expected, max_diff=1e-3).splitlines() == [
        f"output: calc_diff {value!r} > max_diff 0.001",
        "  NaN/Inf on either side (any of them makes calc_diff NaN):",
        "    actual:   0 NaN, 0 Inf",
        "    expected: 0 NaN, 0 Inf",
        "  differing: 1 pairs of finite values (first at (0, 0))",
        "  worst absolute difference: 0.5 at (0, 0): actual 1.5, expected 1.0",
        "  worst relative difference: 0.5 at (0, 0): actual 1.5, expected 1.0",
        "  actual: numpy float32; expected: numpy float32; shape (2, 2)",
        f"  metric: calc_diff = 1 - 2*sum(a*e) / sum(a*a + e*e) = {value!r}, max_diff=0.001",
    ]


def test_assert_diff_message_of_nan_and_inf_carries_every_field():
    # A NaN on both sides at the same place is a NaN on each side: assert_diff has no equal_nan.
    actual = np.array([[NAN, 1.0], [INF, 2.0]], dtype=np.float32)
    expected = np.array([[NAN, 1.0], [1.0, 2.5]], dtype=np.float32)
    assert failure_message(assert_diff, actual, expected, max_diff=1.0, name="logits").splitlines() == [
        "logits: 2 / 4 (50%) elements hold NaN or Inf on a side (calc_diff is NaN, never within max_diff)",
        "  NaN/Inf on either side (any of them makes calc_diff NaN):",
        "    actual:   1 NaN (first at (0, 0)), 1 Inf (first at (1, 0))",
        "    expected: 1 NaN (first at (0, 0)), 0 Inf",
        "  differing: 1 pairs of finite values (first at (1, 1))",
        "  worst absolute difference: 0.5 at (1, 1): actual 2.0, expected 2.5",
        "  worst relative difference: 0.2 at (1, 1): actual 2.0, expected 2.5",
        "  actual: numpy float32; expected: numpy float32; shape (2, 2)",
        "  metric: calc_diff = 1 - 2*sum(a*e) / sum(a*a + e*e) = nan, max_diff=1.0",
    ]


def _row_diff(a: list[float], e: list[float]) -> float:
    return 1.0 - 2.0 * sum(x * y for x, y in zip(a, e, strict=True)) / sum(
        x * x + y * y for x, y in zip(a, e, strict=True)
    )


def test_assert_diff_per_row_message_names_rows_of_a_3d_tensor():
    # Rows (0, 1) and (1, 0) fail: a NaN row first, then a finite one below 1, which must be the worst
    # finite row although a NaN row sorts anywhere.
    expected = [[[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], [[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]]]
    actual = [[[1.0, 2.0, 3.0], [1.0, NAN, 1.0]], [[2.5, 2.0, 2.0], [3.0, 3.0, 3.0]]]
    value = _row_diff([2.5, 2.0, 2.0], [2.0, 2.0, 2.0])
    message = failure_message(
        assert_diff, np.array(actual), np.array(expected), max_diff=1e-3, per_row=True, name="logits"
    )
    assert message.splitlines() == [
        "logits: calc_diff over max_diff 0.001 in 2 / 4 (50%) rows "
        "(rows run along the last dimension, 3 elements each)",
        "  first failing row: (0, 1), calc_diff nan",
        "  rows holding NaN or Inf on a side (calc_diff NaN): 1",
        f"  worst finite row: (1, 0), calc_diff {value!r}",
        "  actual: numpy float64; expected: numpy float64; shape (2, 2, 3)",
    ]


def test_assert_diff_per_row_message_without_a_finite_row_or_of_a_scalar():
    message = failure_message(
        assert_diff, np.array([[NAN, 1.0]]), np.array([[1.0, 1.0]]), max_diff=1.0, per_row=True
    )
    assert message.splitlines() == [
        "output: calc_diff over max_diff 1.0 in 1 / 1 (100%) rows (rows run along the last dimension, "
        "2 elements each)",
        "  first failing row: (0,), calc_diff nan",
        "  rows holding NaN or Inf on a side (calc_diff NaN): 1",
        "  actual: numpy float64; expected: numpy float64; shape (1, 2)",
    ]
    value = _row_diff([2.0], [1.0])
    message = failure_message(assert_diff, np.array(2.0), np.array(1.0), max_diff=1e-3, per_row=True)
    assert message.splitlines() == [
        "output: calc_diff over max_diff 0.001 in 1 / 1 (100%) rows (rows run along the last dimension, "
        "1 elements each)",
        f"  first failing row: (0,), calc_diff {value!r}",
        "  rows holding NaN or Inf on a side (calc_diff NaN): 0",
        f"  worst finite row: (0,), calc_diff {value!r}",
        "  actual: numpy float64; expected: numpy float64; shape ()",
    ]


def test_assert_diff_per_row_bound_is_inclusive(lib):
    # Orthogonal rows: calc_diff exactly 1.0, which max_diff=1.0 admits (as the whole-tensor check does).
    actual, expected = make(lib, [[1.0, 0.0]], "float32"), make(lib, [[0.0, 1.0]], "float32")
    assert_diff(actual, expected, max_diff=1.0, per_row=True)
    assert_diff(actual, expected, max_diff=1.0)
    assert "in 1 / 1 (100%) rows" in failure_message(
        assert_diff, actual, expected, max_diff=0.999, per_row=True
    )


def test_assert_ulp_close_message_carries_every_field():
    # float16 codes: 1.0 = 0x3C00 two steps from 0x3C02, NaN 0x7E00, 2.0 0x4000, 5.0 0x4500,
    # 65504 = 0x7BFF (the largest finite, one step below Inf 0x7C00).
    actual = _codes_as("float16", [[0x3C00, 0x7E00], [0x4500, 0x7BFF]])
    expected = _codes_as("float16", [[0x3C02, 0x4000], [0x7E00, 0x7C00]])
    assert failure_message(assert_ulp_close, actual, expected).splitlines() == [
        "output: not within 1 ulp: 4 / 4 (100%) elements",
        "  infinite distances (a NaN, or an Inf not met by the same Inf): 3 elements (first at (0, 1))",
        "    actual:   1 NaN (first at (0, 1)), 0 Inf",
        "    expected: 1 NaN (first at (1, 0)), 1 Inf (first at (1, 1))",
        "  worst distance: inf ulp at (0, 1): actual nan [0x7e00], expected 2.0 [0x4000]",
        "  actual: numpy float16; expected: numpy float16; shape (2, 2); max_ulp=1",
    ]
    assert_ulp_close(actual[0, :1], expected[0, :1], max_ulp=2)


def test_assert_same_bits_message_carries_every_field():
    actual = np.array([1, 2, 3, 4], dtype=np.uint8)
    expected = np.array([1, 2, 5, 4], dtype=np.uint8)
    assert failure_message(assert_same_bits, actual, expected).splitlines() == [
        "output: bits differ in 1 / 4 (25%) elements",
        "  first 1 differing (index: actual vs expected):",
        "    (2,): 0x03 (3) vs 0x05 (5)",
        "  actual: numpy uint8; expected: numpy uint8; shape (4,)",
    ]


@pytest.mark.parametrize("chunk", [3, 4, 4096])
def test_assert_same_bits_lists_the_first_ten_across_chunks(lib, monkeypatch, chunk):
    # From index 1 on every element differs: with chunks of 3 or 4 the list fills up inside a chunk.
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", chunk)
    expected = make(lib, list(range(16)), "int32")
    actual = make(lib, [0] + [v + 100 for v in range(1, 16)], "int32")
    lines = failure_message(assert_same_bits, actual, expected).splitlines()
    assert lines[:2] == [
        "output: bits differ in 15 / 16 (93.75%) elements",
        "  first 10 differing (index: actual vs expected):",
    ]
    shown = [f"    ({i},): 0x{i + 100:08x} ({i + 100}) vs 0x{i:08x} ({i})" for i in range(1, 11)]
    assert lines[2:12] == shown and len(lines) == 13


@pytest.mark.parametrize(
    ("check", "kwargs"),
    [
        (assert_close, {}),
        (assert_diff, {"max_diff": 1.0}),
        (assert_diff, {"max_diff": 1.0, "per_row": True}),
        (assert_ulp_close, {}),
        (assert_same_bits, {}),
    ],
    ids=["assert_close", "assert_diff", "assert_diff-per_row", "assert_ulp_close", "assert_same_bits"],
)
def test_shape_and_dtype_mismatches_carry_the_name(check, kwargs):
    x = np.ones((2, 3), dtype=np.float32)
    message = failure_message(check, x, x[:1], name="logits", **kwargs)
    assert message.startswith("logits: shape mismatch: actual (2, 3) vs expected (1, 3)"), message
    if check in (assert_ulp_close, assert_same_bits):
        message = failure_message(check, x, x.astype(np.float16), name="logits")
        assert message == "logits: dtype mismatch: actual float32 vs expected float16"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda x: assert_close(x, x, rtol="0.1", atol=0.0),
            TypeError,
            "rtol must be a real number, got str",
        ),
        (
            lambda x: assert_diff(x, x, max_diff=NAN),
            ValueError,
            "max_diff must be a number >= 0 (inf allowed), got nan",
        ),
        (lambda x: assert_ulp_close(x, x, max_ulp=-1), ValueError, "max_ulp must be >= 0, got -1"),
        (
            lambda x: assert_ulp_close(x, x.astype(np.float64)),
            TypeError,
            "expected must have one of the dtypes ['bfloat16', 'float16', 'float32', 'float8_e4m3fn', "
            "'float8_e5m2'], got float64",
        ),
        (
            lambda x: ulp_distance(x.astype(np.float64), x.astype(np.float64)),
            TypeError,
            "expected must have one of the dtypes ['bfloat16', 'float16', 'float32', 'float8_e4m3fn', "
            "'float8_e5m2'], got float64",
        ),
        (lambda x: worst(), ValueError, "worst() needs at least one value"),
        (lambda x: best(), ValueError, "best() needs at least one value"),
        (
            lambda x: worst(1.0, "2.0"),
            TypeError,
            "worst() values must be real numbers, passed as separate arguments; argument 1 is a str",
        ),
        (
            lambda x: best([1.0, 2.0]),
            TypeError,
            "best() values must be real numbers, passed as separate arguments; argument 0 is a list",
        ),
    ],
)
def test_argument_messages_in_full(call, error, message):
    with pytest.raises(error) as caught:
        call(np.array([1.0, 2.0], dtype=np.float32))
    assert str(caught.value) == message


def test_a_value_of_more_than_one_number_is_named_by_position():
    with pytest.raises(TypeError, match=r"^worst\(\) argument 1 is not a single number: ") as caught:
        worst(0.0, np.array([1.0, 2.0]))
    assert isinstance(caught.value.__cause__, TypeError | ValueError)


# ---------------------------------------------------------------------------------------------
# The torch path (GPU tensors take it; here CPU tensors with CPU_TENSORS_VIA_NUMPY off)


@pytest.fixture
def torch_path(monkeypatch):
    monkeypatch.setattr(compare_arrays, "CPU_TENSORS_VIA_NUMPY", False)
    return pytest.importorskip("torch")


def test_a_numpy_array_beside_a_tensor_keeps_its_shape_and_source(torch_path):
    actual = torch_path.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    expected = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 7.0]], dtype=np.float32)
    message = failure_message(assert_close, actual, expected)
    assert "  outside tolerance: 1 pairs of finite values (first at (1, 2))" in message.splitlines()
    assert "  actual: torch.float32 on cpu; expected: numpy float32; shape (2, 3)" in message.splitlines()
    message = failure_message(assert_close, expected, actual)
    assert "  actual: numpy float32; expected: torch.float32 on cpu; shape (2, 3)" in message.splitlines()


def test_a_python_scalar_beside_a_tensor_keeps_its_dtype(torch_path):
    # A float is float64 (float64's tolerances: 1e-6 is outside them, inside float32's); an int is
    # int64 (exact: 10**8 + 1 is not 10**8, which float64's rtol would let through).
    message = failure_message(assert_close, torch_path.tensor(1.0 + 1e-6, dtype=torch_path.float64), 1.0)
    assert "atol=1e-07 (defaults for float64)" in message and "expected: Python float" in message
    message = failure_message(assert_close, torch_path.tensor(10**8 + 1), 10**8)
    assert "(exact for int64)" in message and "expected: Python int" in message


def test_a_python_int_is_compared_exactly(lib):
    actual = make(lib, 10**8 + 1, "int64")
    assert "(exact for int64)" in failure_message(assert_close, actual, 10**8)
    assert "(exact for int64)" in failure_message(assert_close, 10**8 + 1, 10**8)


def test_a_tensor_of_an_unsupported_dtype_is_named(torch_path):
    x = torch_path.ones(2, dtype=torch_path.complex64)
    with pytest.raises(TypeError) as caught:
        assert_close(x, torch_path.ones(2))
    assert str(caught.value) == "actual must have a float, integer or bool dtype, got complex64"


def test_a_numpy_dtype_torch_lacks_is_named(torch_path):
    expected = np.ones(2, dtype=ml_dtypes.float8_e4m3b11fnuz)
    with pytest.raises(TypeError) as caught:
        assert_close(torch_path.ones(2), expected, rtol=0.0, atol=0.0)
    assert str(caught.value) == (
        "expected has dtype float8_e4m3b11fnuz, which torch has no equivalent of; compare it as numpy"
    )


@pytest.mark.parametrize("chunk", [3, 4096])
def test_ulp_distance_across_chunks(lib, monkeypatch, chunk):
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", chunk)
    # float16 codes 0x3C00 + i against 0x3C00 + 2i: i steps apart, for i = 0..7.
    expected = _codes_as("float16", [[0x3C00 + 2 * i for i in range(8)]])
    actual = _codes_as("float16", [[0x3C00 + i for i in range(8)]])
    if lib == "torch":
        torch = pytest.importorskip("torch")
        expected, actual = torch.from_numpy(expected.copy()), torch.from_numpy(actual.copy())
    got = ulp_distance(actual, expected)
    assert tuple(got.shape) == (1, 8) and got.tolist() == [[float(i) for i in range(8)]]


# ---------------------------------------------------------------------------------------------
# The rms of each row (assert_close(atol_of_row_rms=)) at the edge of its bound


@pytest.mark.parametrize(
    ("case", "expected", "actual_ok", "actual_over", "rms"),
    [
        # Only finite values count, and only they are in the mean: sqrt((9 + 16) / 2).
        ("inf-in-the-row", [3.0, INF, 4.0], [3.35, INF, 4.0], [3.36, INF, 4.0], math.sqrt(12.5)),
        # One finite value: its own magnitude.
        ("one-finite-value", [INF, 2.0], [INF, 2.19], [INF, 2.21], 2.0),
        # Elements of different size: each counted once, wherever the chunks (of 1) start.
        ("uneven-row", [0.0, 0.0, 0.0, 4.0], [0.0, 0.0, 0.0, 4.19], [0.0, 0.0, 0.0, 4.21], 2.0),
    ],
)
def test_row_rms_bound_edges(lib, monkeypatch, case, expected, actual_ok, actual_over, rms):
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", 1)
    factor = 0.1
    (i,) = [i for i, (x, y) in enumerate(zip(actual_over, expected, strict=True)) if x != y]
    assert abs(actual_ok[i] - expected[i]) <= factor * rms < abs(actual_over[i] - expected[i])
    e = make(lib, [expected], "float64")
    assert_close(make(lib, [actual_ok], "float64"), e, rtol=0.0, atol_of_row_rms=factor)
    message = failure_message(
        assert_close, make(lib, [actual_over], "float64"), e, rtol=0.0, atol_of_row_rms=factor
    )
    assert f"  outside tolerance: 1 pairs of finite values (first at (0, {i}))" in message.splitlines()


_WITHOUT_NUMPY = textwrap.dedent(
    """
    import importlib.abc, sys, warnings

    class BlockNumpy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in ("numpy", "ml_dtypes") or name.startswith(("numpy.", "ml_dtypes.")):
                raise ModuleNotFoundError("numpy is blocked")
            return None

    sys.meta_path.insert(0, BlockNumpy())
    warnings.simplefilter("ignore")
    import torch
    import gpumatrix.compare as compare

    compare.assert_close(torch.tensor(2.0), 2.0)
    compare.assert_close(torch.tensor([1, 2]), torch.tensor([1, 2]))
    try:
        compare.assert_close(torch.tensor(2.5, dtype=torch.float64), 2.0)
    except AssertionError as exc:
        print("scalar compared:", "expected: Python float" in str(exc))
    print("numpy loaded:", "numpy" in sys.modules)
    """
)


def _importing_this_package() -> dict[str, str]:
    """The environment of a child Python that imports the gpumatrix this test imported."""
    import gpumatrix

    here = str(Path(gpumatrix.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}


def test_tensors_and_scalars_work_where_numpy_cannot_be_imported(monkeypatch):
    # A scalar beside a tensor is made by torch itself: GPU-only environments need no numpy. The same
    # comparison here first, on the torch path the child takes (numpy importable).
    monkeypatch.setattr(compare_arrays, "CPU_TENSORS_VIA_NUMPY", False)
    assert_close(pytest.importorskip("torch").tensor(2.0), 2.0)
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NUMPY],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_importing_this_package(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["scalar compared: True", "numpy loaded: False"]


def test_assert_close_message_of_given_tolerances_and_nonfinite_sides():
    # 0 against 0 is no relative difference; 3 against 2 is 1 apart, half of 2.
    actual = np.array([0.0, 3.0, INF, 1.0], dtype=np.float32)
    expected = np.array([0.0, 2.0, 5.0, NAN], dtype=np.float32)
    assert failure_message(assert_close, actual, expected, rtol=0.0, atol=0.5).splitlines() == [
        "output: not close: 3 / 4 (75%) elements mismatched (max_mismatch=0)",
        "  NaN/Inf failures, which no tolerance or max_mismatch absorbs: 2",
        "    actual:   0 unexpected NaN, 1 unmatched Inf (first at (2,))",
        "    expected: 1 unexpected NaN (first at (3,)), 0 unmatched Inf",
        "  outside tolerance: 1 pairs of finite values (first at (1,))",
        "  worst absolute difference: 1.0 at (1,): actual 3.0, expected 2.0",
        "  worst relative difference: 0.5 at (1,): actual 3.0, expected 2.0",
        "  actual: numpy float32; expected: numpy float32; shape (4,)",
        "  tolerance: |actual - expected| <= atol + rtol * |expected|, rtol=0.0, atol=0.5 (given), "
        "equal_nan=False",
    ]


def test_a_worst_difference_of_zero_is_still_reported():
    lines = failure_message(assert_close, np.array([NAN, 2.0]), np.array([1.0, 2.0])).splitlines()
    assert lines[5:7] == [
        "  worst absolute difference: 0.0 at (1,): actual 2.0, expected 2.0",
        "  worst relative difference: 0.0 at (1,): actual 2.0, expected 2.0",
    ]


def test_firsts_and_ties_across_chunks(lib, monkeypatch):
    # Chunks of 2: the first NaN is in the first chunk, at index 0; the worst differences tie across
    # chunks, and the earliest is reported.
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", 2)
    actual = make(lib, [NAN, 3.0, 0.0, NAN, 3.0, 0.0], "float64")
    expected = make(lib, [0.0, 2.0, 0.0, 0.0, 2.0, 0.0], "float64")
    lines = failure_message(assert_close, actual, expected, rtol=0.0, atol=0.5).splitlines()
    assert lines[2] == "    actual:   2 unexpected NaN (first at (0,)), 0 unmatched Inf"
    assert lines[4] == "  outside tolerance: 2 pairs of finite values (first at (1,))"
    assert lines[5] == "  worst absolute difference: 1.0 at (1,): actual 3.0, expected 2.0"


@pytest.mark.parametrize("chunk", [3, 4096])
def test_exact_integer_comparison_across_chunks(lib, monkeypatch, chunk):
    monkeypatch.setattr(compare_arrays, "CHUNK_ELEMENTS", chunk)
    expected = make(lib, list(range(10)), "int64")
    assert_close(make(lib, list(range(10)), "int64"), expected)
    message = failure_message(assert_close, make(lib, [*range(9), 10], "int64"), expected)
    assert "  outside tolerance: 1 pairs of finite values (first at (9,))" in message.splitlines()
    assert "(exact for int64)" in message


def test_unsigned_integers_compare_exactly(lib):
    assert_close(make(lib, [1, 255], "uint8"), make(lib, [1, 255], "uint8"))
    assert "(exact for uint8)" in failure_message(
        assert_close, make(lib, [1, 2], "uint8"), make(lib, [1, 3], "uint8")
    )


@pytest.mark.parametrize(
    ("kwargs", "expected_dtype", "message"),
    [
        ({"atol": 1e-3}, "float32", "rtol and atol must be given together; rtol is missing"),
        ({"rtol": 1e-3}, "float32", "rtol and atol must be given together; atol is missing"),
        (
            {},
            "float8_e4m3fnuz",
            "expected has dtype float8_e4m3fnuz, which has no default tolerance; pass rtol= and atol= "
            "(defaults exist for float64, float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, "
            "integers and bool)",
        ),
    ],
)
def test_tolerance_messages_in_full(kwargs, expected_dtype, message):
    x = np.array([1.0, 2.0], dtype=np.float32)
    with pytest.raises(ValueError) as caught:
        assert_close(x, x.astype(_numpy_dtype(expected_dtype)), **kwargs)
    assert str(caught.value) == message


def test_row_local_atol_of_a_scalar_and_of_a_3d_tensor(lib):
    # A 0-d tensor is one row of one element; a [2, 2, 3] tensor has rows of 3.
    assert_close(make(lib, 1.05, "float64"), make(lib, 1.0, "float64"), rtol=0.0, atol_of_row_rms=0.1)
    expected = [[[1.0, 1.0, 1.0], [100.0, 100.0, 100.0]], [[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]]
    actual = [[[1.05, 1.0, 1.0], [100.0, 105.0, 100.0]], [[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]]
    e = make(lib, expected, "float64")
    assert_close(make(lib, actual, "float64"), e, rtol=0.0, atol_of_row_rms=0.051)
    actual[1][0][2] = 0.3  # the row's rms is sqrt(25 / 3) = 2.89: 0.3 is outside 0.051 of it
    message = failure_message(assert_close, make(lib, actual, "float64"), e, rtol=0.0, atol_of_row_rms=0.051)
    assert "  outside tolerance: 1 pairs of finite values (first at (1, 0, 2))" in message.splitlines()


def test_integers_beside_floats_compare_in_float64(torch_path):
    # torch compares int64 with float32 in float32, where 2**24 + 1 reads as 2**24; float64 holds both.
    big, near = torch_path.tensor([16777217]), torch_path.tensor([16777216.0])
    assert "(exact for int64)" in failure_message(assert_close, near, big)
    assert "rtol=0.0, atol=0.0 (given)" in failure_message(assert_close, big, near, rtol=0.0, atol=0.0)


def test_tolerances_apply_unless_both_sides_are_integers_compared_exactly(lib):
    # One side float, or a tolerance given: the comparison is |a - e| <= atol + rtol * |e|, not equality.
    assert_close(make(lib, [1.0 + 1e-9], "float64"), make(lib, [1.0], "float64"), rtol=1e-6, atol=0.0)
    assert_close(make(lib, [1], "int64"), make(lib, [1.0000001], "float32"))
    assert_close(make(lib, [100], "int64"), make(lib, [101], "int64"), rtol=0.0, atol=1.0)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_a_tensor_numpy_cannot_hold_is_refused_whichever_path(lib):
    torch = pytest.importorskip("torch")
    x = torch.ones(2, dtype=torch.complex32)
    with pytest.raises(TypeError) as caught:
        assert_close(x, x)
    assert str(caught.value) == "actual must have a float, integer or bool dtype, got complex32"


@pytest.mark.parametrize("where", ["numpy", "torch"])
def test_an_int_too_large_for_int64_is_named(where, monkeypatch):
    if where == "torch":
        monkeypatch.setattr(compare_arrays, "CPU_TENSORS_VIA_NUMPY", False)
        actual = pytest.importorskip("torch").tensor(1)
    else:
        actual = np.int64(1)
    with pytest.raises(ValueError) as caught:
        assert_close(actual, 2**70)
    assert str(caught.value) == f"expected must fit in int64, got {2**70}"


def test_big_endian_arrays_are_read_by_value():
    big = np.array([1.0, -2.5, NAN], dtype=">f4")
    native = np.array([1.0, -2.5, NAN], dtype="<f4")
    assert_same_bits(big, native)
    assert ulp_distance(big[:2], native[:2]).tolist() == [0.0, 0.0]


def test_unsupported_numpy_arrays_are_named_whichever_path(monkeypatch):
    x = np.ones(2, dtype=np.complex64)
    with pytest.raises(TypeError) as caught:
        assert_close(x, np.ones(2))
    assert str(caught.value) == "actual must have a float, integer or bool dtype, got complex64"
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(compare_arrays, "CPU_TENSORS_VIA_NUMPY", False)
    with pytest.raises(TypeError) as caught:
        assert_close(torch.ones(2), x)
    assert str(caught.value) == "expected must have a float, integer or bool dtype, got complex64"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda x: assert_close(x, x, max_mismatch=1.5), TypeError, "max_mismatch must be an int, got float"),
        (lambda x: assert_close(x, x, equal_nan=1), TypeError, "equal_nan must be a bool, got int"),
        (lambda x: assert_close(x, x, name=3), TypeError, "name must be a str, got int"),
        (
            lambda x: assert_close(x, x, atol_of_row_rms=1e-3),
            ValueError,
            "atol_of_row_rms needs rtol and replaces atol: give rtol= and atol_of_row_rms=",
        ),
    ],
)
def test_assert_close_argument_messages_in_full(call, error, message):
    with pytest.raises(error) as caught:
        call(np.array([1.0, 2.0], dtype=np.float32))
    assert str(caught.value) == message


def test_row_local_atol_shape_mismatch_carries_the_name():
    x = np.ones((2, 3), dtype=np.float32)
    message = failure_message(assert_close, x, x[:1], rtol=0.0, atol_of_row_rms=1e-3, name="logits")
    assert message.startswith("logits: shape mismatch: actual (2, 3) vs expected (1, 3)")


def test_packed_fp4_tensors_are_refused():
    torch = pytest.importorskip("torch")
    packed = getattr(torch, "float4_e2m1fn_x2", None)
    if packed is None:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    x = torch.zeros(2, dtype=torch.uint8).view(packed)
    with pytest.raises(TypeError) as caught:
        assert_close(x, x)
    assert str(caught.value) == "actual must have a float, integer or bool dtype, got float4_e2m1fn_x2"


def test_inputs_without_data_and_of_other_types_are_named_in_full():
    torch = pytest.importorskip("torch")
    meta = torch.empty(2, device="meta")
    with pytest.raises(TypeError) as caught:
        assert_close(torch.ones(2), meta)
    assert str(caught.value) == (
        "expected is a meta tensor, which holds no data to compare; compare tensors with values"
    )
    with pytest.raises(TypeError) as caught:
        assert_close([1.0], np.ones(1))
    assert str(caught.value) == (
        "actual must be a torch.Tensor, a numpy array or a Python bool/int/float, got list"
    )


def test_numpy_floating_point_warnings_stay_inside(lib):
    # inf - inf, 0 / 0 and NaN comparisons are expected inside every scan: none may reach the caller.
    actual = make(lib, [[INF, 0.0, NAN], [1.0, -INF, 0.0]], "float32")
    expected = make(lib, [[INF, 0.0, 1.0], [1.0, INF, 0.0]], "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        failure_message(assert_close, actual, expected)
        failure_message(assert_close, actual, expected, rtol=0.0, atol_of_row_rms=1e-3)
        failure_message(assert_diff, actual, expected, max_diff=1.0)
        failure_message(assert_diff, actual, expected, max_diff=1.0, per_row=True)
        assert math.isnan(rel_error(actual, expected)) and math.isnan(calc_diff(actual, expected))
        assert math.isinf(float(ulp_distance(actual, expected)[0][2]))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn", "int64", "uint8", "bool"])
def test_cpu_tensors_are_read_through_numpy_sharing_their_memory(dtype):
    # CPU_TENSORS_VIA_NUMPY: numpy (with ml_dtypes) computes for CPU tensors it can hold, without a copy.
    torch = pytest.importorskip("torch")
    x = torch.zeros((2, 3), dtype=getattr(torch, dtype))
    a, e = compare_arrays.read_pair(x, x)
    assert (a.lib, a.device, a.dtype, a.shape) == ("numpy", "cpu", dtype, (2, 3)) and e.lib == "numpy"
    assert a.flat.ctypes.data == x.data_ptr() and a.source == f"torch.{dtype} on cpu"
