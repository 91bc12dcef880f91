"""`gpumatrix init`: set a repository up for gpumatrix in one command, without a question.

`survey_repository` reads what the repository already says (pytest's settings, the directories that
hold test files, the `runs-on` labels of its workflows and which workflows run pytest);
`plan_init` decides, as a pure function, what to write:

- `ci/matrix.yaml`: the test roots (`--test-root`, else pytest's `testpaths`, else the top-level
  directories holding test files, else `tests`), the class `cpu` and the classes asked for
  (`--classes`); without `--classes`, those the workflows' runner labels name and the registered
  files name, and every class the test files need (`gpumatrix.adopt.class_survey`: each file read as data
  for its signs, as `register --suggest` reads it: a capability a file skips below, a vendor's device, a
  GPU count), else `h100`; one runner per class and GPU count (`--gpus` for every class, else one GPU
  and each count a file needs) on the labels a workflow already uses for it, else
  `[self-hosted, linux, gpu-CLASS]`;
- in each test root's `conftest.py`, the fallback hook that skips GPU-only files when the plugin is
  disabled (`pytest -p no:gpumatrix`);
- `.gitignore` entries for the reports (`reports/`) and the registry cache (`.gpumatrix/`).

Running it again changes nothing (`unchanged`); a `ci/matrix.yaml` that differs from what it would
write is left alone and the whole run refused (a `UsageError`, exit 2) unless `--force`.
`apply_init` writes the plan.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpumatrix import UsageError
from gpumatrix.adopt.class_survey import ClassChoice, FileNeed, choose_classes, file_need
from gpumatrix.adopt.pytest_settings import PytestSettings, read_pytest_settings
from gpumatrix.config import CPU_CLASS, GpuClass, parse_matrix
from gpumatrix.hardware.known_classes import KNOWN_CLASSES, classes_in_label
from gpumatrix.registry.cache import CACHE_PATH
from gpumatrix.yamlfile import is_plain_scalar, load_yaml_data

__all__ = [
    "FALLBACK_MARK",
    "InitOptions",
    "InitPlan",
    "PlannedFile",
    "RepositorySurvey",
    "apply_init",
    "plan_init",
    "survey_repository",
]

MATRIX_PATH = "ci/matrix.yaml"
DEFAULT_GPU_CLASS = "h100"
# The line that tells a conftest already has the fallback.
FALLBACK_MARK = "unplugged_collect_report"
FALLBACK = """
# gpumatrix: with its pytest plugin disabled (`pytest -p no:gpumatrix`) nothing checks this machine
# against the registrations or leases GPUs, so test files registered for GPU classes only are skipped.
import pytest as _gpumatrix_pytest

try:
    from gpumatrix.plugin import unplugged_collect_report as _gpumatrix_unplugged
except ImportError:  # gpumatrix is not installed here: nothing to gate
    _gpumatrix_unplugged = None


@_gpumatrix_pytest.hookimpl(tryfirst=True)
def pytest_make_collect_report(collector):
    return _gpumatrix_unplugged(collector) if _gpumatrix_unplugged is not None else None
"""
IGNORED = (
    ("reports/", "gpumatrix run's reports and pages"),
    (f"{CACHE_PATH.split('/')[0]}/", "the registry cache"),
)


@dataclass(frozen=True)
class RepositorySurvey:
    """What a repository says before gpumatrix is set up in it. Paths are root-relative, '/'-separated."""

    pytest: PytestSettings
    test_dirs: tuple[str, ...]  # top-level directories holding test_*.py files
    test_files: int
    files: Mapping[str, str | None]  # the text of files init may edit (None: missing)
    # (workflow file, runs-on label) of every job; and the workflow files that run pytest or `make test`
    labels: tuple[tuple[str, str], ...] = ()
    pytest_workflows: tuple[str, ...] = ()
    # What each unregistered test file needs, read as data (files with no sign of a GPU are left out),
    # and the classes registered files already name.
    needs: tuple[FileNeed, ...] = ()
    registered_classes: tuple[str, ...] = ()


@dataclass(frozen=True)
class InitOptions:
    classes: tuple[str, ...] = ()  # GPU classes; empty: from the workflows and the test files
    gpus: tuple[int, ...] = ()  # every class's runner counts; empty: 1 and what the test files need
    test_roots: tuple[str, ...] = ()  # empty: from pytest or the tree
    force: bool = False


@dataclass(frozen=True)
class PlannedFile:
    path: str
    action: str  # create, update, overwrite, unchanged, skipped
    text: str | None  # what to write (None: nothing)
    why: str = ""


@dataclass(frozen=True)
class InitPlan:
    files: tuple[PlannedFile, ...]
    test_roots: tuple[str, ...]
    classes: tuple[str, ...]
    reasons: tuple[str, ...]  # how roots and classes were chosen
    next_steps: tuple[str, ...]


def survey_repository(root: str | Path) -> RepositorySurvey:
    """Read pytest's settings, the test directories and the workflows of the repository at `root`."""
    from gpumatrix.adopt.tree_survey import survey_tree
    from gpumatrix.config import Matrix

    root = Path(root)
    settings = read_pytest_settings(root)
    # Everything pytest would collect from the whole tree: where the test files are.
    whole = PytestSettings(python_files=("test_*.py",), norecursedirs=settings.norecursedirs)
    collected = survey_tree(root, Matrix(classes={}, runners=()), whole).collected
    test_dirs = tuple(sorted({path.split("/", 1)[0] for path in collected if "/" in path}))
    labels: list[tuple[str, str]] = []
    pytest_workflows: list[str] = []
    workflows = root / ".github" / "workflows"
    for path in sorted([*workflows.glob("*.yml"), *workflows.glob("*.yaml")]) if workflows.is_dir() else []:
        text = _read(path)
        if text is None:
            continue
        name = path.relative_to(root).as_posix()
        labels.extend((name, label) for label in _runs_on_labels(text))
        if re.search(r"\bpytest\b|\bmake\s+test\b", text):
            pytest_workflows.append(name)
    files = {
        relative: _read(root / relative)
        for relative in (MATRIX_PATH, ".gitignore", *(f"{d}/conftest.py" for d in test_dirs))
    }
    needs, registered = _read_needs(root, collected)
    return RepositorySurvey(
        settings,
        test_dirs,
        len(collected),
        files,
        tuple(labels),
        tuple(pytest_workflows),
        needs,
        registered,
    )


def _read_needs(root: Path, paths: Sequence[str]) -> tuple[tuple[FileNeed, ...], tuple[str, ...]]:
    """What each test file needs (never importing it), and the classes registered files name. A file
    that cannot be read as Python is left to `register --suggest`, which says why."""
    from gpumatrix.adopt.evidence import find_evidence, parse_test_file
    from gpumatrix.adopt.local_helpers import LocalHelpers
    from gpumatrix.registry.reader import read_registration
    from gpumatrix.registry.source import READ_LIMIT
    from gpumatrix.regular_files import read_regular

    helpers = LocalHelpers(root)
    needs: list[FileNeed] = []
    registered: dict[str, None] = {}
    for path in paths:
        try:
            data = read_regular(root / path, limit=READ_LIMIT)
        except OSError:
            continue
        registration, _ = read_registration(data, path)
        if registration is not None:
            registered.update(dict.fromkeys(name for name in registration.on if name != CPU_CLASS))
            continue
        try:
            tree = parse_test_file(data, path)[2]
            need = file_need(path, find_evidence(tree, path, helpers=helpers.helpers_for(tree, path)))
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError, MemoryError):
            continue
        if need is not None:
            needs.append(need)
    return tuple(needs), tuple(registered)


def plan_init(
    survey: RepositorySurvey, options: InitOptions, *, read: Callable[[str], str | None] | None = None
) -> InitPlan:
    """What `init` writes for this repository and these options; a `UsageError` when `ci/matrix.yaml`
    exists, differs, and `options.force` is not set, or an option names an unknown class.

    `read(path)` gives the text of a root-relative file (None: missing); the survey's files by default.
    """
    read = read or survey.files.get
    reasons: list[str] = []
    roots = _test_roots(survey, options, reasons)
    choice = _gpu_classes(survey, options, roots, reasons)
    classes = choice.classes
    counts = {name: options.gpus for name in classes} if options.gpus else choice.gpus
    matrix_text = render_matrix(roots, classes, counts, _labels_by_class(survey))
    parse_matrix(matrix_text, source=MATRIX_PATH)  # what init writes is valid, or this is a bug
    files = [_matrix_file(read(MATRIX_PATH), matrix_text, force=options.force)]
    files += [_conftest_file(f"{r}/conftest.py", read(f"{r}/conftest.py")) for r in roots]
    files.append(_gitignore_file(read(".gitignore")))
    steps = [
        "gpumatrix register --suggest          # a registration for each test file, from what it says; "
        "then --write",
        "gpumatrix check                       # every test file placed, the matrix valid",
        "gpumatrix list                        # which runner runs what",
        "gpumatrix run                         # this machine's slice, with its guards",
    ]
    if survey.pytest_workflows:
        steps.append(
            f"in {', '.join(survey.pytest_workflows)}: run `gpumatrix run --runner LABEL` on each runner "
            f"(`gpumatrix matrix --json` gives a strategy matrix) instead of pytest"
        )
    return InitPlan(tuple(files), roots, classes, tuple(reasons), tuple(steps))


def apply_init(root: str | Path, plan: InitPlan) -> None:
    """Write the files of `plan` under `root`."""
    for planned in plan.files:
        if planned.text is None or planned.action in ("unchanged", "skipped"):
            continue
        path = Path(root) / planned.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(planned.text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def render_matrix(
    roots: Sequence[str],
    classes: Sequence[str],
    gpus: Sequence[int] | Mapping[str, Sequence[int]],
    labels: Mapping[str, str],
) -> str:
    """The text of ci/matrix.yaml: `cpu` and `classes` (names of KNOWN_CLASSES), a runner per class and
    GPU count (`gpus`: the counts of every class, or of each), on `labels[class]` where a workflow
    names one."""
    lines = [
        "# GPU classes and CI runners: the one source of truth for which test file runs where",
        "# (written by `gpumatrix init`; edit freely, `gpumatrix check` validates it).",
        "#",
        "# NVIDIA classes are told by compute capability, AMD's by gfx architecture, Intel's by device name.",
        "",
        "# The directories holding the test files (test_*.py) that must call register(...).",
        f"test_roots: [{', '.join(_quoted(r) for r in roots)}]",
        "",
        "classes:",
    ]
    for name in (CPU_CLASS, *classes):
        lines += _class_lines(KNOWN_CLASSES[name].gpu_class)
    lines += ["", "runners:"]
    lines += _runner_lines("cpu", CPU_CLASS, 0, ["ubuntu-latest"])
    for name in classes:
        for count in gpus[name] if isinstance(gpus, Mapping) else gpus:
            runs_on = [labels[name]] if name in labels else ["self-hosted", "linux", f"gpu-{name}"]
            lines += _runner_lines(f"{count}-gpu-{name}", name, count, runs_on)
    return "\n".join(lines) + "\n"


def _class_lines(gpu_class: GpuClass) -> list[str]:
    lines = [f"  {_quoted(gpu_class.name)}:", f"    description: {_quoted(gpu_class.description)}"]
    if gpu_class.vendor not in ("nvidia", "none"):
        lines.append(f"    vendor: {gpu_class.vendor}")
    if gpu_class.vendor in ("nvidia", "none"):
        capabilities = ", ".join(f'"{major}.{minor}"' for major, minor in gpu_class.compute_capabilities)
        lines.append(f"    compute_capability: [{capabilities}]")
    if gpu_class.architectures:
        lines.append(f"    gfx: [{', '.join(gpu_class.architectures)}]")
    if gpu_class.device_names:
        lines.append(f"    device_names: [{', '.join(_quoted(n) for n in gpu_class.device_names)}]")
    return lines


def _runner_lines(label: str, class_name: str, gpus: int, runs_on: Sequence[str]) -> list[str]:
    return [
        f"  - label: {label}",
        f"    class: {_quoted(class_name)}",
        f"    gpus: {gpus}",
        f"    runs_on: [{', '.join(_quoted(label) for label in runs_on)}]",
        "    timeout_minutes: 60",
        "    max_shards: 2",
    ]


def _quoted(text: str) -> str:
    """`text` as a YAML scalar: plain where YAML reads it back as the same string, else quoted."""
    plain = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_./ ()-]*", text) and is_plain_scalar(text)
    return text if plain and "  " not in text and not text.endswith(" ") else f'"{text}"'


def _test_roots(survey: RepositorySurvey, options: InitOptions, reasons: list[str]) -> tuple[str, ...]:
    if options.test_roots:
        reasons.append(f"test roots: {', '.join(options.test_roots)} (--test-root)")
        return options.test_roots
    testpaths = tuple(p for p in survey.pytest.testpaths if p != ".")
    if testpaths:
        reasons.append(f"test roots: {', '.join(testpaths)} (testpaths in {survey.pytest.source})")
        return testpaths
    if survey.test_dirs:
        reasons.append(
            f"test roots: {', '.join(survey.test_dirs)} (the directories holding the "
            f"{survey.test_files} test_*.py file(s))"
        )
        return survey.test_dirs
    reasons.append("test roots: tests (no test files found yet)")
    return ("tests",)


def _gpu_classes(
    survey: RepositorySurvey, options: InitOptions, roots: Sequence[str], reasons: list[str]
) -> ClassChoice:
    gpu_known = [name for name in KNOWN_CLASSES if name != CPU_CLASS]
    if options.classes:
        unknown = [name for name in options.classes if name not in gpu_known]
        if unknown:
            raise UsageError(
                f"--classes: unknown class(es) {', '.join(unknown)} (known: {', '.join(gpu_known)}; "
                f"declare others in {MATRIX_PATH} by hand)"
            )
        reasons.append(f"classes: cpu, {', '.join(options.classes)} (--classes)")
        classes = tuple(dict.fromkeys(options.classes))
        return ClassChoice(classes, {name: (1,) for name in classes}, ())
    found = _labels_by_class(survey)
    if found:
        named = ", ".join(f"{name} ({found[name]})" for name in found)
        reasons.append(f"classes: {named} (runner labels of the workflows)")
    registered = [name for name in survey.registered_classes if name in KNOWN_CLASSES and name not in found]
    if registered:
        reasons.append(f"classes: {', '.join(registered)} (named by registered test files)")
    needs = [n for n in survey.needs if any(n.path.startswith(f"{root}/") for root in roots)]
    choice = choose_classes(needs, start=[*found, *registered])
    reasons += [f"test files: {reason}" for reason in choice.reasons]
    if not choice.classes:
        reasons.append(
            f"classes: {DEFAULT_GPU_CLASS} (the default: no workflow names a GPU and no test file shows "
            f"a sign of one; --classes to choose)"
        )
        return ClassChoice((DEFAULT_GPU_CLASS,), {DEFAULT_GPU_CLASS: (1,)}, ())
    reasons.append(f"classes: cpu, {', '.join(choice.classes)} (--classes to choose others)")
    return choice


def _labels_by_class(survey: RepositorySurvey) -> dict[str, str]:
    """The first runner label of the workflows that names each known class."""
    found: dict[str, str] = {}
    for _, label in survey.labels:
        for name in classes_in_label(label):
            found.setdefault(name, label)
    return dict(sorted(found.items(), key=lambda item: list(KNOWN_CLASSES).index(item[0])))


def _matrix_file(existing: str | None, text: str, *, force: bool) -> PlannedFile:
    if existing is None:
        return PlannedFile(MATRIX_PATH, "create", text)
    if existing == text:
        return PlannedFile(MATRIX_PATH, "unchanged", None)
    if not force:
        raise UsageError(
            f"{MATRIX_PATH} exists and differs from what init would write: nothing was written; "
            f"edit it, or pass --force to overwrite it"
        )
    return PlannedFile(MATRIX_PATH, "overwrite", text, "--force")


def _conftest_file(path: str, existing: str | None) -> PlannedFile:
    if existing is None:
        return PlannedFile(path, "create", f'"""Test configuration."""\n{FALLBACK}')
    if FALLBACK_MARK in existing:
        return PlannedFile(path, "unchanged", None)
    if re.search(r"^def pytest_make_collect_report\b", existing, re.MULTILINE):
        return PlannedFile(
            path,
            "skipped",
            None,
            "it defines pytest_make_collect_report already: return "
            "gpumatrix.plugin.unplugged_collect_report(collector) from it first",
        )
    separator = "" if existing.endswith("\n") or not existing else "\n"
    return PlannedFile(
        path, "update", existing + separator + FALLBACK, "the -p no:gpumatrix fallback appended"
    )


def _gitignore_file(existing: str | None) -> PlannedFile:
    present = {line.strip().lstrip("/") for line in (existing or "").splitlines()}
    missing = [
        (entry, why) for entry, why in IGNORED if entry not in present and entry.rstrip("/") not in present
    ]
    if not missing:
        return PlannedFile(".gitignore", "unchanged", None)
    added = "".join(f"# {why}\n{entry}\n" for entry, why in missing)
    text = existing or ""
    separator = "" if not text or text.endswith("\n") else "\n"
    return PlannedFile(
        ".gitignore",
        "update" if existing is not None else "create",
        text + separator + added,
        ", ".join(entry for entry, _ in missing),
    )


def _runs_on_labels(text: str) -> list[str]:
    """The literal `runs-on` labels of a workflow's jobs (expressions are skipped); none from a workflow
    that does not read as one (`jobs:` not a mapping)."""
    data = load_yaml_data(text)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    labels: list[str] = []
    for job in jobs.values() if isinstance(jobs, dict) else ():
        runs_on = job.get("runs-on") if isinstance(job, dict) else None
        values = runs_on if isinstance(runs_on, list) else [runs_on]
        labels.extend(v for v in values if isinstance(v, str) and "${{" not in v)
    return labels


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
