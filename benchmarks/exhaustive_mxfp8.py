"""Exhaustive checks of the MXFP8 quantize kernel's integer rules, over every input they can see.

`mxfuse.kernels.mxfp8` (the building blocks of `quantize_mxfp8` and every fused producer) computes
scales and (off the GPU) E4M3 codes with integer arithmetic on float32 bit patterns. Two claims in its
comments and in benchmarks/NOTES-quantize.md rest on checking those rules against their definitions
(docs/mxfp8.md) for *every* input:

  rceil  the scale rule  s = (f > 224) if e == 0 else max(e - 8 + (f > 0x600000), 1), capped at 254
         (e, f: biased exponent and mantissa of the block maximum's bits) equals the definition
         q = fp32(amax / 448); s = biased_exponent(q) + (mantissa(q) != 0), for all 2,139,095,040
         finite non-negative float32 maxima;
  e4m3   the integer rounding of a scaled magnitude m in [0, 448] to an E4M3 code (normals: rebias and
         round the mantissa to 3 bits, nearest-even; subnormals: the float32 add m + 2**14) equals
         ml_dtypes' float8_e4m3fn conversion, for all 1,139,802,113 float32 values in [0, 448].

The rules are written here in numpy exactly as the kernel writes them in Triton (same constants,
same operations); tests/unit/mxfuse/gemm/test_exhaustive_mxfp8.py checks this numpy copy against the bit-exact
torch reference on the boundary values. Runs on one CPU core in about a minute; prints a table.

    python -m benchmarks exhaustive_mxfp8                    # both checks, every value
    python -m benchmarks exhaustive_mxfp8 --check rceil --stride 1009   # a quick sample
"""

from __future__ import annotations

import argparse
import platform
import time

import ml_dtypes
import numpy as np

__all__ = [
    "E4M3_VALUES",
    "RCEIL_VALUES",
    "e4m3_kernel",
    "e4m3_mismatches",
    "rceil_kernel",
    "rceil_mismatches",
    "rceil_reference",
]

RCEIL_VALUES = 0x7F800000  # bit patterns 0 .. 0x7F7FFFFF: every finite non-negative float32
E4M3_VALUES = 0x43E00000 + 1  # bit patterns 0 .. bits(448.0): every float32 in [0, 448]
_CHUNK = 1 << 22  # 16 MiB of uint32 per temporary: the whole check stays under ~200 MiB


def rceil_reference(amax_bits: np.ndarray) -> np.ndarray:
    """The definition: q = fp32(amax / 448); s = biased_exponent(q) + (mantissa(q) != 0), in [0, 254]."""
    q = amax_bits.view(np.float32) / np.float32(448.0)  # IEEE float32 division, nearest-even
    q_bits = q.view(np.uint32)
    s = (q_bits >> 23).astype(np.int32) + ((q_bits & 0x7FFFFF) != 0)
    return np.minimum(s, 254)


def rceil_kernel(amax_bits: np.ndarray) -> np.ndarray:
    """The kernel's rule (`mxfp8_tile.mxfp8_scale_bytes`, RCEIL branch), from the bits of amax."""
    e = (amax_bits >> 23).astype(np.int32)
    f = (amax_bits & 0x7FFFFF).astype(np.int32)
    s = np.where(e == 0, (f > 224).astype(np.int32), np.maximum(e - 8 + (f > 0x600000), 1))
    return np.minimum(s, 254)


def e4m3_kernel(mag: np.ndarray) -> np.ndarray:
    """The kernel's integer E4M3 rounding (`mxfp8_tile.mxfp8_codes`, `HW_CVT=False`) of magnitudes in [0, 448]."""
    mag_bits = mag.view(np.int32)
    odd = (mag_bits >> 20) & 1
    normal = (mag_bits - (120 << 23) + 0x7FFFF + odd) >> 20
    subnormal = (mag + np.float32(16384.0)).view(np.int32) - 0x46800000  # float32 add: nearest-even
    return np.where(mag_bits < (121 << 23), subnormal, normal).astype(np.uint8)


def rceil_mismatches(start: int, stop: int, *, stride: int = 1) -> tuple[int, int, list[int]]:
    """(values checked, mismatches, first few mismatching bit patterns) over bits [start, stop)."""
    return _scan(start, stop, stride, lambda bits: rceil_kernel(bits) != rceil_reference(bits))


def e4m3_mismatches(start: int, stop: int, *, stride: int = 1) -> tuple[int, int, list[int]]:
    def differ(bits: np.ndarray) -> np.ndarray:
        mag = bits.view(np.float32)
        return e4m3_kernel(mag) != mag.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)

    return _scan(start, stop, stride, differ)


def _scan(start: int, stop: int, stride: int, differ) -> tuple[int, int, list[int]]:
    checked = mismatched = 0
    first: list[int] = []
    step = _CHUNK * stride
    with np.errstate(all="ignore"):
        for chunk_start in range(start, stop, step):
            bits = np.arange(chunk_start, min(chunk_start + step, stop), stride, dtype=np.uint32)
            bad = differ(bits)
            checked += bits.size
            count = int(np.count_nonzero(bad))
            if count:
                mismatched += count
                first.extend(int(b) for b in bits[bad][: 10 - len(first)])
    return checked, mismatched, first[:10]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", choices=("rceil", "e4m3", "both"), default="both")
    parser.add_argument(
        "--stride", type=int, default=1, help="check every Nth value (default 1: all of them)"
    )
    args = parser.parse_args(argv)
    if args.stride < 1:
        parser.error("--stride must be >= 1")
    print(
        f"# python {platform.python_version()}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
        f"{platform.machine()}, stride {args.stride}"
    )
    rows = []
    checks = {
        "rceil": (rceil_mismatches, RCEIL_VALUES, "kernel RCEIL rule == fp32(amax / 448) definition"),
        "e4m3": (e4m3_mismatches, E4M3_VALUES, "kernel integer E4M3 rounding == ml_dtypes float8_e4m3fn"),
    }
    for name, (scan, total, what) in checks.items():
        if args.check not in (name, "both"):
            continue
        started = time.perf_counter()
        checked, mismatched, first = scan(0, total, stride=args.stride)
        rows.append((what, checked, mismatched, time.perf_counter() - started, first))
    print("| check | values | mismatches | seconds |\n| --- | ---: | ---: | ---: |")
    for what, checked, mismatched, seconds, _ in rows:
        print(f"| {what} | {checked:,} | {mismatched:,} | {seconds:.1f} |")
    for what, _, mismatched, _, first in rows:
        if mismatched:
            print(f"FAIL {what}: first bit patterns {', '.join(hex(b) for b in first)}")
    raise SystemExit(1 if any(row[2] for row in rows) else 0)
