"""gpumatrix.hardware.detection: the override, each probe (through fakes), CUDA_VISIBLE_DEVICES, pre-flight."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gpumatrix_trees import MATRIX_YAML
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.config import load_matrix, parse_matrix
from gpumatrix.hardware import detection as hardware
from gpumatrix.hardware.detection import BUILTIN_CLASSES, Device, Hardware, detect, preflight, select_visible

register(on=("cpu",), est_time=8)

MATRIX = parse_matrix(MATRIX_YAML)
H200 = "NVIDIA H200"


class FakeNvml:
    """The slice of pynvml that gpumatrix.hardware.detection calls, over a fixed list of devices."""

    class NVMLError(Exception):
        pass

    def __init__(
        self,
        devices: list[tuple[str, str | bytes, tuple[int, int]]],
        *,
        init_error: bool = False,
        processes: dict[int, list[tuple[int, int | None]]] | None = None,
        used_mib: dict[int, int] | None = None,
    ) -> None:
        self.devices, self.init_error = devices, init_error
        self.processes, self.used_mib = processes or {}, used_mib or {}

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self.devices[handle][0]

    def nvmlDeviceGetName(self, handle: int) -> str | bytes:
        return self.devices[handle][1]

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.devices[handle][2]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(handle, [])]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=self.used_mib.get(handle, 500) * 2**20)


THREE_H200 = [
    ("GPU-aaaa-0001", H200, (9, 0)),
    ("GPU-bbbb-0002", H200.encode(), (9, 0)),
    ("GPU-cccc-0003", H200, (9, 0)),
]


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the probes a test installs answer: no torch or nvidia-smi fallback on a GPU host."""
    monkeypatch.setattr(hardware, "_nvidia_driver_present", lambda: False)


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, no_driver: None) -> FakeNvml:
    fake = FakeNvml(THREE_H200)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


# -- the override -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gpu_class", "count", "capability", "description"),
    [
        ("cpu", "cpu", 0, None, "cpu"),
        ("1xh100", "h100", 1, (9, 0), "1 x h100 (fake h100, sm_90)"),
        ("4xb200", "b200", 4, (10, 0), "4 x b200 (fake b200, sm_100)"),
        ("2x5090", "5090", 2, (12, 0), "2 x 5090 (fake 5090, sm_120)"),
        (" 2xgb300 ", "gb300", 2, (10, 3), "2 x gb300 (fake gb300, sm_103)"),
    ],
    ids=["cpu", "1xh100", "4xb200", "2x5090", "spaces"],
)
def test_override_fakes_a_machine(
    text: str,
    gpu_class: str,
    count: int,
    capability: tuple[int, int] | None,
    description: str,
    nvml: FakeNvml,
) -> None:
    found = detect(MATRIX, environ={"GPUMATRIX_HARDWARE": text})
    assert (found.gpu_class, found.count, found.source) == (gpu_class, count, "override")
    assert found.capabilities == (capability,) * count
    assert found.device_ids == tuple(str(i) for i in range(count))
    assert found.describe() == description


@pytest.mark.parametrize(
    "text",
    ["h100", "1xh900", "0xh100", "1xcpu", "1 x h100", "-1xh100", "1xH100", "2xh100,1xb200", "1000xh100"],
)
def test_malformed_override_is_a_value_error_naming_the_variable(text: str) -> None:
    with pytest.raises(ValueError, match=r"GPUMATRIX_HARDWARE=.*expected 'cpu' or COUNTxCLASS"):
        detect(MATRIX, environ={"GPUMATRIX_HARDWARE": text})


def test_override_is_narrowed_by_cuda_visible_devices_like_a_real_machine() -> None:
    found = detect(MATRIX, environ={"GPUMATRIX_HARDWARE": "4xb200", "CUDA_VISIBLE_DEVICES": "3,1"})
    assert (found.count, found.device_ids) == (2, ("3", "1"))


def test_empty_override_means_unset(nvml: FakeNvml) -> None:
    assert detect(MATRIX, environ={"GPUMATRIX_HARDWARE": ""}).source == "nvml"


# -- NVML and CUDA_VISIBLE_DEVICES ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "expected_ids"),
    [
        (None, ("GPU-aaaa-0001", "GPU-bbbb-0002", "GPU-cccc-0003")),
        ("2,0", ("GPU-cccc-0003", "GPU-aaaa-0001")),
        (" 1 , 2", ("GPU-bbbb-0002", "GPU-cccc-0003")),
        ("GPU-bbbb", ("GPU-bbbb-0002",)),  # a unique prefix is enough
        ("GPU-cccc-0003,0", ("GPU-cccc-0003", "GPU-aaaa-0001")),
        ("1,7,2", ("GPU-bbbb-0002",)),  # an index out of range ends the list
        ("0,0,1", ("GPU-aaaa-0001",)),  # so does a repeat
        ("GPU-", ()),  # ambiguous prefix
        ("", ()),
        ("-1", ()),
        ("MIG-1234", ()),
        ("GPU-zzzz", ()),
    ],
    ids=[
        "unset",
        "reordered",
        "spaces",
        "uuid-prefix",
        "uuid-and-index",
        "stops-at-invalid",
        "stops-at-repeat",
        "ambiguous",
        "empty",
        "negative",
        "mig",
        "unknown-uuid",
    ],
)
def test_nvml_devices_narrowed_by_cuda_visible_devices(
    visible: str | None, expected_ids: tuple[str, ...], nvml: FakeNvml
) -> None:
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    found = detect(MATRIX, environ=environ)
    assert found.device_ids == expected_ids
    assert found.count == len(expected_ids)
    assert found.gpu_class == ("h100" if expected_ids else "cpu")
    assert found.source == "nvml"


def test_nvml_reports_names_capabilities_and_driver(nvml: FakeNvml) -> None:
    found = detect(MATRIX, environ={"CUDA_VISIBLE_DEVICES": "1"})
    assert found == Hardware("h100", 1, (H200,), ((9, 0),), "570.86.15", "nvml", ("GPU-bbbb-0002",))
    assert found.describe() == "1 x h100 (NVIDIA H200, sm_90)"


@pytest.mark.parametrize(
    ("devices", "matrix", "gpu_class", "description"),
    [
        (
            [("GPU-1", "NVIDIA L4", (8, 9)), ("GPU-2", H200, (9, 0))],
            MATRIX,
            "unknown",
            "2 x unknown (NVIDIA L4, sm_89; NVIDIA H200, sm_90)",
        ),
        (
            [("GPU-2", H200, (9, 0)), ("GPU-1", "NVIDIA L4", (8, 9))],
            MATRIX,
            "h100",
            "2 x h100 (NVIDIA H200, sm_90; NVIDIA L4, sm_89)",
        ),
        ([("GPU-3", "NVIDIA B200", (10, 0))], None, "b200", "1 x b200 (NVIDIA B200, sm_100)"),
        (
            [("GPU-4", "NVIDIA GeForce RTX 5090", (12, 0))],
            parse_matrix(
                MATRIX_YAML.replace(
                    '  "5090": {description: RTX 5090, compute_capability: ["12.0"]}\n', ""
                ).replace("  - {label: 1-gpu-5090", "  # ")
            ),
            "unknown",
            "1 x unknown (NVIDIA GeForce RTX 5090, sm_120)",
        ),
    ],
    ids=["mixed-first-unknown", "mixed-first-h100", "builtin-table", "class-missing-from-matrix"],
)
def test_class_comes_from_the_first_device_through_the_matrix(
    devices: list[tuple[str, str, tuple[int, int]]],
    matrix: Any,
    gpu_class: str,
    description: str,
    monkeypatch: pytest.MonkeyPatch,
    no_driver: None,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(devices))
    found = detect(matrix, environ={})
    assert (found.gpu_class, found.describe()) == (gpu_class, description)


@pytest.mark.parametrize(
    "pynvml", [None, FakeNvml(THREE_H200, init_error=True)], ids=["missing", "no-driver"]
)
def test_without_nvml_or_driver_the_machine_is_cpu(
    pynvml: Any, monkeypatch: pytest.MonkeyPatch, no_driver: None
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    assert detect(MATRIX, environ={}) == Hardware("cpu", 0)


# -- torch and nvidia-smi ---------------------------------------------------------------------------

FAKE_TORCH = """
import os
from types import SimpleNamespace

def _visible():
    physical = list(range(int(os.environ.get("FAKE_TORCH_DEVICES", "0"))))
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    return physical if spec is None else [int(e) for e in spec.split(",") if e.strip() and int(e) in physical]

def _props(i):
    physical = _visible()[i]
    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0)
    if not os.environ.get("FAKE_TORCH_NO_UUID"):
        props.uuid = f"fake-{physical}"
    return props

cuda = SimpleNamespace(is_available=lambda: bool(_visible()), device_count=lambda: len(_visible()),
                       get_device_properties=_props)
version = SimpleNamespace(cuda="12.8")
"""


@pytest.fixture
def machine_without_nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose `torch` is FAKE_TORCH and whose PATH holds a fake nvidia-smi."""
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(hardware, "_nvidia_driver_present", lambda: True)
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ -n "$FAKE_SMI_FAIL" ] && exit 9\n'
        'case "$*" in *--query-gpu=index,uuid,name,compute_cap,driver_version*) ;; *) exit 2 ;; esac\n'
        'echo "0, GPU-b200-0, NVIDIA B200, 10.0, 570.124.06"\n'
        'echo "1, GPU-b200-1, NVIDIA B200, 10.0, 570.124.06"\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return {"PYTHONPATH": str(tmp_path / "site"), "PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("extra", "expected_ids"),
    [
        ({"FAKE_TORCH_DEVICES": "2"}, ("GPU-fake-0", "GPU-fake-1")),
        ({"FAKE_TORCH_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "1"}, ("GPU-fake-1",)),
        ({"FAKE_TORCH_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "2,0", "FAKE_TORCH_NO_UUID": "1"}, ("2", "0")),
    ],
    ids=["all", "narrowed", "no-uuid-keeps-callers-ids"],
)
def test_torch_probe_when_nvml_is_unusable(
    extra: dict[str, str], expected_ids: tuple[str, ...], machine_without_nvml: dict[str, str]
) -> None:
    found = detect(MATRIX, environ={**machine_without_nvml, **extra})
    assert (found.source, found.gpu_class, found.driver) == ("torch", "h100", "CUDA 12.8 (torch)")
    assert found.device_ids == expected_ids


@pytest.mark.parametrize(
    ("extra", "expected_ids"),
    [
        ({}, ("GPU-b200-0", "GPU-b200-1")),
        ({"CUDA_VISIBLE_DEVICES": "1"}, ("GPU-b200-1",)),
        ({"CUDA_VISIBLE_DEVICES": ""}, ()),
        ({"FAKE_SMI_FAIL": "1"}, ()),
    ],
    ids=["all", "narrowed", "hidden", "smi-fails"],
)
def test_nvidia_smi_probe_when_nvml_and_torch_find_nothing(
    extra: dict[str, str], expected_ids: tuple[str, ...], machine_without_nvml: dict[str, str]
) -> None:
    found = detect(MATRIX, environ={**machine_without_nvml, "FAKE_TORCH_DEVICES": "0", **extra})
    assert found.device_ids == expected_ids
    if expected_ids:
        assert (found.source, found.gpu_class, found.driver) == ("nvidia-smi", "b200", "570.124.06")
    else:
        assert found.gpu_class == "cpu"


# -- pure pieces ------------------------------------------------------------------------------------


def test_select_visible_keeps_cuda_order() -> None:
    devices = [Device(i, f"GPU-{i}", "x", (9, 0)) for i in range(4)]
    assert [d.uuid for d in select_visible(devices, "3,GPU-1,0")] == ["GPU-3", "GPU-1", "GPU-0"]


def test_builtin_classes_match_the_projects_matrix() -> None:
    matrix = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")
    assert {name: c.compute_capabilities for name, c in matrix.classes.items()} == {
        name: c.compute_capabilities for name, c in BUILTIN_CLASSES.items()
    }


def test_hardware_round_trips_through_its_dict() -> None:
    found = Hardware("h100", 2, (H200, H200), ((9, 0), (9, 0)), "570", "nvml", ("GPU-a", "GPU-b"))
    data = found.to_dict()
    assert data["capabilities"] == ["9.0", "9.0"] and data["description"] == "2 x h100 (NVIDIA H200, sm_90)"
    assert Hardware.from_dict(data) == found


# -- pre-flight -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("visible", "runner", "processes", "used_mib", "expected"),
    [
        ("0,1", "2-gpu-h100", {}, {}, []),
        ("0,1", "2-gpu-h100", {0: [("self", 4 * 2**30)]}, {0: 5000}, []),
        (
            "0,1",
            "1-gpu-h100",
            {},
            {},
            [
                "runner '1-gpu-h100' claims 1 x h100; this machine: 2 x h100 (NVIDIA H200, sm_90) "
                "(narrow it with CUDA_VISIBLE_DEVICES to 1 device(s))"
            ],
        ),
        (
            "0",
            "2-gpu-h100",
            {},
            {},
            ["runner '2-gpu-h100' claims 2 x h100; this machine: 1 x h100 (NVIDIA H200, sm_90)"],
        ),
        (
            "0,1",
            "4-gpu-b200",
            {},
            {},
            ["runner '4-gpu-b200' claims 4 x b200; this machine: 2 x h100 (NVIDIA H200, sm_90)"],
        ),
        (
            "0",
            "cpu",
            {},
            {},
            [
                "runner 'cpu' claims cpu; this machine: 1 x h100 (NVIDIA H200, sm_90) "
                "(hide the GPUs with CUDA_VISIBLE_DEVICES= to run the cpu slice here)"
            ],
        ),
        ("", "1-gpu-h100", {}, {}, ["runner '1-gpu-h100' claims 1 x h100; this machine: cpu"]),
        (
            "2,1",
            "2-gpu-h100",
            {1: [(4242, 8 * 2**30), (4343, None)]},
            {1: 9000},
            [
                "GPU 1 (NVIDIA H200, GPU-bbbb-0002) is busy: pid 4242 holds 8192 MiB, "
                "pid 4343 holds an unknown amount of memory"
            ],
        ),
        (
            "0,2",
            "2-gpu-h100",
            {},
            {2: 30000},
            ["GPU 2 (NVIDIA H200, GPU-cccc-0003) has 30000 MiB in use by a process not visible here"],
        ),
    ],
    ids=[
        "idle",
        "own-process-ignored",
        "too-many",
        "too-few",
        "wrong-class",
        "gpus-on-cpu-runner",
        "no-gpu",
        "busy",
        "memory-held",
    ],
)
def test_preflight(
    visible: str,
    runner: str,
    processes: dict[int, list[tuple[Any, int | None]]],
    used_mib: dict[int, int],
    expected: list[str],
    nvml: FakeNvml,
) -> None:
    nvml.processes = {
        index: [(os.getpid() if pid == "self" else pid, used) for pid, used in rows]
        for index, rows in processes.items()
    }
    nvml.used_mib = used_mib
    found = detect(MATRIX, environ={"CUDA_VISIBLE_DEVICES": visible})
    assert preflight(found, MATRIX.runner(runner)) == expected


def test_preflight_without_the_busy_check_only_checks_the_machine_is_the_runner(nvml: FakeNvml) -> None:
    nvml.processes = {0: [(4242, 2**30)]}
    found = detect(MATRIX, environ={"CUDA_VISIBLE_DEVICES": "0"})
    assert preflight(found, MATRIX.runner("1-gpu-h100"), check_busy=False) == []
    assert preflight(found, MATRIX.runner("2-gpu-h100"), check_busy=False) == [
        "runner '2-gpu-h100' claims 2 x h100; this machine: 1 x h100 (NVIDIA H200, sm_90)"
    ]


def test_preflight_of_a_faked_machine_checks_no_real_gpu(nvml: FakeNvml) -> None:
    nvml.processes = {0: [(4242, 2**30)]}
    found = detect(MATRIX, environ={"GPUMATRIX_HARDWARE": "1xh100"})
    assert preflight(found, MATRIX.runner("1-gpu-h100")) == []
