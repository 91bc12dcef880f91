"""AMD and Intel GPUs: detected through fakes of amd-smi, rocm-smi, xpu-smi, sycl-ls and torch, classified
by the matrix's AMD (gfx) and Intel (device name) classes, with the same skip reasons as NVIDIA's."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from gpumatrix import register
from gpumatrix.config import parse_matrix
from gpumatrix.hardware import detection as hardware
from gpumatrix.hardware import vendor_probes
from gpumatrix.hardware.detection import Hardware, detect
from gpumatrix.registry.discovery import build_registry
from gpumatrix.running.gating import evaluate_hardware

register(on=("cpu",), est_time=10)

MATRIX = parse_matrix(
    """\
classes:
  cpu: {compute_capability: []}
  h100: {compute_capability: ["9.0"]}
  mi300x: {vendor: amd, gfx: [gfx942], device_names: [MI300X]}
  mi355x: {vendor: amd, gfx: [gfx950]}
  pvc: {vendor: intel, device_names: [Data Center GPU Max]}
runners:
  - {label: cpu, class: cpu, gpus: 0, runs_on: [u], timeout_minutes: 9}
  - {label: h, class: h100, gpus: 1, runs_on: [h], timeout_minutes: 9}
  - {label: m, class: mi300x, gpus: 1, runs_on: [m], timeout_minutes: 9}
  - {label: m5, class: mi355x, gpus: 1, runs_on: [m5], timeout_minutes: 9}
  - {label: p, class: pvc, gpus: 1, runs_on: [p], timeout_minutes: 9}
"""
)
AMD_SMI = [
    {"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942"}},
    {"gpu": 1, "asic": {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942"}},
]
ROCM_SMI = {"card0": {"Card Series": "AMD Instinct MI355X", "GFX Version": "gfx950"}, "system": {}}
XPU_SMI = {"device_list": [{"device_id": 0, "device_name": "Intel(R) Data Center GPU Max 1550"}]}
SYCL_LS = (
    "[opencl:cpu][opencl:0] Intel(R) OpenCL, Intel(R) Xeon(R) Platinum 8480+ OpenCL 3.0 [2024.18.6]\n"
    "[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero, "
    "Intel(R) Data Center GPU Max 1100 12.60.7 [1.3.29735]\n"
)
FAKE_TORCH = """
import os
from types import SimpleNamespace
n = int(os.environ.get("FAKE_DEVICES", "0"))
kind = os.environ.get("FAKE_KIND")
props = lambda i: SimpleNamespace(name=os.environ["FAKE_NAME"], gcnArchName="gfx942:sramecc+:xnack-")
cuda = SimpleNamespace(is_available=lambda: kind == "hip" and n > 0, device_count=lambda: n,
                       get_device_properties=props)
xpu = SimpleNamespace(is_available=lambda: kind == "xpu" and n > 0, device_count=lambda: n,
                      get_device_properties=props)
version = SimpleNamespace(hip="6.3.1" if kind == "hip" else None, cuda=None)
"""


def _tool(bin_dir: Path, name: str, output: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A machine with no NVIDIA driver, both vendors' drivers, and only the tools a test installs."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(hardware, "_nvidia_driver_present", lambda: False)
    monkeypatch.setattr(hardware, "amd_driver_present", lambda: True)
    monkeypatch.setattr(hardware, "intel_driver_present", lambda: True)
    (tmp_path / "bin").mkdir()
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    return tmp_path


@pytest.mark.parametrize(
    ("tools", "extra", "source", "gpu_class", "count", "described"),
    [
        (
            {"amd-smi": json.dumps(AMD_SMI)},
            {},
            "amd-smi",
            "mi300x",
            2,
            "2 x mi300x (AMD Instinct MI300X, gfx942)",
        ),
        (
            {"amd-smi": "garbage", "rocm-smi": json.dumps(ROCM_SMI)},
            {},
            "rocm-smi",
            "mi355x",
            1,
            "1 x mi355x (AMD Instinct MI355X, gfx950)",
        ),
        (
            {},
            {"FAKE_KIND": "hip", "FAKE_DEVICES": "1", "FAKE_NAME": "AMD Instinct MI300X"},
            "torch-hip",
            "mi300x",
            1,
            "1 x mi300x (AMD Instinct MI300X, gfx942)",
        ),
        (
            {"xpu-smi": json.dumps(XPU_SMI)},
            {},
            "xpu-smi",
            "pvc",
            1,
            "1 x pvc (Intel(R) Data Center GPU Max 1550)",
        ),
        ({"sycl-ls": SYCL_LS}, {}, "sycl-ls", "pvc", 1, "1 x pvc (Intel(R) Data Center GPU Max 1100)"),
        (
            {},
            {"FAKE_KIND": "xpu", "FAKE_DEVICES": "2", "FAKE_NAME": "Intel(R) Data Center GPU Max 1550"},
            "torch-xpu",
            "pvc",
            2,
            "2 x pvc (Intel(R) Data Center GPU Max 1550)",
        ),
        (
            {"sycl-ls": SYCL_LS.replace("Data Center GPU Max 1100", "Arc(TM) A770 Graphics")},
            {},
            "sycl-ls",
            "unknown",
            1,
            "1 x unknown (Intel(R) Arc(TM) A770 Graphics)",
        ),
        ({}, {}, "none", "cpu", 0, "cpu"),
    ],
    ids=["amd-smi", "rocm-smi", "torch-hip", "xpu-smi", "sycl-ls", "torch-xpu", "intel-unknown", "nothing"],
)
def test_vendor_tools_and_torch_are_asked_in_order(
    machine: Path,
    tools: dict[str, str],
    extra: dict[str, str],
    source: str,
    gpu_class: str,
    count: int,
    described: str,
) -> None:
    for name, output in tools.items():
        _tool(machine / "bin", name, output)
    environ = {"PATH": f"{machine / 'bin'}:/usr/bin:/bin", "PYTHONPATH": str(machine / "site"), **extra}
    found = detect(MATRIX, environ=environ)
    assert (found.source, found.gpu_class, found.count) == (source, gpu_class, count)
    assert found.describe() == described


def test_the_drivers_gate_the_vendor_probes(machine: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tool(machine / "bin", "amd-smi", json.dumps(AMD_SMI))
    monkeypatch.setattr(hardware, "amd_driver_present", lambda: False)
    assert detect(MATRIX, environ={"PATH": str(machine / "bin")}).gpu_class == "cpu"


@pytest.mark.parametrize(
    ("override", "on", "reason"),
    [
        ("1xmi300x", ("h100",), "needs 1 x h100; this machine: 1 x mi300x (fake mi300x, gfx942)"),
        ("1xpvc", ("mi300x",), "needs 1 x mi300x; this machine: 1 x pvc (fake pvc (Data Center GPU Max))"),
        ("1xmi300x", ("mi300x",), None),
        ("2xpvc", ("pvc", "cpu"), None),
    ],
)
def test_skips_name_both_sides_as_for_nvidia(override: str, on: tuple[str, ...], reason: str | None) -> None:
    found = detect(MATRIX, environ={"GPUMATRIX_HARDWARE": override})
    source = f"from gpumatrix import register\nregister(on={on!r}, est_time=1)\n"
    (registration,) = build_registry({"tests/test_x.py": source}, MATRIX).require_ok().files
    skip = evaluate_hardware(registration, found)
    assert (skip.reason if skip else None) == reason


def test_an_amd_machine_round_trips_through_its_dict() -> None:
    found = detect(MATRIX, environ={"GPUMATRIX_HARDWARE": "2xmi300x"})
    assert Hardware.from_dict(found.to_dict()) == found
    assert found.to_dict()["architectures"] == ["gfx942", "gfx942"]


@pytest.mark.parametrize(
    ("yaml_class", "message"),
    [
        ("{vendor: amd, compute_capability: ['9.0']}", "a amd class has no compute capability"),
        ("{vendor: amd}", "needs 'gfx'"),
        ("{vendor: amd, gfx: [sm90]}", "is not a gfx architecture"),
        ("{vendor: intel}", "needs 'device_names'"),
        ("{vendor: arm, compute_capability: ['9.0']}", "is not one of nvidia, amd, intel"),
    ],
)
def test_vendor_classes_are_validated(yaml_class: str, message: str) -> None:
    from gpumatrix.config import MatrixError

    text = f"classes:\n  cpu: {{compute_capability: []}}\n  x: {yaml_class}\nrunners: []\n"
    with pytest.raises(MatrixError, match=message):
        parse_matrix(text)


def test_vendor_probes_module_has_no_import_time_probe() -> None:
    assert vendor_probes.AMD_PROBES and vendor_probes.INTEL_PROBES
