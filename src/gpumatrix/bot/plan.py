"""Group resolved targets by runner label: the runner groups a command dispatches.

A file registered on several GPU classes goes to the runner of each class (the registry already chose
the runner with the fewest GPUs that fits); `--runner` narrows the groups. A file of any suite can be
re-run. A file disabled on a runner's class (or everywhere) is refused there with its registered
reason, unless the command says `--include-disabled`; the group that then runs it carries the flag
to its run. Groups come out in the order of `ci/matrix.yaml`, tests in the order the comment named
them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpumatrix.bot.resolve import Refusal, Target
from gpumatrix.config import Matrix
from gpumatrix.registry.model import Registry

__all__ = [
    "Plan",
    "RunnerGroup",
    "check_runners",
    "check_sha",
    "listing_notes",
    "plan_groups",
    "plan_listing",
    "replan_group",
]


@dataclass(frozen=True)
class RunnerGroup:
    """The tests one runner is asked to run: registry paths or validated node ids."""

    label: str
    tests: tuple[str, ...]
    include_disabled: bool = False  # some test is disabled on this runner and was asked for anyway


@dataclass(frozen=True)
class Plan:
    groups: tuple[RunnerGroup, ...]
    refusals: tuple[Refusal, ...] = ()


def check_sha(requested: str | None, head: str | None) -> str | None:
    """Why a `--sha` refuses the command, or None when it matches the PR head (or was not given)."""
    if requested is None:
        return None
    if head is None:
        return f"--sha {requested} cannot be checked: the PR head SHA is not known"
    if not head.startswith(requested):
        return (
            f"--sha {requested} is not the PR head ({head[:12]}); the PR moved since you looked: "
            "check the new commits and comment again"
        )
    return None


def plan_groups(
    targets: Sequence[Target],
    registry: Registry,
    matrix: Matrix,
    *,
    runners: Sequence[str] = (),
    include_disabled: bool = False,
) -> Plan:
    """One group per runner label that any target is registered on, narrowed by `runners`; where a
    target is disabled, a refusal naming the reason instead (or, with `include_disabled`, the group)."""
    refusals, selected = check_runners(runners, matrix)
    by_label: dict[str, list[str]] = {}
    disabled_in: set[str] = set()  # labels whose group runs a disabled test
    for target in targets:
        registration = registry.get(target.path)
        if registration is None:  # resolve only yields registered paths; a stale target is refused
            refusals.append(Refusal(target.selection, "is not a registered test file"))
            continue
        labels = [label for label in registration.runners if not runners or label in selected]
        if not labels:
            if selected:  # when every --runner is unknown, their own refusals already say why
                refusals.append(
                    Refusal(
                        target.selection,
                        f"is registered for {', '.join(registration.runners)}; --runner selects none of them",
                    )
                )
            continue
        if registration.disabled is not None and not include_disabled:
            refusals.append(Refusal(target.selection, _disabled_refusal(registration.why_disabled())))
            continue
        for label in labels:
            why = registration.why_disabled(_class_of(label, matrix))
            if why is not None and not include_disabled:
                refusals.append(Refusal(target.selection, _disabled_refusal(why, label)))
                continue
            if why is not None:
                disabled_in.add(label)
            by_label.setdefault(label, []).append(target.selection)
    return Plan(_in_matrix_order(by_label, matrix, disabled_in), tuple(refusals))


def _disabled_refusal(why: str | None, label: str | None = None) -> str:
    where = f" on runner {label}" if label else ""
    return f"is {why}; add `--include-disabled` to run it{where} anyway"


def _class_of(label: str, matrix: Matrix) -> str | None:
    runner = matrix.runner(label)
    return runner.gpu_class if runner is not None else None


def replan_group(
    label: str,
    tests: Iterable[str],
    registry: Registry,
    *,
    matrix: Matrix | None = None,
    include_disabled: bool = False,
) -> tuple[RunnerGroup | None, list[Refusal]]:
    """Re-check an earlier group's tests against the current head's registry (for `/rerun-failed`):
    still registered for `label`, and not disabled there (`matrix` names its class) unless included."""
    kept: list[str] = []
    refusals: list[Refusal] = []
    disabled = False
    gpu_class = _class_of(label, matrix) if matrix is not None else None
    for test in tests:
        registration = registry.get(test.partition("::")[0])
        if registration is None or label not in registration.runners:
            refusals.append(Refusal(test, f"is no longer registered for {label} at this head"))
            continue
        why = registration.why_disabled(gpu_class)
        if why is not None and not include_disabled:
            refusals.append(Refusal(test, _disabled_refusal(why, label)))
            continue
        disabled |= why is not None
        kept.append(test)
    return (RunnerGroup(label, tuple(kept), disabled) if kept else None), refusals


def plan_listing(
    registry: Registry, matrix: Matrix, *, runners: Sequence[str] = ()
) -> tuple[dict[str, tuple[str, ...]], list[Refusal]]:
    """Registered test files by runner label (every runner of the matrix, narrowed by `runners`)."""
    refusals, selected = check_runners(runners, matrix)
    labels = [r.label for r in matrix.runners if not runners or r.label in selected]
    return {label: tuple(r.path for r in registry.for_runner(label)) for label in labels}, refusals


def listing_notes(
    listing: Mapping[str, Sequence[str]], registry: Registry, matrix: Matrix
) -> dict[str, dict[str, tuple[str, str | None]]]:
    """For `/rerun-test ?`: label -> path -> (the file's suite, why it is disabled on that runner or None)."""
    notes: dict[str, dict[str, tuple[str, str | None]]] = {}
    by_path = {registration.path: registration for registration in registry.files}  # get() is a scan
    for label, paths in listing.items():
        gpu_class = _class_of(label, matrix)
        for path in paths:
            registration = by_path.get(path)
            if registration is not None:
                notes.setdefault(label, {})[path] = (registration.suite, registration.why_disabled(gpu_class))
    return notes


def check_runners(runners: Sequence[str], matrix: Matrix) -> tuple[list[Refusal], set[str]]:
    """Refusals for `--runner` labels the matrix does not know, and the set of those it does."""
    known = [r.label for r in matrix.runners]
    refusals = [
        Refusal(f"--runner {label}", f"is not a runner of ci/matrix.yaml (known: {', '.join(known)})")
        for label in runners
        if label not in known
    ]
    return refusals, {label for label in runners if label in known}


def _in_matrix_order(
    by_label: Mapping[str, list[str]], matrix: Matrix, disabled_in: set[str]
) -> tuple[RunnerGroup, ...]:
    return tuple(
        RunnerGroup(r.label, tuple(by_label[r.label]), r.label in disabled_in)
        for r in matrix.runners
        if r.label in by_label
    )
