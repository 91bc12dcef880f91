"""Which GPU classes and GPU counts a tree's test files need, from the signs `register --suggest` reads.

`gpumatrix init` asks this before it writes ci/matrix.yaml, so that `register --suggest` finds a class
for every file it reads afterwards: a file that skips unless compute capability 10.0 needs a class of
that capability or later, one that runs on `xpu` only an Intel class, one that checks for eight GPUs a
runner of eight. The choice is a pure function of the files' evidence (`gpumatrix.adopt.evidence.Evidence`),
the classes already wanted (runner labels of the workflows) and the classes gpumatrix knows
(`gpumatrix.hardware.known_classes`):

- files are taken from the least demanding to the most (any GPU first, then by rising compute
  capability), and a file that no chosen class of its first vendor can run (NVIDIA's for a file that
  NVIDIA GPUs can run, then AMD's, then Intel's: a CUDA file is not left to ROCm alone) gets the known
  class that fits it best: the default (h100) when it can, else the NVIDIA class of the lowest
  capability that is still enough, else the default class of its vendor (mi300x for AMD, pvc for
  Intel);
- each class gets a runner of one GPU and of every larger count a file placed on it needs.

Each choice comes with its reason, in counts a person can check: "3 files skip unless compute
capability >= 10.0 -> b200".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpumatrix.adopt.evidence import Evidence
from gpumatrix.config import CPU_CLASS, GpuClass
from gpumatrix.hardware.known_classes import KNOWN_CLASSES, KnownClass

__all__ = ["DEFAULT_CLASSES", "ClassChoice", "FileNeed", "choose_classes", "file_need"]

# The class a need of each vendor gets when no chosen class serves it ("nvidia": also a need of any GPU).
DEFAULT_CLASSES = {"nvidia": "h100", "amd": "mi300x", "intel": "pvc"}
_VENDOR_WORDS = {"amd": "ROCm (AMD only)", "intel": "xpu (Intel only)"}


@dataclass(frozen=True)
class FileNeed:
    """What one file's signs ask of a machine: GPUs of `vendors` (empty: any), of `capability` or
    later on NVIDIA, `gpus` of them."""

    path: str
    vendors: frozenset[str]
    capability: tuple[int, int] | None
    gpus: int

    def served_by(self, gpu_class: GpuClass) -> bool:
        """Whether a class can run the file (the rule `register --suggest` places files by)."""
        if gpu_class.is_cpu or (self.vendors and gpu_class.vendor not in self.vendors):
            return False
        return (
            gpu_class.vendor != "nvidia"
            or self.capability is None
            or any(cc >= self.capability for cc in gpu_class.compute_capabilities)
        )

    def describe(self) -> str:
        if self.capability is not None:
            return f"skip unless compute capability >= {self.capability[0]}.{self.capability[1]}"
        only = [_VENDOR_WORDS[v] for v in sorted(self.vendors) if v in _VENDOR_WORDS]
        if self.vendors and len(only) == len(self.vendors):
            return f"use {' or '.join(only)}"
        return "use CUDA (any NVIDIA GPU)" if self.vendors else "use a GPU (any)"


@dataclass(frozen=True)
class ClassChoice:
    classes: tuple[str, ...]  # GPU classes, in the order KNOWN_CLASSES lists them
    gpus: Mapping[str, tuple[int, ...]]  # each class's runner GPU counts, 1 first
    reasons: tuple[str, ...]


def file_need(path: str, evidence: Evidence) -> FileNeed | None:
    """The need of a file with `evidence`; None for a file with no sign of a GPU (a CPU file)."""
    if not evidence.signs:
        return None
    capabilities = [s.capability for s in evidence.signs if s.capability is not None]
    return FileNeed(
        path,
        frozenset().union(*(s.vendors for s in evidence.signs)),
        max(capabilities) if capabilities else None,
        max(s.gpus for s in evidence.signs),
    )


def choose_classes(
    needs: Sequence[FileNeed],
    *,
    start: Sequence[str] = (),
    known: Mapping[str, KnownClass] = KNOWN_CLASSES,
) -> ClassChoice:
    """The classes that serve every need, beginning with `start` (names of `known`), and the GPU
    counts their runners need."""
    chosen = [name for name in start if name in known and name != CPU_CLASS]
    added: dict[str, list[FileNeed]] = {}
    unserved: list[FileNeed] = []
    for need in sorted(needs, key=_demand):
        first = _first_vendor(need)
        if any(
            need.served_by(known[name].gpu_class) and known[name].gpu_class.vendor == first for name in chosen
        ):
            continue
        best = _best_class(need, known)
        if best is None:
            unserved.append(need)
            continue
        chosen.append(best)
        added.setdefault(best, [])
    for need in sorted(needs, key=_demand):  # each need a class was added for, under the first that serves it
        serving = [
            name
            for name in chosen
            if need.served_by(known[name].gpu_class) and known[name].gpu_class.vendor == _first_vendor(need)
        ]
        if serving and serving[0] in added:
            added[serving[0]].append(need)
    reasons = [_reason(name, group) for name, group in added.items()]
    reasons += [f"{need.path}: no known class can run it ({need.describe()})" for need in unserved]
    order = list(known)
    classes = tuple(sorted(dict.fromkeys(chosen), key=order.index))
    counts: dict[str, set[int]] = {name: {1} for name in classes}
    many: dict[int, list[FileNeed]] = {}
    for need in needs:
        if need.gpus > 1:
            serving = [name for name in classes if need.served_by(known[name].gpu_class)]
            for name in serving:
                counts[name].add(need.gpus)
            if serving:
                many.setdefault(need.gpus, []).append(need)
    for gpus, group in sorted(many.items()):
        serving = [name for name in classes if any(n.served_by(known[name].gpu_class) for n in group)]
        reasons.append(
            f"{_counted(len(group), f'need {gpus} GPUs')} -> runners of {gpus} x {', '.join(serving)}"
        )
    return ClassChoice(classes, {name: tuple(sorted(counts[name])) for name in classes}, tuple(reasons))


def _demand(need: FileNeed) -> tuple:
    """Least demanding first: any vendor before one vendor, no capability before a rising one."""
    return (
        need.capability is not None,
        need.capability or (0, 0),
        len(need.vendors) == 1,
        need.path,
    )


def _first_vendor(need: FileNeed) -> str:
    """The vendor whose class a file should get: NVIDIA where NVIDIA GPUs can run it, else AMD, else Intel."""
    return next((v for v in ("nvidia", "amd", "intel") if not need.vendors or v in need.vendors), "nvidia")


def _best_class(need: FileNeed, known: Mapping[str, KnownClass]) -> str | None:
    vendors = need.vendors or frozenset({"nvidia"})
    if "nvidia" in vendors:
        default = known.get(DEFAULT_CLASSES["nvidia"])
        if default is not None and need.served_by(default.gpu_class):
            return default.gpu_class.name
        fitting = [
            k.gpu_class
            for k in known.values()
            if k.gpu_class.vendor == "nvidia" and need.served_by(k.gpu_class)
        ]
        if fitting:
            return min(fitting, key=lambda c: min(c.compute_capabilities)).name
    for vendor in ("amd", "intel"):
        name = DEFAULT_CLASSES[vendor]
        if vendor in vendors and name in known and need.served_by(known[name].gpu_class):
            return name
    return None


def _files(count: int) -> str:
    return f"{count} file{'s' if count != 1 else ''}"


def _reason(name: str, group: Sequence[FileNeed]) -> str:
    kinds: dict[str, int] = {}
    for need in group:
        kinds[need.describe()] = kinds.get(need.describe(), 0) + 1
    return "; ".join(_counted(count, kind) for kind, count in kinds.items()) + f" -> {name}"


def _counted(count: int, kind: str) -> str:
    """`3 files skip unless ...`, `1 file skips unless ...`."""
    verb, _, rest = kind.partition(" ")
    return f"{_files(count)} {verb if count != 1 else verb + 's'} {rest}"
