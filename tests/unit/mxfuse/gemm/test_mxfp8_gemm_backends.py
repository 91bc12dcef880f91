"""The deepgemm and flashinfer adapters on CPU, against fake libraries that enforce the real call contracts.

``tests/support/fake_blackwell.py`` holds the fakes; every rule they check cites its source (DeepGEMM 2.8.0
at deepseek-ai/DeepGEMM@0274ad7b, FlashInfer at flashinfer-ai/flashinfer@00054844 and its mm_mxfp8 docs).
A GPU is stood in for by replacing ``mxfuse.gemm.backend.cuda_capability``, the one place adapters read the
device's compute capability; the fakes then compute the product from the operands as the library would
read them, so each test checks the adapter's output end to end against the float64 oracle
(``|out - ref| <= 2**-8 |ref| + 2**-10 rms(ref)``, see ``mxfp8_gemm_cases``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import types

import pytest
import torch
from fake_blackwell import ContractError, FakeDeepGemm, FakeFlashInfer
from mxfp8_gemm_cases import activation_pair, assert_gemm_close, random_codes, random_scales, reference_numpy

import mxfuse.gemm.backend as gemm_backend
from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import MxfuseUnavailableError, witness
from mxfuse.formats import align, pack_ue8m0_deepgemm, scale_spec, scale_storage_view, swizzle_128x4
from mxfuse.gemm import AUTO_ORDER, backend_status, mxfp8_gemm, prepare_mxfp8_weight, select_backend
from mxfuse.gemm import api as gemm_api
from mxfuse.kernels.gemm import launch as gemm_launch

register(on=("cpu",), est_time=20)

CUDA0 = torch.device("cuda", 0)


@pytest.fixture(autouse=True)
def _fresh_backend_status():
    gemm_api._status.cache_clear()
    yield
    gemm_api._status.cache_clear()


def _pretend(monkeypatch, capability: tuple[int, int] | None) -> None:
    """Every device, the CPU included, reports ``capability`` (None: the real lookup) and, to the launch
    tables, no name (a device no measured table names)."""
    if capability is not None:
        monkeypatch.setattr(gemm_backend, "cuda_capability", lambda device: capability)
        monkeypatch.setattr(gemm_launch, "device_facts", lambda device: (None, 132))


@pytest.fixture
def fake_deep_gemm(monkeypatch) -> FakeDeepGemm:
    fake = FakeDeepGemm()
    monkeypatch.setitem(sys.modules, "deep_gemm", fake)
    return fake


@pytest.fixture
def fake_flashinfer(monkeypatch) -> FakeFlashInfer:
    fake = FakeFlashInfer()
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    return fake


def _operands(m: int, n: int, k: int, *, seed: int):
    aq, as_ = random_codes(m, k, seed=seed), random_scales(m, k, seed=seed + 1)
    wq, ws = random_codes(n, k, seed=seed + 2), random_scales(n, k, seed=seed + 3)
    return aq, as_, wq, ws


# --- deepgemm ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "k"), [(64, 160), (136, 2048), (1000, 288)])
@pytest.mark.parametrize("m", [1, 2, 15, 129])
def test_deepgemm_adapter_calls_fp8_gemm_nt_as_documented(monkeypatch, fake_deep_gemm, m, n, k):
    _pretend(monkeypatch, (10, 0))
    aq, as_, wq, ws = _operands(m, n, k, seed=m + n)
    w = prepare_mxfp8_weight(wq, ws)  # auto: deepgemm runs "here" and takes N % 8 == 0
    assert w.backend == "deepgemm" and w.passed_over == ()
    spec = scale_spec(n, k, scale_layout="deepgemm")  # int32 [N, ceil(K/128)], strides (1, align(N, 4))
    assert w.scale.dtype == torch.int32 and w.scale.stride() == (1, align(n, 4)) == spec.stride
    assert_same_bits(
        scale_storage_view(w.scale, spec), scale_storage_view(pack_ue8m0_deepgemm(ws), spec), name="w.scale"
    )
    pair = activation_pair(aq, as_, "deepgemm")
    with witness.capture() as records:
        out = mxfp8_gemm(pair, w, site="wqkv_a")
    (call,) = fake_deep_gemm.calls
    assert call["a"][0] is pair[0] and call["a"][1] is pair[1] and call["d"] is out
    assert call["b"][0] is w.qweight and call["b"][1] is w.scale
    assert call["recipe"] == (1, 1, 32) and call["c"] is None and call["disable_ue8m0_cast"] is False
    assert records[-1]["path"] == "gemm.deepgemm" and records[-1]["passed_over"] == {}
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


def test_deepgemm_propagates_nan_scale_rows_and_writes_into_out(monkeypatch, fake_deep_gemm):
    _pretend(monkeypatch, (10, 3))
    aq, as_, wq, ws = _operands(9, 64, 256, seed=5)
    as_[4, 3] = 0xFF
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    out = torch.full((9, 64), 7.0, dtype=torch.bfloat16)
    got = mxfp8_gemm(activation_pair(aq, as_, "deepgemm"), w, out=out, backend="deepgemm")
    assert got is out
    assert torch.isnan(out).any(dim=1).tolist() == [i == 4 for i in range(9)]
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out", equal_nan=True)


@pytest.mark.parametrize(
    ("capability", "expected"), [((9, 0), "sm_90"), ((12, 0), "sm_120"), ((8, 9), "sm_89")]
)
def test_deepgemm_is_never_used_off_sm100_even_when_deep_gemm_is_installed(
    monkeypatch, fake_deep_gemm, capability, expected
):
    _pretend(monkeypatch, capability)
    status = backend_status(CUDA0)["deepgemm"]
    assert not status.ok and f"sm_100 and sm_103 only; this device is {expected}" in status.reason
    with pytest.raises(MxfuseUnavailableError, match=rf"backend 'deepgemm' cannot run on cpu: .*{expected}"):
        prepare_mxfp8_weight(
            random_codes(64, 256, seed=1), random_scales(64, 256, seed=2), backend="deepgemm"
        )
    w = prepare_mxfp8_weight(random_codes(64, 256, seed=1), random_scales(64, 256, seed=2))
    assert w.backend != "deepgemm" and expected in dict(w.passed_over)["deepgemm"]
    assert fake_deep_gemm.calls == []


def test_auto_on_sm90_with_deep_gemm_installed_picks_the_next_backend(
    monkeypatch, fake_deep_gemm, fake_flashinfer
):
    _pretend(monkeypatch, (9, 0))
    assert AUTO_ORDER == ("deepgemm", "flashinfer", "gluon", "triton", "torch")
    name, passed_over = select_backend(CUDA0, n=7168, k=16384)
    assert name == "triton"
    assert "sm_100 and sm_103 only; this device is sm_90" in passed_over["deepgemm"]
    assert "this device is sm_90" in passed_over["flashinfer"]
    assert "not chosen automatically" in passed_over["gluon"]  # its measured table does not name this device
    assert fake_deep_gemm.calls == [] and fake_flashinfer.calls == []


def test_deepgemm_refuses_a_layout_it_does_not_read(monkeypatch, fake_deep_gemm):
    _pretend(monkeypatch, (10, 0))
    aq, as_, wq, ws = _operands(3, 64, 256, seed=7)
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    pair = activation_pair(aq, as_, "e8m0")
    out = torch.zeros((3, 64), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"a holds e8m0 scales; backend 'deepgemm' reads deepgemm"):
        mxfp8_gemm(pair, w, out=out, backend="deepgemm")
    assert not out.any()
    with witness.capture() as records:  # auto: the reference backend runs, and the record says why
        out = mxfp8_gemm(pair, w)
    assert records[-1]["path"] == "gemm.torch"
    assert records[-1]["passed_over"] == {"deepgemm": "deepgemm reads deepgemm activation scales, not e8m0"}
    assert fake_deep_gemm.calls == []
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


def test_deepgemm_refuses_an_output_that_tma_cannot_address(monkeypatch, fake_deep_gemm):
    _pretend(monkeypatch, (10, 0))
    aq, as_, wq, ws = _operands(3, 64, 256, seed=8)
    w = prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    out = torch.zeros(3 * 64 + 1, dtype=torch.bfloat16)[1:].view(3, 64)  # contiguous, 2 bytes off
    with (
        witness.capture() as records,
        pytest.raises(ValueError, match=r"out must start on a 16-byte boundary"),
    ):
        mxfp8_gemm(activation_pair(aq, as_, "deepgemm"), w, out=out)
    assert fake_deep_gemm.calls == [] and not out.any() and records == []


def test_triton_takes_any_n():
    assert gemm_api.BACKENDS["triton"].supports_shape(4099, 7168).ok
    assert not gemm_api.BACKENDS["triton"].supports_shape(4099, 48).ok


@pytest.mark.parametrize(
    ("n", "k", "ok", "match"),
    [
        (4099, 7168, False, r"N must be a multiple of 8"),
        (1000, 7168, True, r"N % 8 == 0"),
        (7168, 16384, True, r""),
        (8, 32, True, r""),
    ],
)
def test_deepgemm_shape_rule(n, k, ok, match):
    status = gemm_api.BACKENDS["deepgemm"].supports_shape(n, k)
    assert status.ok is ok and status.reason
    assert re.search(match, status.reason)


def test_deepgemm_library_problems_are_reasons(monkeypatch):
    _pretend(monkeypatch, (10, 0))
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # import raises ImportError
    assert "deep_gemm is not importable (ModuleNotFoundError" in backend_status(CUDA0)["deepgemm"].reason
    gemm_api._status.cache_clear()

    def broken_cuda_library(name):
        raise OSError("libcuda.so.1: cannot open shared object file")

    with monkeypatch.context() as patch:
        patch.setattr(gemm_backend, "importlib", types.SimpleNamespace(import_module=broken_cuda_library))
        reason = backend_status(CUDA0)["deepgemm"].reason
    assert "deep_gemm is not importable (OSError: libcuda.so.1" in reason
    gemm_api._status.cache_clear()
    old = types.ModuleType("deep_gemm")  # the 1.0 API: gemm_fp8_fp8_bf16_nt, no fp8_gemm_nt
    old.__version__ = "1.0.0"
    old.gemm_fp8_fp8_bf16_nt = lambda *args: None
    monkeypatch.setitem(sys.modules, "deep_gemm", old)
    reason = backend_status(CUDA0)["deepgemm"].reason
    assert "deep_gemm (1.0.0) has no fp8_gemm_nt" in reason and "build DeepGEMM >= 2 from source" in reason


# --- flashinfer ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("capability", [(10, 0), (12, 0)])
@pytest.mark.parametrize(("n", "k"), [(128, 128), (160, 2080), (1056, 2048)])
@pytest.mark.parametrize("m", [1, 15, 129])
def test_flashinfer_adapter_calls_mm_mxfp8_as_documented(monkeypatch, fake_flashinfer, capability, m, n, k):
    _pretend(monkeypatch, capability)
    monkeypatch.setitem(sys.modules, "deep_gemm", None)  # deepgemm cannot run: flashinfer is next
    fake_flashinfer.capability = capability[0] * 10 + capability[1]
    aq, as_, wq, ws = _operands(m, n, k, seed=m + k)
    w = prepare_mxfp8_weight(wq, ws)
    assert w.backend == "flashinfer" and "deepgemm" in dict(w.passed_over)
    assert_same_bits(w.scale, swizzle_128x4(ws), name="w.scale")
    pair = activation_pair(aq, as_, "swizzled_128x4")
    with witness.capture() as records:
        out = mxfp8_gemm(pair, w)
    (call,) = fake_flashinfer.calls
    assert call["a"] is pair[0] and call["a_descale"] is pair[1] and call["out"] is out
    assert call["b"].data_ptr() == w.qweight.data_ptr() and call["b_descale"] is w.scale
    assert call["backend"] == "cutlass" and call["use_8x4_sf_layout"] is False
    assert call["out_dtype"] == torch.bfloat16
    assert records[-1]["path"] == "gemm.flashinfer" and "deepgemm" in records[-1]["passed_over"]
    assert_gemm_close(out, reference_numpy(aq, as_, wq, ws), name="out")


@pytest.mark.parametrize(
    ("n", "k", "ok", "match"),
    [
        (4099, 7168, False, r"N must be a multiple of 32"),
        (1000, 7168, False, r"N must be a multiple of 32"),
        (96, 7168, False, r"at least 128"),
        (1792, 96, False, r"K must be a multiple of 32 and at least 128"),
        (1792, 5120, True, r"N, K >= 128"),
    ],
)
def test_flashinfer_shape_rule(n, k, ok, match):
    status = gemm_api.BACKENDS["flashinfer"].supports_shape(n, k)
    assert status.ok is ok
    assert re.search(match, status.reason)


def test_a_shape_no_vendor_library_takes_falls_through_with_reasons(
    monkeypatch, fake_deep_gemm, fake_flashinfer
):
    _pretend(monkeypatch, (10, 0))
    wq, ws = random_codes(4099, 256, seed=3), random_scales(4099, 256, seed=4)
    w = prepare_mxfp8_weight(wq, ws)
    passed = dict(w.passed_over)
    assert (
        "N must be a multiple of 8" in passed["deepgemm"]
        and "N must be a multiple of 32" in passed["flashinfer"]
    )
    with pytest.raises(
        ValueError, match=r"weight of shape \[N, K\] = \[4099, 256\] cannot be used by backend 'deepgemm'"
    ):
        prepare_mxfp8_weight(wq, ws, backend="deepgemm")
    assert fake_deep_gemm.calls == [] and fake_flashinfer.calls == []


def test_flashinfer_refuses_a_misaligned_activation(monkeypatch, fake_flashinfer):
    _pretend(monkeypatch, (10, 0))
    aq, as_, wq, ws = _operands(2, 128, 256, seed=9)
    w = prepare_mxfp8_weight(wq, ws, backend="flashinfer")
    shifted = torch.empty(2 * 256 + 8, dtype=torch.float8_e4m3fn)[8:].view(2, 256)
    shifted.copy_(aq)
    with pytest.raises(ValueError, match=r"a.data must start on a 16-byte boundary"):
        mxfp8_gemm(activation_pair(shifted, as_, "swizzled_128x4"), w)
    assert fake_flashinfer.calls == []


# --- availability on every device class ----------------------------------------------------------------

_AVAILABILITY = [
    # device, capability, backend, ok, reason contains
    ("cpu", None, "deepgemm", False, "needs a CUDA device of sm_100 or sm_103; got cpu"),
    ("cpu", None, "flashinfer", False, "needs a CUDA device of sm_100+ or sm_120; got cpu"),
    ("cpu", None, "triton", False, "runs on CUDA devices; this is cpu"),
    ("cpu", None, "torch", True, "any device"),
    ("sm_80", (8, 0), "deepgemm", False, "this device is sm_80"),
    ("sm_80", (8, 0), "flashinfer", False, "this device is sm_80"),
    ("sm_80", (8, 0), "triton", False, "needs FP8 (sm_89+); cuda:0 is sm_80"),
    ("sm_80", (8, 0), "torch", True, "any device"),
    ("sm_89", (8, 9), "deepgemm", False, "this device is sm_89"),
    ("sm_89", (8, 9), "flashinfer", False, "this device is sm_89"),
    ("sm_89", (8, 9), "triton", True, "on sm_89"),
    ("sm_90", (9, 0), "deepgemm", False, "sm_100 and sm_103 only; this device is sm_90"),
    ("sm_90", (9, 0), "flashinfer", False, "this device is sm_90"),
    ("sm_90", (9, 0), "triton", True, "on sm_90"),
    ("sm_90", (9, 0), "torch", True, "any device"),
    ("sm_100", (10, 0), "deepgemm", True, "deep_gemm.fp8_gemm_nt on sm_100"),
    ("sm_100", (10, 0), "flashinfer", True, "flashinfer.mm_mxfp8 (CUTLASS) on sm_100"),
    ("sm_100", (10, 0), "triton", True, "on sm_100"),
    ("sm_103", (10, 3), "deepgemm", True, "deep_gemm.fp8_gemm_nt on sm_103"),
    ("sm_103", (10, 3), "flashinfer", True, "flashinfer.mm_mxfp8 (CUTLASS) on sm_103"),
    ("sm_103", (10, 3), "triton", True, "on sm_103"),
    ("sm_120", (12, 0), "deepgemm", False, "this device is sm_120"),
    ("sm_120", (12, 0), "flashinfer", True, "flashinfer.mm_mxfp8 (CUTLASS) on sm_120"),
    ("sm_120", (12, 0), "triton", True, "on sm_120"),
    ("sm_120", (12, 0), "torch", True, "any device"),
]


@pytest.mark.parametrize(
    ("label", "capability", "backend", "ok", "reason"),
    _AVAILABILITY,
    ids=[f"{row[0]}-{row[2]}" for row in _AVAILABILITY],
)
def test_availability_and_its_reason_on_each_device(
    monkeypatch, fake_deep_gemm, fake_flashinfer, label, capability, backend, ok, reason
):
    _pretend(monkeypatch, capability)
    status = backend_status("cpu" if capability is None else CUDA0)[backend]
    assert status.ok is ok and reason in status.reason


def test_importing_and_asking_on_a_cpu_does_not_import_the_libraries():
    code = (
        "import sys, mxfuse.gemm as g; g.backend_status('cpu'); g.select_backend('cpu', n=64, k=64); "
        "print(sorted(m for m in ('deep_gemm', 'flashinfer') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_fakes_refuse_what_the_libraries_refuse():
    """The fakes are only worth something if they fail on a wrong call: one wrong argument each."""
    dg = FakeDeepGemm()
    a = (
        torch.zeros(2, 256, dtype=torch.float8_e4m3fn),
        pack_ue8m0_deepgemm(torch.zeros(2, 8, dtype=torch.uint8)),
    )
    b = (
        torch.zeros(64, 256, dtype=torch.float8_e4m3fn),
        pack_ue8m0_deepgemm(torch.zeros(64, 8, dtype=torch.uint8)),
    )
    d = torch.zeros(2, 64, dtype=torch.bfloat16)
    with pytest.raises(ContractError, match=r"sfa shape \(2, 2\)"):  # the default recipe is gran_k 128
        dg.fp8_gemm_nt(a, b, d)
    with pytest.raises(ContractError, match="sfa must be MN-major"):
        dg.fp8_gemm_nt((a[0], a[1].contiguous()), b, d, recipe=(1, 1, 32))
    with pytest.raises(ContractError, match="packed UE8M0 scales are int32"):
        dg.fp8_gemm_nt((a[0], torch.zeros(2, 8, dtype=torch.uint8)), b, d, recipe=(1, 1, 32))
    with pytest.raises(RuntimeError, match="Unsupported architecture"):
        FakeDeepGemm(arch_major=9).fp8_gemm_nt(a, b, d, recipe=(1, 1, 32))
    fi = FakeFlashInfer()
    sa, sb = (
        swizzle_128x4(torch.zeros(2, 8, dtype=torch.uint8)),
        swizzle_128x4(torch.zeros(128, 8, dtype=torch.uint8)),
    )
    wq = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
    out = torch.zeros(2, 128, dtype=torch.bfloat16)
    with pytest.raises(ContractError, match="b must be column-major"):
        fi.mm_mxfp8(a[0], wq.t().contiguous(), sa, sb, out=out, backend="cutlass")
    with pytest.raises(ContractError, match="out is written by cutlass/cudnn only"):
        fi.mm_mxfp8(a[0], wq.t(), sa, sb, out=out, backend="trtllm")
    with pytest.raises(ContractError, match="a_descale length"):
        fi.mm_mxfp8(a[0], wq.t(), sa[:-512], sb, out=out, backend="cutlass")
