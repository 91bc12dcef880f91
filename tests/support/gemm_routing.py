"""The backend ``backend="auto"`` should run for a weight and a call, read from the checked-in Gluon table.

The table (``src/mxfuse/kernels/gemm/gluon_configs.json``) is data written by a GPU sweep: it names, per
device and ``[N, K]``, the M buckets where the Gluon kernel measured faster than the Triton one. The
routing rule it implies, restated here from the file itself (not through ``mxfuse.gemm``):

* a weight whose shape the table lists for this device is prepared for ``gluon``, every other for the
  device's shape-free choice (``default``);
* a call of ``m`` rows on a ``gluon`` weight runs ``gluon`` when a bucket holds ``m``, else ``triton``;
* a device the table does not name reads its stand-in's entries (the H100 SXM reads the H200's), unless
  ``MXFUSE_TABLE_STANDINS=0``.

Test weights keep their scale bytes inside the Gluon kernel's window, so the value rule never intervenes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

TABLE = Path(__file__).resolve().parents[2] / "src/mxfuse/kernels/gemm/gluon_configs.json"
STANDINS = {"NVIDIA H100 80GB HBM3": "NVIDIA H200", "NVIDIA H200": "NVIDIA H100 80GB HBM3"}  # restated


def gluon_buckets(device: torch.device | str, n: int, k: int) -> list[tuple[int, int]]:
    """``[(m_min, m_max), ...]`` the table lists for this CUDA device's name and ``[n, k]`` ([] if none)."""
    name = torch.cuda.get_device_properties(torch.device(device)).name
    devices = json.loads(TABLE.read_text())["devices"]
    if name not in devices and os.environ.get("MXFUSE_TABLE_STANDINS", "1") != "0":
        name = STANDINS.get(name, name)
    shapes = devices.get(name, {}).get("shapes", {})
    return [(b["m_min"], b["m_max"]) for b in shapes.get(f"{n}x{k}", [])]


def expected_weight_backend(device: torch.device | str, n: int, k: int, *, default: str) -> str:
    """The backend an ``[n, k]`` weight is prepared for by ``auto``."""
    return "gluon" if gluon_buckets(device, n, k) else default


def expected_call_backend(device: torch.device | str, n: int, k: int, m: int, *, default: str) -> str:
    """The backend an ``auto`` call of ``m`` rows runs on an ``[n, k]`` weight."""
    buckets = gluon_buckets(device, n, k)
    if not buckets:
        return default
    return "gluon" if any(lo <= m <= hi for lo, hi in buckets) else "triton"
