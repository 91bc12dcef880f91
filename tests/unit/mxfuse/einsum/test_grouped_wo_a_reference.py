"""The grouped wo_a reference, weight preparation and the CPU entry point, against an independent
float64 numpy formulation (``wo_a_cases.numpy_wo_a``) and the MXFP8 format rules."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from wo_a_cases import exact_case, gaussian_case, numpy_wo_a, to_bf16_bits

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_diff, assert_same_bits
from mxfuse import witness
from mxfuse.einsum import WoAWeight, grouped_wo_a, grouped_wo_a_reference, prepare_wo_a_weight
from mxfuse.formats import (
    MxTensor,
    empty_mxfp8_pair,
    quantize_mxfp8_reference,
    scale_spec,
    scale_storage_view,
    scale_to_layout,
)

register(on=("cpu",), est_time=8)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
SHAPES = [(1, 1, 32, 128), (5, 2, 64, 256), (7, 3, 128, 128), (130, 2, 64, 128)]  # (T, G, r, R)


def _numpy_scale_bytes(scale: torch.Tensor, layout: str, m: int, k: int) -> np.ndarray:
    """Row-major E8M0 bytes [m, k/32] read out of ``layout`` by its definition, independently of mxfuse."""
    groups = k // 32
    rows, cols = np.meshgrid(np.arange(m), np.arange(groups), indexing="ij")
    if layout == "e8m0":
        return scale.numpy().copy()
    if layout == "deepgemm":
        m4 = -(-m // 4) * 4
        flat = scale.as_strided((m4 * -(-groups // 4),), (1,)).numpy().astype("<i4").view(np.uint8)
        return flat[((cols // 4) * m4 + rows) * 4 + cols % 4]
    n_k4 = -(-groups // 4)
    offs = (
        (rows // 128) * (n_k4 * 512)
        + (cols // 4) * 512
        + (rows % 32) * 16
        + ((rows % 128) // 32) * 4
        + cols % 4
    )
    return scale.numpy()[offs]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("t", "groups", "k", "n"), SHAPES)
def test_exact_operands_give_the_float64_result_bit_for_bit(t, groups, k, n, layout):
    case = exact_case(t, groups, k, n, seed=t + 10 * groups + k)
    pair = case.pair(layout)
    assert_same_bits(_numpy_scale_bytes(pair[1], layout, t, groups * k), case.a_scale, name="layout decode")
    z = grouped_wo_a_reference(pair, case.weight)
    assert z.dtype == torch.bfloat16 and tuple(z.shape) == (t, groups, n)
    assert_same_bits(z, to_bf16_bits(numpy_wo_a(case)), name="z")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_subnormal_activations_give_the_float64_result_bit_for_bit(layout):
    case = exact_case(7, 2, 128, 128, seed=11, subnormals=True)
    assert ((case.a_codes & 0x7F) < 8).mean() > 0.25  # a quarter of the codes are E4M3 subnormals
    z = grouped_wo_a_reference(case.pair(layout), case.weight)
    assert_same_bits(z, to_bf16_bits(numpy_wo_a(case)), name="z")


def test_exact_operands_are_not_trivial():
    """Guard the generator: the products span signs and magnitudes, and z needs more than bf16's bits."""
    case = exact_case(5, 2, 128, 128, seed=1)
    z = numpy_wo_a(case)
    assert (z > 0).any() and (z < 0).any() and np.abs(z).max() > 64
    assert (z.astype(np.float32).astype(np.float64) == z).all()  # exact in fp32, as the docstring says
    assert (to_bf16_bits(z).float().numpy() != z).mean() > 0.5  # bf16 rounding is exercised


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("t", "groups", "k", "n"), SHAPES)
def test_gaussian_operands_match_float64(t, groups, k, n, layout):
    """fp32 against float64 accumulation: calc_diff <= 1e-9 on unrounded values would be too tight for
    bf16 z, so both are bf16: equal except where the two sums straddle a bf16 rounding boundary."""
    case = gaussian_case(t, groups, k, n, seed=3 * t + groups)
    z = grouped_wo_a_reference(case.pair(layout), case.weight)
    want = numpy_wo_a(case)
    assert_diff(z, to_bf16_bits(want), max_diff=1e-6, name="z")
    atol = 1e-3 * float(np.sqrt(np.mean(want**2)))
    assert_close(z, to_bf16_bits(want), rtol=1.6e-2, atol=atol, name="z")


def test_nan_block_poisons_one_token_group_only():
    case = exact_case(6, 3, 64, 128, seed=5)
    clean = grouped_wo_a_reference(case.pair("e8m0"), case.weight)
    case.a_scale[4, 1 * 2 + 1] = 0xFF  # token 4, group 1, second K block
    case.a_codes[2, 2 * 64 + 7] = 0x7F  # token 2, group 2: a NaN element
    z = grouped_wo_a_reference(case.pair("e8m0"), case.weight)
    nan = torch.zeros(6, 3, 128, dtype=torch.bool)
    nan[4, 1] = nan[2, 2] = True
    assert_same_bits(z.isnan(), nan, name="NaN positions")
    assert_same_bits(z[~nan], clean[~nan], name="untouched outputs")
    assert np.isnan(numpy_wo_a(case)[nan.numpy()]).all()


# ---------------------------------------------------------------------------------------------
# Weight preparation


def test_float_weight_is_quantized_per_row_block():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(2, 128, 96, generator=g).bfloat16()
    w = prepare_wo_a_weight(weight, rounding="floor")
    q, s = quantize_mxfp8_reference(weight.reshape(256, 96), rounding="floor", scale_layout="e8m0")
    assert (w.groups, w.n, w.k) == (2, 128, 96)
    assert_same_bits(w.qweight.reshape(256, 96).view(torch.uint8), q.view(torch.uint8), name="qweight")
    assert_same_bits(w.scale_e8m0.reshape(256, 3), s, name="scale_e8m0")
    assert tuple(w.scale.shape) == (2, 3, 128) and w.scale.is_contiguous()
    assert_same_bits(w.scale.transpose(1, 2).reshape(256, 3), s, name="scale [G, r/32, R]")
    assert w.tickets.dtype == torch.int32 and int(w.tickets.abs().sum()) == 0


def test_flat_checkpoint_weight_with_32x32_blocks_is_expanded_per_row():
    rng = np.random.default_rng(2)
    codes = torch.from_numpy(rng.integers(0, 0x7E, size=(2 * 256, 64), dtype=np.uint8))
    blocks = torch.from_numpy(rng.integers(100, 150, size=(2 * 256 // 32, 2), dtype=np.uint8))
    e8m0fnu = getattr(torch, "float8_e8m0fnu", None)
    scale = blocks.view(e8m0fnu) if e8m0fnu is not None else blocks
    w = prepare_wo_a_weight(codes.view(torch.float8_e4m3fn), scale, groups=2)
    assert (w.groups, w.n, w.k) == (2, 256, 64)
    assert_same_bits(w.qweight.reshape(512, 64).view(torch.uint8), codes, name="qweight")
    assert_same_bits(w.scale_e8m0.reshape(512, 2), blocks.repeat_interleave(32, dim=0), name="scale_e8m0")
    # The same checkpoint given as [G, R/32, r/32] blocks and a [G, R, r] weight.
    w3 = prepare_wo_a_weight(codes.view(torch.float8_e4m3fn).reshape(2, 256, 64), blocks.reshape(2, 8, 2))
    assert_same_bits(w3.scale, w.scale, name="scale from 3-D blocks")


def _e4m3(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.uint8).view(torch.float8_e4m3fn)


BAD_WEIGHTS = [
    ("R not a multiple of 128", lambda: prepare_wo_a_weight(torch.zeros(2, 96, 64)), r"R \(rows per group\)"),
    ("flat R = 64", lambda: prepare_wo_a_weight(torch.zeros(256, 64), groups=4), r"R = 64"),
    ("flat without groups", lambda: prepare_wo_a_weight(torch.zeros(256, 64)), "groups must be an int"),
    (
        "flat groups not dividing",
        lambda: prepare_wo_a_weight(torch.zeros(256, 64), groups=3),
        "multiple of groups",
    ),
    (
        "3-D groups mismatch",
        lambda: prepare_wo_a_weight(torch.zeros(2, 128, 64), groups=4),
        "groups must be None or 2",
    ),
    ("r not a multiple of 32", lambda: prepare_wo_a_weight(torch.zeros(1, 128, 48)), r"multiple of 32"),
    ("4-D weight", lambda: prepare_wo_a_weight(torch.zeros(1, 1, 128, 64)), r"\[G, R, r\] or \[G\*R, r\]"),
    ("E4M3 without scale", lambda: prepare_wo_a_weight(_e4m3(1, 128, 64)), "scale is required"),
    (
        "scale of another shape",
        lambda: prepare_wo_a_weight(_e4m3(1, 128, 64), torch.zeros(1, 128, 3, dtype=torch.uint8)),
        "scale must hold one E8M0 scale",
    ),
    (
        "scale with another group count",
        lambda: prepare_wo_a_weight(_e4m3(2, 128, 64), torch.zeros(1, 256, 2, dtype=torch.uint8)),
        "group count 2",
    ),
    ("int8 weight", lambda: prepare_wo_a_weight(torch.zeros(1, 128, 64, dtype=torch.int8)), "weight must be"),
    ("weight a list", lambda: prepare_wo_a_weight([[0.0]]), "weight must be a torch.Tensor"),
]


@pytest.mark.parametrize(("name", "call", "match"), BAD_WEIGHTS, ids=[r[0] for r in BAD_WEIGHTS])
def test_prepare_rejects(name, call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_weight_dataclass_checks_what_it_is_given():
    w = prepare_wo_a_weight(torch.zeros(1, 128, 64))
    with pytest.raises(ValueError, match=r"R \(rows per group\)"):
        WoAWeight(_e4m3(1, 64, 64), torch.zeros(1, 2, 64, dtype=torch.uint8), w.tickets)
    with pytest.raises(ValueError, match="scale must be a contiguous uint8"):
        WoAWeight(w.qweight, w.scale_e8m0, w.tickets)
    with pytest.raises(ValueError, match="tickets must be an int32"):
        WoAWeight(w.qweight, w.scale, torch.zeros(8, dtype=torch.int32))


# ---------------------------------------------------------------------------------------------
# The entry point on CPU tensors: the reference, with the kernel's contract


def _poisoned_pair(t: int, k: int, layout: str, poison: int = 0xA5) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = empty_mxfp8_pair(t, k, scale_layout=layout, device="cpu")
    q.view(torch.uint8).fill_(poison)
    scale_storage_view(s, scale_spec(t, k, scale_layout=layout)).view(torch.uint8).fill_(poison)
    return q, s


def _storage(pair: tuple[torch.Tensor, torch.Tensor], t: int, k: int, layout: str) -> torch.Tensor:
    return scale_storage_view(pair[1], scale_spec(t, k, scale_layout=layout)).view(torch.uint8)


@pytest.mark.parametrize("out_layout", LAYOUTS)
@pytest.mark.parametrize("rounding", ["rceil", "floor"])
def test_cpu_entry_writes_the_quantized_reference(out_layout, rounding):
    t, groups, k, n = 5, 2, 64, 256
    case = gaussian_case(t, groups, k, n, seed=4)
    a = case.pair("deepgemm")
    z = torch.full((t, groups, n), 7.0, dtype=torch.bfloat16)
    with witness.capture() as records:
        got_z = grouped_wo_a(a, case.weight, out=z)
        pair = _poisoned_pair(t, groups * n, out_layout)
        got = grouped_wo_a(a, case.weight, out_pair=pair, rounding=rounding)
    assert got_z is z and got.data is pair[0] and got.scale is pair[1]
    assert (got.scale_layout.value, got.rounding.value) == (out_layout, rounding)
    assert_same_bits(z, grouped_wo_a_reference(a, case.weight), name="z")
    want_q, want_s = quantize_mxfp8_reference(
        z.view(t, groups * n), rounding=rounding, scale_layout=out_layout
    )
    assert_same_bits(pair[0].view(torch.uint8), want_q.view(torch.uint8), name="q")
    assert_same_bits(
        _storage(pair, t, groups * n, out_layout), _storage((want_q, want_s), t, groups * n, out_layout)
    )
    assert [r["path"] for r in records] == ["einsum.wo_a.reference"] * 2
    assert records[1]["out_scale_layout"] == out_layout and records[0]["out_scale_layout"] is None


def test_cpu_entry_quantizes_a_bf16_input_first():
    t, groups, k, n = 3, 2, 64, 128
    case = gaussian_case(t, groups, k, n, seed=6)
    x = torch.randn(t, groups * k, generator=torch.Generator().manual_seed(1)).bfloat16()
    got = grouped_wo_a(x, case.weight, rounding="floor")
    want = grouped_wo_a_reference(quantize_mxfp8_reference(x, rounding="floor"), case.weight)
    assert_same_bits(got, want, name="z")
    pair = grouped_wo_a(x, case.weight, out_scale_layout="swizzled_128x4")
    want_pair = quantize_mxfp8_reference(
        grouped_wo_a_reference(quantize_mxfp8_reference(x), case.weight).view(t, groups * n),
        scale_layout="swizzled_128x4",
    )
    assert_same_bits(pair.data.view(torch.uint8), want_pair[0].view(torch.uint8), name="q")
    assert_same_bits(pair.scale, want_pair[1], name="scale")


@pytest.mark.parametrize("out_layout", [None, *LAYOUTS])
def test_cpu_entry_with_no_tokens(out_layout):
    case = gaussian_case(0, 2, 64, 128, seed=0)
    got = grouped_wo_a(case.pair("e8m0"), case.weight, out_scale_layout=out_layout)
    if out_layout is None:
        assert got.dtype == torch.bfloat16 and tuple(got.shape) == (0, 2, 128)
    else:
        spec = scale_spec(0, 256, scale_layout=out_layout)
        assert got.shape == (0, 256) and tuple(got.scale.shape) == spec.shape


_CASE = gaussian_case(4, 2, 64, 128, seed=9)
_A = _CASE.pair("e8m0")
_W = _CASE.weight


def _bad_calls() -> list[tuple[str, dict, type, str]]:
    w3 = prepare_wo_a_weight(torch.zeros(3, 128, 64))
    q8 = _A[0]
    return [
        ("group count mismatch", {"w": w3}, ValueError, r"a must have G \* r = 3 \* 64 = 192 columns"),
        ("w not a WoAWeight", {"w": _W.qweight}, TypeError, "w must be a WoAWeight"),
        (
            "a fp16 pair element",
            {"a": (q8.view(torch.uint8).half(), _A[1])},
            ValueError,
            r"a\[0\] must be a 2-D",
        ),
        (
            "a int8 tensor",
            {"a": torch.zeros(4, 128, dtype=torch.int8)},
            ValueError,
            "a must be an MxTensor, an MXFP8 pair or",
        ),
        ("a one tensor of three", {"a": (q8, _A[1], _A[1])}, TypeError, "a must be an MxTensor or a pair"),
        ("a scale int64", {"a": (q8, _A[1].long())}, ValueError, r"a\[1\] must be int32"),
        (
            "a scale for another layout",
            {"a": _A, "scale_layout": "deepgemm"},
            ValueError,
            r"a\[1\] must have dtype",
        ),
        (
            "a scale unknown layout",
            {"a": _A, "scale_layout": "rows"},
            ValueError,
            "scale_layout must be one of",
        ),
        (
            "scale_layout with bf16 a",
            {"a": torch.zeros(4, 128), "scale_layout": "e8m0"},
            ValueError,
            "must be None",
        ),
        ("a rows not contiguous", {"a": torch.zeros(128, 4).t()}, ValueError, "a must have contiguous"),
        (
            "a on another device",
            {"a": (q8.to("meta"), _A[1])},
            ValueError,
            "a must be on the weight's device",
        ),
        ("unknown rounding", {"rounding": "up"}, ValueError, "rounding must be one of"),
        ("out and out_pair", {"out": "z", "out_pair": "pair"}, ValueError, "not both"),
        ("out fp32", {"out": torch.zeros(4, 2, 128)}, ValueError, "out must be a bfloat16 tensor"),
        ("out flat", {"out": torch.zeros(4, 256, dtype=torch.bfloat16)}, ValueError, r"shape \(4, 2, 128\)"),
        ("out with out_scale_layout", {"out": "z", "out_scale_layout": "e8m0"}, ValueError, "must be None"),
        (
            "out_pair 3 tensors",
            {"out_pair": ("q", "s", "x")},
            TypeError,
            r"out_pair must be an MxTensor or a pair \(fp8 \[M, K\], scale\)",
        ),
        (
            "out_pair wrong layout",
            {"out_pair": "pair", "out_scale_layout": "e8m0"},
            ValueError,
            r"out_pair\[1\]",
        ),
        (
            "out_pair for [T, G, R]",
            {"out_pair": "pair3"},
            ValueError,
            r"out_pair\[0\] must have shape \(4, 256\)",
        ),
        (
            "out_scale_layout unknown",
            {"out_scale_layout": "x"},
            ValueError,
            "out_scale_layout must be one of",
        ),
    ]


BAD_CALLS = _bad_calls()


@pytest.mark.parametrize(("name", "kwargs", "error", "match"), BAD_CALLS, ids=[r[0] for r in BAD_CALLS])
def test_bad_input_is_refused_before_anything_is_written(name, kwargs, error, match):
    z = torch.full((4, 2, 128), 3.0, dtype=torch.bfloat16)
    pair = _poisoned_pair(4, 256, "deepgemm")
    pair3 = _poisoned_pair(4, 256, "deepgemm")
    pair3 = (pair3[0].view(4, 2, 128), pair3[1])
    named = {"z": z, "pair": pair, "pair3": pair3}
    args = {"a": _A, "w": _W}
    for key, value in kwargs.items():
        args[key] = (
            named.get(value, value) if isinstance(value, str) and key in ("out", "out_pair") else value
        )
    before = (z.clone(), pair[0].view(torch.uint8).clone(), _storage(pair, 4, 256, "deepgemm").clone())
    with pytest.raises(error, match=match):
        grouped_wo_a(args.pop("a"), args.pop("w"), **args)
    assert_same_bits(z, before[0], name="out untouched")
    assert_same_bits(pair[0].view(torch.uint8), before[1], name="out_pair[0] untouched")
    assert_same_bits(_storage(pair, 4, 256, "deepgemm"), before[2], name="out_pair[1] untouched")


def test_scale_bytes_reach_every_layout():
    """The layouts above are read by index formulas here; check them on a pattern where every byte differs."""
    s = torch.arange(130 * 8, dtype=torch.int64).remainder(251).to(torch.uint8).reshape(130, 8)
    for layout in LAYOUTS:
        assert_same_bits(
            _numpy_scale_bytes(scale_to_layout(s, scale_layout=layout), layout, 130, 256), s.numpy()
        )


# ---------------------------------------------------------------------------------------------
# The CPU path's witness record, field for field, and messages that start with what they name


@pytest.mark.parametrize(
    ("given", "out_layout", "what"),
    [
        ("bf16", None, "bf16 z"),
        ("bf16", "deepgemm", "and quantize_mxfp8 the pair"),
        ("pair", "swizzled_128x4", "and quantize_mxfp8 the pair"),
    ],
)
def test_the_cpu_path_records_what_ran(given, out_layout, what):
    w = prepare_wo_a_weight(torch.randn(2, 128, 64, generator=torch.Generator().manual_seed(1)))
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(2)).bfloat16()
    a = x if given == "bf16" else quantize_mxfp8_reference(x, scale_layout="deepgemm")
    with witness.capture() as records:
        grouped_wo_a(a, w, out_scale_layout=out_layout)
    assert records == [
        {
            "path": "einsum.wo_a.reference",
            "reason": f"CPU tensors: the torch reference ran (dequantize + fp32 einsum, {what})",
            "backend": "torch",
            "input": "pair" if given == "pair" else "quantized here",
            "rows": 3,
            "groups": 2,
            "n": 128,
            "k": 64,
            "scale_layout": "deepgemm",  # a bf16 a is quantized with deepgemm scales
            "out_scale_layout": out_layout,
        }
    ]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda w, x: grouped_wo_a(x, "w"),
            TypeError,
            "w must be a WoAWeight (see prepare_wo_a_weight); got str",
        ),
        (
            lambda w, x: grouped_wo_a(x, w, scale_layout="e8m0"),
            ValueError,
            "scale_layout describes an MXFP8 pair a; a is a plain tensor, so it must be None",
        ),
        (
            lambda w, x: grouped_wo_a(x.int(), w),
            ValueError,
            "a must be an MxTensor, an MXFP8 pair or a 2-D bf16/fp16/fp32 tensor [T, G*r]; got torch.int32 (3, 128)",
        ),
        (
            lambda w, x: grouped_wo_a_reference(x, "w"),
            TypeError,
            "w must be a WoAWeight (see prepare_wo_a_weight); got str",
        ),
    ],
)
def test_messages_in_full(call, error, message):
    w = prepare_wo_a_weight(torch.zeros(2, 128, 64))
    x = torch.zeros(3, 128, dtype=torch.bfloat16)
    with pytest.raises(error, match=f"^{re.escape(message)}$"):
        call(w, x)


def _fp8(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.float8_e4m3fn)


# Each check of WoAWeight and prepare_wo_a_weight fed the one bad field it exists for, the others good.
WEIGHT_FIELDS = [
    ("qweight 2-D", lambda t: WoAWeight(_fp8(128, 64), torch.zeros(1, 2, 128, dtype=torch.uint8), t),
     "qweight must be a contiguous float8_e4m3fn tensor [G, R, r]"),
    ("qweight bf16", lambda t: WoAWeight(torch.zeros(1, 128, 64, dtype=torch.bfloat16), torch.zeros(1, 2, 128, dtype=torch.uint8), t),
     "qweight must be a contiguous float8_e4m3fn tensor [G, R, r]"),
    ("R = 0", lambda t: WoAWeight(_fp8(1, 0, 64), torch.zeros(1, 2, 0, dtype=torch.uint8), t),
     "qweight: R (rows per group) must be a positive multiple of 128"),
    ("r = 48", lambda t: WoAWeight(_fp8(1, 128, 48), torch.zeros(1, 1, 128, dtype=torch.uint8), t),
     "qweight: r (columns per group) must be a positive multiple of 32 and G >= 1; got G = 1, r = 48"),
    ("G = 0", lambda t: WoAWeight(_fp8(0, 128, 64), torch.zeros(0, 2, 128, dtype=torch.uint8), t),
     "qweight: r (columns per group) must be a positive multiple of 32 and G >= 1; got G = 0, r = 64"),
    ("scale int32", lambda t: WoAWeight(_fp8(1, 128, 64), torch.zeros(1, 2, 128, dtype=torch.int32), t),
     "scale must be a contiguous uint8 tensor (1, 2, 128) ([G, r/32, R]); got torch.int32 (1, 2, 128)"),
    ("tickets int64", lambda t: WoAWeight(_fp8(1, 128, 64), torch.zeros(1, 2, 128, dtype=torch.uint8), t.long()),
     "tickets must be an int32 tensor of"),
    ("tickets on meta", lambda t: WoAWeight(_fp8(1, 128, 64), torch.zeros(1, 2, 128, dtype=torch.uint8), t.to("meta")),
     "scale and tickets must be on cpu like qweight; got cpu, meta"),
    ("weight a str", lambda t: prepare_wo_a_weight("w"), "weight must be a torch.Tensor; got str"),
    ("3-D R = 96", lambda t: prepare_wo_a_weight(torch.zeros(2, 96, 64)),
     "weight: R (rows per group) must be a positive multiple of 128 so that no output scale word straddles two groups; got R = 96"),
    ("3-D R = 0", lambda t: prepare_wo_a_weight(torch.zeros(1, 0, 64)), "weight: R (rows per group) must be"),
    ("flat rows not a multiple of groups", lambda t: prepare_wo_a_weight(torch.zeros(256, 96), groups=3),
     "weight.shape[0] (G*R) must be a multiple of groups = 3; got 256"),
    ("a an int", lambda t: grouped_wo_a_reference(5, prepare_wo_a_weight(torch.zeros(1, 128, 64))),
     "a must be an MxTensor or a pair (fp8 [M, K], scale); got int"),
    ("a scale a str", lambda t: grouped_wo_a_reference((_fp8(2, 64), "s"), prepare_wo_a_weight(torch.zeros(1, 128, 64))),
     "a[1] must be a torch.Tensor; got str"),
    ("a scale int32 1-D", lambda t: grouped_wo_a_reference((_fp8(2, 64), torch.zeros(8, dtype=torch.int32)), prepare_wo_a_weight(torch.zeros(1, 128, 64))),
     "a[1] must be int32 [M, ceil(K/128)] (deepgemm), uint8 [M, K/32] (e8m0) or 1-D uint8 (swizzled_128x4); got torch.int32 (8,)"),
    ("a scale for another layout than named", lambda t: grouped_wo_a_reference((_fp8(2, 64), torch.zeros(2, 2, dtype=torch.uint8)), prepare_wo_a_weight(torch.zeros(1, 128, 64)), scale_layout="deepgemm"),
     "a[1] must have dtype torch.int32"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "call", "message"), WEIGHT_FIELDS, ids=[c[0] for c in WEIGHT_FIELDS])
def test_each_check_names_its_field(name, call, message):
    tickets = torch.zeros(4096, dtype=torch.int32)
    with pytest.raises((ValueError, TypeError)) as caught:
        call(tickets)
    assert str(caught.value).startswith(message), str(caught.value)


def test_one_group_of_a_flat_weight():
    w = prepare_wo_a_weight(torch.ones(128, 64), groups=1)
    assert w.groups == 1 and w.n == 128 and w.tickets.device == w.qweight.device


def _out_pair_call(**kwargs):
    w = prepare_wo_a_weight(torch.zeros(2, 128, 64))
    return grouped_wo_a(torch.zeros(3, 128, dtype=torch.bfloat16), w, **kwargs)


OUT_MESSAGES = [
    ("out and out_pair", {"out": "z", "out_pair": "p"}, ValueError, "give out (bf16 z) or out_pair (the MXFP8 pair of z), not both"),
    ("out with out_scale_layout", {"out": torch.zeros(3, 2, 128, dtype=torch.bfloat16), "out_scale_layout": "e8m0"},
     ValueError, "out_scale_layout describes out_pair; with out (bf16 z) it must be None"),
    ("out_pair a str", {"out_pair": "pq"}, TypeError, "out_pair must be an MxTensor or a pair (fp8 [M, K], scale); got str"),
    ("out_pair scale int64", {"out_pair": (_fp8(3, 256), torch.zeros(3, 8, dtype=torch.int64))},
     ValueError, "out_pair[1] must be int32 [M, ceil(K/128)] (deepgemm)"),
    ("out_pair with an unknown layout", {"out_pair": (_fp8(3, 256), torch.zeros(3, 8, dtype=torch.uint8)), "out_scale_layout": "x"},
     ValueError, "out_scale_layout must be one of"),
    ("out_pair an MxTensor in another layout", {"out_pair": MxTensor.empty(3, 256, scale_layout="e8m0", device="cpu"), "out_scale_layout": "deepgemm"},
     ValueError, "out_pair holds e8m0 scales; deepgemm scales are required here"),
    ("out_pair an MxTensor for another rounding", {"out_pair": MxTensor.empty(3, 256, scale_layout="e8m0", rounding="floor", device="cpu"), "rounding": "rceil"},
     ValueError, "rounding='rceil' disagrees with out_pair, an MxTensor for floor scales"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "kwargs", "error", "message"), OUT_MESSAGES, ids=[c[0] for c in OUT_MESSAGES]
)
def test_out_checks_name_their_argument(name, kwargs, error, message):
    with pytest.raises(error) as caught:
        _out_pair_call(**kwargs)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize("field", ["qweight", "scale", "tickets"])
def test_a_weight_field_that_is_no_tensor_is_named(field):
    w = prepare_wo_a_weight(torch.zeros(1, 128, 64))
    values = {"qweight": w.qweight, "scale": w.scale, "tickets": w.tickets, field: [0]}
    with pytest.raises(TypeError, match=rf"^{field} must be a torch.Tensor; got list$"):
        WoAWeight(**values)
