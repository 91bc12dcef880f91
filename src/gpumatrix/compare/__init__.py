"""NaN-safe numeric comparators: every test comparison in this repository goes through here.

Kernel test suites let NaN through in ways found in real code: ``max(0.0, nan) == 0.0`` when two
metrics are combined; mismatch counters written as ``diff > tol`` (never true for NaN, and
``inf > inf`` is false, so +inf against -inf passes); ULP distances on fp8 bit patterns, where the
E4M3 NaN code 0x7F sits one step from 448; ``equal_nan=True`` defaults; whole-tensor metrics that a
few corrupted elements slip under. Here a NaN, or an Inf that is not the same Inf at the same
place, fails whatever tolerance, metric or mismatch budget is in force.

Inputs are torch tensors on any device (float, fp8, integer or bool dtypes), numpy arrays
(ml_dtypes' bfloat16 and float8 types included) or Python scalars. numpy inputs never import
torch, and importing this module imports neither. Arithmetic is float64, done in chunks on the
tensor's own device so memory stays bounded on large GPU tensors.

The package: this module is the public API and its failure messages; ``_arrays`` reads inputs into
chunked operands; ``_scan`` walks a pair of operands once and returns a frozen summary.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gpumatrix.compare._arrays import Operand, as_caller_array, format_index, read_pair
from gpumatrix.compare._scan import (
    Located,
    PairScan,
    Worst,
    all_within_tolerance,
    calc_diff_rows_values,
    calc_diff_value,
    rel_error_value,
    row_rms,
    scan_bits,
    scan_pair,
    scan_ulp,
    ulp_distances,
)

__all__ = [
    "DEFAULT_TOLERANCES",
    "ULP_DTYPES",
    "assert_close",
    "assert_diff",
    "assert_same_bits",
    "assert_ulp_close",
    "best",
    "calc_diff",
    "calc_diff_rows",
    "rel_error",
    "ulp_distance",
    "worst",
]

#: (rtol, atol) used by assert_close when neither is given, keyed by ``expected``'s dtype. The
#: float32/float16/bfloat16/float64 rows equal torch.testing's; the fp8 rows are one rounding step
#: of the format relative to 1 (E4M3: 3 mantissa bits, so 2^-3) and about its smallest subnormal.
#: Integer and bool dtypes compare exactly; other float dtypes need explicit tolerances.
DEFAULT_TOLERANCES: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "float64": (1e-7, 1e-7),
        "float32": (1.3e-6, 1e-5),
        "float16": (1e-3, 1e-5),
        "bfloat16": (1.6e-2, 1e-5),
        "float8_e4m3fn": (0.125, 2.0**-9),
        "float8_e5m2": (0.25, 2.0**-16),
    }
)

#: Dtypes whose values ulp_distance can count: IEEE-ordered formats up to 32 bits.
ULP_DTYPES: frozenset[str] = frozenset({"float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "float32"})

# assert_same_bits lists this many differing elements; enough to see a pattern (a shifted row,
# one bad block) without burying the summary.
_SHOWN_DIFFERENCES = 10


def assert_close(
    actual: Any,
    expected: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    atol_of_row_rms: float | None = None,
    equal_nan: bool = False,
    max_mismatch: int = 0,
    name: str = "output",
) -> None:
    """Asserts ``|actual - expected| <= atol + rtol * |expected|`` elementwise, in float64.

    Tolerances default by ``expected``'s dtype (DEFAULT_TOLERANCES; integers and bool exact) and
    must be given together. Shapes must match exactly; dtypes may differ. Up to ``max_mismatch``
    pairs of finite values may fall outside the tolerance. A NaN on either side (unless
    ``equal_nan`` and both sides hold NaN there), or an Inf not met by the same Inf, always fails.
    -0.0 equals 0.0. Raises AssertionError with counts, first indices and the worst differences.

    ``atol_of_row_rms`` replaces ``atol`` (with ``rtol`` given) by a bound local to each row: an
    element's atol is ``atol_of_row_rms`` times the root mean square of the finite values of its row
    of ``expected`` (rows run along the last dimension). A whole-tensor atol lets a row of small
    values (a tiny token, a row with small scales) be wrong by the size of the large rows' slack.
    """
    _check_name(name)
    _check_flag(equal_nan, "equal_nan")
    max_mismatch = _check_count(max_mismatch, "max_mismatch")
    a, e = read_pair(actual, expected)
    atol_rows = None
    if atol_of_row_rms is not None:
        if rtol is None or atol is not None:
            raise ValueError("atol_of_row_rms needs rtol and replaces atol: give rtol= and atol_of_row_rms=")
        rtol, atol = _check_bound(rtol, "rtol"), _check_bound(atol_of_row_rms, "atol_of_row_rms")
        origin = f"atol = {atol!r} x the rms of each row of expected"
        _assert_same_shape(a, e, name)
        atol_rows = row_rms(e) * atol
    else:
        rtol, atol, origin = _resolve_tolerances(e.dtype, rtol, atol)
        _assert_same_shape(a, e, name)
    # Integers compare natively: float64 would round int64 values above 2**53 into equality.
    exact = a.kind != "float" and e.kind != "float" and rtol == 0 and atol == 0
    if all_within_tolerance(a, e, rtol=rtol, atol=atol, exact_native=exact, atol_rows=atol_rows):
        return
    scan = scan_pair(
        a,
        e,
        rtol=rtol,
        atol=atol,
        equal_nan=equal_nan,
        infs_match=True,
        exact_native=exact,
        atol_rows=atol_rows,
    )
    if scan.nonfinite.count == 0 and scan.out_of_tolerance.count <= max_mismatch:
        return
    mismatched = scan.nonfinite.count + scan.out_of_tolerance.count
    raise AssertionError(
        "\n".join(
            [
                f"{name}: not close: {_share(mismatched, scan.total)} elements mismatched "
                f"(max_mismatch={max_mismatch})",
                f"  NaN/Inf failures, which no tolerance or max_mismatch absorbs: {scan.nonfinite.count}",
                *_side_lines(scan, a.shape, nan_word="unexpected NaN", inf_word="unmatched Inf"),
                f"  outside tolerance: {_located(scan.out_of_tolerance, a.shape, 'pairs of finite values')}",
                *_worst_lines(scan, a.shape),
                _operands_line(a, e),
                f"  tolerance: |actual - expected| <= atol + rtol * |expected|, rtol={rtol!r}, "
                f"atol={atol!r} ({origin}), equal_nan={equal_nan}",
            ]
        )
    )


def rel_error(actual: Any, expected: Any) -> float:
    """``||actual - expected||_2 / ||expected||_2`` in float64.

    NaN when either side holds a NaN or an Inf that is not the same Inf on the other side (matched
    Infs are left out of both norms); 0.0 when both are all zero (or empty); inf when ``expected``
    is all zero and ``actual`` is not. Compare it as ``rel_error(...) <= bound`` so NaN fails.
    """
    a, e = _metric_pair(actual, expected)
    return rel_error_value(a, e)


def calc_diff(x: Any, y: Any) -> float:
    """``1 - 2*sum(x*y) / sum(x*x + y*y)`` in float64, the similarity metric of DeepGEMM's tests.

    0 means identical, 1 orthogonal, 2 opposite. NaN whenever either side holds a NaN or an Inf,
    so ``calc_diff(...) < threshold`` is never true for broken output; 0.0 when both are all zero
    (or empty), where the formula itself would read 0/0.
    """
    a, b = _metric_pair(x, y, names=("x", "y"))
    return calc_diff_value(a, b)


def calc_diff_rows(x: Any, y: Any) -> Any:
    """``calc_diff`` of each row (the last dimension; a 0-d input is one row) as float64 values, a numpy
    array for numpy inputs or a tensor on the inputs' device, of shape ``x.shape[:-1]``: NaN for a row
    that holds a NaN or an Inf on either side, 0.0 for a row all zero (or empty) on both."""
    a, b = _metric_pair(x, y, names=("x", "y"))
    return as_caller_array(a, calc_diff_rows_values(a, b).reshape(a.shape[:-1]))


def assert_diff(
    actual: Any, expected: Any, *, max_diff: float, per_row: bool = False, name: str = "output"
) -> None:
    """Asserts no NaN or Inf on either side, then ``calc_diff(actual, expected) <= max_diff``.

    ``per_row``: every row (the last dimension) on its own must meet ``max_diff``, so one wrong row
    among thousands fails instead of being averaged away (one doubled block scale in one row of 2048
    moves the whole tensor's calc_diff by about 1e-6 and that row's by about 1e-3).
    """
    _check_name(name)
    _check_flag(per_row, "per_row")
    max_diff = _check_bound(max_diff, "max_diff")
    a, e = read_pair(actual, expected)
    _assert_same_shape(a, e, name)
    if per_row:
        _assert_rows_diff(a, e, max_diff=max_diff, name=name)
        return
    value = calc_diff_value(a, e)
    if value <= max_diff:  # never true for NaN, which every NaN or Inf input produces
        return
    scan = scan_pair(a, e, rtol=0.0, atol=0.0, equal_nan=False, infs_match=False, exact_native=False)
    if scan.nonfinite.count:
        headline = (
            f"{name}: {_share(scan.nonfinite.count, scan.total)} elements hold NaN or Inf on a side "
            "(calc_diff is NaN, never within max_diff)"
        )
    else:
        headline = f"{name}: calc_diff {value!r} > max_diff {max_diff!r}"
    raise AssertionError(
        "\n".join(
            [
                headline,
                "  NaN/Inf on either side (any of them makes calc_diff NaN):",
                *_side_lines(scan, a.shape, nan_word="NaN", inf_word="Inf"),
                f"  differing: {_located(scan.out_of_tolerance, a.shape, 'pairs of finite values')}",
                *_worst_lines(scan, a.shape),
                _operands_line(a, e),
                f"  metric: calc_diff = 1 - 2*sum(a*e) / sum(a*a + e*e) = {value!r}, max_diff={max_diff!r}",
            ]
        )
    )


def _assert_rows_diff(a: Operand, e: Operand, *, max_diff: float, name: str) -> None:
    values = calc_diff_rows_values(a, e)
    xp = a.xp
    failing = ~(values <= max_diff)  # NaN rows fail
    count = int(xp.count_nonzero(failing))
    if count == 0:
        return
    rows = int(values.shape[0])
    first = int(xp.argmax(_as_uint8(a.lib, failing)))
    broken = xp.isnan(values)
    nan_rows = int(xp.count_nonzero(broken))
    finite_values = xp.where(broken, -1.0, values)
    worst_row = int(xp.argmax(finite_values))
    row_shape = a.shape[:-1] or (1,)
    lines = [
        f"{name}: calc_diff over max_diff {max_diff!r} in {_share(count, rows)} rows "
        f"(rows run along the last dimension, {a.shape[-1] if a.shape else 1} elements each)",
        f"  first failing row: {format_index(first, row_shape)}, calc_diff {float(values[first])!r}",
        f"  rows holding NaN or Inf on a side (calc_diff NaN): {nan_rows}",
    ]
    if nan_rows < rows:
        lines.append(
            f"  worst finite row: {format_index(worst_row, row_shape)}, calc_diff {float(values[worst_row])!r}"
        )
    lines.append(_operands_line(a, e))
    raise AssertionError("\n".join(lines))


def _as_uint8(lib: str, mask: Any) -> Any:
    # torch's argmax refuses bool tensors; numpy's takes them.
    return mask.to(sys.modules["torch"].uint8) if lib == "torch" else mask


def worst(*values: Any) -> float:
    """The largest value, or NaN when any value is NaN: ``max`` for metrics (``max(0.0, nan) == 0.0``)."""
    numbers = _metric_values(values, "worst")
    return math.nan if any(math.isnan(v) for v in numbers) else max(numbers)


def best(*values: Any) -> float:
    """The smallest value, or NaN when any value is NaN: ``min`` for metrics."""
    numbers = _metric_values(values, "best")
    return math.nan if any(math.isnan(v) for v in numbers) else min(numbers)


def ulp_distance(actual: Any, expected: Any) -> Any:
    """Elementwise distance in representable values (units in the last place) of one dtype.

    Both sides must share a dtype from ULP_DTYPES and a shape. Returns float64 values, a numpy
    array for numpy inputs or a tensor on the inputs' device: whole numbers of steps (exact, since
    float32 needs fewer than 2**33), and ``inf`` where either side is NaN or an Inf meets anything
    but the same Inf. +0 and -0 are 0 apart. float64 rather than int64 with a sentinel so that
    ``distance <= bound`` is false for broken elements without a special case.
    """
    a, e = _metric_pair(actual, expected)
    _check_ulp_dtypes(a, e)
    return as_caller_array(a, ulp_distances(a, e))


def assert_ulp_close(actual: Any, expected: Any, *, max_ulp: int = 1, name: str = "output") -> None:
    """Asserts ``ulp_distance(actual, expected) <= max_ulp`` everywhere (NaN never passes)."""
    _check_name(name)
    max_ulp = _check_count(max_ulp, "max_ulp")
    a, e = read_pair(actual, expected)
    _check_ulp_dtype(e, "expected")
    _assert_same_shape(a, e, name)
    _assert_same_dtype(a, e, name)
    scan = scan_ulp(a, e, max_ulp=max_ulp)
    if scan.beyond.count == 0:
        return
    worst_line = "  worst distance: none"
    if scan.worst is not None:
        w = scan.worst
        worst_line = (
            f"  worst distance: {w.value!r} ulp at {format_index(w.index, a.shape)}: "
            f"actual {w.actual!r} [{_hex(w.actual_bits, a.itemsize)}], "
            f"expected {w.expected!r} [{_hex(w.expected_bits, a.itemsize)}]"
        )
    raise AssertionError(
        "\n".join(
            [
                f"{name}: not within {max_ulp} ulp: {_share(scan.beyond.count, scan.total)} elements",
                "  infinite distances (a NaN, or an Inf not met by the same Inf): "
                + _located(scan.infinite, a.shape, "elements"),
                f"    actual:   {_located(scan.nan_actual, a.shape, 'NaN')}, "
                f"{_located(scan.inf_actual, a.shape, 'Inf')}",
                f"    expected: {_located(scan.nan_expected, a.shape, 'NaN')}, "
                f"{_located(scan.inf_expected, a.shape, 'Inf')}",
                worst_line,
                _operands_line(a, e) + f"; max_ulp={max_ulp}",
            ]
        )
    )


def assert_same_bits(actual: Any, expected: Any, *, name: str = "output") -> None:
    """Asserts bitwise equality, for quantized outputs (fp8 codes, E8M0 bytes, packed int32 scales).

    Dtypes and shapes must match. Identical NaN codes pass (a quantizer is right to write them);
    -0.0 and 0.0 differ. The message lists the first differing indices with both values in hex.
    """
    _check_name(name)
    a, e = read_pair(actual, expected)
    _assert_same_shape(a, e, name)
    _assert_same_dtype(a, e, name)
    scan = scan_bits(a, e, keep=_SHOWN_DIFFERENCES)
    if scan.differing.count == 0:
        return
    lines = [
        f"{name}: bits differ in {_share(scan.differing.count, scan.total)} elements",
        f"  first {len(scan.first)} differing (index: actual vs expected):",
    ]
    for w in scan.first:
        lines.append(
            f"    {format_index(w.index, a.shape)}: {_hex(w.actual_bits, a.itemsize)} "
            f"({_value(w.actual, a)}) vs {_hex(w.expected_bits, a.itemsize)} ({_value(w.expected, a)})"
        )
    lines.append(_operands_line(a, e))
    raise AssertionError("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Argument checks


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")


def _check_flag(value: object, arg: str) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{arg} must be a bool, got {type(value).__name__}")


def _check_count(value: object, arg: str) -> int:
    # numbers.Integral takes numpy integers too; bool is an int but never a count.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{arg} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{arg} must be >= 0, got {value}")
    return int(value)


def _check_bound(value: object, arg: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a real number, got {type(value).__name__}")
    bound = float(value)
    if math.isnan(bound) or bound < 0:
        raise ValueError(f"{arg} must be a number >= 0 (inf allowed), got {value!r}")
    return bound


def _resolve_tolerances(dtype: str, rtol: object, atol: object) -> tuple[float, float, str]:
    if rtol is None and atol is None:
        if dtype in DEFAULT_TOLERANCES:
            return (*DEFAULT_TOLERANCES[dtype], f"defaults for {dtype}")
        if dtype.startswith(("int", "uint")) or dtype == "bool":
            return 0.0, 0.0, f"exact for {dtype}"
        raise ValueError(
            f"expected has dtype {dtype}, which has no default tolerance; pass rtol= and atol= "
            f"(defaults exist for {', '.join(DEFAULT_TOLERANCES)}, integers and bool)"
        )
    if rtol is None or atol is None:
        missing = "rtol" if rtol is None else "atol"
        raise ValueError(f"rtol and atol must be given together; {missing} is missing")
    return _check_bound(rtol, "rtol"), _check_bound(atol, "atol"), "given"


def _check_ulp_dtype(operand: Operand, arg: str) -> None:
    if operand.dtype not in ULP_DTYPES:
        raise TypeError(f"{arg} must have one of the dtypes {sorted(ULP_DTYPES)}, got {operand.dtype}")


def _check_ulp_dtypes(a: Operand, e: Operand) -> None:
    _check_ulp_dtype(e, "expected")
    if a.dtype != e.dtype:
        raise TypeError(f"actual and expected must share a dtype, got {a.dtype} and {e.dtype}")


def _metric_pair(
    x: Any, y: Any, *, names: tuple[str, str] = ("actual", "expected")
) -> tuple[Operand, Operand]:
    a, b = read_pair(x, y)
    if a.shape != b.shape:
        raise ValueError(f"{names[0]} and {names[1]} must have the same shape, got {a.shape} and {b.shape}")
    return a, b


def _metric_values(values: tuple[Any, ...], function: str) -> list[float]:
    if not values:
        raise ValueError(f"{function}() needs at least one value")
    numbers = []
    for position, value in enumerate(values):
        if isinstance(value, (str, bytes, complex)) or not hasattr(type(value), "__float__"):
            raise TypeError(
                f"{function}() values must be real numbers, passed as separate arguments; "
                f"argument {position} is a {type(value).__name__}"
            )
        try:
            numbers.append(float(value))
        except (TypeError, ValueError, RuntimeError) as exc:  # a tensor of more than one element
            raise TypeError(f"{function}() argument {position} is not a single number: {exc}") from exc
    return numbers


def _assert_same_shape(a: Operand, e: Operand, name: str) -> None:
    if a.shape != e.shape:
        raise AssertionError(
            f"{name}: shape mismatch: actual {a.shape} vs expected {e.shape} "
            f"(actual: {a.describe()}; expected: {e.describe()})"
        )


def _assert_same_dtype(a: Operand, e: Operand, name: str) -> None:
    if a.dtype != e.dtype:
        raise AssertionError(f"{name}: dtype mismatch: actual {a.dtype} vs expected {e.dtype}")


# ---------------------------------------------------------------------------------------------
# Message pieces


def _share(count: int, total: int) -> str:
    percent = 100.0 * count / total if total else 0.0
    return f"{count} / {total} ({percent:.4g}%)"


def _located(located: Located, shape: tuple[int, ...], what: str) -> str:
    if located.count == 0:
        return f"0 {what}"
    return f"{located.count} {what} (first at {format_index(located.first, shape)})"


def _side_lines(scan: PairScan, shape: tuple[int, ...], *, nan_word: str, inf_word: str) -> list[str]:
    return [
        f"    actual:   {_located(scan.nan_actual, shape, nan_word)}, "
        f"{_located(scan.inf_actual, shape, inf_word)}",
        f"    expected: {_located(scan.nan_expected, shape, nan_word)}, "
        f"{_located(scan.inf_expected, shape, inf_word)}",
    ]


def _worst_line(label: str, w: Worst | None, shape: tuple[int, ...]) -> str:
    if w is None:
        return f"  worst {label} difference: none (no pair of finite values)"
    return (
        f"  worst {label} difference: {w.value!r} at {format_index(w.index, shape)}: "
        f"actual {w.actual!r}, expected {w.expected!r}"
    )


def _worst_lines(scan: PairScan, shape: tuple[int, ...]) -> list[str]:
    return [_worst_line("absolute", scan.worst_abs, shape), _worst_line("relative", scan.worst_rel, shape)]


def _operands_line(a: Operand, e: Operand) -> str:
    return f"  actual: {a.describe()}; expected: {e.describe()}; shape {a.shape}"


def _hex(bits: int | None, itemsize: int) -> str:
    if bits is None:
        return "?"
    return f"0x{bits & ((1 << (8 * itemsize)) - 1):0{2 * itemsize}x}"


def _value(value: float, operand: Operand) -> str:
    return repr(value) if operand.kind == "float" else str(int(value))
