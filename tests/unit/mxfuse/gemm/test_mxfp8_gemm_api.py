"""mxfuse.gemm on CPU: prepared weights, the torch backend against a float64 numpy oracle, witnesses, bad input.

Closeness (``mxfp8_gemm_cases.assert_gemm_close``): the torch backend accumulates in fp32 and rounds once
to bf16, so against the float64 oracle ``|out - ref| <= 2**-8 |ref| + 2**-10 rms(ref)``; quantized weights
and scales are compared bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from mxfp8_gemm_cases import (
    activation_pair,
    assert_gemm_close,
    e4m3_codes,
    random_codes,
    random_scales,
    reference_numpy,
)

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits
from mxfuse import MxfuseUnavailableError, witness
from mxfuse.formats import MxTensor, empty_mxfp8_pair, quantize_mxfp8_reference, scale_to_layout
from mxfuse.gemm import MxWeight, backend_status, mxfp8_gemm, prepare_mxfp8_weight, select_backend
from mxfuse.gemm import api as gemm_api

register(on=("cpu",), est_time=8)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
POISON = 0xA5


@pytest.fixture(autouse=True)
def _fresh_backend_status():
    gemm_api._status.cache_clear()
    yield
    gemm_api._status.cache_clear()


def _weight(n: int, k: int, *, seed: int, backend: str = "torch"):
    wq, ws = random_codes(n, k, seed=seed), random_scales(n, k, seed=seed + 1)
    return wq, ws, prepare_mxfp8_weight(wq, ws, backend=backend)


def _activation(m: int, k: int, layout: str, *, seed: int):
    aq, as_ = random_codes(m, k, seed=seed), random_scales(m, k, seed=seed + 1)
    return aq, as_, activation_pair(aq, as_, layout)


def _poisoned_out(m: int, n: int) -> torch.Tensor:
    out = torch.empty((m, n), dtype=torch.bfloat16)
    out.view(torch.uint8).fill_(POISON)
    return out


# --- prepared weights ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "fp16", "fp32"]
)
def test_prepare_from_a_float_weight_quantizes_with_the_format_rules(dtype, rounding):
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(45, 160, generator=g) * torch.exp2(torch.randint(-8, 8, (45, 1), generator=g))).to(dtype)
    x[4, 32:64] = float("nan")
    w = prepare_mxfp8_weight(x, backend="torch", rounding=rounding)
    want_q, want_s = quantize_mxfp8_reference(x, rounding=rounding)
    assert_same_bits(w.qweight.view(torch.uint8), want_q.view(torch.uint8), name="qweight")
    assert_same_bits(w.scale_e8m0, want_s, name="scale_e8m0")
    assert w.scale is w.scale_e8m0 and w.backend == "torch" and (w.n, w.k) == (45, 160)


@pytest.mark.parametrize("scale_dtype", ["uint8", "float8_e8m0fnu"])
def test_prepare_from_a_native_checkpoint_with_1x32_scales_keeps_the_bytes(scale_dtype):
    wq, ws = random_codes(45, 160, seed=1), random_scales(45, 160, seed=2)
    given = ws if scale_dtype == "uint8" else ws.view(torch.float8_e8m0fnu)
    w = prepare_mxfp8_weight(wq, given, backend="torch")
    assert_same_bits(w.qweight.view(torch.uint8), wq.view(torch.uint8), name="qweight")
    assert_same_bits(w.scale_e8m0, ws, name="scale_e8m0")


@pytest.mark.parametrize("scale_dtype", ["uint8", "float8_e8m0fnu"])
@pytest.mark.parametrize("n", [45, 64, 1])
def test_prepare_from_a_native_checkpoint_with_32x32_scales_expands_them_per_row(n, scale_dtype):
    wq = random_codes(n, 160, seed=4)
    blocks = random_scales(-(-n // 32), 160, seed=5)
    given = blocks if scale_dtype == "uint8" else blocks.view(torch.float8_e8m0fnu)
    w = prepare_mxfp8_weight(wq, given, backend="torch")
    rows = np.arange(n) // 32  # row r of the weight takes block row r // 32
    assert_same_bits(w.scale_e8m0.numpy(), blocks.numpy()[rows], name="expanded scale_e8m0")


def test_a_prepared_weight_multiplies_like_its_checkpoint():
    wq, ws = random_codes(64, 2048, seed=7), random_scales(2, 2048, seed=8)  # 32x32 blocks
    aq, as_, pair = _activation(3, 2048, "e8m0", seed=9)
    out = mxfp8_gemm(pair, prepare_mxfp8_weight(wq, ws, backend="torch"))
    want = reference_numpy(aq, as_, wq, ws.repeat_interleave(32, dim=0))
    assert_gemm_close(out, want, name="out")


# --- the torch backend against the float64 oracle ------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("m", [0, 1, 2, 15, 16, 64, 129])
def test_torch_backend_matches_the_float64_oracle(m, layout):
    n, k = 45, 160  # odd N; K of 5 blocks, so packed layouts carry padding groups
    wq, ws, w = _weight(n, k, seed=m + 11)
    aq, as_, pair = _activation(m, k, layout, seed=m + 13)
    out = mxfp8_gemm(pair, w)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (m, n)
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name=f"out m={m} {layout}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_nan_scale_block_in_a_makes_exactly_its_rows_nan(layout):
    wq, ws, w = _weight(45, 160, seed=21)
    aq, as_ = random_codes(17, 160, seed=22), random_scales(17, 160, seed=23)
    as_[3, 2] = 0xFF
    as_[16, 4] = 0xFF
    out = mxfp8_gemm(activation_pair(aq, as_, layout), w)
    want = reference_numpy(aq, as_, wq, ws)
    nan_rows = torch.isnan(out).any(dim=1)
    assert nan_rows.tolist() == [i in (3, 16) for i in range(17)]
    assert torch.isnan(out[[3, 16]]).all()
    assert_gemm_close(out, want, name="out", equal_nan=True)  # NaN exactly where the oracle has it


def test_a_nan_scale_block_in_the_weight_makes_exactly_its_columns_nan():
    wq, ws = random_codes(45, 160, seed=24), random_scales(45, 160, seed=25)
    ws[10, 0] = 0xFF
    w = prepare_mxfp8_weight(wq, ws, backend="torch")
    aq, as_, pair = _activation(5, 160, "e8m0", seed=26)
    out = mxfp8_gemm(pair, w)
    assert torch.isnan(out).any(dim=0).tolist() == [j == 10 for j in range(45)]
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out", equal_nan=True)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_zero_blocks_contribute_nothing(layout):
    wq, ws, w = _weight(45, 160, seed=31)
    aq, as_ = random_codes(6, 160, seed=32), random_scales(6, 160, seed=33)
    codes = aq.view(torch.uint8)
    codes[2] = 0  # a zero row with scale 0: the whole output row is zero
    as_[2] = 0
    codes[4, 32:96] = 0  # two zero blocks in the middle of a row
    out = mxfp8_gemm(activation_pair(aq, as_, layout), w)
    assert_close(out[2], torch.zeros(45), rtol=0, atol=0, name="zero row")
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_extreme_scale_bytes_whose_products_stay_finite(layout):
    """Scale bytes 0, 1, 253, 254 on a against 254, 253, 1, 0 on the weight: every block product is 2**0."""
    k = 256
    aq, wq = random_codes(7, k, seed=41, limit=1.75), random_codes(45, k, seed=42, limit=1.75)
    a_bytes = torch.tensor([0, 1, 253, 254], dtype=torch.uint8).repeat(k // 128)
    as_ = a_bytes.repeat(7, 1)
    ws = (254 - a_bytes.to(torch.int32)).to(torch.uint8).repeat(45, 1)
    out = mxfp8_gemm(activation_pair(aq, as_, layout), prepare_mxfp8_weight(wq, ws, backend="torch"))
    assert torch.isfinite(out).all()
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


# --- out=, witnesses -----------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [0, 1, 129])
def test_out_is_written_in_place(m):
    wq, ws, w = _weight(45, 160, seed=51)
    aq, as_, pair = _activation(m, 160, "deepgemm", seed=52)
    out = _poisoned_out(m, 45)
    address = out.data_ptr()
    got = mxfp8_gemm(pair, w, out=out)
    assert got is out and out.data_ptr() == address
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


def test_an_empty_weight_gives_an_empty_output():
    w = prepare_mxfp8_weight(torch.zeros(0, 64), backend="torch")
    _, _, pair = _activation(3, 64, "e8m0", seed=64)
    out = mxfp8_gemm(pair, w)
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (3, 0)


def test_every_call_emits_a_witness_record_with_the_choice_and_what_was_passed_over():
    wq, ws = random_codes(45, 160, seed=61), random_scales(45, 160, seed=62)
    w = prepare_mxfp8_weight(wq, ws)  # auto on the CPU: only the torch backend runs here
    _, _, pair = _activation(3, 160, "e8m0", seed=63)
    with witness.capture() as records:
        mxfp8_gemm(pair, w, site="wo_b")
        mxfp8_gemm(pair, w, backend="torch")
        mxfp8_gemm((pair[0][:0], pair[1][:0]), w)
    assert [r["path"] for r in records] == ["gemm.torch"] * 3
    first = records[0]
    assert (
        first["backend"] == "torch"
        and first["site"] == "wo_b"
        and (first["rows"], first["n"], first["k"]) == (3, 45, 160)
    )
    assert first["reason"] == "auto: the weight was prepared for torch"
    assert set(first["passed_over"]) == set(gemm_api.AUTO_ORDER) - {"torch"}
    assert "needs a CUDA device" in first["passed_over"]["deepgemm"]
    assert "needs a CUDA device" in first["passed_over"]["flashinfer"]
    assert records[1]["reason"] == "backend='torch' was asked for" and records[1]["passed_over"] == {}
    assert records[2]["rows"] == 0


def test_auto_on_the_cpu_picks_torch_and_says_why_the_others_cannot_run():
    name, passed_over = select_backend("cpu", n=45, k=160)
    assert name == "torch"
    assert list(passed_over) == [b for b in gemm_api.AUTO_ORDER if b != "torch"]
    status = backend_status("cpu")
    assert status["torch"].ok and not status["deepgemm"].ok and not status["flashinfer"].ok


# --- bad input -----------------------------------------------------------------------------------------


def _bad_calls():
    wq, ws, w = _weight(45, 160, seed=71)
    aq, as_, pair = _activation(4, 160, "e8m0", seed=72)
    _, _, dg_pair = _activation(4, 160, "deepgemm", seed=72)
    wide = torch.empty((4, 320), dtype=torch.float8_e4m3fn)
    meta_q = torch.empty((4, 160), dtype=torch.float8_e4m3fn, device="meta")
    return (
        w,
        pair,
        [
            (
                "w not prepared",
                lambda out: mxfp8_gemm(pair, wq, out=out),
                TypeError,
                r"w must be an MxWeight",
            ),
            (
                "a not a pair",
                lambda out: mxfp8_gemm(aq, w, out=out),
                TypeError,
                r"a must be an MxTensor or a pair",
            ),
            (
                "a three items",
                lambda out: mxfp8_gemm((aq, as_, as_), w, out=out),
                TypeError,
                r"a must be an MxTensor or a pair",
            ),
            (
                "a[0] not a tensor",
                lambda out: mxfp8_gemm(([1], as_), w, out=out),
                TypeError,
                r"a\[0\] must be a torch.Tensor",
            ),
            (
                "a[0] bf16",
                lambda out: mxfp8_gemm((aq.to(torch.bfloat16), as_), w, out=out),
                ValueError,
                r"a\[0\] must be a 2-D float8_e4m3fn",
            ),
            (
                "a[0] 3-D",
                lambda out: mxfp8_gemm((aq[None], as_), w, out=out),
                ValueError,
                r"a\[0\] must be a 2-D",
            ),
            (
                "mismatched K",
                lambda out: mxfp8_gemm((aq[:, :128].contiguous(), as_[:, :4].contiguous()), w, out=out),
                ValueError,
                r"a\.shape\[1\] \(K\) must equal the weight's K = 160",
            ),
            (
                "a[0] not contiguous",
                lambda out: mxfp8_gemm((wide[:, ::2], as_), w, out=out),
                ValueError,
                r"a\[0\] must be contiguous",
            ),
            (
                "a on another device",
                lambda out: mxfp8_gemm((meta_q, as_), w, out=out),
                ValueError,
                r"a\[0\] must be on cpu; got meta",
            ),
            (
                "a[1] not a tensor",
                lambda out: mxfp8_gemm((aq, 3), w, out=out),
                TypeError,
                r"a\[1\] must be a torch.Tensor",
            ),
            (
                "a[1] float32",
                lambda out: mxfp8_gemm((aq, as_.float()), w, out=out),
                ValueError,
                r"a\[1\] must be int32",
            ),
            (
                "a[1] wrong shape",
                lambda out: mxfp8_gemm((aq, as_[:3]), w, out=out),
                ValueError,
                r"a\[1\] must have shape \(4, 5\)",
            ),
            (
                "a[1] deepgemm strides",
                lambda out: mxfp8_gemm((aq, dg_pair[1].contiguous()), w, out=out),
                ValueError,
                r"a\[1\] must have strides \(1, 4\)",
            ),
            (
                "declared layout disagrees",
                lambda out: mxfp8_gemm(pair, w, out=out, scale_layout="deepgemm"),
                ValueError,
                r"a\[1\] must have dtype torch.int32",
            ),
            (
                "unknown layout",
                lambda out: mxfp8_gemm(pair, w, out=out, scale_layout="nvfp4"),
                ValueError,
                r"scale_layout must be one of",
            ),
            (
                "unknown backend",
                lambda out: mxfp8_gemm(pair, w, out=out, backend="cublas"),
                ValueError,
                r"backend must be one of 'auto', ",
            ),
            (
                "backend not a string",
                lambda out: mxfp8_gemm(pair, w, out=out, backend=None),
                ValueError,
                r"backend must be one of",
            ),
            (
                "backend other than the weight's",
                lambda out: mxfp8_gemm(pair, w, out=out, backend="deepgemm"),
                ValueError,
                r"backend 'deepgemm' cannot use a weight prepared for 'torch'",
            ),
            (
                "out not a tensor",
                lambda out: mxfp8_gemm(pair, w, out=[0]),
                TypeError,
                r"out must be a torch.Tensor",
            ),
            (
                "out float32",
                lambda out: mxfp8_gemm(pair, w, out=out.float()),
                ValueError,
                r"out must be a bfloat16 tensor of shape \(4, 45\)",
            ),
            (
                "out wrong shape",
                lambda out: mxfp8_gemm(pair, w, out=out[:3]),
                ValueError,
                r"out must be a bfloat16 tensor of shape \(4, 45\)",
            ),
            (
                "out not contiguous",
                lambda out: mxfp8_gemm(pair, w, out=out.t().contiguous().t()),
                ValueError,
                r"out must be contiguous",
            ),
            (
                "out on another device",
                lambda out: mxfp8_gemm(
                    pair, w, out=torch.empty((4, 45), dtype=torch.bfloat16, device="meta")
                ),
                ValueError,
                r"out must be on cpu",
            ),
        ],
    )


_IDS = [case[0] for case in _bad_calls()[2]]


@pytest.mark.parametrize("case", range(len(_IDS)), ids=_IDS)
def test_bad_gemm_input_is_refused_naming_the_argument_and_writes_nothing(case):
    _, _, cases = _bad_calls()
    _, call, error, match = cases[case]
    out = _poisoned_out(4, 45)
    before = out.clone()
    with pytest.raises(error, match=match):
        call(out)
    assert_same_bits(out.view(torch.uint8), before.view(torch.uint8), name="out after a refused call")


_BAD_PREPARE = [
    (
        "weight not a tensor",
        lambda: prepare_mxfp8_weight([[1.0]]),
        TypeError,
        r"weight must be a torch.Tensor",
    ),
    ("weight 1-D", lambda: prepare_mxfp8_weight(torch.zeros(64)), ValueError, r"weight must be 2-D"),
    (
        "K not a multiple of 32",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 48)),
        ValueError,
        r"weight.shape\[1\] \(K\) must be a positive multiple of 32",
    ),
    ("K zero", lambda: prepare_mxfp8_weight(torch.zeros(4, 0)), ValueError, r"weight.shape\[1\] \(K\)"),
    (
        "int8 weight",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64, dtype=torch.int8)),
        ValueError,
        r"weight must be float8_e4m3fn, bfloat16",
    ),
    (
        "E4M3 without scale",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64, dtype=torch.float8_e4m3fn)),
        ValueError,
        r"scale is required",
    ),
    (
        "float weight with scale",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64), torch.zeros(4, 2, dtype=torch.uint8)),
        ValueError,
        r"scale must be None with a float weight",
    ),
    (
        "scale wrong shape",
        lambda: prepare_mxfp8_weight(
            torch.zeros(40, 64, dtype=torch.float8_e4m3fn), torch.zeros(3, 2, dtype=torch.uint8)
        ),
        ValueError,
        r"scale must hold one E8M0 scale per 1x32 block \(40, 2\) or per 32x32 block \(2, 2\)",
    ),
    (
        "scale int32",
        lambda: prepare_mxfp8_weight(
            torch.zeros(4, 64, dtype=torch.float8_e4m3fn), torch.zeros(4, 2, dtype=torch.int32)
        ),
        ValueError,
        r"scale must hold E8M0 bytes",
    ),
    (
        "scale not a tensor",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64, dtype=torch.float8_e4m3fn), [[127, 127]] * 4),
        TypeError,
        r"scale must be a torch.Tensor",
    ),
    (
        "scale on another device",
        lambda: prepare_mxfp8_weight(
            torch.zeros(4, 64, dtype=torch.float8_e4m3fn), torch.zeros(4, 2, dtype=torch.uint8, device="meta")
        ),
        ValueError,
        r"scale must be on cpu like weight",
    ),
    (
        "unknown rounding",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64), rounding="nearest"),
        ValueError,
        r"rounding must be one of",
    ),
    (
        "unknown backend",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64), backend="cublas"),
        ValueError,
        r"backend must be one of",
    ),
    (
        "backend not here",
        lambda: prepare_mxfp8_weight(torch.zeros(4, 64), backend="deepgemm"),
        MxfuseUnavailableError,
        r"backend 'deepgemm' cannot run on cpu: needs a CUDA device",
    ),
    ("n without k", lambda: select_backend("cpu", n=64), ValueError, r"n and k must be given together"),
    ("negative k", lambda: backend_status("cpu", n=64, k=-32), ValueError, r"k must be an int >= 0"),
]


@pytest.mark.parametrize(
    ("call", "error", "match"), [c[1:] for c in _BAD_PREPARE], ids=[c[0] for c in _BAD_PREPARE]
)
def test_bad_prepare_input_is_refused_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_hand_built_weight_is_checked():
    q = torch.zeros(4, 64, dtype=torch.float8_e4m3fn)
    s = torch.zeros(4, 2, dtype=torch.uint8)
    operand = MxTensor(q, s, "e8m0")
    with pytest.raises(ValueError, match=r"MxTensor.scale must have shape \(4, 2\)"):
        MxTensor(q, s[:3], "e8m0")
    with pytest.raises(
        ValueError, match=r"MxWeight.operand must hold a weight \[N, K\] with K > 0 and row-major e8m0"
    ):
        MxWeight(MxTensor(q, torch.zeros(4, 1, dtype=torch.int32), "deepgemm"), s, "torch")
    with pytest.raises(ValueError, match=r"MxWeight.scale must be on cpu like the weight; got meta"):
        MxWeight(operand, s.to("meta"), "torch")
    with pytest.raises(TypeError, match=r"MxWeight.backend must be a str; got int"):
        MxWeight(operand, s, 7)
    with pytest.raises(TypeError, match=r"MxWeight.passed_over must be a tuple"):
        MxWeight(operand, s, "torch", {"deepgemm": "no"})
    with pytest.raises(ValueError, match=r"w.backend must be one of"):
        mxfp8_gemm(empty_mxfp8_pair(1, 64, scale_layout="e8m0", device="cpu"), MxWeight(operand, s, "cublas"))


def test_an_activation_scale_may_come_as_float8_e8m0fnu():
    wq, ws, w = _weight(45, 160, seed=81)
    aq, as_, _ = _activation(3, 160, "e8m0", seed=82)
    out = mxfp8_gemm((aq, as_.view(torch.float8_e8m0fnu)), w)
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


def test_exact_codes_give_the_exact_product():
    """Integers times powers of two: the oracle and the backend agree bit for bit after one bf16 rounding."""
    a = e4m3_codes(torch.tensor([[1.0, 2.0, -3.0, 0.5] * 8]))
    w = e4m3_codes(torch.tensor([[2.0] * 32, [-1.0] * 32]))
    out = mxfp8_gemm(
        (a, torch.tensor([[128]], dtype=torch.uint8)),
        prepare_mxfp8_weight(w, torch.tensor([[126], [127]], dtype=torch.uint8), backend="torch"),
    )
    # row sum of a = 8 * 0.5 = 4; times 2 (a scale) times 2 * 0.5 (w row 0) = 8; times -1 (w row 1) = -8
    assert_close(out, torch.tensor([[8.0, -8.0]]), rtol=0, atol=0, name="out")


def test_scale_to_layout_round_trips_through_every_layout_the_gemm_reads():
    """The inputs the tests build go through scale_to_layout; the GEMM must read them back as given."""
    wq, ws, w = _weight(45, 160, seed=91)
    aq, as_ = random_codes(130, 160, seed=92), random_scales(130, 160, seed=93)
    outs = [mxfp8_gemm((aq, scale_to_layout(as_, scale_layout=layout)), w) for layout in LAYOUTS]
    for layout, out in zip(LAYOUTS[1:], outs[1:], strict=True):
        assert_same_bits(out.view(torch.int16), outs[0].view(torch.int16), name=f"{layout} vs e8m0")
