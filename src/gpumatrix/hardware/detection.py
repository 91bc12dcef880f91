"""What GPUs this machine has, as the test matrix names them, and whether they are free to use.

`detect` asks, in order: the `GPUMATRIX_HARDWARE` override (`cpu`, `1xh100`, `4xb200`, `2x5090`: a
fake machine, for dry runs on CPU), NVML, torch, `nvidia-smi`; a machine none of them answers for is
`cpu`. The class comes from the compute capability of the first visible device, through the runner
matrix (or a built-in copy of docs/registry.md's table); a device whose capability no class claims is of
class `unknown`, which no test file names, so its GPU tests skip with a reason.

Devices are named by UUID where the source gives one: CUDA accepts `GPU-<uuid>` in
CUDA_VISIBLE_DEVICES, and unlike an index it means the same device whatever ordering or narrowing
the caller's own CUDA_VISIBLE_DEVICES applied. Nothing here runs at import time.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumatrix import UsageError
from gpumatrix.config import CPU_CLASS, GpuClass, Matrix, Runner, classify_device
from gpumatrix.hardware.devices import Device
from gpumatrix.hardware.devices import Probe as _Probe
from gpumatrix.hardware.vendor_probes import (
    AMD_PROBES,
    INTEL_PROBES,
    amd_driver_present,
    intel_driver_present,
)
from gpumatrix.hardware.visibility import visible_spec

__all__ = [
    "BUILTIN_CLASSES",
    "HARDWARE_ENV",
    "HARDWARE_SOURCES",
    "UNKNOWN_CLASS",
    "Device",
    "Hardware",
    "HardwareOverrideError",
    "detect",
    "parse_override",
    "preflight",
    "select_visible",
]

HARDWARE_ENV = "GPUMATRIX_HARDWARE"
# Where `detect` learnt what it reports, in the order it asks; `none`: no source answered (a CPU machine).
HARDWARE_SOURCES = (
    "override",
    "nvml",
    "torch",
    "nvidia-smi",
    "amd-smi",
    "rocm-smi",
    "torch-hip",
    "xpu-smi",
    "sycl-ls",
    "torch-xpu",
    "none",
)
UNKNOWN_CLASS = "unknown"
# docs/registry.md's classes, for callers without a matrix (`gpumatrix detect` outside a checkout).
BUILTIN_CLASSES: Mapping[str, GpuClass] = {
    CPU_CLASS: GpuClass(CPU_CLASS, "no GPU", ()),
    "5090": GpuClass("5090", "GeForce RTX 5090 (Blackwell consumer)", ((12, 0),), ("RTX 5090",)),
    "h100": GpuClass("h100", "Hopper (H100, H200, H800, H20)", ((9, 0),), ("H100", "H200", "H800", "H20")),
    "b200": GpuClass("b200", "Blackwell datacenter (B200)", ((10, 0),), ("B200",)),
    "gb300": GpuClass("gb300", "Blackwell Ultra (GB300)", ((10, 3),), ("GB300", "B300")),
}
_OVERRIDE_RE = re.compile(r"^([1-9][0-9]{0,2})x([A-Za-z0-9_.-]+)$")
# An idle H100/H200 shows a few hundred MiB used (driver reservations) and no process.
_IDLE_MEMORY_MIB = 2048


class HardwareOverrideError(UsageError, ValueError):
    """`GPUMATRIX_HARDWARE` is malformed or names an unknown class: a usage error (exit 2)."""


@dataclass(frozen=True)
class Hardware:
    """The visible GPUs of this process, classified; `cpu` with count 0 when there are none."""

    gpu_class: str
    count: int
    names: tuple[str, ...] = ()
    capabilities: tuple[tuple[int, int], ...] = ()
    driver: str | None = None
    source: str = "none"  # one of HARDWARE_SOURCES
    device_ids: tuple[str, ...] = ()  # what CUDA_VISIBLE_DEVICES names each visible device by
    vendor: str = "nvidia"  # of the GPUs (the first visible device's); see config.VENDORS
    architectures: tuple[str, ...] = ()  # AMD: each device's gfx architecture; empty for NVIDIA

    def describe(self) -> str:
        """`1 x h100 (NVIDIA H200, sm_90)`, `1 x mi300x (AMD Instinct MI300X, gfx942)`, `cpu`; mixed
        machines list each kind of device."""
        if not self.count:
            return CPU_CLASS
        if self.vendor == "nvidia":
            kinds = dict.fromkeys(
                f"{name}, sm_{major}{minor}"
                for name, (major, minor) in zip(self.names, self.capabilities, strict=True)
            )
        else:
            arches = self.architectures or ("",) * self.count
            kinds = dict.fromkeys(
                f"{name}, {arch}" if arch else name for name, arch in zip(self.names, arches, strict=True)
            )
        return f"{self.count} x {self.gpu_class} ({'; '.join(kinds)})"

    def to_dict(self) -> dict[str, Any]:
        other = (
            {"vendor": self.vendor, "architectures": list(self.architectures)}
            if self.vendor != "nvidia"
            else {}
        )
        return other | {
            "gpu_class": self.gpu_class,
            "count": self.count,
            "names": list(self.names),
            "capabilities": [f"{major}.{minor}" for major, minor in self.capabilities],
            "driver": self.driver,
            "source": self.source,
            "device_ids": list(self.device_ids),
            "description": self.describe(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hardware:
        capabilities = tuple(
            tuple(int(part) for part in str(text).split(".")) for text in data["capabilities"]
        )
        return cls(
            gpu_class=str(data["gpu_class"]),
            count=int(data["count"]),
            names=tuple(data["names"]),
            capabilities=capabilities,  # type: ignore[arg-type]
            driver=data.get("driver"),
            source=str(data["source"]),
            device_ids=tuple(data["device_ids"]),
            vendor=str(data.get("vendor", "nvidia")),
            architectures=tuple(data.get("architectures", ())),
        )


def detect(matrix: Matrix | None = None, *, environ: Mapping[str, str] | None = None) -> Hardware:
    """This process's GPUs: the override if set, else the first probe that answers, else `cpu`.

    Raises HardwareOverrideError (a ValueError) when `GPUMATRIX_HARDWARE` is malformed or names a
    class the matrix lacks.
    """
    env = os.environ if environ is None else environ
    classes = matrix.classes if matrix is not None else BUILTIN_CLASSES
    override = env.get(HARDWARE_ENV, "").strip()  # empty counts as unset, as a CI template leaves it
    probe = _probe_override(override, classes) if override else _probe_machine(env)
    if probe is None:
        return Hardware(CPU_CLASS, 0)
    vendor = probe.devices[0].vendor if probe.devices else "nvidia"
    devices = (
        probe.devices if probe.visible_applied else select_visible(probe.devices, visible_spec(vendor, env))
    )
    if not devices:
        return Hardware(CPU_CLASS, 0, driver=probe.driver, source=probe.source)
    first = devices[0]
    owner = classify_device(classes, first.vendor, first.capability, first.arch, first.name)
    return Hardware(
        gpu_class=owner.name if owner is not None else UNKNOWN_CLASS,
        count=len(devices),
        names=tuple(d.name for d in devices),
        capabilities=tuple(d.capability for d in devices),
        driver=probe.driver,
        source=probe.source,
        device_ids=tuple(d.uuid for d in devices),
        vendor=first.vendor,
        architectures=tuple(d.arch for d in devices) if first.vendor != "nvidia" else (),
    )


def parse_override(text: str, classes: Mapping[str, GpuClass] = BUILTIN_CLASSES) -> tuple[str, int]:
    """`'4xb200'` -> `('b200', 4)`, `'cpu'` -> `('cpu', 0)`; HardwareOverrideError naming the variable otherwise."""
    if text == CPU_CLASS:
        return CPU_CLASS, 0
    match = _OVERRIDE_RE.match(text)
    gpu_classes = [name for name, c in classes.items() if not c.is_cpu]
    expected = f"expected 'cpu' or COUNTxCLASS such as '1x{gpu_classes[0] if gpu_classes else 'h100'}'"
    if match is None:
        raise HardwareOverrideError(f"{HARDWARE_ENV}={text!r} is not understood: {expected}")
    name = match[2]
    if name not in gpu_classes:
        raise HardwareOverrideError(
            f"{HARDWARE_ENV}={text!r} names unknown GPU class {name!r} "
            f"(known: {', '.join(gpu_classes)}); {expected}"
        )
    return name, int(match[1])


def select_visible(devices: Sequence[Device], spec: str | None) -> tuple[Device, ...]:
    """The devices CUDA would expose under CUDA_VISIBLE_DEVICES=`spec`, in its order (HIP reads its
    variables, and Level Zero ZE_AFFINITY_MASK's indices, the same way: `gpumatrix.hardware.visibility`).

    As CUDA reads it: unset means all; empty means none; entries are indices or `GPU-` UUIDs (a
    unique prefix is enough); the first invalid, unknown or repeated entry ends the list. Indices
    are the probe's (PCI order), which is CUDA's order on machines of one GPU model; mixed machines
    should name devices by UUID or set CUDA_DEVICE_ORDER=PCI_BUS_ID.
    """
    if spec is None:
        return tuple(devices)
    chosen: list[Device] = []
    for entry in (part.strip() for part in spec.split(",")):
        if re.fullmatch(r"[0-9]+", entry):
            matches = [d for d in devices if d.index == int(entry)]
        elif entry.startswith("GPU-"):
            matches = [d for d in devices if d.uuid.startswith(entry)]
        else:  # empty, negative, MIG instances (not enumerated here) and anything else
            matches = []
        if len(matches) != 1 or matches[0] in chosen:
            break
        chosen.append(matches[0])
    return tuple(chosen)


def preflight(
    hardware: Hardware, runner: Runner, *, check_busy: bool = True, idle_memory_mib: int = _IDLE_MEMORY_MIB
) -> list[str]:
    """Why this machine cannot honestly run `runner`'s slice; empty when it can.

    The machine must be the runner's class with exactly its GPU count and, with `check_busy`, no GPU
    may already run another process's work or hold memory (a leftover job would make timings and
    OOMs lie).
    """
    problems: list[str] = []
    claim = CPU_CLASS if not runner.gpus else f"{runner.gpus} x {runner.gpu_class}"
    if hardware.gpu_class != runner.gpu_class or hardware.count != runner.gpus:
        hint = ""
        if hardware.gpu_class == runner.gpu_class and hardware.count > runner.gpus:
            hint = f" (narrow it with CUDA_VISIBLE_DEVICES to {runner.gpus} device(s))"
        elif hardware.count and runner.gpu_class == CPU_CLASS:
            hint = " (hide the GPUs with CUDA_VISIBLE_DEVICES= to run the cpu slice here)"
        problems.append(f"runner {runner.label!r} claims {claim}; this machine: {hardware.describe()}{hint}")
    if check_busy and hardware.count and hardware.source != "override":
        problems.extend(_busy_devices(hardware, idle_memory_mib=idle_memory_mib))
    return problems


# -- probes -----------------------------------------------------------------------------------------


def _probe_machine(environ: Mapping[str, str]) -> _Probe | None:
    probes: list[Callable[[Mapping[str, str]], _Probe | None]] = [_probe_nvml]
    if _nvidia_driver_present():  # keeps a CPU machine from paying a torch import on every run
        probes += [_probe_torch, _probe_nvidia_smi]
    if amd_driver_present():
        probes += AMD_PROBES
    if intel_driver_present():
        probes += INTEL_PROBES
    for probe in probes:
        found = probe(environ)
        if found is not None:
            return found
    return None


def _probe_override(text: str, classes: Mapping[str, GpuClass]) -> _Probe:
    name, count = parse_override(text, classes)
    if not count:
        return _Probe("override", None, ())
    gpu_class = classes[name]
    capability = gpu_class.compute_capabilities[0] if gpu_class.vendor == "nvidia" else (0, 0)
    arch = gpu_class.architectures[0] if gpu_class.architectures else ""
    # An Intel class is told by name: the fake device carries the first of its names.
    shown = f"fake {name}" if gpu_class.vendor != "intel" else f"fake {name} ({gpu_class.device_names[0]})"
    return _Probe(
        "override",
        "fake",
        tuple(Device(i, str(i), shown, capability, gpu_class.vendor, arch) for i in range(count)),
    )


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _nvml() -> Any | None:
    """The initialised pynvml module, or None where NVML is missing or has no driver to talk to."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    return pynvml


def _probe_nvml(environ: Mapping[str, str]) -> _Probe | None:
    del environ  # NVML lists every device; CUDA_VISIBLE_DEVICES is applied by the caller
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            devices.append(
                Device(
                    index,
                    _text(nvml.nvmlDeviceGetUUID(handle)),
                    _text(nvml.nvmlDeviceGetName(handle)),
                    (int(major), int(minor)),
                )
            )
        return _Probe("nvml", _text(nvml.nvmlSystemGetDriverVersion()), tuple(devices))
    except nvml.NVMLError:
        return None  # a device NVML cannot read (fallen off the bus): let the next probe try
    finally:
        nvml.nvmlShutdown()


def _nvidia_driver_present() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


# Run in a child: querying devices initialises CUDA, which fixes CUDA_VISIBLE_DEVICES for the whole
# process and would stop the plugin from handing each test its own GPUs.
_TORCH_PROBE = """
import json, torch
devices = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        devices.append({"uuid": f"GPU-{uuid}" if uuid else "", "name": p.name, "capability": [p.major, p.minor]})
print(json.dumps({"driver": torch.version.cuda, "devices": devices}))
"""


def _probe_torch(environ: Mapping[str, str]) -> _Probe | None:
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TORCH_PROBE],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not found["devices"]:
        return None
    # Without a UUID, name the device as the caller's CUDA_VISIBLE_DEVICES did (or by index).
    entries = (
        [e.strip() for e in environ["CUDA_VISIBLE_DEVICES"].split(",")]
        if "CUDA_VISIBLE_DEVICES" in environ
        else []
    )
    devices = tuple(
        Device(
            i,
            d["uuid"] or (entries[i] if i < len(entries) else str(i)),
            d["name"],
            (int(d["capability"][0]), int(d["capability"][1])),
        )
        for i, d in enumerate(found["devices"])
    )
    return _Probe(
        "torch", f"CUDA {found['driver']} (torch)" if found["driver"] else None, devices, visible_applied=True
    )


def _probe_nvidia_smi(environ: Mapping[str, str]) -> _Probe | None:
    executable = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [
                executable,
                "--query-gpu=index,uuid,name,compute_cap,driver_version",
                "--format=csv,noheader,nounits",
            ],
            env=dict(environ),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        rows = [row for row in csv.reader(done.stdout.splitlines(), skipinitialspace=True) if row]
        devices = []
        for index, uuid, name, capability, _ in rows:
            major, minor = capability.split(".")
            devices.append(Device(int(index), uuid, name, (int(major), int(minor))))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None  # includes drivers too old for compute_cap: no class can be told
    if not devices:
        return None
    return _Probe("nvidia-smi", rows[0][4], tuple(devices))


def _busy_devices(hardware: Hardware, *, idle_memory_mib: int) -> list[str]:
    nvml = _nvml()
    if nvml is None:
        return []
    problems: list[str] = []
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        by_uuid = {_text(nvml.nvmlDeviceGetUUID(h)): (i, h) for i, h in enumerate(handles)}
        for device_id, name in zip(hardware.device_ids, hardware.names, strict=True):
            if device_id not in by_uuid:
                continue
            index, handle = by_uuid[device_id]
            where = f"GPU {index} ({name}, {device_id})"
            processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            others = [p for p in processes if p.pid != os.getpid()]
            own = sum(p.usedGpuMemory or 0 for p in processes if p.pid == os.getpid())
            foreign_mib = (nvml.nvmlDeviceGetMemoryInfo(handle).used - own) // 2**20
            if others:
                held = ", ".join(f"pid {p.pid} holds {_mib(p.usedGpuMemory)}" for p in others)
                problems.append(f"{where} is busy: {held}")
            elif foreign_mib > idle_memory_mib:
                # Another container's processes are invisible here; their memory is not.
                problems.append(f"{where} has {foreign_mib} MiB in use by a process not visible here")
    except nvml.NVMLError as exc:
        problems.append(f"cannot check whether the GPUs are free: NVML says {exc}")
    finally:
        nvml.nvmlShutdown()
    return problems


def _mib(used: int | None) -> str:
    return "an unknown amount of memory" if used is None else f"{used // 2**20} MiB"
