"""A GPU as a probe sees it, and what one probe found: the leaf `gpumatrix.hardware.detection` and its vendor
probes (`gpumatrix.hardware.vendor_probes`) share."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Device", "Probe"]


@dataclass(frozen=True)
class Device:
    """One GPU as a probe saw it, before CUDA_VISIBLE_DEVICES narrows the set."""

    index: int  # the probe's own index (NVML and nvidia-smi: PCI order)
    uuid: str  # 'GPU-…' where known, else the id CUDA_VISIBLE_DEVICES should carry
    name: str
    capability: tuple[int, int]  # NVIDIA's compute capability; (0, 0) for other vendors
    vendor: str = "nvidia"
    arch: str = ""  # AMD: the gfx architecture (gfx942)


@dataclass(frozen=True)
class Probe:
    """The devices one source (NVML, a vendor's tool, torch) reported, and the driver it named."""

    source: str
    driver: str | None
    devices: tuple[Device, ...]
    visible_applied: bool = False  # the source already honoured CUDA_VISIBLE_DEVICES (torch does)
