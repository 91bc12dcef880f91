"""Chunked scans behind ``gpumatrix.compare``: each walks a pair once and returns a frozen summary.

The same code runs on numpy arrays and torch tensors (on any device): elementwise work uses the
functions both modules name alike (isnan, abs, where, ...); the few calls that differ are the small
``_lib_*`` functions below. Only scalars (counts, indices, sums) leave the device, once per chunk.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from gpumatrix.compare._arrays import Operand, chunk_bounds, quiet

__all__ = [
    "BitsScan",
    "Located",
    "PairScan",
    "UlpScan",
    "Worst",
    "all_within_tolerance",
    "calc_diff_rows_values",
    "calc_diff_value",
    "rel_error_value",
    "row_rms",
    "scan_bits",
    "scan_pair",
    "scan_ulp",
    "ulp_distances",
]

_FLOAT64_MAX = sys.float_info.max
_INF = math.inf


@dataclass(frozen=True)
class Located:
    """How many elements have a property, and the flat index of the first (-1 when none)."""

    count: int
    first: int


@dataclass(frozen=True)
class Worst:
    """The element with the largest difference: the difference, its flat index and both values."""

    value: float
    index: int
    actual: float
    expected: float
    actual_bits: int | None = None
    expected_bits: int | None = None


@dataclass(frozen=True)
class PairScan:
    """Everything ``assert_close`` and ``assert_diff`` report about a pair."""

    total: int
    nan_actual: Located  # NaN in actual not excused by equal_nan
    nan_expected: Located
    inf_actual: Located  # Inf in actual not matched by the same Inf (every Inf when infs_match=False)
    inf_expected: Located
    nonfinite: Located  # elements failing for any of the four reasons above
    out_of_tolerance: Located  # pairs of finite values outside the tolerance
    worst_abs: Worst | None  # over pairs of finite values; None when there are none
    worst_rel: Worst | None


@dataclass(frozen=True)
class UlpScan:
    total: int
    beyond: Located  # distance > max_ulp, infinite distances included
    infinite: Located
    nan_actual: Located
    nan_expected: Located
    inf_actual: Located
    inf_expected: Located
    worst: Worst | None


@dataclass(frozen=True)
class BitsScan:
    total: int
    differing: Located
    first: tuple[Worst, ...]  # the first few differing elements (value unused: 0.0)


def _lib_count(lib: str, mask: Any) -> int:
    return int(sys.modules[lib].count_nonzero(mask))


def _lib_first(lib: str, mask: Any) -> int:
    # argmax returns the first maximum in both libraries; torch's argmax refuses bool input.
    return int(mask.to(sys.modules["torch"].uint8).argmax()) if lib == "torch" else int(mask.argmax())


def _lib_first_k(lib: str, mask: Any, k: int) -> list[int]:
    if lib == "torch":
        return [int(i) for i in mask.nonzero().flatten()[:k].tolist()]
    return [int(i) for i in sys.modules["numpy"].flatnonzero(mask)[:k]]


def _lib_clamp_max_(lib: str, x: Any, bound: float) -> None:
    if lib == "torch":
        sys.modules["torch"].clamp(x, max=bound, out=x)
    else:
        sys.modules["numpy"].minimum(x, bound, out=x)


def _lib_int64(lib: str, x: Any) -> Any:
    return x.to(sys.modules["torch"].int64) if lib == "torch" else x.astype(sys.modules["numpy"].int64)


def _lib_float64(lib: str, x: Any) -> Any:
    return x.to(sys.modules["torch"].float64) if lib == "torch" else x.astype(sys.modules["numpy"].float64)


class _Tally:
    """Accumulates a Located over chunks."""

    def __init__(self, lib: str) -> None:
        self.lib, self.count, self.first = lib, 0, -1

    def add(self, mask: Any, offset: int) -> None:
        n = _lib_count(self.lib, mask)
        if n:
            if self.first < 0:
                self.first = offset + _lib_first(self.lib, mask)
            self.count += n

    def result(self) -> Located:
        return Located(self.count, self.first)


class _Champion:
    """Keeps the largest score over chunks (the earliest on ties); scores < 0 mean 'not a candidate'."""

    def __init__(self) -> None:
        self.best: Worst | None = None

    def offer(self, score: Any, offset: int, a: Any, e: Any, a_bits: Any = None, e_bits: Any = None) -> None:
        if score.shape[0] == 0:
            return
        i = int(score.argmax())
        value = float(score[i])
        if value < 0 or (self.best is not None and value <= self.best.value):
            return
        self.best = Worst(
            value,
            offset + i,
            float(a[i]),
            float(e[i]),
            None if a_bits is None else int(a_bits[i]),
            None if e_bits is None else int(e_bits[i]),
        )


def _tolerance(lib: str, e: Any, *, rtol: float, atol: Any) -> Any:
    """atol + rtol*|e|, computed in place in e and capped at the largest finite float64 (``atol`` a
    number, or one float64 per element of the chunk: see ``_chunk_atol``).

    The cap keeps ``|a-e| <= tol`` false whenever a side is infinite (|a-e| is then inf or NaN),
    even where rtol*|inf| or a user's atol=inf would make the bound infinite.
    """
    xp = sys.modules[lib]
    xp.abs(e, out=e)
    xp.multiply(e, rtol, out=e)
    xp.add(e, atol, out=e)
    _lib_clamp_max_(lib, e, _FLOAT64_MAX)
    return e


def _row_index(lib: str, device: str, start: int, stop: int, row_len: int) -> Any:
    """The row of each flat index in [start, stop), rows being ``row_len`` consecutive elements."""
    if lib == "torch":
        torch = sys.modules["torch"]
        return torch.arange(start, stop, device=device) // row_len
    return sys.modules["numpy"].arange(start, stop) // row_len


def _chunk_atol(operand: Operand, atol: Any, atol_rows: Any, start: int, stop: int) -> Any:
    """``atol``, or with ``atol_rows`` (one float64 per row of the last dimension) each element's own."""
    if atol_rows is None:
        return atol
    row_len = operand.shape[-1] if operand.shape else 1
    return atol_rows[_row_index(operand.lib, operand.device, start, stop, row_len)]


def _row_sums(operand: Operand, rows: Any, values: Any, start: int) -> None:
    """Adds ``values`` (the elements from flat index ``start`` on) to ``rows``, the totals of their rows."""
    row_len = operand.shape[-1] if operand.shape else 1
    first, last = start // row_len, (start + values.shape[0] - 1) // row_len
    local = _row_index(operand.lib, operand.device, start, start + values.shape[0], row_len) - first
    if operand.lib == "torch":
        rows[first : last + 1].index_add_(0, local, values)
    else:
        rows[first : last + 1] += sys.modules["numpy"].bincount(
            local, weights=values, minlength=last - first + 1
        )


def _row_zeros(operand: Operand) -> Any:
    """float64 zeros, one per row of the last dimension (a 0-d operand is one row)."""
    count = 1
    for size in operand.shape[:-1]:
        count *= size
    if operand.lib == "torch":
        torch = sys.modules["torch"]
        return torch.zeros(count, dtype=torch.float64, device=operand.device)
    return sys.modules["numpy"].zeros(count, dtype=sys.modules["numpy"].float64)


def row_rms(operand: Operand) -> Any:
    """Root mean square of the finite values of each row (the last dimension), float64; 0 for a row with
    none. In the operand's library, on its compute device."""
    xp = operand.xp
    squares, counts = _row_zeros(operand), _row_zeros(operand)
    with quiet(operand):
        for start, stop in chunk_bounds(operand.numel):
            e = operand.float64(start, stop)
            finite = xp.isfinite(e)
            _row_sums(operand, squares, xp.where(finite, e * e, 0.0), start)
            _row_sums(operand, counts, _lib_float64(operand.lib, finite), start)
        return xp.where(counts > 0, xp.sqrt(squares / xp.where(counts > 0, counts, 1.0)), 0.0)


def calc_diff_rows_values(x: Operand, y: Operand) -> Any:
    """``calc_diff`` of each row (the last dimension), float64: NaN for a row holding NaN or Inf on a side,
    0.0 for a row all zero on both sides. In the operands' library, on their compute device."""
    xp = x.xp
    cross, squares, broken = _row_zeros(x), _row_zeros(x), _row_zeros(x)
    with quiet(x):
        for start, stop in chunk_bounds(x.numel):
            a, b = x.float64(start, stop), y.float64(start, stop)
            finite = xp.isfinite(a) & xp.isfinite(b)
            _row_sums(x, broken, _lib_float64(x.lib, ~finite), start)
            a, b = xp.where(finite, a, 0.0), xp.where(finite, b, 0.0)
            _row_sums(x, cross, a * b, start)
            _row_sums(x, squares, a * a + b * b, start)
        values = xp.where(squares == 0.0, 0.0, 1.0 - 2.0 * cross / xp.where(squares == 0.0, 1.0, squares))
        return xp.where(broken > 0, math.nan, values)


def all_within_tolerance(
    actual: Operand,
    expected: Operand,
    *,
    rtol: float,
    atol: float,
    exact_native: bool,
    atol_rows: Any = None,
) -> bool:
    """True when every pair is finite and within tolerance: the cheap pass most calls end with.

    False means 'scan in full' (some element failed, or is a matched Inf or an allowed NaN).
    """
    xp = actual.xp
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            if exact_native:
                if bool((actual.native(start, stop) != expected.native(start, stop)).any()):
                    return False
                continue
            a, e = actual.float64(start, stop), expected.float64(start, stop)
            xp.subtract(a, e, out=a)
            xp.abs(a, out=a)
            chunk_atol = _chunk_atol(actual, atol, atol_rows, start, stop)
            if not bool((a <= _tolerance(actual.lib, e, rtol=rtol, atol=chunk_atol)).all()):
                return False
    return True


def scan_pair(
    actual: Operand,
    expected: Operand,
    *,
    rtol: float,
    atol: float,
    equal_nan: bool,
    infs_match: bool,
    exact_native: bool,
    atol_rows: Any = None,
) -> PairScan:
    """Classifies every element of a pair (see PairScan) in one chunked pass.

    Chunks whose elements are all finite and within tolerance only feed the worst differences;
    the full classification (a dozen more passes) runs on the chunks that hold a failure, which
    keeps a 16M-element pair with one NaN in the last element at a fraction of a second.
    """
    lib, xp = actual.lib, actual.xp
    tallies = {key: _Tally(lib) for key in ("nan_a", "nan_e", "inf_a", "inf_e", "hard", "outside")}
    worst_abs, worst_rel = _Champion(), _Champion()
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            a, e = actual.float64(start, stop), expected.float64(start, stop)
            diff, magnitude = xp.abs(a - e), xp.abs(e)
            if exact_native:
                outside = actual.native(start, stop) != expected.native(start, stop)
                clean = not bool(outside.any())
            else:
                chunk_atol = _chunk_atol(actual, atol, atol_rows, start, stop)
                outside = ~(diff <= _tolerance(lib, xp.abs(e), rtol=rtol, atol=chunk_atol))
                clean = not bool(outside.any())  # so every element is finite (see _tolerance)
            # 0/0 is no difference; x/0 is an infinite relative difference.
            relative = xp.where(diff == 0, 0.0, diff / magnitude)
            if clean:
                worst_abs.offer(diff, start, a, e)
                worst_rel.offer(relative, start, a, e)
                continue
            nan_a, nan_e = xp.isnan(a), xp.isnan(e)
            inf_a, inf_e = xp.isinf(a), xp.isinf(e)
            finite = ~(nan_a | nan_e | inf_a | inf_e)
            if equal_nan:
                both_nan = nan_a & nan_e
                nan_a, nan_e = nan_a & ~both_nan, nan_e & ~both_nan
            if infs_match:
                same_inf = inf_a & (a == e)
                inf_a, inf_e = inf_a & ~same_inf, inf_e & ~same_inf
            for key, mask in (
                ("nan_a", nan_a),
                ("nan_e", nan_e),
                ("inf_a", inf_a),
                ("inf_e", inf_e),
                ("hard", nan_a | nan_e | inf_a | inf_e),
                ("outside", finite & outside),
            ):
                tallies[key].add(mask, start)
            worst_abs.offer(xp.where(finite, diff, -1.0), start, a, e)
            worst_rel.offer(xp.where(finite, relative, -1.0), start, a, e)
    return PairScan(
        total=actual.numel,
        nan_actual=tallies["nan_a"].result(),
        nan_expected=tallies["nan_e"].result(),
        inf_actual=tallies["inf_a"].result(),
        inf_expected=tallies["inf_e"].result(),
        nonfinite=tallies["hard"].result(),
        out_of_tolerance=tallies["outside"].result(),
        worst_abs=worst_abs.best,
        worst_rel=worst_rel.best,
    )


def rel_error_value(actual: Operand, expected: Operand) -> float:
    """||a-e||_2 / ||e||_2 in float64, matched Infs left out of both norms; NaN on any NaN or Inf mismatch."""
    xp = actual.xp
    squared_error = squared_norm = 0.0
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            a, e = actual.float64(start, stop), expected.float64(start, stop)
            if bool((xp.isnan(a) | xp.isnan(e)).any()):
                return math.nan
            inf_a, inf_e = xp.isinf(a), xp.isinf(e)
            if bool(((inf_a | inf_e) & (a != e)).any()):
                return math.nan
            kept = ~inf_a  # where a is Inf, e is the same Inf here
            squared_error += float(xp.where(kept, (a - e) ** 2, 0.0).sum())
            squared_norm += float(xp.where(kept, e * e, 0.0).sum())
    if squared_norm == 0.0:
        return 0.0 if squared_error == 0.0 else _INF
    return math.sqrt(squared_error) / math.sqrt(squared_norm)


def calc_diff_value(x: Operand, y: Operand) -> float:
    """1 - 2*sum(x*y) / sum(x*x + y*y) in float64; NaN if either side holds NaN or Inf; 0.0 if both are 0."""
    xp = x.xp
    cross = squares = 0.0
    with quiet(x):
        for start, stop in chunk_bounds(x.numel):
            a, b = x.float64(start, stop), y.float64(start, stop)
            if not bool((xp.isfinite(a) & xp.isfinite(b)).all()):
                return math.nan
            cross += float((a * b).sum())
            squares += float((a * a + b * b).sum())
    if squares == 0.0:
        return 0.0  # both all zero (or empty): identical, though the formula would read 0/0
    return 1.0 - 2.0 * cross / squares


def _ordered(lib: str, bits: Any, itemsize: int) -> Any:
    """Bit patterns mapped to integers that count representable values: -0 and +0 both map to 0."""
    wide = _lib_int64(lib, bits)
    width = 8 * itemsize
    wide = wide & ((1 << width) - 1)
    sign = 1 << (width - 1)
    magnitude = wide & (sign - 1)
    return sys.modules[lib].where((wide & sign) != 0, -magnitude, magnitude)


def _ulp_chunk(actual: Operand, expected: Operand, start: int, stop: int) -> tuple[Any, Any, Any, Any, Any]:
    """(distances, a, e, a_bits, e_bits) for one chunk; distances are float64 with inf for 'never close'."""
    lib, xp = actual.lib, actual.xp
    a_bits, e_bits = actual.bits(start, stop), expected.bits(start, stop)
    a, e = actual.float64(start, stop), expected.float64(start, stop)
    steps = xp.abs(_ordered(lib, a_bits, actual.itemsize) - _ordered(lib, e_bits, actual.itemsize))
    # NaN codes sit next to the largest finite value in bit order (E4M3's 0x7F beside 448 at 0x7E):
    # any NaN, and any Inf not met by the same Inf, is infinitely far whatever the bits say.
    never = xp.isnan(a) | xp.isnan(e) | ((xp.isinf(a) | xp.isinf(e)) & (a != e))
    distances = xp.where(never, _INF, _lib_float64(lib, steps))
    return distances, a, e, a_bits, e_bits


def ulp_distances(actual: Operand, expected: Operand) -> Any:
    """Elementwise ULP distances as float64 in the operands' library and shape."""
    lib, xp = actual.lib, actual.xp
    if lib == "torch":
        out = xp.empty(actual.numel, dtype=xp.float64, device=actual.device)
    else:
        out = xp.empty(actual.numel, dtype=xp.float64)
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            out[start:stop] = _ulp_chunk(actual, expected, start, stop)[0]
    return out.reshape(actual.shape)


def scan_ulp(actual: Operand, expected: Operand, *, max_ulp: int) -> UlpScan:
    lib, xp = actual.lib, actual.xp
    tallies = {key: _Tally(lib) for key in ("beyond", "infinite", "nan_a", "nan_e", "inf_a", "inf_e")}
    worst = _Champion()
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            distances, a, e, a_bits, e_bits = _ulp_chunk(actual, expected, start, stop)
            for key, mask in (
                ("beyond", ~(distances <= max_ulp)),
                ("infinite", xp.isinf(distances)),
                ("nan_a", xp.isnan(a)),
                ("nan_e", xp.isnan(e)),
                ("inf_a", xp.isinf(a)),
                ("inf_e", xp.isinf(e)),
            ):
                tallies[key].add(mask, start)
            worst.offer(distances, start, a, e, a_bits, e_bits)
    return UlpScan(
        total=actual.numel,
        beyond=tallies["beyond"].result(),
        infinite=tallies["infinite"].result(),
        nan_actual=tallies["nan_a"].result(),
        nan_expected=tallies["nan_e"].result(),
        inf_actual=tallies["inf_a"].result(),
        inf_expected=tallies["inf_e"].result(),
        worst=worst.best,
    )


def scan_bits(actual: Operand, expected: Operand, *, keep: int) -> BitsScan:
    """Counts elements whose bits differ and keeps the first ``keep`` of them with both values."""
    lib = actual.lib
    tally, first = _Tally(lib), []
    with quiet(actual):
        for start, stop in chunk_bounds(actual.numel):
            a_bits, e_bits = actual.bits(start, stop), expected.bits(start, stop)
            differ = a_bits != e_bits
            tally.add(differ, start)
            if len(first) < keep and tally.count:
                a, e = actual.float64(start, stop), expected.float64(start, stop)
                for i in _lib_first_k(lib, differ, keep - len(first)):
                    first.append(
                        Worst(0.0, start + i, float(a[i]), float(e[i]), int(a_bits[i]), int(e_bits[i]))
                    )
    return BitsScan(total=actual.numel, differing=tally.result(), first=tuple(first))
