"""AMD and Intel GPUs, through their vendors' tools or torch, for `gpumatrix.hardware.detection.detect`.

Asked only where the vendor's driver is present (`/dev/kfd` for ROCm; a DRM device of vendor 0x8086
with a render node for Intel), in this order:

- AMD: `amd-smi static --asic --json` (ROCm 6+), `rocm-smi --showproductname --json`, then torch
  built for ROCm (`torch.version.hip`; each device's `gcnArchName`). A device is named by its
  marketing name and told by its gfx architecture (`gfx942`), which ci/matrix.yaml's AMD classes list.
- Intel: `xpu-smi discovery --json`, `sycl-ls` (its Level Zero GPUs), then torch's `torch.xpu`. A
  device is told by its name (`Intel(R) Data Center GPU Max 1550`), which the Intel classes match.

Devices are named by index, which HIP reads in CUDA_VISIBLE_DEVICES as CUDA does. A tool that is
missing, fails or prints what cannot be read answers nothing, and the next one is asked.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpumatrix.hardware.devices import Device, Probe

__all__ = ["AMD_PROBES", "INTEL_PROBES", "amd_driver_present", "intel_driver_present"]

_NO_CAPABILITY = (0, 0)


def amd_driver_present() -> bool:
    return Path("/dev/kfd").exists()


def intel_driver_present() -> bool:
    for vendor in Path("/sys/class/drm").glob("card*/device/vendor"):
        try:
            if vendor.read_text().strip() == "0x8086" and any(Path("/dev/dri").glob("renderD*")):
                return True
        except OSError:
            continue
    return False


def _run(args: list[str], environ: Mapping[str, str], *, timeout: float = 60) -> str | None:
    """The standard output of a tool (or of `python -c`), or None when it is missing or fails."""
    if args[0] != sys.executable:
        executable = shutil.which(args[0], path=environ.get("PATH", os.defpath))
        if executable is None:
            return None
        args = [executable, *args[1:]]
    try:
        done = subprocess.run(
            args, env=dict(environ), capture_output=True, text=True, timeout=timeout, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _gfx(text: object) -> str:
    """`gfx942` of `gfx942:sramecc+:xnack-` (torch) or of `gfx942` (the tools)."""
    found = re.match(r"gfx[0-9a-f]{3,4}", str(text or "").strip().lower())
    return found[0] if found else ""


def _amd(index: int, name: str, arch: str) -> Device:
    return Device(index, str(index), name.strip() or "AMD GPU", _NO_CAPABILITY, "amd", _gfx(arch))


def _intel(index: int, name: str) -> Device:
    return Device(index, str(index), name.strip() or "Intel GPU", _NO_CAPABILITY, "intel")


def _probe_amd_smi(environ: Mapping[str, str]) -> Probe | None:
    data = _json(_run(["amd-smi", "static", "--asic", "--json"], environ))
    rows = data.get("gpu_data", data) if isinstance(data, dict) else data
    if not isinstance(rows, list):
        return None
    devices = []
    for position, row in enumerate(rows):
        asic = row.get("asic") if isinstance(row, dict) else None
        if not isinstance(asic, dict):
            return None
        index = row.get("gpu", position)
        devices.append(
            _amd(
                index if isinstance(index, int) else position,
                str(asic.get("market_name", "")),
                asic.get("target_graphics_version", ""),
            )
        )
    return Probe("amd-smi", None, tuple(devices)) if devices else None


def _probe_rocm_smi(environ: Mapping[str, str]) -> Probe | None:
    data = _json(_run(["rocm-smi", "--showproductname", "--json"], environ))
    if not isinstance(data, dict):
        return None
    devices = []
    for card, fields in data.items():
        found = re.fullmatch(r"card(\d+)", str(card))
        if found is None or not isinstance(fields, dict):
            continue
        devices.append(_amd(int(found[1]), str(fields.get("Card Series", "")), fields.get("GFX Version", "")))
    return Probe("rocm-smi", None, tuple(sorted(devices, key=lambda d: d.index))) if devices else None


def _probe_xpu_smi(environ: Mapping[str, str]) -> Probe | None:
    data = _json(_run(["xpu-smi", "discovery", "--json"], environ))
    rows = data.get("device_list") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        return None
    devices = [
        _intel(int(row.get("device_id", position)), str(row.get("device_name", "")))
        for position, row in enumerate(rows)
        if isinstance(row, dict)
    ]
    return Probe("xpu-smi", None, tuple(devices)) if devices else None


# `[level_zero:gpu][level_zero:0] Intel(R) oneAPI Unified Runtime over Level-Zero, Intel(R) Data Center
# GPU Max 1550 12.60.7 [1.3.29735]`: the device name sits between the backend's and its version.
_SYCL_LINE_RE = re.compile(
    r"^\[level_zero:gpu\]\[level_zero:(\d+)\][^,]*,\s*(.+?)\s+\d+\.\d+(?:\.\d+)*\s+\[", re.M
)


def _probe_sycl_ls(environ: Mapping[str, str]) -> Probe | None:
    text = _run(["sycl-ls"], environ)
    if text is None:
        return None
    devices = [_intel(int(index), name) for index, name in _SYCL_LINE_RE.findall(text)]
    return Probe("sycl-ls", None, tuple(devices)) if devices else None


# Run in a child, as the CUDA probe is: querying devices fixes the visible set for the whole process.
_TORCH_HIP = """
import json, torch
devices = []
if getattr(torch.version, "hip", None) and torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        devices.append({"name": p.name, "arch": getattr(p, "gcnArchName", "")})
print(json.dumps({"driver": getattr(torch.version, "hip", None), "devices": devices}))
"""
_TORCH_XPU = """
import json, torch
devices = []
xpu = getattr(torch, "xpu", None)
if xpu is not None and xpu.is_available():
    for i in range(xpu.device_count()):
        devices.append({"name": xpu.get_device_properties(i).name, "arch": ""})
print(json.dumps({"driver": None, "devices": devices}))
"""


def _torch_probe(script: str, source: str, make: Callable[[int, dict], Device]) -> Callable:
    def probe(environ: Mapping[str, str]) -> Probe | None:
        if importlib.util.find_spec("torch") is None:
            return None
        lines = (_run([sys.executable, "-c", script], environ, timeout=120) or "").strip().splitlines()
        data = _json(lines[-1]) if lines else None
        if not isinstance(data, dict) or not data.get("devices"):
            return None
        driver = f"ROCm {data['driver']} (torch)" if source == "torch-hip" and data.get("driver") else None
        devices = tuple(make(i, d) for i, d in enumerate(data["devices"]))
        return Probe(source, driver, devices, visible_applied=True)

    return probe


AMD_PROBES: list[Callable[[Mapping[str, str]], Probe | None]] = [
    _probe_amd_smi,
    _probe_rocm_smi,
    _torch_probe(_TORCH_HIP, "torch-hip", lambda i, d: _amd(i, str(d.get("name", "")), d.get("arch", ""))),
]
INTEL_PROBES: list[Callable[[Mapping[str, str]], Probe | None]] = [
    _probe_xpu_smi,
    _probe_sycl_ls,
    _torch_probe(_TORCH_XPU, "torch-xpu", lambda i, d: _intel(i, str(d.get("name", "")))),
]
