"""The MXFP8 reference against an independent numpy + ml_dtypes implementation, and hand-computed bytes.

The independent implementation works in float64 (scaling by 2**(127 - s) is exact there) and lets
ml_dtypes round float64 straight to E4M3, so it shares no arithmetic with the torch reference.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.formats import (
    dequantize_mxfp8,
    e8m0_to_float,
    float_to_e8m0,
    quantize_mxfp8_reference,
)

register(on=("cpu",), est_time=25)

NAN, INF = math.nan, math.inf
F32_MAX = float(np.finfo(np.float32).max)
F32_TINY = 2.0**-149  # smallest fp32 subnormal
BF16_TINY = 2.0**-133  # smallest bf16 subnormal
_TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_NUMPY_DTYPES = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp32": np.float32}
_BITS_DTYPES = {"bf16": np.uint16, "fp16": np.uint16, "fp32": np.uint32}


# ---------------------------------------------------------------------------------------------
# The independent implementation


def numpy_mxfp8(x: np.ndarray, rounding: str) -> tuple[np.ndarray, np.ndarray]:
    """(E4M3 bytes [M, K], E8M0 bytes [M, K/32]) of ``x`` per docs/mxfp8.md, in numpy."""
    m, k = x.shape
    with np.errstate(invalid="ignore"):
        blocks = x.astype(np.float64).reshape(m, k // 32, 32)
        nonfinite = ~np.isfinite(blocks).all(axis=-1)
        amax = np.where(nonfinite, 0.0, np.abs(blocks).max(axis=-1, initial=0.0))
    if rounding == "rceil":
        q = (amax.astype(np.float32) / np.float32(448.0)).view(np.uint32).astype(np.int64)
        s = (q >> 23) + ((q & 0x7FFFFF) != 0)
    else:
        _, exp = np.frexp(amax)  # amax = mant * 2**exp, mant in [0.5, 1)
        s = exp.astype(np.int64) - 1 - 8 + 127
    s = np.where(amax == 0, 0, np.clip(s, 0, 254))
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = np.ldexp(blocks, (127 - s)[..., None])
        codes = np.clip(scaled, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    codes = np.where(nonfinite[..., None], np.uint8(0x7F), codes)
    s = np.where(nonfinite, 255, s).astype(np.uint8)
    return codes.reshape(m, k), s


def to_torch(x: np.ndarray) -> torch.Tensor:
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def check_against_numpy(x: np.ndarray, rounding: str) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = quantize_mxfp8_reference(to_torch(x), rounding=rounding, scale_layout="e8m0")
    want_q, want_s = numpy_mxfp8(x, rounding)
    assert_same_bits(s, torch.from_numpy(want_s), name="scale")
    assert_same_bits(q.view(torch.uint8), torch.from_numpy(want_q), name="q")
    return q, s


# ---------------------------------------------------------------------------------------------
# Special blocks, with hand-computed bytes.
# Each row: id, dtype, the block's leading values (the rest of the 32 are +0.0), the scale byte under
# rceil and floor, and {element index: (E4M3 byte under rceil, under floor)}.

SPECIAL_BLOCKS = [
    ("zeros", "bf16", [0.0], 0, 0, {0: (0x00, 0x00), 31: (0x00, 0x00)}),
    ("negative zeros", "fp32", [-0.0] * 32, 0, 0, {0: (0x80, 0x80), 31: (0x80, 0x80)}),
    # 448 / 448 = 1.0 exactly: s = 127; floor(log2 448) = 8 gives 127 too.
    ("amax 448", "bf16", [448.0, -448.0, 1.0], 127, 127, {0: (0x7E, 0x7E), 1: (0xFE, 0xFE), 2: (0x38, 0x38)}),
    # 450 / 448 > 1 rounds the scale up; floor keeps 127 and saturates 450 to 448.
    # 450 / 2 = 225 -> 224 (step 16 in [128, 256)) = 1.75 * 2**7 = 0x76.
    ("amax 450", "bf16", [450.0], 128, 127, {0: (0x76, 0x7E)}),
    # 510 under rceil: scale 2, 255 rounds (step 16 in [128, 256)) to 256 = 0x78; floor saturates.
    ("amax 510", "fp32", [510.0], 128, 127, {0: (0x78, 0x7E)}),
    # 1.75 / 448 = 2**-8 exactly: mantissa 0, so no round-up.
    ("amax 1.75 exact power of two quotient", "fp32", [1.75], 119, 119, {0: (0x7E, 0x7E)}),
    (
        "amax just above 1.75",
        "fp32",
        [float(np.nextafter(np.float32(1.75), np.float32(2)))],
        120,
        119,
        {0: (0x76, 0x7E)},
    ),
    ("amax 1.0", "bf16", [1.0, 0.5], 119, 119, {0: (0x78, 0x78), 1: (0x70, 0x70)}),
    # Ties at scale 1 (block max 448): 1.0625 -> 1.0 (even), 1.1875 -> 1.25, 2**-10 -> 0, 3 * 2**-10 -> 2**-8.
    (
        "E4M3 ties to even",
        "fp32",
        [448.0, 1.0625, 1.1875, 2.0**-10, 3 * 2.0**-10, -(2.0**-10)],
        127,
        127,
        {1: (0x38, 0x38), 2: (0x3A, 0x3A), 3: (0x00, 0x00), 4: (0x02, 0x02), 5: (0x80, 0x80)},
    ),
    (
        "E4M3 subnormals",
        "fp32",
        [448.0, 2.0**-9, -(2.0**-9), 2.0**-11, -(2.0**-11), 7 * 2.0**-9],
        127,
        127,
        {1: (0x01, 0x01), 2: (0x81, 0x81), 3: (0x00, 0x00), 4: (0x80, 0x80), 5: (0x07, 0x07)},
    ),
    # bf16 subnormal maximum 2**-133: rceil q = 2**-133 / 448 is an fp32 subnormal > 0, so s = 1 and the
    # element is 2**-7 = 4 E4M3 steps; floor clamps to s = 0 (2**-127) and the element is 2**-6 = 0x08.
    ("bf16 subnormal amax", "bf16", [BF16_TINY] * 32, 1, 0, {0: (0x04, 0x08)}),
    # 2**-149 / 448 rounds to 0: mantissa 0 and exponent 0 give s = 0 under rceil as well.
    ("fp32 smallest subnormal", "fp32", [F32_TINY], 0, 0, {0: (0x00, 0x00)}),
    # amax = 224 * 2**-149: amax / 448 = 2**-150 exactly, a tie that rounds to 0, so s = 0.
    ("fp32 subnormal quotient tie", "fp32", [224 * F32_TINY], 0, 0, {0: (0x00, 0x00)}),
    ("fp32 subnormal quotient above tie", "fp32", [225 * F32_TINY], 1, 0, {0: (0x00, 0x00)}),
    ("fp32 smallest normal", "fp32", [2.0**-126], 1, 0, {0: (0x38, 0x40)}),
    # 2**128 * (1 - 2**-24): rceil 2**120 gives 255.99 -> 256; floor 2**119 gives 511.99 -> 448.
    ("fp32 largest finite", "fp32", [F32_MAX, -F32_MAX], 247, 246, {0: (0x78, 0x7E), 1: (0xF8, 0xFE)}),
    # 65504 / 448 = 146.2 -> 2**8; 65504 / 256 = 255.875 -> 256; floor: 2**7, 511.75 saturates.
    ("fp16 largest finite", "fp16", [65504.0], 135, 134, {0: (0x78, 0x7E)}),
    ("NaN", "bf16", [1.0, NAN, 2.0], 255, 255, {0: (0x7F, 0x7F), 1: (0x7F, 0x7F), 31: (0x7F, 0x7F)}),
    ("+Inf", "fp16", [INF, 1.0], 255, 255, {0: (0x7F, 0x7F), 1: (0x7F, 0x7F)}),
    ("-Inf", "fp32", [-INF, -1.0], 255, 255, {0: (0x7F, 0x7F), 1: (0x7F, 0x7F)}),
]


def _block(dtype: str, values: list[float]) -> np.ndarray:
    row = np.zeros((1, 32), dtype=np.float64)
    row[0, : len(values)] = values
    with np.errstate(over="ignore"):
        return row.astype(_NUMPY_DTYPES[dtype])


@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize(
    ("name", "dtype", "values", "s_rceil", "s_floor", "codes"),
    SPECIAL_BLOCKS,
    ids=[row[0] for row in SPECIAL_BLOCKS],
)
def test_special_block(name, dtype, values, s_rceil, s_floor, codes, rounding):
    x = _block(dtype, values)
    q, s = check_against_numpy(x, rounding)
    want = s_rceil if rounding == "rceil" else s_floor
    assert int(s[0, 0]) == want, f"{name}: scale byte {int(s[0, 0]):#04x}, expected {want:#04x}"
    for index, (code_rceil, code_floor) in codes.items():
        code = code_rceil if rounding == "rceil" else code_floor
        got = int(q.view(torch.uint8)[0, index])
        assert got == code, f"{name}: element {index} is {got:#04x}, expected {code:#04x}"


def test_negative_nan_gives_positive_nan_bytes():
    bits = np.zeros((1, 64), dtype=np.uint32)
    bits[0, 0] = 0xFFC00000  # a negative quiet NaN in the first block
    bits[0, 32:] = np.float32(3.0).view(np.uint32)
    q, s = quantize_mxfp8_reference(torch.from_numpy(bits.view(np.float32)))
    # 3 / 448 = 1.71 * 2**-8: biased exponent 119, mantissa non-zero, so s = 120.
    assert s.tolist() == [[0xFF, 120]]
    assert q.view(torch.uint8)[0, :32].tolist() == [0x7F] * 32


def test_nan_stays_in_its_block():
    x = np.ones((2, 96), dtype=np.float32)
    x[1, 40] = NAN
    q, s = check_against_numpy(x, "rceil")
    assert s[1].tolist() == [119, 255, 119]
    assert q.view(torch.uint8)[1, 32:64].tolist() == [0x7F] * 32
    assert q.view(torch.uint8)[1, 0] == 0x78 and q.view(torch.uint8)[1, 64] == 0x78


# ---------------------------------------------------------------------------------------------
# Drawn inputs


@st.composite
def raw_bit_patterns(draw):
    """Every bit pattern of the input dtype is possible: NaN payloads, subnormals, infinities."""
    dtype = draw(st.sampled_from(sorted(_TORCH_DTYPES)))
    m, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    bits_dtype = _BITS_DTYPES[dtype]
    top = np.iinfo(bits_dtype).max
    values = draw(st.lists(st.integers(0, top), min_size=m * groups * 32, max_size=m * groups * 32))
    return np.array(values, dtype=bits_dtype).view(_NUMPY_DTYPES[dtype]).reshape(m, groups * 32)


@st.composite
def realistic_blocks(draw):
    """Gaussian blocks at a drawn magnitude per block, so elements span the block's E4M3 range."""
    dtype = draw(st.sampled_from(sorted(_TORCH_DTYPES)))
    m, groups = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    low, high = {"bf16": (-140, 120), "fp16": (-26, 12), "fp32": (-150, 120)}[dtype]
    rng = np.random.default_rng(seed)
    exps = rng.integers(low, high, size=(m, groups, 1))
    x = (
        rng.standard_normal((m, groups, 32))
        * np.exp2(exps)
        * np.exp2(rng.integers(-12, 1, size=(m, groups, 32)))
    )
    with np.errstate(over="ignore"):
        return x.reshape(m, groups * 32).astype(_NUMPY_DTYPES[dtype])


@settings(max_examples=300, deadline=None)
@given(x=raw_bit_patterns(), rounding=st.sampled_from(["rceil", "floor"]))
def test_reference_matches_numpy_on_raw_bits(x, rounding):
    check_against_numpy(x, rounding)


@settings(max_examples=300, deadline=None)
@given(x=realistic_blocks(), rounding=st.sampled_from(["rceil", "floor"]))
def test_reference_matches_numpy_on_realistic_blocks(x, rounding):
    check_against_numpy(x, rounding)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_16_bit_pattern(dtype):
    """All 65536 patterns, 32 to a block, and each one alone in a block beside 448 (scale 1)."""
    patterns = np.arange(2**16, dtype=np.uint16).view(_NUMPY_DTYPES[dtype])
    for rounding in ("rceil", "floor"):
        check_against_numpy(patterns.reshape(-1, 32), rounding)
        beside = np.zeros((2**16, 32), dtype=_NUMPY_DTYPES[dtype])
        beside[:, 0] = patterns
        beside[:, 1] = 448.0
        check_against_numpy(beside.reshape(-1, 32 * 16), rounding)


# ---------------------------------------------------------------------------------------------
# E8M0 codecs and dequantize


def test_e8m0_to_float_hand_values():
    got = e8m0_to_float(torch.tensor([0, 1, 126, 127, 128, 254, 255], dtype=torch.uint8))
    bits = got.view(torch.int32).tolist()
    # 0 is the subnormal 2**-127 (0x00400000), never +0; 0xFF is NaN, never Inf.
    assert bits[:6] == [0x00400000, 0x00800000, 0x3F000000, 0x3F800000, 0x40000000, 0x7F000000]
    assert math.isnan(got[6].item())


def test_e8m0_round_trips_every_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    assert_same_bits(float_to_e8m0(e8m0_to_float(codes)), codes)


FLOAT_TO_E8M0 = [
    ("one", 1.0, 127),
    ("three rounds down", 3.0, 128),
    ("three quarters", 0.75, 126),
    ("2**-127 subnormal", 2.0**-127, 0),
    ("below 2**-127", 2.0**-130, 0),
    ("zero", 0.0, 0),
    ("negative", -4.0, 0),
    ("2**127", 2.0**127, 254),
    ("largest finite", F32_MAX, 254),
    ("+Inf", INF, 255),
    ("-Inf", -INF, 255),
    ("NaN", NAN, 255),
]


@pytest.mark.parametrize(("name", "value", "code"), FLOAT_TO_E8M0, ids=[r[0] for r in FLOAT_TO_E8M0])
def test_float_to_e8m0(name, value, code):
    assert float_to_e8m0(torch.tensor([value], dtype=torch.float32)).tolist() == [code], name


def test_dequantize_hand_values():
    q = torch.tensor(
        [[0x38, 0xC0, 0x01, 0x7F] + [0] * 28 + [0x38] * 32 + [0x7E] + [0] * 31], dtype=torch.uint8
    ).view(torch.float8_e4m3fn)
    scale = torch.tensor([[128, 255, 0]], dtype=torch.uint8)
    got = dequantize_mxfp8(q, scale, scale_layout="e8m0")
    assert got[0, :3].tolist() == [2.0, -4.0, 2.0**-8]  # 1 * 2, -2 * 2, 2**-9 * 2
    assert all(math.isnan(v) for v in got[0, 3:4].tolist() + got[0, 32:64].tolist())
    assert got[0, 64].item() == 448.0 * 2.0**-127


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    scale=st.integers(1, 246),  # 448 * 2**(246 - 127) is the largest such block maximum fp32 holds
    layout=st.sampled_from(["e8m0", "deepgemm", "swizzled_128x4"]),
    rounding=st.sampled_from(["rceil", "floor"]),
)
def test_representable_blocks_round_trip_exactly(seed, scale, layout, rounding):
    """E4M3 codes times 2**(s-127), each block holding +-448 * 2**(s-127), quantize to those codes and s."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 0x7F, size=(3, 64)).astype(np.uint8) | (rng.integers(0, 2, (3, 64)) << 7).astype(
        np.uint8
    )
    codes[:, [0, 32]] = 0x7E
    values = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * 2.0 ** (scale - 127)
    x = torch.from_numpy(values.astype(np.float32))
    q, s = quantize_mxfp8_reference(x, rounding=rounding, scale_layout=layout)
    assert_same_bits(q.view(torch.uint8), torch.from_numpy(codes))
    assert_same_bits(dequantize_mxfp8(q, s, scale_layout=layout), x)


# ---------------------------------------------------------------------------------------------
# Bad input

BAD_INPUTS = [
    ("not a tensor", lambda: [[1.0] * 32], {}, TypeError, "x must be a torch.Tensor; got list$"),
    ("integer dtype", lambda: torch.ones(2, 32, dtype=torch.int32), {}, ValueError, "x must be bfloat16"),
    ("float64", lambda: torch.ones(2, 32, dtype=torch.float64), {}, ValueError, "x must be bfloat16"),
    ("1-D", lambda: torch.ones(64), {}, ValueError, "x must be 2-D"),
    ("3-D", lambda: torch.ones(2, 2, 32), {}, ValueError, "x must be 2-D"),
    (
        "K not a multiple of 32",
        lambda: torch.ones(2, 48),
        {},
        ValueError,
        r"x.shape\[1\] \(K\) must be a multiple",
    ),
    (
        "unknown rounding",
        lambda: torch.ones(2, 32),
        {"rounding": "nearest"},
        ValueError,
        "rounding must be one of",
    ),
    (
        "unknown layout",
        lambda: torch.ones(2, 32),
        {"scale_layout": "cublas"},
        ValueError,
        "^scale_layout must be one of 'e8m0', 'deepgemm', 'swizzled_128x4'; got 'cublas'$",
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "kwargs", "error", "match"), BAD_INPUTS, ids=[r[0] for r in BAD_INPUTS]
)
def test_reference_rejects(name, make, kwargs, error, match):
    with pytest.raises(error, match=match):
        quantize_mxfp8_reference(make(), **kwargs)


BAD_CODEC_INPUTS = [
    (
        "e8m0_to_float of int32",
        lambda: e8m0_to_float(torch.zeros(2, dtype=torch.int32)),
        ValueError,
        "scale must",
    ),
    (
        "e8m0_to_float of a list",
        lambda: e8m0_to_float([1, 2]),
        TypeError,
        "scale must be a torch.Tensor; got list$",
    ),
    (
        "float_to_e8m0 of bf16",
        lambda: float_to_e8m0(torch.ones(2, dtype=torch.bfloat16)),
        ValueError,
        "value must",
    ),
    (
        "dequantize of bf16",
        lambda: dequantize_mxfp8(
            torch.ones(1, 32, dtype=torch.bfloat16), torch.zeros(1, 1, dtype=torch.uint8), scale_layout="e8m0"
        ),
        ValueError,
        "q must be a 2-D float8_e4m3fn",
    ),
    (
        "dequantize of K = 48",
        lambda: dequantize_mxfp8(
            torch.zeros(1, 48, dtype=torch.float8_e4m3fn),
            torch.zeros(1, 1, dtype=torch.uint8),
            scale_layout="e8m0",
        ),
        ValueError,
        r"^q must be a 2-D float8_e4m3fn tensor \[M, K\] with K a multiple of 32; got torch.float8_e4m3fn \(1, 48\)$",
    ),
    (
        "dequantize of 3-D",
        lambda: dequantize_mxfp8(
            torch.zeros(2, 32, 32, dtype=torch.float8_e4m3fn),
            torch.zeros(2, 1, dtype=torch.uint8),
            scale_layout="e8m0",
        ),
        ValueError,
        r"^q must be a 2-D float8_e4m3fn tensor",
    ),
    (
        "dequantize with a short scale",
        lambda: dequantize_mxfp8(
            torch.zeros(1, 64, dtype=torch.float8_e4m3fn),
            torch.zeros(1, 1, dtype=torch.uint8),
            scale_layout="e8m0",
        ),
        ValueError,
        r"scale must have shape \(1, 2\)",
    ),
    (
        "dequantize with an unknown layout",
        lambda: dequantize_mxfp8(
            torch.zeros(1, 32, dtype=torch.float8_e4m3fn),
            torch.zeros(1, 1, dtype=torch.uint8),
            scale_layout="rowwise",
        ),
        ValueError,
        "scale_layout must be one of",
    ),
]


@pytest.mark.parametrize(
    ("name", "call", "error", "match"), BAD_CODEC_INPUTS, ids=[r[0] for r in BAD_CODEC_INPUTS]
)
def test_codecs_reject(name, call, error, match):
    with pytest.raises(error, match=match):
        call()
