"""What the pytest plugin decides about a test file, as plain functions of plain data.

A registered test file is decided on before it is imported: collected, skipped for this machine's
hardware (one entry per file, with a reason naming both sides), skipped as disabled where it runs
(`register(disabled=...)`, `disabled_on=`: one entry with the registered reason, never silently
absent), deselected as outside a `--runner` slice or a `--suite`, or failed for its registration
problems. A Blackwell test that imports `deep_gemm` at module
top is therefore skipped on a CPU or Hopper machine, never imported there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpumatrix.config import CPU_CLASS, Runner
from gpumatrix.hardware.detection import Hardware
from gpumatrix.problems import Problem
from gpumatrix.registry.model import Registration

__all__ = [
    "FileDecision",
    "HardwareSkip",
    "ReportFacts",
    "decide_file",
    "evaluate_hardware",
    "forwarded_options",
    "report_facts",
    "running_class",
    "unplugged_skip_reason",
]


@dataclass(frozen=True)
class HardwareSkip:
    reason: str


def evaluate_hardware(registration: Registration, hardware: Hardware) -> HardwareSkip | None:
    """None when this machine can run the file; else why not, naming what it needs and what is here.

    A file that names `cpu` runs as a CPU test on a machine without GPUs, or with GPUs of a class it
    does not name. On a machine of a class it names, it needs `gpus` of them: a GPU test that asks
    for two must not run on one (there is no CPU fallback inside a GPU class).
    """
    gpu_classes = [name for name in registration.on if name != CPU_CLASS]
    if CPU_CLASS in registration.on and (not hardware.count or hardware.gpu_class not in gpu_classes):
        return None
    if hardware.count and hardware.gpu_class in gpu_classes and hardware.count >= registration.gpus:
        return None
    also = " (or no GPU)" if CPU_CLASS in registration.on else ""
    return HardwareSkip(
        f"needs {registration.gpus} x {'|'.join(gpu_classes)}{also}; this machine: {hardware.describe()}"
    )


def running_class(registration: Registration, hardware: Hardware, runner: Runner | None) -> str | None:
    """The class the file runs as here, which its `disabled_on` is looked up by: the runner's; else
    this machine's GPU class when the file names it, else `cpu` when it names that (the rules of
    `evaluate_hardware`); None when it names neither."""
    if runner is not None:
        return runner.gpu_class
    if hardware.count and hardware.gpu_class in registration.on:
        return hardware.gpu_class
    return CPU_CLASS if CPU_CLASS in registration.on else None


@dataclass(frozen=True)
class FileDecision:
    """`collect` the file, or not: `error` (problems), `deselect` (another runner's or suite's) or
    `skip` (reason; `disabled` when the registration switched it off here, not the hardware)."""

    action: str
    reason: str = ""
    problems: tuple[Problem, ...] = ()
    disabled: bool = False


_COLLECT = FileDecision("collect")


def decide_file(
    path: str,
    registration: Registration | None,
    problems: Sequence[Problem],
    *,
    hardware: Hardware,
    runner: Runner | None,
    suite: str | None = None,
    include_disabled: bool = False,
) -> FileDecision:
    """The decision on a registered-kind test file (`tests/**/test_*.py`), before it is imported.

    `suite` None runs every suite. A file disabled where it runs is skipped with its reason before
    the hardware is looked at: that reason is the one a person acts on, wherever the run is.
    """
    if registration is None:
        found = tuple(problems) or (Problem(path, 0, "not registered (it was added after the run started?)"),)
        return FileDecision("error", problems=found)
    if runner is not None and runner.label not in registration.runners:
        return FileDecision("deselect", reason=f"not in runner {runner.label}'s slice")
    if suite is not None and registration.suite != suite:
        return FileDecision("deselect", reason=f"in suite {registration.suite}, not {suite}")
    if not include_disabled:
        why = registration.why_disabled(running_class(registration, hardware, runner))
        if why is not None:
            return FileDecision("skip", reason=why, disabled=True)
    skip = evaluate_hardware(registration, hardware)
    return FileDecision("skip", reason=skip.reason) if skip is not None else _COLLECT


@dataclass(frozen=True)
class ReportFacts:
    """What the JSON report needs to know of each registered file here, by path: the reason of a skip
    for this machine's hardware or for a `disabled=` registration, and the file's estimate."""

    hardware_skips: Mapping[str, str]
    disabled_skips: Mapping[str, str]
    est_times: Mapping[str, float]


def report_facts(
    registrations: Iterable[Registration],
    hardware: Hardware,
    runner: Runner | None,
    *,
    include_disabled: bool,
) -> ReportFacts:
    """The facts of every registration on this machine and runner (`decide_file`'s rules)."""
    hardware_skips, disabled_skips, est_times = {}, {}, {}
    for registration in registrations:
        skip = evaluate_hardware(registration, hardware)
        if skip is not None:
            hardware_skips[registration.path] = skip.reason
        ran_as = running_class(registration, hardware, runner)
        why = registration.why_disabled(ran_as)
        if why is not None and not include_disabled:
            disabled_skips[registration.path] = why
        est_times[registration.path] = registration.estimate_for(ran_as)
    return ReportFacts(hardware_skips, disabled_skips, est_times)


def unplugged_skip_reason(registration: Registration | None) -> str | None:
    """Why a file is skipped when the gpumatrix plugin is disabled (`-p no:gpumatrix`), or None.

    Without the plugin nothing compares the machine with `register(on=...)` or leases GPUs, so a
    file that needs a GPU would run blind (and fail in unrelated ways); CPU files run as usual,
    unless disabled (everywhere, or on `cpu`).
    """
    if registration is None:
        return None
    if CPU_CLASS in registration.on:
        return registration.why_disabled(CPU_CLASS)
    return (
        f"registered for {'|'.join(registration.on)} and the gpumatrix plugin is disabled "
        f"(-p no:gpumatrix): nothing checks this machine or leases GPUs, so it is not run"
    )


# pytest's short options that take a value ("-pNAME" or "-p NAME"); any other short option is a flag.
_VALUED_SHORT = frozenset("kmpcoWrn")
_FORWARDED_SHORT = {"p": "-p", "o": "-o", "W": "-W"}
_FORWARDED_LONG = {"--override-ini": "-o", "--pythonwarnings": "-W"}


def forwarded_options(args: Sequence[str]) -> list[str]:
    """The options of a pytest command line that a child pytest running one of its tests must get.

    Plugins enabled or disabled (`-p NAME`, `-pNAME`), ini overrides (`-o`, `--override-ini`),
    warning filters (`-W`, `--pythonwarnings`) and `-x`/`--exitfirst`, in every spelling argparse
    takes, grouped short flags included (`-xq`, `-qpno:foo`). Everything after `--` is an argument.
    """
    out: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if name == "--exitfirst":
                out.append("-x")
            elif name in _FORWARDED_LONG:
                if not eq and index < len(args):
                    value, index = args[index], index + 1
                out += [_FORWARDED_LONG[name], value]
            continue
        if not arg.startswith("-") or arg == "-":
            continue
        for position in range(1, len(arg)):  # a group of short options: -xq, -xpno:foo
            letter = arg[position]
            if letter not in _VALUED_SHORT:
                if letter == "x":
                    out.append("-x")
                continue
            value = arg[position + 1 :]
            if not value and index < len(args):
                value, index = args[index], index + 1
            if letter in _FORWARDED_SHORT:
                out += [_FORWARDED_SHORT[letter], value]
            break
    return out
