"""JSON reports as the gpumatrix plugin writes them, built from a few literals, for the coverage tests.

`report_json` goes through the plugin's own writer (`RunOutcomes.to_report`, `report_to_json`), so the
readers are always tested against what the writer produces. `PATHS_YAML` declares the paths these reports name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpumatrix.hardware.detection import Hardware
from gpumatrix.report import FileResult, Report, Skip, report_to_json
from gpumatrix.report.collect import RunOutcomes

__all__ = ["PATHS_YAML", "hardware_of", "report_from_files", "report_json"]

PATHS_YAML = """\
paths:
  k.pair:
    description: the kernel wrote the pair
    required_on: [h100, b200]
  k.bf16:
    required_on: [h100]
  ref.torch:
    required_on: [cpu]
  extra.path:
    required_on: []
    why: exercised where it happens
"""
_NAMES = {
    "cpu": "",
    "h100": "NVIDIA H200",
    "b200": "NVIDIA B200",
    "gb300": "NVIDIA GB300",
    "5090": "RTX 5090",
}
_CC = {"h100": (9, 0), "b200": (10, 0), "gb300": (10, 3), "5090": (12, 0)}


def report_json(
    runner: str | None,
    gpu_class: str,
    gpus: int,
    tests: Mapping[str, str],
    witnessed: Mapping[str, Sequence[str]] = {},
    durations: Mapping[str, float] = {},
    *,
    reasons: Mapping[str, str] = {},
    est_times: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """A report: `tests` {nodeid: passed|failed|errors|skipped}, `witnessed` {nodeid: [path, ...]},
    `durations` {nodeid: seconds} (1 s unless given), `reasons` {nodeid: skip reason}."""
    run = RunOutcomes()
    for nodeid, kind in tests.items():
        reason = reasons.get(nodeid, "needs b200") if kind == "skipped" else ""
        run.add(nodeid, nodeid.split("::")[0], kind, reason)
        run.durations[nodeid] = durations.get(nodeid, 1.0)
    for nodeid, paths in witnessed.items():
        run.witnessed[nodeid] = [{"path": p, "reason": f"why {p}"} for p in paths]
    hardware = hardware_of(gpu_class, gpus)
    return report_to_json(run.to_report(hardware=hardware, runner=runner, est_times=dict(est_times or {})))


def hardware_of(gpu_class: str, gpus: int) -> Hardware:
    """A machine of `gpus` GPUs of `gpu_class` (0: a CPU machine), as NVML would describe it."""
    return Hardware(
        gpu_class,
        gpus,
        names=(_NAMES[gpu_class],) * gpus,
        capabilities=(_CC.get(gpu_class, (0, 0)),) * gpus,
        source="nvml" if gpus else "none",
        device_ids=tuple(f"GPU-{index}" for index in range(gpus)),
    )


def report_from_files(files: Mapping[str, Mapping[str, Any]]) -> Report:
    """A report of a CPU machine holding `files` written as the JSON's (`{"passed": [...], "skipped":
    [{"nodeid", "reason", "hardware", "disabled"?}]}`; lists left out are empty)."""
    return Report(
        hardware=Hardware("cpu", 0),
        runner=None,
        files={
            path: FileResult(
                passed=tuple(entry.get("passed", ())),
                failed=tuple(entry.get("failed", ())),
                errors=tuple(entry.get("errors", ())),
                skipped=tuple(Skip(**skip) for skip in entry.get("skipped", ())),
            )
            for path, entry in files.items()
        },
    )
