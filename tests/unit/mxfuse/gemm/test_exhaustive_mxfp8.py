"""benchmarks.exhaustive_mxfp8 (`python -m benchmarks exhaustive_mxfp8`) on the values where its rules can go wrong, and against the reference."""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.formats import quantize_mxfp8_reference

register(on=("cpu",), est_time=6)


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return importlib.import_module("benchmarks.exhaustive_mxfp8")


def _windows(centres: list[int], half: int) -> list[tuple[int, int]]:
    return [(max(c - half, 0), c + half) for c in centres]


# Where the RCEIL rule's cases meet: all subnormal maxima, the 1.75 mantissa boundary (0x600000) at every
# exponent, the smallest normal, and the largest finite values.
RCEIL_RANGES = [
    (0, 0x800000),
    *_windows([(e << 23) | 0x600000 for e in range(1, 255)], 2048),
    (0x7F7F0000, 0x7F800000),
]
# Where the E4M3 rounding's cases meet: zero and the tiniest floats, every subnormal step (k * 2**-9) and
# the ties between them, the first quarter of every binade from the smallest normal (2**-6) up (its first
# rounding ties included), and the top up to 448.
_STEPS = [int(np.float32(k / 2 * 2.0**-9).view(np.uint32)) for k in range(1, 18)]
E4M3_RANGES = [
    (0, 1 << 16),
    *_windows(_STEPS, 1 << 15),
    *[(e << 23, (e << 23) + (1 << 21)) for e in range(121, 136)],
    (0x43DF0000, 0x43E00001),
]


def test_rceil_rule_equals_the_definition_where_its_cases_meet(script: ModuleType) -> None:
    for start, stop in RCEIL_RANGES:
        checked, mismatched, first = script.rceil_mismatches(start, stop)
        assert (checked, mismatched) == (stop - start, 0), [hex(b) for b in first]


def test_e4m3_rounding_equals_ml_dtypes_where_its_cases_meet(script: ModuleType) -> None:
    for start, stop in E4M3_RANGES:
        checked, mismatched, first = script.e4m3_mismatches(start, stop)
        assert (checked, mismatched) == (stop - start, 0), [hex(b) for b in first]


def test_the_scan_finds_a_wrong_rule(script: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    rule = script.rceil_kernel
    monkeypatch.setattr(script, "rceil_kernel", lambda bits: rule(bits) + ((bits & 0x7FFFFF) == 0x600000))
    checked, mismatched, first = script.rceil_mismatches(0x3F000000, 0x3F800000)
    assert checked == 1 << 23 and mismatched == 1 and first == [0x3F600000]


def test_the_numpy_rules_are_the_references(script: ModuleType) -> None:
    """The script's copy of the kernel's rules gives the reference's scale bytes and E4M3 codes."""
    amax_bits = np.concatenate(
        [np.arange(a, b, max((b - a) // 64, 1), dtype=np.uint32) for a, b in RCEIL_RANGES]
    )
    x = torch.zeros(amax_bits.size, 32)
    x[:, 0] = torch.from_numpy(amax_bits.view(np.float32).copy())
    _, scales = quantize_mxfp8_reference(x, rounding="rceil", scale_layout="e8m0")
    assert_same_bits(
        torch.from_numpy(script.rceil_kernel(amax_bits).astype(np.uint8)),
        scales.view(torch.uint8).reshape(-1),
    )

    mag = np.concatenate([np.arange(a, b, max((b - a) // 4096, 1), dtype=np.uint32) for a, b in E4M3_RANGES])
    mag = mag.view(np.float32)
    # A block whose maximum is 448 has scale 2**0 (RCEIL), so the reference rounds each element as is.
    blocks = np.full((mag.size, 32), 448.0, dtype=np.float32)
    blocks[:, 1] = mag
    codes, scales = quantize_mxfp8_reference(torch.from_numpy(blocks), rounding="rceil", scale_layout="e8m0")
    assert int(scales.view(torch.uint8).unique().item()) == 127
    assert_same_bits(torch.from_numpy(script.e4m3_kernel(mag)), codes.view(torch.uint8)[:, 1].contiguous())
