"""MxLinear on the CPU (torch backend): request -> load -> process -> fact, paths and witness, reloads.

Expected values are computed here from the loaded weight's exact value (mx_linear_cases), never by
the layer; quantized paths that must agree are compared bit for bit.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F
from mx_linear_cases import PACKED, SOURCES, activations, bf16_weight, data_ptrs, load, native_weight

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits
from mxfuse import witness
from mxfuse.formats import dequantize_mxfp8, quantize_mxfp8_reference
from mxfuse.gemm import BACKENDS, Availability
from mxfuse.kernels import quantize_mxfp8
from mxfuse.layers import LayerNotReadyError, MxLinear, forward_context, mx_linear

register(on=("cpu",), est_time=8)

N, K = 96, 128


def _ready(source: str = "bf16", *, seed: int = 0, **kwargs) -> tuple[MxLinear, torch.Tensor]:
    layer = MxLinear(K, N, mxfp8_input=True, name="proj", **kwargs)
    value = load(layer, source, seed=seed)
    layer.process_weights_after_loading()
    return layer, value


def _only(records: list[dict], prefix: str = "linear.") -> list[dict]:
    return [r for r in records if r["path"].startswith(prefix)]


def _expected_mxfp8(x: torch.Tensor, w_value: torch.Tensor) -> torch.Tensor:
    """float64 dequant(quantize(x)) @ W.T, with W the layer's MXFP8 weight value (float64)."""
    q, s = quantize_mxfp8_reference(x, scale_layout="e8m0")
    xd = dequantize_mxfp8(q, s, scale_layout="e8m0").to(torch.float64)
    return xd @ w_value.T


def _mxfp8_weight_value(w_value: torch.Tensor, source: str) -> torch.Tensor:
    """A bf16 weight is quantized by the layer (RCEIL); a native one is used as loaded."""
    if source != "bf16":
        return w_value
    q, s = quantize_mxfp8_reference(w_value.to(torch.bfloat16), scale_layout="e8m0")
    return dequantize_mxfp8(q, s, scale_layout="e8m0").to(torch.float64)


def _assert_matmul_close(
    actual: torch.Tensor, expected: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> None:
    # bf16 output: one rounding (2**-9 relative) plus fp32 accumulation over K, bounded by sum |x| |w|.
    atol = 1e-6 * float((x.abs().to(torch.float64) @ w.abs().T).max())
    assert_close(actual, expected, rtol=2.0**-8, atol=atol)


def test_every_path_the_layer_emits_is_declared():
    for path in (
        "linear.pair_consumed",
        "linear.self_quantized",
        "linear.bf16",
        "linear.pair_fallback",
        "linear.rebind",
    ):
        assert witness.PATHS.get(path), path


# ---- lifecycle ------------------------------------------------------------------------------------


def _not_ready(what: str, todo: str) -> str:
    return re.escape(f"{what} of wo_b is not known before process_weights_after_loading(); {todo}") + "$"


def test_the_fact_and_everything_that_depends_on_it_fail_clearly_before_processing():
    layer = MxLinear(K, N, mxfp8_input=True, name="wo_b")
    x = activations(2, K, seed=1)
    reads = {
        "takes_mxfp8_input": lambda: layer.takes_mxfp8_input,
        "input_scale_layout": lambda: layer.input_scale_layout,
        "the processing result": lambda: layer.processed,
        "gate": lambda: layer.gate(1, context="decode"),
        "forward": lambda: layer(x, context="decode"),
    }
    assert layer.state == "requested"
    for what, read in reads.items():
        todo = "call load_weights(...) and then process_weights_after_loading()"
        with pytest.raises(LayerNotReadyError, match=_not_ready(what, todo)):
            read()
    with pytest.raises(LayerNotReadyError, match="call load_weights"):
        layer.process_weights_after_loading()
    layer.load_weights(bf16_weight(N, K, seed=0))
    assert layer.state == "loaded"
    for what, read in reads.items():
        todo = "weights were loaded but not processed: call process_weights_after_loading()"
        with pytest.raises(LayerNotReadyError, match=_not_ready(what, todo)):
            read()


def test_a_reload_not_yet_processed_is_not_read_as_the_old_weights():
    layer, _ = _ready()
    x = activations(2, K, seed=1)
    layer(x, context="decode")
    load(layer, "bf16", seed=1)
    assert layer.state == "loaded"
    for read in (lambda: layer.takes_mxfp8_input, lambda: layer(x, context="decode")):
        with pytest.raises(LayerNotReadyError, match="loaded but not processed"):
            read()


def test_a_layer_with_a_device_but_nothing_loaded_has_nothing_to_process():
    layer = MxLinear(K, N, device="cpu")
    assert layer.site == "MxLinear[96x128]" and layer.device == torch.device("cpu")
    with pytest.raises(
        LayerNotReadyError,
        match=re.escape("MxLinear[96x128]: nothing to process; call load_weights(...) first"),
    ):
        layer.process_weights_after_loading()


@pytest.mark.parametrize("source", SOURCES)
def test_weights_loaded_on_another_device_move_to_the_layers(source):
    # The meta device stands in for a GPU: the layer's device is fixed at construction.
    layer = MxLinear(K, N, bias=True, device="meta")
    assert layer.device == torch.device("meta")
    if source == "bf16":
        layer.load_weights(bf16_weight(N, K, seed=2), bias=torch.ones(N))  # from the CPU
    else:
        block_rows = {"native_1x32": 1, "native_32x32": 32}[source]
        layer.load_weights(*native_weight(N, K, block_rows=block_rows, seed=2), bias=torch.ones(N))
    assert layer.device == torch.device("meta")
    layer.process_weights_after_loading()
    assert {name: p.device.type for name, p in layer.named_parameters()} == {
        "weight": "meta",
        **({} if source == "bf16" else {"weight_scale": "meta"}),
        "bias": "meta",
    }


@pytest.mark.parametrize("source", SOURCES)
def test_request_load_process_fact_prepares_every_weight_source(source):
    layer = MxLinear(K, N, mxfp8_input=True, name="wqkv_a")
    w_value = load(layer, source, seed=3)
    result = layer.process_weights_after_loading()
    assert layer.state == "ready"
    assert (layer.takes_mxfp8_input, result.backend, result.weight_format) == (True, "torch", "mxfp8")
    assert layer.input_scale_layout.value == "e8m0"  # the torch backend's first layout
    assert "torch" in result.reason
    assert [u.action for u in result.updates] == ["new", "new"]
    assert layer.weight.dtype == torch.float8_e4m3fn and tuple(layer.weight.shape) == (N, K)
    assert layer.weight_scale.dtype == torch.uint8 and tuple(layer.weight_scale.shape) == (N, K // 32)
    # The prepared weight is exactly the loaded one (native) or its RCEIL quantization (bf16).
    prepared = dequantize_mxfp8(layer.weight, layer.weight_scale, scale_layout="e8m0").to(torch.float64)
    assert_same_bits(prepared, _mxfp8_weight_value(w_value, source), name="prepared weight")

    x = activations(5, K, seed=4)
    with witness.capture() as records:
        y = layer(x, context="decode")
    w = _mxfp8_weight_value(w_value, source)
    _assert_matmul_close(y, _expected_mxfp8(x, w), x.to(torch.float64), w)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (5, N)
    (record,) = _only(records)
    assert record["path"] == "linear.self_quantized" and record["backend"] == "torch"
    assert (record["site"], record["rows"], record["n"], record["k"], record["mode"], record["layout"]) == (
        "wqkv_a",
        5,
        N,
        K,
        "decode",
        "e8m0",
    )
    assert [r["path"] for r in records] == ["gemm.torch", "linear.self_quantized"]
    # The GEMM ran on the backend the weight was prepared for (auto) and knows the layer.
    assert (records[0]["site"], records[0]["reason"]) == ("wqkv_a", "auto: the weight was prepared for torch")
    assert json.loads(json.dumps(records)) == records


@pytest.mark.parametrize("source", SOURCES)
def test_without_the_request_the_fact_is_false_and_the_layer_runs_bf16(source):
    layer = MxLinear(K, N, name="plain")
    w_value = load(layer, source, seed=5)
    result = layer.process_weights_after_loading()
    assert layer.takes_mxfp8_input is False and layer.input_scale_layout is None
    assert result.reason == "mxfp8_input=False: the layer was not asked to take MXFP8 input"
    assert result.backend is None  # the torch backend would consume pairs here, but none were asked for
    assert result.weight_format == ("bf16" if source == "bf16" else "mxfp8")
    x = activations(3, K, seed=6)
    with witness.capture() as records:
        y = layer(x, context="decode")
    # An MXFP8 weight is dequantized to bf16 exactly (E4M3 x 2**e fits bf16), so F.linear on it is the truth.
    assert_same_bits(y, F.linear(x, w_value.to(torch.bfloat16)), name="bf16 path")
    (record,) = _only(records)
    assert (record["path"], record["backend"], record["failed"]) == ("linear.bf16", None, ["fact"])
    assert "mxfp8_input=False" in record["reason"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_float_weight_without_the_request_runs_as_bf16(dtype):
    layer = MxLinear(K, N)
    w = bf16_weight(N, K, seed=5)
    layer.load_weights(w.to(dtype))
    layer.process_weights_after_loading()
    assert layer.weight.dtype == torch.bfloat16
    x = activations(3, K, seed=6)
    assert_same_bits(layer(x, context="decode"), F.linear(x, w), name="bf16 path")


def test_a_bf16_weight_is_quantized_with_the_layers_rounding():
    layer = MxLinear(K, N, mxfp8_input=True, rounding="floor")
    w = load(layer, "bf16", seed=3).to(torch.bfloat16)
    layer.process_weights_after_loading()
    floor = quantize_mxfp8_reference(w, rounding="floor", scale_layout="e8m0")
    rceil = quantize_mxfp8_reference(w, rounding="rceil", scale_layout="e8m0")
    assert not torch.equal(floor[1], rceil[1])  # the two rules differ on this weight
    assert_same_bits(layer.weight_scale, floor[1], name="weight scales")
    assert_same_bits(layer.weight.view(torch.uint8), floor[0].view(torch.uint8), name="weight codes")


def test_a_float_bias_is_rounded_to_bf16_once_at_load():
    layer = MxLinear(K, N, bias=True, mxfp8_input=True)
    bias = torch.linspace(-3, 3, N) + 1e-3  # not bf16 values
    load(layer, "bf16", seed=9, bias=bias)
    layer.process_weights_after_loading()
    assert layer.bias.dtype == torch.bfloat16
    assert_same_bits(layer.bias, bias.to(torch.bfloat16), name="bias")
    x = activations(3, K, seed=10)
    assert_same_bits(
        layer(x, context="prefill"), F.linear(x, _bf16_of(layer), bias.to(torch.bfloat16)), name="bf16 + bias"
    )


def test_a_strided_input_on_the_fused_path_is_made_contiguous():
    layer, _ = _ready()
    x = activations(5, 2 * K, seed=18)[:, ::2]  # K along a stride of 2
    with witness.capture() as records:
        y = layer(x, context="decode")
    assert [r["path"] for r in _only(records)] == ["linear.self_quantized"]
    assert_same_bits(y, layer(x.contiguous(), context="decode"), name="strided input")


# ---- a backend that lays its weight scales out its own way (PACKED, a CPU stand-in for a GPU one) ----


def _packed_status(device: torch.device) -> dict[str, Availability]:
    return {"packed": PACKED.available(device), "torch": Availability(True, "reference")}


@pytest.fixture
def packed(monkeypatch):
    monkeypatch.setitem(BACKENDS, PACKED.name, PACKED)


@pytest.mark.parametrize("source", ["bf16", "native_32x32"])
def test_a_backend_with_its_own_scale_layout_gets_its_weight_and_its_scales(packed, monkeypatch, source):
    layer = MxLinear(K, N, mxfp8_input=True, name="p", backend_status=_packed_status)
    load(layer, source, seed=19)
    result = layer.process_weights_after_loading()
    assert (result.takes_mxfp8_input, result.backend, result.weight_backend) == (True, "packed", "packed")
    assert layer.input_scale_layout.value == "deepgemm"  # the backend's first layout
    # Its own scales are kept beside the E8M0 ones, and are what the GEMM is handed.
    assert layer.weight_scale_packed.dtype == torch.int16
    assert_same_bits(layer.weight_scale_packed, layer.weight_scale.to(torch.int16), name="packed scales")

    reference = MxLinear(K, N, mxfp8_input=True)
    load(reference, source, seed=19)
    reference.process_weights_after_loading()
    x = activations(6, K, seed=20)
    expected = reference(x, context="decode")

    # mxfp8_gemm would emit gemm.packed, a path the project does not have: the call is run here instead.
    calls = []

    def gemm(a, w, *, backend, site):
        calls.append((w.backend, w.scale is layer.weight_scale_packed, backend, a.scale_layout.value, site))
        out = torch.empty(a.shape[0], w.n, dtype=torch.bfloat16)
        PACKED.run(a, w, out)
        return out

    monkeypatch.setattr(mx_linear, "mxfp8_gemm", gemm)
    assert_same_bits(layer(x, context="decode"), expected, name="packed vs torch backend")
    assert calls == [("packed", True, "auto", "deepgemm", "p")]  # auto: the weight's backend (packed)


def test_a_native_weight_without_the_request_is_prepared_for_the_torch_reference(packed):
    layer = MxLinear(K, N, backend_status=_packed_status)
    load(layer, "native_1x32", seed=21)
    result = layer.process_weights_after_loading()
    assert (result.takes_mxfp8_input, result.weight_format, result.weight_backend) == (
        False,
        "mxfp8",
        "torch",
    )
    assert layer.weight_scale_packed is None


def test_a_shape_the_backend_refuses_ends_with_fact_false_and_its_rule(packed):
    layer = MxLinear(K, 100, mxfp8_input=True, backend_status=_packed_status)
    load(layer, "bf16", seed=22)
    result = layer.process_weights_after_loading()
    assert (result.takes_mxfp8_input, result.weight_format) == (False, "bf16")
    assert result.reason == "N must be a multiple of 8; got N = 100"
    decision = layer.gate(4, context="decode")
    assert decision.failed == ("alignment", "fact")
    assert decision.reason.startswith("packed: N must be a multiple of 8, got N = 100; ")


def _no_backend(device: torch.device) -> dict[str, Availability]:
    return {"triton": Availability(False, "fake device: sm_80, needs sm_89+")}


@pytest.mark.parametrize("source", SOURCES)
def test_a_device_without_a_consuming_backend_ends_with_fact_false_and_its_reasons(source):
    layer = MxLinear(K, N, mxfp8_input=True, name="wo_b", backend_status=_no_backend)
    load(layer, source, seed=7)
    result = layer.process_weights_after_loading()
    assert layer.takes_mxfp8_input is False and result.backend is None
    assert (
        "no backend on cpu consumes an MXFP8 pair" in result.reason and "sm_80, needs sm_89+" in result.reason
    )
    # Native weights are still prepared (for the torch reference); a bf16 weight stays bf16.
    assert result.weight_format == ("bf16" if source == "bf16" else "mxfp8")
    assert result.weight_backend == (None if source == "bf16" else "torch")
    x = activations(4, K, seed=8)
    pair = quantize_mxfp8(x, scale_layout="deepgemm")
    with witness.capture() as records:
        y_pair = layer(pair, context="decode")
        y_bf16 = layer(pair.dequantize().to(torch.bfloat16), context="decode")
    assert_same_bits(y_pair, y_bf16, name="pair fallback")
    fallback, bf16 = _only(records)
    assert fallback["path"] == "linear.pair_fallback" and fallback["layout"] == "deepgemm"
    assert fallback["failed"] == ["device", "fact"] and "sm_80" in fallback["reason"]
    assert bf16["path"] == "linear.bf16"


def test_bias_is_added_on_every_path():
    layer = MxLinear(K, N, bias=True, mxfp8_input=True, name="b")
    bias = torch.linspace(-3, 3, N).to(torch.bfloat16)
    load(layer, "bf16", seed=9, bias=bias)
    layer.process_weights_after_loading()
    x = activations(3, K, seed=10)
    y = layer(x, context="decode")
    without = MxLinear(K, N, mxfp8_input=True)
    load(without, "bf16", seed=9)
    without.process_weights_after_loading()
    assert_same_bits(y, without(x, context="decode") + bias, name="fused + bias")
    assert_same_bits(layer(x, context="prefill"), F.linear(x, _bf16_of(without), bias), name="bf16 + bias")


def _bf16_of(layer: MxLinear) -> torch.Tensor:
    return dequantize_mxfp8(layer.weight, layer.weight_scale, scale_layout="e8m0").to(torch.bfloat16)


# ---- gating through the layer: the witness says which path and why ------------------------------------


GATE_CASES = [
    # (id, layer kwargs, in_features, rows, context, input, path, failed, reason fragment)
    ("decode 1 row", {}, K, 1, "decode", "bf16", "linear.self_quantized", [], "decode, 1 rows <= 2048"),
    ("decode 2048 rows", {}, K, 2048, "decode", "bf16", "linear.self_quantized", [], "2048 rows <= 2048"),
    ("decode 2049 rows", {}, K, 2049, "decode", "bf16", "linear.bf16", ["rows"], "2049 rows > 2048"),
    ("pair 2048 rows", {}, K, 2048, "decode", "pair", "linear.pair_consumed", [], "2048 rows <= 2048"),
    ("pair 2049 rows", {}, K, 2049, "decode", "pair", "linear.pair_fallback", ["rows"], "2049 rows > 2048"),
    ("target verify", {}, K, 16, "target_verify", "bf16", "linear.self_quantized", [], "target_verify"),
    ("prefill", {}, K, 16, "prefill", "bf16", "linear.bf16", ["mode"], "prefill is not decode"),
    ("extend pair", {}, K, 16, "extend", "pair", "linear.pair_fallback", ["mode"], "extend is not decode"),
    ("no mode: decode assumed", {}, K, 16, None, "pair", "linear.pair_consumed", [], "decode, 16 rows"),
    ("sequence parallel", {}, K, 16, "sp", "bf16", "linear.bf16", ["mode"], "sequence parallel"),
    ("K = 48 misaligned", {}, 48, 4, "decode", "bf16", "linear.bf16", ["alignment", "fact"], "K = 48"),
    (
        "unsupported device",
        {"backend_status": _no_backend},
        K,
        4,
        "decode",
        "pair",
        "linear.pair_fallback",
        ["device", "fact"],
        "sm_80",
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "k", "rows", "context", "given", "path", "failed", "fragment"),
    [case[1:] for case in GATE_CASES],
    ids=[case[0] for case in GATE_CASES],
)
def test_gate_boundaries_reach_the_witness(kwargs, k, rows, context, given, path, failed, fragment):
    layer = MxLinear(k, 32, mxfp8_input=True, name="site", **kwargs)
    layer.load_weights(bf16_weight(32, k, seed=11))
    layer.process_weights_after_loading()
    x = activations(rows, k, seed=12)
    if given == "pair":
        x = quantize_mxfp8(x, scale_layout="e8m0")
    with witness.capture() as records:
        if context == "sp":
            with forward_context("decode", sequence_parallel=True):
                layer(x)
        else:
            layer(x, context=context)
    (record,) = _only(records)
    assert (record["path"], record["failed"], record["rows"]) == (path, failed, rows)
    expected_from = {None: "default", "sp": "forward_context"}.get(context, "argument")
    assert (record["mode"], record["mode_from"]) == (
        "decode" if context in (None, "sp") else context,
        expected_from,
    )
    assert fragment in record["reason"]
    assert record["backend"] == (
        "torch" if path in ("linear.self_quantized", "linear.pair_consumed") else None
    )
    # Producers ask the same gate; it must say what forward did.
    decision = layer.gate(rows, context=None if context in (None, "sp") else context)
    if context != "sp":
        assert decision.fused == (failed == []) and list(decision.failed) == failed


def test_ambient_forward_context_applies_and_a_per_call_context_wins():
    layer, _ = _ready()
    x = activations(2, K, seed=13)
    with witness.capture() as records, forward_context("decode"):
        layer(x)
        layer(x, context="prefill")
    assert [r["path"] for r in _only(records)] == ["linear.self_quantized", "linear.bf16"]
    assert [(r["mode"], r["mode_from"]) for r in _only(records)] == [
        ("decode", "forward_context"),
        ("prefill", "argument"),
    ]


# ---- a pair and bf16 input are the same computation --------------------------------------------------


@pytest.mark.parametrize("layout", ["e8m0", "deepgemm", "swizzled_128x4"])
@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize("rows", [1, 7, 33])
def test_forward_of_the_quantized_input_equals_forward_of_the_input_bit_for_bit(layout, rounding, rows):
    layer, _ = _ready("native_32x32", input_scale_layout=layout, rounding=rounding)
    assert layer.input_scale_layout.value == layout and layer.rounding.value == rounding
    x = activations(rows, K, seed=14)
    with witness.capture() as records:
        y_pair = layer(quantize_mxfp8(x, rounding=rounding, scale_layout=layout), context="decode")
        y_bf16 = layer(x, context="decode")
    assert_same_bits(y_pair, y_bf16, name="pair vs bf16")
    assert [r["path"] for r in _only(records)] == ["linear.pair_consumed", "linear.self_quantized"]
    assert [r["layout"] for r in _only(records)] == [layout, layout]


def test_bare_calls_assume_decode_and_say_so():
    layer, _ = _ready()
    x = activations(4, K, seed=17)
    with witness.capture() as records:
        y_pair = layer(quantize_mxfp8(x, scale_layout=layer.input_scale_layout))
        y_bf16 = layer(x)
    assert_same_bits(y_pair, y_bf16, name="bare pair vs bare bf16")
    got = [(r["path"], r["mode"], r["mode_from"]) for r in _only(records)]
    assert got == [
        ("linear.pair_consumed", "decode", "default"),
        ("linear.self_quantized", "decode", "default"),
    ]


def test_zero_rows():
    layer, _ = _ready()
    y = layer(torch.empty(0, K, dtype=torch.bfloat16), context="decode")
    assert tuple(y.shape) == (0, N) and y.dtype == torch.bfloat16


# ---- bad input ------------------------------------------------------------------------------------------


def _pair(rows: int = 3, k: int = K, layout: str = "e8m0") -> tuple[torch.Tensor, torch.Tensor]:
    """A plain ``(q, scale)`` tuple, as a caller without MxTensor passes one."""
    mx = quantize_mxfp8(activations(rows, k, seed=15), scale_layout=layout)
    return mx.data, mx.scale


BAD_FORWARD = [
    ("bf16 wrong K", lambda: activations(3, K + 32, seed=0), ValueError, r"x.shape\[1\] \(K\) must equal"),
    ("bf16 3-D", lambda: activations(6, K, seed=0).view(2, 3, K), ValueError, "x must be 2-D .*flatten"),
    (
        "bf16 wrong dtype",
        lambda: activations(3, K, seed=0).float(),
        ValueError,
        "x must have dtype torch.bfloat16",
    ),
    (
        "bf16 wrong device",
        lambda: torch.empty(3, K, dtype=torch.bfloat16, device="meta"),
        ValueError,
        "device",
    ),
    ("pair wrong K", lambda: _pair(k=K + 32), ValueError, r"x\[0\].shape\[1\] \(K\) must equal"),
    ("pair 3-D", lambda: (_pair(6)[0].view(2, 3, K), _pair(6)[1]), ValueError, r"x\[0\] must be 2-D"),
    ("pair q dtype", lambda: (activations(3, K, seed=0), _pair()[1]), ValueError, r"x\[0\] must have dtype"),
    (
        "pair wrong layout",
        lambda: _pair(layout="deepgemm"),
        ValueError,
        r"x holds deepgemm scales.*reads e8m0",
    ),
    (
        "pair swizzled",
        lambda: _pair(layout="swizzled_128x4"),
        ValueError,
        r"x holds swizzled_128x4 scales.*reads e8m0",
    ),
    (
        "MxTensor wrong layout",
        lambda: quantize_mxfp8(activations(3, K, seed=15), scale_layout="deepgemm"),
        ValueError,
        r"x holds deepgemm scales.*reads e8m0 \(layer.input_scale_layout\)",
    ),
    (
        "MxTensor wrong K",
        lambda: quantize_mxfp8(activations(3, K + 32, seed=15), scale_layout="e8m0"),
        ValueError,
        r"x.shape\[1\] \(K\) must equal in_features",
    ),
    (
        "pair scale dtype",
        lambda: (_pair()[0], _pair()[1].to(torch.int16)),
        ValueError,
        re.escape(
            "x[1] must be int32 [M, ceil(K/128)] (deepgemm), uint8 [M, K/32] (e8m0) or 1-D "
            "uint8 (swizzled_128x4); got torch.int16 (3, 4)"
        ),
    ),
    (
        "pair scale shape",
        lambda: (_pair()[0], torch.zeros(3, K // 32 + 1, dtype=torch.uint8)),
        ValueError,
        r"x\[1\]",
    ),
    ("pair scale rows", lambda: (_pair()[0], _pair(4)[1]), ValueError, r"x\[1\] must have shape"),
    (
        "scale not tensor",
        lambda: (_pair()[0], 3),
        TypeError,
        r"x\[1\] must be a torch.Tensor; got int$",
    ),
    ("three items", lambda: (*_pair(), None), ValueError, "x must be a pair .*; got a tuple of 3$"),
    ("not a tensor", lambda: "x", TypeError, "x must be a bf16 tensor .*; got str$"),
]


@pytest.mark.parametrize(
    ("make", "error", "match"), [c[1:] for c in BAD_FORWARD], ids=[c[0] for c in BAD_FORWARD]
)
def test_bad_forward_input_names_the_argument(make, error, match):
    layer, _ = _ready()
    with witness.capture() as records, pytest.raises(error, match=match):
        layer(make(), context="decode")
    assert records == []  # nothing ran, nothing claimed


def test_a_layer_without_pairs_still_checks_the_pair_it_dequantizes():
    layer = MxLinear(K, N, name="plain")
    load(layer, "bf16", seed=0)
    layer.process_weights_after_loading()
    with pytest.raises(ValueError, match=r"x\[1\] must have shape"):
        layer((_pair()[0], _pair(4)[1]), context="decode")
    with pytest.raises(ValueError, match=r"x\[1\] must be int32"):
        layer((_pair()[0], _pair()[1].float()), context="decode")


BAD_LOAD = [
    ("weight shape", lambda: (bf16_weight(N, K + 32, seed=0),), {}, ValueError, "weight must have shape"),
    (
        "weight dtype",
        lambda: (torch.zeros(N, K, dtype=torch.int8),),
        {},
        ValueError,
        "weight must be float8_e4m3fn",
    ),
    ("weight not tensor", lambda: ([[0.0]],), {}, TypeError, "weight must be a torch.Tensor; got list$"),
    (
        "fp8 without scale",
        lambda: (native_weight(N, K, block_rows=1, seed=0)[0],),
        {},
        ValueError,
        "^" + re.escape("scale is required with a float8_e4m3fn weight (E8M0 per 1x32 or 32x32 block)") + "$",
    ),
    (
        "scale block shape",
        lambda: (
            native_weight(N, K, block_rows=1, seed=0)[0],
            torch.zeros(N // 16, K // 32, dtype=torch.uint8),
        ),
        {},
        ValueError,
        "scale must hold one E8M0 scale per 1x32 block",
    ),
    (
        "scale dtype",
        lambda: (native_weight(N, K, block_rows=1, seed=0)[0], torch.zeros(N, K // 32, dtype=torch.int32)),
        {},
        ValueError,
        "scale must hold E8M0 bytes",
    ),
    (
        "float with scale",
        lambda: (bf16_weight(N, K, seed=0), torch.zeros(N, 4, dtype=torch.uint8)),
        {},
        ValueError,
        "scale must be None",
    ),
    (
        "bias on bias=False",
        lambda: (bf16_weight(N, K, seed=0),),
        {"bias": torch.zeros(N)},
        ValueError,
        "bias must be None: the layer was built with bias=False$",
    ),
]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"), [c[1:] for c in BAD_LOAD], ids=[c[0] for c in BAD_LOAD]
)
def test_bad_load_names_the_argument_and_keeps_the_ready_layer_intact(args, kwargs, error, match):
    layer, _ = _ready()
    x = activations(2, K, seed=16)
    before = layer(x, context="decode")
    ptrs = data_ptrs(layer)
    with pytest.raises(error, match=match):
        layer.load_weights(*args(), **kwargs)
    assert layer.state == "ready" and data_ptrs(layer) == ptrs
    assert_same_bits(layer(x, context="decode"), before, name="output after a refused load")


@pytest.mark.parametrize(
    ("bias", "error", "match"),
    [
        (
            None,
            TypeError,
            re.escape("bias must be a torch.Tensor [96] (the layer has bias=True); got NoneType"),
        ),
        (
            [0.0] * N,
            TypeError,
            re.escape("bias must be a torch.Tensor [96] (the layer has bias=True); got list"),
        ),
        (
            torch.zeros(N + 1),
            ValueError,
            re.escape("bias must be a float tensor of shape [96]; got torch.float32 [97]"),
        ),
        (torch.zeros(N, dtype=torch.int32), ValueError, "got torch.int32 \\[96\\]$"),
    ],
    ids=["bias missing", "bias a list", "bias shape", "bias dtype"],
)
def test_bias_is_required_when_asked_for(bias, error, match):
    layer = MxLinear(K, N, bias=True)
    with pytest.raises(error, match=match):
        layer.load_weights(bf16_weight(N, K, seed=0), bias=bias)
    assert layer.state == "requested"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((0, N), {}, ValueError, "in_features must be an int >= 1"),
        ((K, True), {}, ValueError, "out_features must be an int >= 1"),
        ((K, N), {"mxfp8_input": "yes"}, TypeError, "^mxfp8_input must be a bool; got str$"),
        ((K, N), {"bias": 1}, TypeError, "^bias must be a bool; got int$"),
        ((K, N), {"rounding": "up"}, ValueError, "rounding must be one of"),
        ((K, N), {"input_scale_layout": "nvfp4"}, ValueError, "scale_layout must be one of"),
        ((K, N), {"backend_status": 3}, TypeError, "backend_status must be callable; got int$"),
    ],
    ids=[
        "in_features",
        "out_features",
        "mxfp8_input",
        "bias",
        "rounding",
        "input_scale_layout",
        "backend_status",
    ],
)
def test_bad_construction_names_the_argument(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        MxLinear(*args, **kwargs)


def test_one_feature_in_or_out_is_a_layer():
    layer = MxLinear(1, 1)
    layer.load_weights(torch.full((1, 1), 2.0, dtype=torch.bfloat16))
    layer.process_weights_after_loading()
    x = torch.full((1, 1), 3.0, dtype=torch.bfloat16)
    assert layer(x, context="decode").item() == 6.0
