"""The fused-path gate as a pure function: every rule's boundary, the consumer rule per device, the
alignment table, and the forward context the gate reads. No layer and no GPU: devices are plain values."""

from __future__ import annotations

import threading

import pytest
import torch

from gpumatrix import register
from mxfuse.gemm import Availability
from mxfuse.layers import (
    DEFAULT_CONTEXT,
    MAX_FUSED_ROWS,
    RULES,
    Consumer,
    ForwardContext,
    ForwardMode,
    MxLinear,
    consuming_backend,
    current_forward_context,
    forward_context,
    fused_mxfp8_rows,
    parse_forward_context,
    resolve_forward_context,
    shape_support,
)

register(on=("cpu",), est_time=2)

OK = Availability(True, "available")
DECODE = ForwardContext(ForwardMode.DECODE)
BASE = {
    "rows": 16,
    "n": 1792,
    "k": 5120,
    "consumer": Consumer("triton", "triton: sm_90"),
    "context": DECODE,
    "takes_mxfp8_input": True,
}

GATE = [
    # (id, changes to BASE, fused, failed rules, reason fragment)
    ("decode", {}, True, (), "decode, 16 rows <= 2048, N = 1792 and K = 5120 aligned for triton"),
    ("target verify", {"context": ForwardContext("target_verify")}, True, (), "target_verify"),
    ("0 rows", {"rows": 0}, True, (), "0 rows"),
    ("1 row", {"rows": 1}, True, (), "1 rows <= 2048"),
    ("2048 rows", {"rows": 2048}, True, (), "2048 rows <= 2048"),
    ("2049 rows", {"rows": 2049}, False, ("rows",), "2049 rows > 2048"),
    (
        "prefill",
        {"context": ForwardContext("prefill")},
        False,
        ("mode",),
        "prefill is not decode or target_verify",
    ),
    ("extend", {"context": ForwardContext("extend")}, False, ("mode",), "extend is not decode"),
    ("no mode", {"context": None}, False, ("mode",), "no forward mode given"),
    (
        "sequence parallel",
        {"context": ForwardContext("decode", sequence_parallel=True)},
        False,
        ("mode",),
        "sequence parallel",
    ),
    ("fact false", {"takes_mxfp8_input": False, "fact_reason": "not asked"}, False, ("fact",), "(not asked)"),
    ("no consumer", {"consumer": Consumer(None, "nothing here")}, False, ("device",), "nothing here"),
    ("triton K % 32", {"k": 5136}, False, ("alignment",), "triton: K must be a positive multiple of 32"),
    ("triton odd N", {"n": 1795}, True, (), "N = 1795"),
    ("deepgemm aligned", {"consumer": Consumer("deepgemm", "d")}, True, (), "aligned for deepgemm"),
    (
        "deepgemm N % 8",
        {"consumer": Consumer("deepgemm", "d"), "n": 1796},
        False,
        ("alignment",),
        "N must be a multiple of 8",
    ),
    (
        "flashinfer N % 32",
        {"consumer": Consumer("flashinfer", "f"), "n": 1800},
        False,
        ("alignment",),
        "N must be a multiple of 32",
    ),
    ("torch K % 32", {"consumer": Consumer("torch", "t"), "k": 48}, False, ("alignment",), "K = 48"),
    (
        "unknown backend fails closed",
        {"consumer": Consumer("cublas", "c")},
        False,
        ("alignment",),
        "no MXFP8 GEMM backend is named 'cublas'",
    ),
    (
        "every rule at once",
        {
            "consumer": Consumer(None, "no device"),
            "context": ForwardContext("prefill"),
            "rows": 4096,
            "takes_mxfp8_input": False,
        },
        False,
        ("device", "mode", "rows", "fact"),
        "no device; forward mode prefill",
    ),
    (
        "alignment with the rest",
        {"k": 5136, "context": None, "rows": 2049, "takes_mxfp8_input": False},
        False,
        ("alignment", "mode", "rows", "fact"),
        "got 5136",
    ),
]


@pytest.mark.parametrize(
    ("changes", "fused", "failed", "fragment"), [g[1:] for g in GATE], ids=[g[0] for g in GATE]
)
def test_gate_table(changes, fused, failed, fragment):
    decision = fused_mxfp8_rows(**{**BASE, **changes})
    assert (decision.fused, bool(decision), decision.failed) == (fused, fused, failed)
    assert fragment in decision.reason
    assert decision.backend == {**BASE, **changes}["consumer"].backend
    # One reason per failing rule, in RULES order.
    assert decision.reason.count("; ") + 1 == max(len(failed), 1)
    assert list(failed) == [r for r in RULES if r in failed]


def test_the_row_limit_is_2048():
    assert MAX_FUSED_ROWS == 2048


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"rows": -1}, ValueError, "rows must be an int >= 0"),
        ({"rows": True}, ValueError, "rows must be an int >= 0"),
        ({"rows": 2.0}, ValueError, "rows must be an int >= 0"),
        ({"n": 0}, ValueError, "n must be an int >= 1"),
        ({"k": None}, ValueError, "k must be an int >= 1"),
        (
            {"consumer": "triton"},
            TypeError,
            r"consumer must be a Consumer \(see consuming_backend\); got str$",
        ),
        ({"context": "decode"}, TypeError, "context must be a ForwardContext or None; got str$"),
        ({"takes_mxfp8_input": 1}, TypeError, "takes_mxfp8_input must be a bool; got int$"),
    ],
    ids=["rows < 0", "rows bool", "rows float", "n 0", "k None", "consumer str", "context str", "fact int"],
)
def test_gate_bad_input_names_the_argument(changes, error, match):
    with pytest.raises(error, match=match):
        fused_mxfp8_rows(**{**BASE, **changes})


# Each rule's words in full, alone and after the others ("; " between rules, in RULES order).
REASONS = [
    (
        {"context": None},
        "no forward mode given (pass context= to the layer or use mxfuse.layers.forward_context)",
    ),
    ({"context": ForwardContext("extend")}, "forward mode extend is not decode or target_verify"),
    (
        {"context": ForwardContext("target_verify", sequence_parallel=True)},
        "sequence parallel: the rows are split across ranks",
    ),
    ({"takes_mxfp8_input": False}, "the layer's takes_mxfp8_input is False"),
    (
        {"takes_mxfp8_input": False, "fact_reason": "not asked"},
        "the layer's takes_mxfp8_input is False (not asked)",
    ),
    (
        {"consumer": Consumer("torch", "t"), "k": 48, "rows": 2049},
        # The backend's own "; " becomes ", ": "; " separates the rules.
        "torch: K must be a positive multiple of 32 (one scale block), got K = 48; 2049 rows > 2048",
    ),
]


@pytest.mark.parametrize(
    ("changes", "reason"),
    REASONS,
    ids=["no mode", "extend", "sequence parallel", "fact", "fact with reason", "alignment and rows"],
)
def test_each_rules_reason_in_full(changes, reason):
    assert fused_mxfp8_rows(**{**BASE, **changes}).reason == reason


CONSUMERS = [
    # (id, device, status, backend, reason fragments)
    ("cpu torch counts", "cpu", {"torch": OK}, "torch", ["torch: available"]),
    (
        "cuda torch does not count",
        "cuda:0",
        {"torch": OK},
        None,
        ["no backend on cuda:0", "torch: does not count on cuda", "slower than the bf16 path"],
    ),
    (
        "sm_80 without triton",
        "cuda:0",
        {"triton": Availability(False, "needs sm_89+; cuda:0 is sm_80"), "torch": OK},
        None,
        ["triton: needs sm_89+; cuda:0 is sm_80", "torch: does not count"],
    ),
    (
        "hopper skips deepgemm",
        "cuda:0",
        {"deepgemm": Availability(False, "needs sm_100/sm_103; cuda:0 is sm_90"), "triton": OK, "torch": OK},
        "triton",
        ["triton: available"],
    ),
    ("first available wins", "cuda:1", {"deepgemm": OK, "triton": OK}, "deepgemm", ["deepgemm"]),
    ("nothing registered", "cpu", {}, None, ["no MXFP8 GEMM backend is registered for cpu"]),
]


@pytest.mark.parametrize(
    ("device", "status", "backend", "fragments"), [c[1:] for c in CONSUMERS], ids=[c[0] for c in CONSUMERS]
)
def test_consuming_backend_per_device(device, status, backend, fragments):
    consumer = consuming_backend(torch.device(device), status)
    assert consumer.backend == backend and bool(consumer) == (backend is not None)
    for fragment in fragments:
        assert fragment in consumer.reason


@pytest.mark.parametrize(
    "shape", [None, (1792, 5120)], ids=["no shape", "a shape measured on another device"]
)
def test_a_layer_takes_gluon_only_where_auto_would(shape, monkeypatch):
    """Hopper with the Gluon kernel available: while its measured table does not name the device and the
    weight's shape (here a device without a name, as a CPU reports: the table's H200 entry for this shape
    is not its), the layer's consumer is the Triton kernel, as ``select_backend`` picks (a layer never
    runs a kernel by name that ``auto`` passes over)."""
    from mxfuse.kernels.gemm import launch as gemm_launch

    monkeypatch.setattr(gemm_launch, "device_facts", lambda device: (None, 132))
    status = {"gluon": Availability(True, "Gluon wgmma and TMA on sm_90"), "triton": OK, "torch": OK}
    n, k = shape if shape else (None, None)
    consumer = consuming_backend(torch.device("cuda", 0), status, n=n, k=k)
    assert consumer.backend == "triton" and consumer.reason == "triton: available"


def test_a_layer_on_hopper_prepares_its_weight_for_triton_not_gluon(monkeypatch):
    """The whole processing on a pretend sm_90 (the CPU tensors stand in): the weight is prepared for the
    backend ``auto`` picks."""
    from mxfuse.gemm import api as gemm_api
    from mxfuse.gemm.gluon_backend import GLUON
    from mxfuse.gemm.triton_backend import TRITON

    status = {"gluon": Availability(True, "pretend"), "triton": Availability(True, "pretend"), "torch": OK}
    for backend in (GLUON, TRITON):
        monkeypatch.setattr(type(backend), "available", lambda self, device: Availability(True, "pretend"))
    gemm_api._status.cache_clear()
    try:
        layer = MxLinear(256, 64, mxfp8_input=True, name="hopper", backend_status=lambda device: status)
        layer.load_weights(torch.randn(64, 256, dtype=torch.bfloat16))
        result = layer.process_weights_after_loading()
    finally:
        gemm_api._status.cache_clear()
    assert (result.backend, result.weight_backend) == ("triton", "triton")


def test_a_device_without_a_consumer_lists_every_backend_passed_over():
    status = {"triton": Availability(False, "needs sm_89+"), "torch": OK}
    assert consuming_backend(torch.device("cuda", 0), status).reason == (
        "no backend on cuda:0 consumes an MXFP8 pair (triton: needs sm_89+; torch: does not count on cuda "
        "(dequantize + fp32 matmul is slower than the bf16 path))"
    )


@pytest.mark.parametrize(
    ("backend", "n", "k", "ok"),
    [
        ("torch", 1, 32, True),
        ("torch", 7, 48, False),
        ("triton", 1795, 5120, True),
        ("triton", 1792, 5136, False),
        ("deepgemm", 64, 128, True),
        ("deepgemm", 1796, 128, False),
        ("deepgemm", 64, 160, True),
        ("flashinfer", 128, 128, True),
        ("flashinfer", 8, 128, False),
        ("flashinfer", 1800, 5120, False),
        ("nvfp4", 128, 128, False),
    ],
)
def test_shape_support_is_the_backends_own_rule(backend, n, k, ok):
    from mxfuse.gemm import BACKENDS

    assert shape_support(backend, n=n, k=k).ok is ok
    if backend in BACKENDS:
        assert shape_support(backend, n=n, k=k) == BACKENDS[backend].supports_shape(n, k)


# ---- forward context ------------------------------------------------------------------------------


def test_forward_context_nests_and_restores():
    assert current_forward_context() is None
    with forward_context("decode") as outer:
        assert current_forward_context() == outer == ForwardContext(ForwardMode.DECODE)
        with forward_context(ForwardMode.PREFILL, sequence_parallel=True):
            assert current_forward_context() == ForwardContext(ForwardMode.PREFILL, True)
        assert current_forward_context() is outer
    assert current_forward_context() is None


def test_forward_context_is_not_shared_with_other_threads():
    seen: list[ForwardContext | None] = []
    with forward_context("decode"):
        thread = threading.Thread(target=lambda: seen.append(current_forward_context()))
        thread.start()
        thread.join()
    assert seen == [None]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("decode", ForwardContext(ForwardMode.DECODE)),
        (ForwardMode.TARGET_VERIFY, ForwardContext(ForwardMode.TARGET_VERIFY)),
        (ForwardContext("extend", True), ForwardContext(ForwardMode.EXTEND, True)),
    ],
)
def test_parse_forward_context(value, expected):
    assert parse_forward_context(value) == expected


def test_a_mode_given_as_a_string_becomes_a_forward_mode():
    context = ForwardContext("prefill")
    assert context.mode is ForwardMode.PREFILL and context.mode.value == "prefill"
    decision = fused_mxfp8_rows(**{**BASE, "context": ForwardContext("target_verify")})
    assert decision.fused and decision.reason.startswith("target_verify, 16 rows")


def test_resolve_forward_context_prefers_the_argument_then_the_block_then_decode():
    assert resolve_forward_context(None) == (DEFAULT_CONTEXT, "default")
    assert DEFAULT_CONTEXT == ForwardContext(ForwardMode.DECODE)
    with forward_context("prefill") as ambient:
        assert resolve_forward_context(None) == (ambient, "forward_context")
        assert resolve_forward_context("target_verify") == (ForwardContext("target_verify"), "argument")


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: parse_forward_context("decoding"), ValueError, "context must be one of 'decode'"),
        (
            lambda: parse_forward_context(3),
            TypeError,
            "context must be a ForwardContext, a ForwardMode, one of its string values or None; got int$",
        ),
        (
            lambda: ForwardContext("warmup"),
            ValueError,
            "mode must be one of 'decode', 'target_verify', 'prefill', 'extend'; got 'warmup'$",
        ),
        (
            lambda: ForwardContext("decode", sequence_parallel=1),
            TypeError,
            "sequence_parallel must be a bool; got int$",
        ),
        (lambda: forward_context("idle").__enter__(), ValueError, "mode must be one of"),
        (lambda: resolve_forward_context("decoding"), ValueError, "^context must be one of 'decode'"),
        (lambda: resolve_forward_context(3, argument="ctx"), TypeError, "^ctx must be a ForwardContext"),
    ],
    ids=[
        "unknown mode string",
        "not a mode",
        "bad mode",
        "sequence_parallel int",
        "context manager",
        "resolve names context",
        "resolve names its argument",
    ],
)
def test_forward_context_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_layer_on_a_gluon_weight_runs_triton_where_the_table_has_no_win(monkeypatch):
    """A weight prepared for Gluon (the table names its shape, measured faster at M = 17-64) is run by
    Gluon only at those M: at M = 1 the layer's call goes to the Triton kernel, which reads the same
    weight, as ``mxfp8_gemm(..., backend="auto")`` would; the layer's witness names the kernel that ran.
    The CPU tensors stand in for a pretend sm_90; each backend's ``run`` is recorded and computes with
    the torch reference."""
    from mxfuse import witness
    from mxfuse.gemm import api as gemm_api
    from mxfuse.gemm.gluon_backend import GLUON
    from mxfuse.gemm.torch_backend import TORCH
    from mxfuse.gemm.triton_backend import TRITON
    from mxfuse.kernels import quantize_mxfp8
    from mxfuse.kernels.gemm import gluon_launch
    from mxfuse.kernels.gemm import launch as gemm_launch
    from mxfuse.kernels.gemm.gluon_launch import GluonConfig

    n, k = 128, 256
    monkeypatch.setattr(gemm_launch, "device_facts", lambda device: (None, 132))
    monkeypatch.setattr(gluon_launch, "gluon_table", lambda: {"": {(n, k): [(17, 64, GluonConfig())]}})
    ran = []
    for backend in (GLUON, TRITON):
        monkeypatch.setattr(type(backend), "available", lambda self, device: Availability(True, "pretend"))
        monkeypatch.setattr(
            type(backend),
            "run",
            lambda self, a, w, out: (ran.append((self.name, a.shape[0])), TORCH.run(a, w, out)),
        )
    status = {"gluon": Availability(True, "pretend"), "triton": Availability(True, "pretend"), "torch": OK}
    gemm_api._status.cache_clear()
    try:
        layer = MxLinear(k, n, mxfp8_input=True, name="wo_b", backend_status=lambda device: status)
        layer.load_weights(torch.randn(n, k, dtype=torch.bfloat16))
        result = layer.process_weights_after_loading()
        assert (result.backend, result.weight_backend) == ("gluon", "gluon")
        with witness.capture() as records:
            for m in (1, 16, 17, 64, 65):
                x = quantize_mxfp8(
                    torch.randn(m, k, dtype=torch.bfloat16), scale_layout=layer.input_scale_layout
                )
                layer(x, context="decode")
    finally:
        gemm_api._status.cache_clear()
    expected = [("triton", 1), ("triton", 16), ("gluon", 17), ("gluon", 64), ("triton", 65)]
    assert ran == expected
    assert [(r["backend"], r["rows"]) for r in records if r["path"] == "linear.pair_consumed"] == expected
