"""What a pytest session of the gpumatrix plugin decides before its first test, resolved once.

A `SessionPlan` is the tree's root, this machine's hardware, the runner and suite asked for (checked
against ci/matrix.yaml), the registry of the tree's test files and the code paths ci/paths.yaml
declares. It is resolved once (`resolve_session`: the matrix loaded, the hardware detected, the
registry discovered) and then handed on as JSON rather than resolved again: `gpumatrix run` writes the
plan it made for the pytest it starts (`--gpumatrix-plan FILE`), the plugin's controller hands its plan
to xdist workers, and a test that needs more GPUs than its process sees runs in a child pytest given
the plan narrowed to the GPUs it leased.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpumatrix import UsageError
from gpumatrix.bounds import MAX_PLAN_BYTES
from gpumatrix.config import (
    DEFAULT_FLAKY_RERUNS,
    DEFAULT_TEST_ROOTS,
    MAX_WORKERS_PER_GPU,
    Matrix,
    Runner,
    WorkersPerGpu,
    load_matrix,
)
from gpumatrix.coverage.paths import PATHS_FILE, load_paths
from gpumatrix.hardware.detection import Hardware, detect
from gpumatrix.problems import Problem
from gpumatrix.registry.discovery import discover
from gpumatrix.registry.model import Registration, Registry
from gpumatrix.regular_files import read_regular

__all__ = [
    "PLAN_FORMAT",
    "WORKERS_PER_GPU_ENV",
    "SessionPlan",
    "declared_paths",
    "resolve_session",
    "resolve_workers_per_gpu",
]

PLAN_FORMAT = 1
# Overrides ci/matrix.yaml's `workers_per_gpu` for one run (a measurement of another sharing, say).
WORKERS_PER_GPU_ENV = "GPUMATRIX_WORKERS_PER_GPU"


@dataclass(frozen=True)
class SessionPlan:
    """Everything the plugin resolves before the first test; `declared_paths` None: no ci/paths.yaml."""

    root: Path
    hardware: Hardware
    registry: Registry
    runner: Runner | None = None
    suite: str | None = None  # None: every suite
    declared_paths: frozenset[str] | None = None
    test_roots: tuple[str, ...] = DEFAULT_TEST_ROOTS  # ci/matrix.yaml's: the files the plugin decides on
    flaky_reruns: int = DEFAULT_FLAKY_RERUNS  # ci/matrix.yaml `flaky: reruns:`
    workers_per_gpu: int = 1  # tests one GPU runs at a time (`resolve_workers_per_gpu`)

    def narrowed(self, device_ids: Sequence[str]) -> SessionPlan:
        """This plan as a child process bound to `device_ids` (a subset of this machine's GPUs, as
        CUDA_VISIBLE_DEVICES names them) sees it: those GPUs only, and no runner (it runs one test)."""
        keep = [self.hardware.device_ids.index(d) for d in device_ids if d in self.hardware.device_ids]
        hardware = replace(
            self.hardware,
            count=len(keep),
            names=tuple(self.hardware.names[i] for i in keep),
            capabilities=tuple(self.hardware.capabilities[i] for i in keep),
            device_ids=tuple(self.hardware.device_ids[i] for i in keep),
        )
        return replace(self, hardware=hardware, runner=None, suite=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT,
            "root": str(self.root),
            "hardware": self.hardware.to_dict(),
            "runner": _runner_json(self.runner),
            "suite": self.suite,
            "declared_paths": sorted(self.declared_paths) if self.declared_paths is not None else None,
            "files": [r.to_dict() for r in self.registry.files],
            "problems": [[p.source, p.line, p.message] for p in self.registry.problems],
            "test_roots": list(self.test_roots),
            "flaky_reruns": self.flaky_reruns,
            "workers_per_gpu": self.workers_per_gpu,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, source: str) -> SessionPlan:
        """The plan `to_json` wrote; a `UsageError` naming `source` when it is not one."""
        try:
            if data["format"] != PLAN_FORMAT:
                raise ValueError(f"format {data['format']!r}, not {PLAN_FORMAT}")
            runner = data["runner"]
            declared = data["declared_paths"]
            return cls(
                root=Path(data["root"]),
                hardware=Hardware.from_dict(data["hardware"]),
                registry=Registry(
                    tuple(Registration.from_dict(r) for r in data["files"]),
                    tuple(Problem(str(s), int(line), str(m)) for s, line, m in data["problems"]),
                ),
                runner=Runner(**{**runner, "runs_on": tuple(runner["runs_on"])}) if runner else None,
                suite=data["suite"],
                declared_paths=frozenset(declared) if declared is not None else None,
                test_roots=tuple(str(root) for root in data["test_roots"]),
                flaky_reruns=int(data.get("flaky_reruns", DEFAULT_FLAKY_RERUNS)),
                workers_per_gpu=_workers_per_gpu_field(data.get("workers_per_gpu", 1)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UsageError(
                f"{source} is not a plan gpumatrix wrote ({type(exc).__name__}: {exc})"
            ) from None

    def dump(self) -> str:
        """The plan file's text (`gpumatrix run` writes it through `gpumatrix.running.outputs`)."""
        return json.dumps(self.to_json()) + "\n"

    def write(self, path: Path) -> None:
        path.write_text(self.dump(), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> SessionPlan:
        try:  # a FIFO or a device is refused, never opened for a read that would wait
            data = json.loads(read_regular(path, limit=MAX_PLAN_BYTES))
        except (OSError, ValueError, RecursionError) as exc:
            raise UsageError(f"--gpumatrix-plan: cannot read {path}: {exc}") from None
        if not isinstance(data, dict):
            raise UsageError(f"{path} is not a plan gpumatrix wrote")
        return cls.from_json(data, source=str(path))


def _workers_per_gpu_field(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WORKERS_PER_GPU:
        raise ValueError(f"workers_per_gpu {value!r} is not from 1 to {MAX_WORKERS_PER_GPU}")
    return value


def _runner_json(runner: Runner | None) -> dict[str, Any] | None:
    if runner is None:
        return None
    return {
        "label": runner.label,
        "gpu_class": runner.gpu_class,
        "gpus": runner.gpus,
        "runs_on": list(runner.runs_on),
        "timeout_minutes": runner.timeout_minutes,
        "max_shards": runner.max_shards,
        "workers_per_gpu": runner.workers_per_gpu,
    }


def resolve_session(
    root: Path,
    *,
    runner: str | None = None,
    suite: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SessionPlan:
    """Load root's ci/matrix.yaml and ci/paths.yaml, check `runner` and `suite` (a label and a suite name,
    `all` for every suite), detect this machine and discover the registry.

    Raises a `UsageError` (an invalid matrix or paths file, an unknown runner or suite, a malformed
    GPUMATRIX_HARDWARE): nothing a session could run with.
    """
    matrix = load_matrix(root / "ci" / "matrix.yaml")
    chosen = matrix.require_runner(runner) if runner is not None else None
    chosen_suite = matrix.require_suite(suite) if suite is not None else None
    hardware = detect(matrix, environ=environ)
    workers = resolve_workers_per_gpu(matrix, hardware, chosen, environ=environ)
    return SessionPlan(
        root=root,
        hardware=hardware,
        registry=discover(root, matrix),
        runner=chosen,
        suite=chosen_suite,
        declared_paths=declared_paths(root, matrix),
        test_roots=matrix.test_roots,
        flaky_reruns=matrix.flaky_reruns,
        workers_per_gpu=workers.count,
    )


def resolve_workers_per_gpu(
    matrix: Matrix, hardware: Hardware, runner: Runner | None, *, environ: Mapping[str, str] | None = None
) -> WorkersPerGpu:
    """How many tests one GPU of this machine runs at a time: `GPUMATRIX_WORKERS_PER_GPU`, else the
    runner's setting (without one, the runner of this machine's class and GPU count), else its class's.

    Raises a `UsageError` naming the variable when it is not a number from 1 to MAX_WORKERS_PER_GPU.
    """
    env = os.environ if environ is None else environ
    text = env.get(WORKERS_PER_GPU_ENV, "").strip()
    if text:
        if not (
            text.isascii() and text.isdigit() and len(text) <= 3 and 1 <= int(text) <= MAX_WORKERS_PER_GPU
        ):
            raise UsageError(
                f"{WORKERS_PER_GPU_ENV}={text[:40]!r} must be a whole number from 1 to {MAX_WORKERS_PER_GPU} "
                f"(1: each test holds a GPU alone)"
            )
        return WorkersPerGpu(int(text), WORKERS_PER_GPU_ENV)
    if runner is None:
        runner = next(
            (r for r in matrix.runners if r.gpu_class == hardware.gpu_class and r.gpus == hardware.count),
            None,
        )
    return matrix.workers_per_gpu(hardware.gpu_class, runner)


def declared_paths(root: Path, matrix: Matrix) -> frozenset[str] | None:
    """The path names root's ci/paths.yaml declares (a `PathsError` when it is invalid); None without one."""
    paths_file = root / PATHS_FILE
    return frozenset(load_paths(paths_file, matrix).paths) if paths_file.is_file() else None
