"""MxLinear on one GPU with the best MXFP8 backend here (``select_backend``): lifecycle, the fused paths,
a reload under a captured CUDA graph, and the witness naming the backend that ran (per shape and rows where
the checked-in Gluon table routes a call to the Gluon kernel: tests/support/gemm_routing.py).

Every GPU class registered below has a backend that consumes pairs (Triton on sm_89+; DeepGEMM or
FlashInfer where installed), so a device that ends up on the ``torch`` reference fails here: the fused
path these tests are about would otherwise be skipped silently.
"""

from __future__ import annotations

import pytest
import torch
from gemm_routing import expected_call_backend, expected_weight_backend
from mx_linear_cases import SOURCES, activations, data_ptrs, load
from mxfp8_gemm_cases import assert_gemm_matches_float64
from mxfp8_operands import checkpoint_weight, is_subnormal

from gpumatrix import register
from gpumatrix.compare import assert_diff, assert_same_bits
from mxfuse import witness
from mxfuse.formats import dequantize_mxfp8, quantize_mxfp8_reference
from mxfuse.gemm import backend_status, select_backend
from mxfuse.kernels import quantize_mxfp8
from mxfuse.layers import MxLinear, consuming_backend

register(
    on=("h100", "b200", "gb300", "5090"), gpus=1, est_time={"h100": 15, "b200": 90, "gb300": 90, "5090": 90}
)

# DeepSeek-V4.1-Flash wqkv_a, and a small shape whose N is no multiple of a large tile (Triton masks N).
SHAPES = [(1792, 5120), (320, 512)]
ROWS = (1, 16, 2048)


@pytest.fixture(scope="module")
def best() -> str:
    """The backend ``auto`` picks on this GPU; it must consume pairs, or these tests have nothing to test."""
    device = torch.device("cuda", torch.cuda.current_device())
    name, passed_over = select_backend(device)
    consumer = consuming_backend(device, backend_status(device))
    assert consumer.backend == name, (
        f"no MXFP8 backend on {torch.cuda.get_device_name(device)} consumes pairs: {consumer.reason}; "
        f"select_backend picked {name!r} (passed over: {passed_over})"
    )
    return name


def _layer(
    n: int, k: int, source: str, *, seed: int, mxfp8_input: bool = True
) -> tuple[MxLinear, torch.Tensor]:
    layer = MxLinear(k, n, mxfp8_input=mxfp8_input, name=f"gpu[{n}x{k}]", device="cuda")
    value = load(layer, source, seed=seed)
    layer.process_weights_after_loading()
    return layer, value


def _prepared_value(layer: MxLinear) -> torch.Tensor:
    return dequantize_mxfp8(layer.weight, layer.weight_scale, scale_layout="e8m0").to(torch.float64)


def _linear_records(records: list[dict]) -> list[dict]:
    return [r for r in records if r["path"].startswith("linear.")]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_lifecycle_and_fused_output_with_the_best_backend(best, n, k, source):
    layer, value = _layer(n, k, source, seed=1)
    result = layer.processed
    prepared = expected_weight_backend("cuda", n, k, default=best)
    assert (layer.takes_mxfp8_input, result.backend, result.weight_backend) == (True, prepared, prepared)
    assert layer.input_scale_layout is not None and layer.weight.is_cuda
    if source != "bf16":  # a native checkpoint is used exactly as loaded
        assert_same_bits(_prepared_value(layer), value, name="prepared native weight")
    w = _prepared_value(layer)
    for rows in ROWS:
        x = activations(rows, k, seed=rows, device="cuda")
        with witness.capture() as records:
            y = layer(x, context="decode")
        torch.cuda.synchronize()
        q, s = quantize_mxfp8_reference(x, scale_layout="e8m0")
        expected = dequantize_mxfp8(q, s, scale_layout="e8m0").to(torch.float64) @ w.T
        # Same quantized operands on both sides: only accumulation order and the bf16 rounding differ
        # (calc_diff of a bf16 rounding alone is ~1e-6; a wrong block scale is > 1e-3 in its row). Row
        # by row: one block scale doubled in one row of 2048 moves the whole tensor's calc_diff by ~1e-6.
        assert_diff(y, expected, max_diff=1e-5, per_row=True, name=f"rows={rows}")
        (record,) = _linear_records(records)
        ran = expected_call_backend("cuda", n, k, rows, default=best)
        assert (record["path"], record["backend"], record["rows"]) == ("linear.self_quantized", ran, rows)
        assert any(r["path"] == f"gemm.{ran}" for r in records)


def test_subnormal_weight_codes_zero_and_tiny_tokens(best):
    """A 32x32-block checkpoint weight whose small rows are E4M3 subnormal codes, and bf16 tokens that are
    zero or tiny (2**-60) beside normal ones: each output element against float64 of the same quantized
    operands (tests/support/mxfp8_gemm_cases.py), zero tokens exactly 0."""
    n, k = SHAPES[0]
    q, s = checkpoint_weight(n, k, seed=21, device="cuda")
    assert float(is_subnormal(q).float().mean()) > 0.05
    layer = MxLinear(k, n, mxfp8_input=True, name="subnormal weight", device="cuda")
    layer.load_weights(q, s)
    layer.process_weights_after_loading()
    x = activations(16, k, seed=22, device="cuda")
    x[[3, 11]] = 0.0
    x[[5, 13]] = (x[[5, 13]].float() * 2.0**-60).bfloat16()
    with witness.capture() as records:
        y = layer(x, context="decode")
    torch.cuda.synchronize()
    assert [r["path"] for r in _linear_records(records)] == ["linear.self_quantized"]
    a_q, a_s = quantize_mxfp8_reference(x, scale_layout="e8m0")
    per_row = s.repeat_interleave(32, dim=0)[:n]
    assert_gemm_matches_float64(y, a_q, a_s, q, per_row, name="subnormal weight")
    assert not (y[[3, 11]].view(torch.int16) & 0x7FFF).any(), "a zero token's outputs are 0"


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_forward_of_the_quantized_input_equals_forward_of_the_input_bit_for_bit(best, n, k, rows):
    layer, _ = _layer(n, k, "native_32x32", seed=2)
    x = activations(rows, k, seed=3, device="cuda")
    pair = quantize_mxfp8(x, rounding=layer.rounding, scale_layout=layer.input_scale_layout)
    with witness.capture() as records:
        y_pair = layer(pair, context="target_verify")
        y_bf16 = layer(x, context="target_verify")
    torch.cuda.synchronize()
    assert_same_bits(y_pair, y_bf16, name="pair vs bf16")
    paths = [(r["path"], r["backend"]) for r in _linear_records(records)]
    ran = expected_call_backend("cuda", n, k, rows, default=best)
    assert paths == [("linear.pair_consumed", ran), ("linear.self_quantized", ran)]


def test_the_gate_falls_back_at_2049_rows_and_in_prefill(best):
    n, k = SHAPES[1]
    layer, _ = _layer(n, k, "bf16", seed=4)
    x = activations(2049, k, seed=5, device="cuda")
    with witness.capture() as records:
        layer(x, context="decode")
        layer(x[:16], context="prefill")
    torch.cuda.synchronize()
    got = [(r["path"], r["failed"]) for r in _linear_records(records)]
    assert got == [("linear.bf16", ["rows"]), ("linear.bf16", ["mode"])]


def _capture(layer: MxLinear, given, context: str) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, list[dict]]:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up outside the capture
        for _ in range(2):
            layer(given, context=context)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records, torch.cuda.graph(graph):
        y = layer(given, context=context)
    return graph, y, records


@pytest.mark.parametrize(
    ("given", "context", "path"),
    [
        ("bf16", "decode", "linear.self_quantized"),
        ("pair", "decode", "linear.pair_consumed"),
        ("bf16", "prefill", "linear.bf16"),
    ],
    ids=["self-quantized", "pair consumed", "bf16 fallback"],
)
def test_reload_under_a_captured_graph_reads_the_new_weights(best, given, context, path):
    n, k = SHAPES[0]
    layer, _ = _layer(n, k, "bf16", seed=6)
    x = activations(16, k, seed=7, device="cuda")
    inputs = x if given == "bf16" else quantize_mxfp8(x, scale_layout=layer.input_scale_layout)
    graph, y, records = _capture(layer, inputs, context)
    (record,) = _linear_records(records)  # decided once, at capture
    ran = expected_call_backend("cuda", n, k, x.shape[0], default=best)
    assert record["path"] == path and record["backend"] == (None if path == "linear.bf16" else ran)
    graph.replay()
    torch.cuda.synchronize()
    before = y.clone()

    ptrs = data_ptrs(layer)
    load(layer, "native_32x32", seed=8)  # different values, same shapes
    result = layer.process_weights_after_loading()
    assert result.graph_safe and {u.action for u in result.updates} == {"copied"}
    assert data_ptrs(layer) == ptrs
    with witness.capture() as replayed:
        graph.replay()
        torch.cuda.synchronize()
    assert replayed == []  # replays run no host code

    fresh, _ = _layer(n, k, "native_32x32", seed=8)
    assert_same_bits(y, fresh(inputs, context=context), name="replay after reload vs fresh layer")
    assert not torch.equal(y, before)


def test_a_reload_that_changes_the_weight_format_rebinds_and_says_so():
    n, k = SHAPES[1]
    layer, _ = _layer(n, k, "bf16", seed=9, mxfp8_input=False)  # no request: a bf16 weight stays bf16
    old = layer.weight.data_ptr()
    load(layer, "native_1x32", seed=10)
    with witness.capture() as records:
        result = layer.process_weights_after_loading()
    assert result.rebound == ("weight",) and not result.graph_safe
    assert layer.weight.data_ptr() != old and layer.weight.dtype == torch.float8_e4m3fn
    assert [r["param"] for r in records if r["path"] == "linear.rebind"] == ["weight"]
