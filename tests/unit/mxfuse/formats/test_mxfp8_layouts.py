"""Scale layouts: hand-computed offsets for small M and K, round trips, allocation and out-buffer checks."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.formats import (
    check_mxfp8_pair,
    empty_mxfp8_pair,
    pack_ue8m0_deepgemm,
    scale_from_layout,
    scale_spec,
    scale_to_layout,
    swizzle_128x4,
    unpack_ue8m0_deepgemm,
    unswizzle_128x4,
)

register(on=("cpu",), est_time=10)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")

# id, m, k, layout, dtype, shape, stride, storage elements (padding included)
SPECS = [
    ("e8m0 7x2080", 7, 2080, "e8m0", torch.uint8, (7, 65), (65, 1), 455),
    ("deepgemm 5x288", 5, 288, "deepgemm", torch.int32, (5, 3), (1, 8), 24),
    ("deepgemm 8x128", 8, 128, "deepgemm", torch.int32, (8, 1), (1, 8), 8),
    ("deepgemm 4099x7168", 4099, 7168, "deepgemm", torch.int32, (4099, 56), (1, 4100), 4100 * 56),
    ("swizzled 1x32", 1, 32, "swizzled_128x4", torch.uint8, (512,), (1,), 512),
    ("swizzled 130x160", 130, 160, "swizzled_128x4", torch.uint8, (2048,), (1,), 2048),
    ("swizzled 0x64", 0, 64, "swizzled_128x4", torch.uint8, (0,), (1,), 0),
]


@pytest.mark.parametrize(
    ("name", "m", "k", "layout", "dtype", "shape", "stride", "numel"), SPECS, ids=[r[0] for r in SPECS]
)
def test_scale_spec_and_allocation(name, m, k, layout, dtype, shape, stride, numel):
    spec = scale_spec(m, k, scale_layout=layout)
    assert (spec.dtype, spec.shape, spec.stride, spec.storage_numel) == (dtype, shape, stride, numel), name
    q, scale = empty_mxfp8_pair(m, k, scale_layout=layout, device="cpu")
    assert (q.dtype, tuple(q.shape), scale.dtype, tuple(scale.shape)) == (
        torch.float8_e4m3fn,
        (m, k),
        dtype,
        shape,
    )
    if numel:
        assert tuple(scale.stride()) == stride
    assert scale.untyped_storage().nbytes() == numel * scale.element_size()


def _distinct_scales(m: int, groups: int) -> torch.Tensor:
    return (16 * torch.arange(m)[:, None] + torch.arange(groups)[None, :] + 1).to(torch.uint8)


def test_deepgemm_hand_computed_words():
    # M = 5, K = 288: 9 groups -> 3 words per row, rows padded to 8; scale[m, g] = 16m + g + 1.
    packed = pack_ue8m0_deepgemm(_distinct_scales(5, 9))
    assert (tuple(packed.shape), tuple(packed.stride())) == ((5, 3), (1, 8))
    words = packed.as_strided((24,), (1,)).tolist()  # storage: word p of row m at p * 8 + m
    assert words[0 * 8 + 0] == 0x04030201  # groups 0..3 of row 0, little-endian
    assert words[1 * 8 + 4] == 0x48474645  # row 4, groups 4..7: 69, 70, 71, 72
    assert words[2 * 8 + 1] == 0x00000019  # row 1, group 8 (25) alone in the last word: slots zero
    assert words[5:8] == [0, 0, 0] and words[13:16] == [0, 0, 0] and words[21:24] == [0, 0, 0]  # padding rows


def test_deepgemm_high_bytes_keep_their_bits():
    scale = torch.tensor([[0x80, 0x81, 0xFE, 0xFF]], dtype=torch.uint8)
    word = pack_ue8m0_deepgemm(scale)[0, 0].item()
    assert word == int.from_bytes(bytes([0x80, 0x81, 0xFE, 0xFF]), "little", signed=True)


# id, m, k, (row, group) of the one non-zero scale, its byte offset in the 128x4 layout
SWIZZLE_OFFSETS = [
    ("origin", 130, 160, 0, 0, 0),
    ("next group", 130, 160, 0, 1, 1),
    ("next group word", 130, 160, 0, 4, 512),
    ("next row", 130, 160, 1, 0, 16),
    ("row 31 group 3", 130, 160, 31, 3, 31 * 16 + 3),
    ("row 32", 130, 160, 32, 0, 4),
    ("row 33 group 2", 130, 160, 33, 2, 16 + 4 + 2),
    ("row 127 group 4", 130, 160, 127, 4, 512 + 31 * 16 + 3 * 4),
    ("row 128", 130, 160, 128, 0, 1024),
    ("row 129 group 4", 130, 160, 129, 4, 1024 + 512 + 16),
    ("single row", 1, 32, 0, 0, 0),
]


@pytest.mark.parametrize(
    ("name", "m", "k", "row", "group", "offset"), SWIZZLE_OFFSETS, ids=[r[0] for r in SWIZZLE_OFFSETS]
)
def test_swizzle_hand_computed_offsets(name, m, k, row, group, offset):
    scale = torch.zeros((m, k // 32), dtype=torch.uint8)
    scale[row, group] = 0xAB
    swizzled = swizzle_128x4(scale)
    assert swizzled.nonzero().flatten().tolist() == [offset], name
    assert swizzled[offset].item() == 0xAB
    assert_same_bits(unswizzle_128x4(swizzled, m=m, k=k), scale)


@settings(max_examples=100, deadline=None)
@given(m=st.integers(0, 300), groups=st.integers(0, 12), seed=st.integers(0, 2**31 - 1))
def test_layouts_round_trip_and_pad_with_zero(m, groups, seed):
    k = 32 * groups
    scale = torch.randint(
        1, 256, (m, groups), generator=torch.Generator().manual_seed(seed), dtype=torch.int32
    )
    scale = scale.to(torch.uint8)  # every real scale non-zero, so any zero byte beyond them is padding
    for layout in LAYOUTS:
        laid = scale_to_layout(scale, scale_layout=layout)
        spec = scale_spec(m, k, scale_layout=layout)
        assert laid.dtype == spec.dtype and tuple(laid.shape) == spec.shape
        assert_same_bits(scale_from_layout(laid, scale_layout=layout, m=m, k=k), scale, name=layout)
        storage = laid.as_strided((spec.storage_numel,), (1,)).contiguous().view(torch.uint8)
        assert int((storage != 0).sum()) == m * groups, f"{layout}: padding must be zero"
    assert_same_bits(unpack_ue8m0_deepgemm(pack_ue8m0_deepgemm(scale), k=k), scale)
    assert_same_bits(unswizzle_128x4(swizzle_128x4(scale), m=m, k=k), scale)


# ---------------------------------------------------------------------------------------------
# Out-buffer checks: every mismatch names the argument.


def _pair(layout: str, m: int = 5, k: int = 288) -> tuple[torch.Tensor, torch.Tensor]:
    return empty_mxfp8_pair(m, k, scale_layout=layout, device="cpu")


BAD_PAIRS = [
    ("not a tuple", "e8m0", lambda: _pair("e8m0")[0], r"out must be a tuple \(q, scale\)"),
    ("three items", "e8m0", lambda: (*_pair("e8m0"), None), r"out must be a tuple \(q, scale\)"),
    ("q not a tensor", "e8m0", lambda: (None, _pair("e8m0")[1]), r"out\[0\] must be a torch.Tensor"),
    (
        "q uint8",
        "e8m0",
        lambda: (_pair("e8m0")[0].view(torch.uint8), _pair("e8m0")[1]),
        r"out\[0\] must have dtype torch.float8_e4m3fn",
    ),
    (
        "q wrong shape",
        "e8m0",
        lambda: (_pair("e8m0", k=256)[0], _pair("e8m0")[1]),
        r"out\[0\] must have shape",
    ),
    (
        "q not contiguous",
        "e8m0",
        lambda: (torch.empty(288, 5, dtype=torch.float8_e4m3fn).t(), _pair("e8m0")[1]),
        r"^out\[0\] must be contiguous \(strides \(288, 1\)\); got \(1, 5\)$",
    ),
    ("not a pair", "e8m0", lambda: "q", r"^out must be a tuple \(q, scale\); got str$"),
    (
        "q not a tensor",
        "e8m0",
        lambda: ([[0]], _pair("e8m0")[1]),
        r"^out\[0\] must be a torch.Tensor; got list$",
    ),
    (
        "q on another device",
        "e8m0",
        lambda: (_pair("e8m0")[0].to("meta"), _pair("e8m0")[1]),
        r"out\[0\] must be on cpu",
    ),
    (
        "scale int32 for e8m0",
        "e8m0",
        lambda: (_pair("e8m0")[0], _pair("e8m0")[1].int()),
        r"out\[1\] must have dtype",
    ),
    (
        "e8m0 scale transposed",
        "e8m0",
        lambda: (_pair("e8m0")[0], torch.empty(9, 5, dtype=torch.uint8).t()),
        r"out\[1\] must have strides \(9, 1\)",
    ),
    (
        "deepgemm row-major",
        "deepgemm",
        lambda: (_pair("deepgemm")[0], torch.zeros(5, 3, dtype=torch.int32)),
        r"out\[1\] must have strides \(1, 8\)",
    ),
    (
        "deepgemm without padding storage",
        "deepgemm",
        lambda: (_pair("deepgemm")[0], torch.empty_strided((5, 3), (1, 8), dtype=torch.int32)),
        r"out\[1\] must own 24 elements",
    ),
    (
        "deepgemm wrong shape",
        "deepgemm",
        lambda: (_pair("deepgemm")[0], _pair("deepgemm", m=6)[1]),
        r"out\[1\] must have shape \(5, 3\)",
    ),
    (
        "swizzled too short",
        "swizzled_128x4",
        lambda: (_pair("swizzled_128x4")[0], torch.zeros(512, dtype=torch.uint8)),
        r"out\[1\] must have shape \(1536,\)",
    ),
    (
        "swizzled unaligned",
        "swizzled_128x4",
        lambda: (_pair("swizzled_128x4")[0], torch.zeros(1537, dtype=torch.uint8)[1:]),
        r"out\[1\] must start on a 4-byte boundary",
    ),
    (
        "scale on another device",
        "deepgemm",
        lambda: (_pair("deepgemm")[0], _pair("deepgemm")[1].to("meta")),
        r"out\[1\] must be on cpu",
    ),
]


@pytest.mark.parametrize(("name", "layout", "make", "match"), BAD_PAIRS, ids=[r[0] for r in BAD_PAIRS])
def test_check_mxfp8_pair_rejects(name, layout, make, match):
    with pytest.raises(ValueError, match=match):
        check_mxfp8_pair(make(), m=5, k=288, scale_layout=layout, device=torch.device("cpu"))


def test_a_scale_row_of_two_with_a_gap_is_refused():
    # Every stride of a dimension longer than 1 counts, a dimension of 2 rows included.
    q = torch.zeros(2, 288, dtype=torch.float8_e4m3fn)
    scale = torch.zeros(2, 18, dtype=torch.uint8)[:, :9]
    with pytest.raises(
        ValueError,
        match=r"^s\[1\] must have strides \(9, 1\) for e8m0 scales of an \[M, K\] tensor; got \(18, 1\)$",
    ):
        check_mxfp8_pair(
            (q, scale), m=2, k=288, scale_layout="e8m0", device=torch.device("cpu"), argument="s"
        )


def test_a_padding_short_storage_is_counted_in_whole_elements():
    # 14 bytes hold 3 int32 words (and 2 bytes): the deepgemm scales of 3 rows need 4, padding included.
    scale = torch.zeros(14, dtype=torch.uint8)[:12].view(torch.int32).as_strided((3, 1), (1, 4))
    q = torch.zeros(3, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"must own 4 elements .*; its storage holds 3$"):
        check_mxfp8_pair((q, scale), m=3, k=128, scale_layout="deepgemm", device=torch.device("cpu"))


def test_layouts_are_made_on_the_device_of_their_input():
    # The meta device stands in for a GPU: nothing may be made on the CPU instead.
    meta = torch.device("meta")
    scale = torch.empty(6, 8, dtype=torch.uint8, device=meta)
    packed = pack_ue8m0_deepgemm(scale)
    assert (packed.device, tuple(packed.shape), packed.stride()) == (meta, (6, 2), (1, 8))
    assert unpack_ue8m0_deepgemm(packed, k=256).device == meta
    swizzled = swizzle_128x4(scale)
    assert (swizzled.device, tuple(swizzled.shape)) == (meta, (1024,))
    assert unswizzle_128x4(swizzled, m=6, k=256).device == meta
    for layout in LAYOUTS:
        q, s = empty_mxfp8_pair(6, 256, scale_layout=layout, device=meta)
        assert (q.device, s.device) == (meta, meta)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_check_mxfp8_pair_accepts_what_empty_allocates(layout):
    q, scale = _pair(layout)
    got = check_mxfp8_pair((q, scale), m=5, k=288, scale_layout=layout, device=torch.device("cpu"))
    assert got[0] is q and got[1] is scale


BAD_LAYOUT_CALLS = [
    ("spec k not a multiple of 32", lambda: scale_spec(4, 48, scale_layout="e8m0"), ValueError, "k must be"),
    ("spec negative m", lambda: scale_spec(-1, 32, scale_layout="e8m0"), ValueError, "m must be"),
    (
        "spec unknown layout",
        lambda: scale_spec(4, 32, scale_layout="mn-major"),
        ValueError,
        "scale_layout must be",
    ),
    (
        "pack int32",
        lambda: pack_ue8m0_deepgemm(torch.zeros(4, 4, dtype=torch.int32)),
        ValueError,
        "scale must be",
    ),
    ("pack a list", lambda: pack_ue8m0_deepgemm([[1]]), TypeError, "scale must be a torch.Tensor; got list$"),
    (
        "spec m a float",
        lambda: scale_spec(2.0, 32, scale_layout="e8m0"),
        ValueError,
        "^m must be an int >= 0; got 2.0$",
    ),
    (
        "spec m a bool",
        lambda: scale_spec(True, 32, scale_layout="e8m0"),
        ValueError,
        "^m must be an int >= 0",
    ),
    (
        "spec k a float",
        lambda: scale_spec(4, 64.0, scale_layout="e8m0"),
        ValueError,
        "^k must be an int >= 0 and a multiple of 32; got 64.0$",
    ),
    (
        "to a layout from int32",
        lambda: scale_to_layout(torch.zeros(2, 2, dtype=torch.int32), scale_layout="deepgemm"),
        ValueError,
        r"^scale must be a 2-D uint8 tensor \[M, K/32\]; got torch.int32 \(2, 2\)$",
    ),
    (
        "unpack with the wrong k",
        lambda: unpack_ue8m0_deepgemm(pack_ue8m0_deepgemm(torch.ones(4, 4, dtype=torch.uint8)), k=256),
        ValueError,
        r"packed must have shape \(4, 2\)",
    ),
    (
        "unpack 1-D",
        lambda: unpack_ue8m0_deepgemm(torch.zeros(4, dtype=torch.int32), k=32),
        ValueError,
        "packed must be a 2-D int32",
    ),
    (
        "swizzle 1-D",
        lambda: swizzle_128x4(torch.zeros(4, dtype=torch.uint8)),
        ValueError,
        "scale must be a 2-D uint8",
    ),
    (
        "unswizzle the wrong size",
        lambda: unswizzle_128x4(torch.zeros(512, dtype=torch.uint8), m=129, k=32),
        ValueError,
        r"swizzled must have shape \(1024,\)",
    ),
]


@pytest.mark.parametrize(
    ("name", "call", "error", "match"), BAD_LAYOUT_CALLS, ids=[r[0] for r in BAD_LAYOUT_CALLS]
)
def test_layout_functions_reject(name, call, error, match):
    with pytest.raises(error, match=match):
        call()
