"""GPU classes gpumatrix knows how to declare, for `gpumatrix init` and for machines without a matrix.

Each is a class as ci/matrix.yaml declares it (NVIDIA's by compute capability, AMD's by gfx
architecture, Intel's by device name) with the words CI runner labels use for it (`hints`), so
`init` can propose classes from the `runs-on` labels of a repository's workflows
(`linux-mi300-gpu-1` -> mi300x). A project may name its classes as it likes in ci/matrix.yaml; these
are only the defaults `init` writes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gpumatrix.config import CPU_CLASS, GpuClass

__all__ = ["KNOWN_CLASSES", "KnownClass", "classes_in_label"]


@dataclass(frozen=True)
class KnownClass:
    gpu_class: GpuClass
    hints: tuple[str, ...]  # runner-label words that name it


def _nvidia(
    name: str, description: str, capability: tuple[int, int], names: tuple[str, ...], hints: tuple[str, ...]
):
    return KnownClass(GpuClass(name, description, (capability,), names), hints)


def _amd(name: str, description: str, gfx: tuple[str, ...], names: tuple[str, ...], hints: tuple[str, ...]):
    return KnownClass(GpuClass(name, description, (), names, vendor="amd", architectures=gfx), hints)


_ALL = (
    KnownClass(GpuClass(CPU_CLASS, "no GPU", (), vendor="none"), ("cpu",)),
    _nvidia("a100", "Ampere datacenter (A100, A800)", (8, 0), ("A100", "A800"), ("a100", "a800", "ampere")),
    _nvidia("l40s", "Ada datacenter (L40S, L40, L4)", (8, 9), ("L40S", "L40", "L4"), ("l40s", "l40", "ada")),
    _nvidia(
        "h100",
        "Hopper (H100, H200, H800, H20)",
        (9, 0),
        ("H100", "H200", "H800", "H20"),
        ("h100", "h200", "h800", "h20", "hopper"),
    ),
    _nvidia("b200", "Blackwell datacenter (B200)", (10, 0), ("B200",), ("b200", "gb200", "blackwell")),
    _nvidia("gb300", "Blackwell Ultra (GB300)", (10, 3), ("GB300", "B300"), ("gb300", "b300")),
    _nvidia("5090", "GeForce RTX 5090 (Blackwell consumer)", (12, 0), ("RTX 5090",), ("5090", "rtx5090")),
    _amd(
        "mi250x",
        "AMD Instinct MI250X, MI250, MI210 (CDNA2)",
        ("gfx90a",),
        ("MI250X", "MI250", "MI210"),
        ("mi250", "mi250x", "mi210"),
    ),
    _amd(
        "mi300x",
        "AMD Instinct MI300X, MI300A, MI325X (CDNA3)",
        ("gfx942",),
        ("MI300X", "MI300A", "MI325X"),
        ("mi300", "mi300x", "mi300a", "mi325", "mi325x"),
    ),
    _amd(
        "mi355x",
        "AMD Instinct MI355X, MI350X (CDNA4)",
        ("gfx950",),
        ("MI355X", "MI350X"),
        ("mi355", "mi355x", "mi350", "mi350x"),
    ),
    KnownClass(
        GpuClass(
            "pvc", "Intel Data Center GPU Max (Ponte Vecchio)", (), ("Data Center GPU Max",), vendor="intel"
        ),
        ("pvc", "max1550", "max1100"),
    ),
)
KNOWN_CLASSES: Mapping[str, KnownClass] = MappingProxyType({known.gpu_class.name: known for known in _ALL})


def classes_in_label(label: str) -> tuple[str, ...]:
    """The known GPU classes a runner label names by one of its words (`linux-max1550-pvc-8` -> pvc)."""
    words = set(re.split(r"[^a-z0-9]+", label.lower()))
    return tuple(
        name for name, known in KNOWN_CLASSES.items() if name != CPU_CLASS and words & set(known.hints)
    )
