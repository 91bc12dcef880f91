"""Visibility variables per vendor: what a lease, a child pytest and a narrowed run set, and what
detection reads (fakes: no GPU of any vendor here)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpumatrix_trees import MATRIX_YAML, read_jsonl, registered, run_pytest, write_tree

from gpumatrix import register
from gpumatrix.hardware.detection import detect
from gpumatrix.hardware.devices import Device, Probe
from gpumatrix.hardware.visibility import narrowed, visible_environment, visible_spec
from gpumatrix.running.leases import ProcessLeases

register(on=("cpu",), est_time=15)

_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")


@pytest.mark.parametrize(
    ("vendor", "expected"),
    [
        ("nvidia", {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}),
        ("amd", {"HIP_VISIBLE_DEVICES": "GPU-a,GPU-b", "CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}),
        ("intel", {"ZE_AFFINITY_MASK": "GPU-a,GPU-b"}),
    ],
)
def test_visible_environment_names_the_vendors_variables(vendor: str, expected: dict[str, str]) -> None:
    assert visible_environment(vendor, ("GPU-a", "GPU-b")) == expected


def test_an_unknown_vendor_is_refused() -> None:
    with pytest.raises(ValueError, match="vendor must be one of nvidia, amd, intel, got 'none'"):
        visible_environment("none", ("0",))


@pytest.mark.parametrize(
    ("vendor", "environ", "spec"),
    [
        ("amd", {"HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, "1"),
        ("amd", {"CUDA_VISIBLE_DEVICES": "0"}, "0"),
        ("amd", {"ROCR_VISIBLE_DEVICES": "0"}, None),  # ROCr's own narrowing renumbers; it is not a spec
        ("intel", {"ZE_AFFINITY_MASK": "1", "CUDA_VISIBLE_DEVICES": "0"}, "1"),
        ("nvidia", {"HIP_VISIBLE_DEVICES": "1"}, None),
    ],
)
def test_visible_spec_reads_the_first_variable_the_runtime_reads(
    vendor: str, environ: dict[str, str], spec: str | None
) -> None:
    assert visible_spec(vendor, environ) == spec


def test_narrowed_restores_set_and_unset_variables() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "OTHER": "x"}
    with narrowed("amd", ("2",), environ) as changes:
        assert environ == {"CUDA_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "2", "OTHER": "x"}
        assert changes == {"HIP_VISIBLE_DEVICES": "2", "CUDA_VISIBLE_DEVICES": "2"}
    assert environ == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "OTHER": "x"}


@pytest.mark.parametrize("vendor", ["nvidia", "amd", "intel"])
def test_a_lease_sets_and_restores_the_vendors_variables(
    vendor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "0,1,2")  # a container's own narrowing: left alone
    process = ProcessLeases(devices=("0", "1", "2"), lock_dir=tmp_path, vendor=vendor)
    leased = process.start(process.plan(2), holder="t")
    seen = {name: os.environ.get(name) for name in _VARIABLES}
    process.finish()
    expected = {name: None for name in _VARIABLES} | {"ROCR_VISIBLE_DEVICES": "0,1,2"}
    expected |= visible_environment(vendor, leased)
    assert seen == expected
    assert {name: os.environ.get(name) for name in _VARIABLES} == {name: None for name in _VARIABLES} | {
        "ROCR_VISIBLE_DEVICES": "0,1,2"
    }


def _probe(vendor: str) -> Probe:
    arch = "gfx942" if vendor == "amd" else ""
    name = "AMD Instinct MI300X" if vendor == "amd" else "Intel(R) Data Center GPU Max 1550"
    return Probe("fake", "1.0", tuple(Device(i, str(i), name, (0, 0), vendor, arch) for i in range(4)))


@pytest.mark.parametrize(
    ("vendor", "environ", "count"),
    [
        ("amd", {"HIP_VISIBLE_DEVICES": "1,3"}, 2),
        ("amd", {"CUDA_VISIBLE_DEVICES": "2"}, 1),
        ("amd", {}, 4),
        ("intel", {"ZE_AFFINITY_MASK": "0,1,2"}, 3),
        ("intel", {"CUDA_VISIBLE_DEVICES": "0"}, 4),  # Level Zero does not read CUDA's variable
    ],
)
def test_detection_narrows_by_the_vendors_variable(
    vendor: str, environ: dict[str, str], count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpumatrix.hardware import detection as hardware

    monkeypatch.setattr(hardware, "_probe_machine", lambda env: _probe(vendor))
    found = detect(environ=environ)
    assert (found.vendor, found.count) == (vendor, count)


_RECORDING = """
    import json, os

    def test_sees(request):
        with open(os.environ["RECORDS"], "a") as stream:
            stream.write(json.dumps({name: os.environ.get(name) for name in
                ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")}) + "\\n")
"""
_VENDOR_CLASSES = """\
  mi300x: {description: MI300X, vendor: amd, gfx: [gfx942]}
  pvc: {description: Max, vendor: intel, device_names: ["Data Center GPU Max"]}
runners:
  - {label: 2-gpu-mi300x, class: mi300x, gpus: 2, runs_on: [amd], timeout_minutes: 30}
  - {label: 2-gpu-pvc, class: pvc, gpus: 2, runs_on: [intel], timeout_minutes: 30}
"""


@pytest.mark.parametrize(
    ("hardware", "klass", "variables"),
    [
        ("2xmi300x", "mi300x", ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")),
        ("2xpvc", "pvc", ("ZE_AFFINITY_MASK",)),
    ],
)
def test_a_test_of_an_amd_or_intel_file_sees_its_lease_in_its_vendors_variable(
    hardware: str, klass: str, variables: tuple[str, ...], tmp_path: Path
) -> None:
    matrix = MATRIX_YAML.replace("runners:\n", _VENDOR_CLASSES, 1)
    write_tree(tmp_path, {"tests/kernels/test_k.py": registered((klass,), body=_RECORDING)}, matrix=matrix)
    records, log = tmp_path / "records.jsonl", tmp_path / "leases.jsonl"
    run = run_pytest(
        tmp_path, hardware=hardware, env={"RECORDS": str(records), "GPUMATRIX_LEASE_LOG": str(log)}
    )
    assert run.returncode == 0, run.output
    (seen,) = read_jsonl(records)
    (lease,) = read_jsonl(log)
    leased = ",".join(lease["devices"])
    assert {name: value for name, value in seen.items() if value is not None} == dict.fromkeys(
        variables, leased
    )
