"""`gpumatrix run`: this machine's slice of the matrix, through pytest, with honest-signal guards.

A run fails, whatever pytest says, when it executed zero tests, or when a test was skipped for
hardware reasons on a machine that matches its runner: a mislabelled runner must not go green having
run nothing. Files disabled where they run (`register(disabled=...)`) are skipped with their reason
and listed in the summary; they count for neither guard, so a selection of disabled files only runs
nothing and passes, saying so. A test that passed only after running again (a file registered `flaky=`)
is listed as such, never as a plain pass; a run repeated N times (`--repeat N`, pytest-repeat's `--count`)
ends with each test's pass rate and its 95% interval (`gpumatrix.flaky.history`).
`plan_run` decides everything before pytest starts (and raises a `UsageError` for
anything a person must fix first): among it the worker count (`choose_workers`: the runner's GPUs times
the tests one GPU runs at a time, `workers_per_gpu`, at most one per CPU) and the compile caches
(`gpumatrix.running.compile_cache`); `finish_run` reads pytest's report (through `gpumatrix.report`: a
report that cannot be read or contradicts itself fails the run, naming it) into a `RunResult`. The CLI
starts pytest between the two and `gpumatrix.commands.run` renders both.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpumatrix import UsageError
from gpumatrix.config import CPU_CLASS, DEFAULT_SUITE, MAX_REPEAT, Matrix, Runner, WorkersPerGpu
from gpumatrix.hardware.visibility import visible_environment
from gpumatrix.registry.model import Registration
from gpumatrix.report import OUTCOMES, RAN, Report, ReportError, read_report
from gpumatrix.running.compile_cache import CacheUse, CompileCache, compile_cache
from gpumatrix.running.outputs import (
    Output,
    check_output,
    publish_output,
    remove_own_output,
    staging_path,
    write_output,
)
from gpumatrix.running.pytest_failure import explain_no_report
from gpumatrix.running.session import SessionPlan, declared_paths, resolve_workers_per_gpu
from gpumatrix.running.shard import Durations, Parallelism, parallelism_of, parse_shard_spec, split_shards

if TYPE_CHECKING:
    from gpumatrix.flaky.history import PassRecord
    from gpumatrix.hardware.detection import Hardware

__all__ = [
    "RunError",
    "RunOptions",
    "RunPlan",
    "RunResult",
    "RunSummary",
    "StagedRun",
    "WorkerChoice",
    "choose_workers",
    "clean_outputs",
    "evaluate_report",
    "finish_run",
    "plan_run",
    "prepare_outputs",
    "run_outputs",
    "select_files",
    "select_runner",
]

# pytest's exit code for a usage error (bad options, a GPUMATRIX_* variable the plugin refused).
_PYTEST_USAGE_ERROR = 4
# pytest's exit code when no test ran: all a selection of disabled files can do.
_PYTEST_NO_TESTS = 5


class RunError(UsageError):
    """What was asked of `gpumatrix run` cannot be done on this machine or tree (exit 2)."""


@dataclass(frozen=True)
class RunOptions:
    label: str = "auto"
    shard: str | None = None
    workers: str | None = None
    tests_file: Path | None = None
    junit_xml: Path | None = None
    report: Path | None = None
    summary_md: Path | None = None
    durations: Durations | None = None  # measured seconds by class and file, for --shard (as `matrix`)
    html: Path | None = None  # the report page (default: beside the JSON report)
    preflight: bool = True
    pytest_args: tuple[str, ...] = ()
    suite: str = DEFAULT_SUITE  # a suite of ci/matrix.yaml, or "all"; a --tests-file runs what it names
    include_disabled: bool = False
    repeat: int = 1  # run each test this many times (pytest-repeat's --count); reruns are then off


@dataclass(frozen=True)
class RunSummary:
    """What a finished run amounts to, and why it fails if it does."""

    runner: str
    executed: int
    passed: int
    failed: int
    errors: int
    skipped: int
    per_file: Mapping[str, Mapping[str, int]]
    problems: tuple[str, ...] = field(default=())
    disabled: tuple[tuple[str, str], ...] = field(default=())  # (file, reason) of each disabled file skipped
    after_reruns: tuple[tuple[str, int], ...] = field(default=())  # (nodeid, reruns): passed only after them
    pass_rates: tuple[PassRecord, ...] = field(default=())  # a repeated run's: every test, flakiest first
    repeat: int = 1

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class WorkerChoice:
    """How many pytest-xdist workers a run starts, and why (shown in its header)."""

    arg: str  # pytest-xdist's -n: a number, or "auto"
    reason: str

    @property
    def parallel(self) -> bool:
        return self.arg not in ("0", "1")


@dataclass(frozen=True)
class RunPlan:
    """Everything decided before pytest starts: who runs what, where, and with which command."""

    root: Path
    matrix: Matrix
    runner: Runner
    hardware: Hardware
    hardware_matches: bool
    targets: tuple[str, ...]  # empty: this selection has nothing to run (a failure, not a usage error)
    gated: tuple[Registration, ...]  # registered files this runner does not run
    command: tuple[str, ...]
    env: Mapping[str, str]
    report_path: Path
    junit_path: Path
    shard: str | None = None
    html_path: Path | None = None
    session: SessionPlan | None = None  # what pytest is handed instead of resolving it again
    session_path: Path | None = None  # where it is written for pytest (--gpumatrix-plan)
    workers: WorkerChoice = WorkerChoice("1", "one process")
    compile_cache: CompileCache | None = None


@dataclass(frozen=True)
class RunResult:
    """How a run ended: its summary (None when pytest wrote no report), problems, and the exit code."""

    plan: RunPlan
    pytest_exit: int | None  # None: pytest was not started
    summary: RunSummary | None
    problems: tuple[str, ...]
    exit_code: int
    cache_use: CacheUse | None = None  # what the run found in the compile cache and added to it


def select_runner(matrix: Matrix, hardware: Hardware, label: str) -> tuple[Runner, dict[str, str]]:
    """The runner to run as, and environment changes that make this machine match it.

    `auto` picks the runner of this machine's class with exactly its GPU count; failing that, the
    largest runner of the class that fits, with the vendor's visibility variable (CUDA_VISIBLE_DEVICES,
    HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK) narrowed to that many GPUs.
    """
    if label != "auto":
        return matrix.require_runner(label), {}
    same_class = [r for r in matrix.runners if r.gpu_class == hardware.gpu_class]
    exact = [r for r in same_class if r.gpus == hardware.count]
    if exact:
        return exact[0], {}
    fitting = [r for r in same_class if 0 < r.gpus < hardware.count]
    if fitting:
        runner = max(fitting, key=lambda r: r.gpus)
        return runner, visible_environment(hardware.vendor, hardware.device_ids[: runner.gpus])
    raise RunError(
        f"--runner auto: no runner matches this machine ({hardware.describe()}); runners: "
        + ", ".join(f"{r.label} ({r.gpus} x {r.gpu_class})" for r in matrix.runners)
    )


def choose_workers(
    runner: Runner, per_gpu: WorkersPerGpu, *, cpus: int, requested: str | None = None
) -> WorkerChoice:
    """The xdist workers of a run: `requested` (`-n`) when given; on a CPU runner one per CPU; on a GPU
    runner its GPUs times the tests one GPU runs at a time, at most one per CPU (compiling is CPU work,
    and a worker without a CPU only waits)."""
    if requested is not None:
        return WorkerChoice(requested, f"-n {requested} as asked")
    if runner.gpu_class == CPU_CLASS:
        return WorkerChoice("auto", f"one per CPU ({cpus})")
    wanted = runner.gpus * per_gpu.count
    count = max(1, min(wanted, cpus))
    reason = f"{runner.gpus} GPU(s) x {per_gpu.count} test(s) per GPU (workers_per_gpu of {per_gpu.source})"
    if count < wanted:
        reason += f", limited to the {cpus} CPUs"
    return WorkerChoice(str(count), reason)


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, as a container or taskset limits it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def select_files(
    files: Sequence[Registration],
    *,
    shard: str | None,
    tests_file: Path | None,
    runner: Runner,
    durations: Durations | None = None,
    parallelism: Parallelism | None = None,
) -> list[str]:
    """The pytest targets of this run: the runner's slice, one shard of it (packed as `gpumatrix matrix`
    packs it: the same `parallelism`, `parallelism_of` the matrix's runner), or an explicit list."""
    from gpumatrix.bounds import MAX_TESTS_FILE_BYTES
    from gpumatrix.regular_files import read_regular

    slice_paths = {f.path for f in files}
    if tests_file is not None:
        try:  # a FIFO or a device is refused, never opened for a read that would wait
            data = read_regular(tests_file, limit=MAX_TESTS_FILE_BYTES)
        except OSError as exc:
            raise RunError(f"--tests-file: cannot read {tests_file}: {exc.strerror}") from exc
        if len(data) > MAX_TESTS_FILE_BYTES:
            raise RunError(f"--tests-file: {tests_file} is larger than {MAX_TESTS_FILE_BYTES >> 20} MiB")
        try:
            lines = data.decode("utf-8-sig").splitlines()
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise RunError(
                f"--tests-file: {tests_file}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
                f"list one registry path or node id per line, as UTF-8"
            ) from None
        targets = [line.strip() for line in lines if line.strip()]
        foreign = [t for t in targets if t.split("::", 1)[0] not in slice_paths]
        if foreign:
            raise RunError(f"--tests-file: not registered for runner {runner.label}: {', '.join(foreign)}")
        if not targets:
            raise RunError(f"--tests-file: {tests_file} names no tests")
        return targets
    if shard is None:
        return sorted(slice_paths)
    try:
        index, count = parse_shard_spec(shard, max_shards=runner.max_shards)
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    shards = split_shards(
        files,
        count,
        gpu_class=runner.gpu_class,
        durations=durations,
        parallelism=parallelism or Parallelism(),
    )
    return list(shards[index - 1].files)


def evaluate_report(
    report: Report, *, runner: Runner, hardware_matches: bool, targets: Sequence[str] | None = None
) -> RunSummary:
    """Turn the plugin's report into a summary and the guard failures.

    A run that executed nothing passes only when every file it had (`targets`, the run's pytest
    targets: a file collected with no test is not in the report at all) was skipped as disabled. A
    report of a refused run fails with the problems it lists.
    """
    per_file: dict[str, dict[str, int]] = {}
    hardware_skips: list[str] = []
    disabled: list[tuple[str, str]] = []
    after_reruns: list[tuple[str, int]] = []
    only_disabled = True  # every file of the report is a disabled file, skipped whole
    for path, result in sorted(report.files.items()):
        counts = {outcome: len(result.ids(outcome)) for outcome in OUTCOMES}
        per_file[path] = counts
        hardware_skips.extend(f"{s.nodeid}: {s.reason}" for s in result.skipped if s.hardware)
        disabled.extend((s.nodeid, s.reason) for s in result.skipped if s.disabled)
        after_reruns.extend(result.passed_after_reruns())
        only_disabled &= not result.ran and all(s.disabled for s in result.skipped)
    totals = {outcome: sum(c[outcome] for c in per_file.values()) for outcome in OUTCOMES}
    executed = sum(totals[outcome] for outcome in RAN)
    problems: list[str] = list(report.problems)
    if targets is not None:
        only_disabled &= {target.split("::", 1)[0] for target in targets} <= {path for path, _ in disabled}
    if executed == 0 and not (disabled and only_disabled):
        problems.append(f"runner {runner.label} ran zero tests: a job that runs nothing must not pass")
    if hardware_matches and hardware_skips:
        shown = "; ".join(hardware_skips[:5]) + (" ..." if len(hardware_skips) > 5 else "")
        problems.append(
            f"{len(hardware_skips)} test(s) skipped for hardware reasons on a machine that matches "
            f"runner {runner.label}: {shown}"
        )
    return RunSummary(
        runner=runner.label,
        executed=executed,
        per_file=per_file,
        problems=tuple(problems),
        disabled=tuple(disabled),
        after_reruns=tuple(after_reruns),
        repeat=report.repeat,
        **totals,
    )


def plan_run(root: Path, options: RunOptions, *, environ: Mapping[str, str] | None = None) -> RunPlan:
    """Decide the run: the tree is valid, this machine is the runner, its GPUs can be leased.

    Raises `RegistryError` (registration problems, exit 1) or a `UsageError` (exit 2).
    """
    from gpumatrix.hardware.detection import detect, preflight
    from gpumatrix.registry.discovery import load_tree
    from gpumatrix.running.leases import lease_settings

    base_env = dict(os.environ if environ is None else environ)
    # pytest runs in `root`: relative paths given here must not be read again from there.
    root = Path(root).resolve()
    matrix, registry = load_tree(root)
    registry.require_ok()
    # Explicit tests run whatever their suite (a /rerun-test of a nightly file): the suite picks a slice.
    suite = matrix.require_suite(options.suite) if options.tests_file is None else None
    hardware = detect(matrix, environ=base_env)
    runner, env_changes = select_runner(matrix, hardware, options.label)
    env = {**base_env, **env_changes}
    if env_changes:
        hardware = detect(matrix, environ=env)
    matches = hardware.gpu_class == runner.gpu_class and hardware.count == runner.gpus
    if not matches:
        raise RunError(
            f"this machine ({hardware.describe()}) is not runner {runner.label} "
            f"({runner.gpus} x {runner.gpu_class}): refusing to run rather than skip everything"
        )
    if not 1 <= options.repeat <= MAX_REPEAT:
        raise RunError(f"--repeat must be from 1 to {MAX_REPEAT}, got {options.repeat}")
    if options.repeat > 1 and importlib.util.find_spec("pytest_repeat") is None:
        raise RunError(
            "--repeat runs each test N times through pytest-repeat, which is not installed: pip install pytest-repeat"
        )
    settings = lease_settings(env)
    if runner.gpus:
        settings.prepare()
    if options.preflight and runner.gpu_class != CPU_CLASS and hardware.source != "override":
        problems = preflight(hardware, runner)
        if problems:
            raise RunError(
                f"the GPUs runner {runner.label} claims are not all present and idle:\n"
                + "\n".join(f"  - {p}" for p in problems)
            )

    targets = select_files(
        registry.for_runner(runner.label, suite=suite),
        shard=options.shard,
        tests_file=options.tests_file,
        runner=runner,
        durations=options.durations,
        parallelism=parallelism_of(matrix, runner),
    )
    reports_dir = root / "reports"
    junit = (options.junit_xml or reports_dir / f"junit-{runner.label}.xml").resolve()
    report_path = (options.report or reports_dir / f"gpumatrix-{runner.label}.json").resolve()
    # pytest is handed what was resolved here (the hardware, the runner, the registry) instead of
    # detecting, loading and discovering it again.
    per_gpu = resolve_workers_per_gpu(matrix, hardware, runner, environ=env)
    session = SessionPlan(
        root,
        hardware,
        registry,
        runner,
        suite,
        declared_paths(root, matrix),
        test_roots=matrix.test_roots,
        flaky_reruns=matrix.flaky_reruns,
        workers_per_gpu=per_gpu.count,
    )
    session_path = report_path.with_name(f".{report_path.stem}.plan.json")
    workers = choose_workers(runner, per_gpu, cpus=available_cpus(), requested=options.workers)
    cache = compile_cache(env)
    env.update(cache.env)
    # Every option that takes a value is one `--option=value` argument: pytest looks for its config file
    # from the paths among its arguments before the plugin has registered its options, so a value given
    # as a separate argument (a report outside the tree) would be taken for a test path, and the config
    # (pythonpath, xfail_strict, --strict-markers, filterwarnings) would be lost.
    # --rootdir and --gpumatrix-root: a tree nested in another project's pytest config keeps its own
    # matrix, registry and root-relative node ids.
    command = [
        sys.executable,
        "-m",
        "pytest",
        *targets,
        f"--runner={runner.label}",
        f"--rootdir={root}",
        f"--gpumatrix-root={root}",
        f"--gpumatrix-report={report_path}",
        f"--gpumatrix-plan={session_path}",
        f"--junitxml={junit}",
        "-p",
        "no:cacheprovider",
    ]
    if suite is not None:
        command.append(f"--suite={suite}")
    if options.include_disabled:
        command.append("--include-disabled")
    if options.repeat > 1:
        command.append(f"--count={options.repeat}")
    if workers.parallel:
        command.append(f"--numprocesses={workers.arg}")
        if not any(arg == "--dist" or arg.startswith("--dist=") for arg in options.pytest_args):
            # Contiguous blocks of tests per worker, stolen when a worker runs dry: a file's tests, which
            # compile the same kernels, mostly stay in one process and compile them once.
            command.append("--dist=worksteal")
    if env.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        command += ["-p", "gpumatrix.plugin"]
    command += list(options.pytest_args)
    return RunPlan(
        root=root,
        matrix=matrix,
        runner=runner,
        hardware=hardware,
        hardware_matches=matches,
        targets=tuple(targets),
        gated=tuple(f for f in registry.files if runner.label not in f.runners),
        command=tuple(command),
        env=env,
        report_path=report_path,
        junit_path=junit,
        shard=options.shard,
        html_path=(options.html or report_path.with_suffix(".html")).resolve(),
        session=session,
        session_path=session_path,
        workers=workers,
        compile_cache=cache,
    )


@dataclass(frozen=True)
class StagedRun:
    """A run whose pytest writes its JSON report and JUnit XML to temporary files beside their paths
    (`command`), renamed into place by `clean_outputs` once pytest is done."""

    plan: RunPlan
    command: tuple[str, ...]
    moves: tuple[tuple[Path, Output], ...]  # (temporary file, the output it becomes)


def run_outputs(plan: RunPlan) -> tuple[Output, ...]:
    """The files a run writes, each with the option that names it."""
    outputs = [
        Output("--report", plan.report_path, "report"),
        Output("--junit-xml", plan.junit_path, "junit"),
    ]
    if plan.html_path is not None:
        outputs.append(Output("--html", plan.html_path, "page"))
    if plan.session_path is not None:
        outputs.append(Output("the session plan beside --report", plan.session_path, "plan"))
    return tuple(outputs)


def prepare_outputs(plan: RunPlan) -> StagedRun:
    """Check every output path before any test runs (`gpumatrix.running.outputs`: nothing there, or a file of
    its kind gpumatrix wrote; never a test file, ci/matrix.yaml or a device), remove this run's own stale
    report and page (a stale report must not pass for this run's), write the session plan pytest is
    handed, and stage the report and the JUnit XML: pytest writes them beside their paths."""
    outputs = {output.kind: output for output in run_outputs(plan)}
    seen: dict[Path, str] = {}
    for output in outputs.values():
        if output.path in seen:
            raise RunError(f"{output.option} names the same file as {seen[output.path]}: {output.path}")
        seen[output.path] = output.option
        check_output(output)
    if plan.compile_cache is not None:
        plan.compile_cache.prepare()
    for kind in ("report", "page"):
        if kind in outputs:
            remove_own_output(outputs[kind])
    if plan.session is not None and "plan" in outputs:
        write_output(outputs["plan"], plan.session.dump())
    report, junit = outputs["report"], outputs["junit"]
    moves = ((staging_path(report), report), (staging_path(junit), junit))
    return StagedRun(plan, _staged_command(plan.command, moves), moves)


def _staged_command(command: Sequence[str], moves: Sequence[tuple[Path, Output]]) -> tuple[str, ...]:
    """`command` with each output's path, given as `--opt PATH` or `--opt=PATH`, replaced by its staging
    path."""
    swaps = {str(output.path): str(staged) for staged, output in moves}
    staged_command = []
    for arg in command:
        option, equals, value = arg.partition("=")
        if arg in swaps:
            arg = swaps[arg]
        elif equals and option.startswith("--") and value in swaps:
            arg = f"{option}={swaps[value]}"
        staged_command.append(arg)
    return tuple(staged_command)


def clean_outputs(staged: StagedRun) -> None:
    """Rename what pytest wrote into place and remove what only the run needed (the session plan)."""
    try:
        for path, output in staged.moves:
            publish_output(path, output)
    finally:
        if staged.plan.session_path is not None:
            staged.plan.session_path.unlink(missing_ok=True)


def finish_run(plan: RunPlan, pytest_exit: int | None, output: str = "") -> RunResult:
    """The result of a run from pytest's exit code, the report it wrote (None: pytest never ran) and the
    end of what it printed (`output`: says why it wrote no report, such as a conftest's import error).

    Exit codes (the table in `gpumatrix.cli`): pytest's usage error (4) becomes 2; any other failure
    of pytest, a guard, or nothing to run, 1.
    """
    if pytest_exit is None:
        return RunResult(
            plan, None, None, (f"runner {plan.runner.label} has no test files in this selection",), 1
        )
    usage = pytest_exit == _PYTEST_USAGE_ERROR
    if not plan.report_path.is_file():
        problem = explain_no_report(pytest_exit, output, plan.report_path)
        return RunResult(plan, pytest_exit, None, (problem,), 2 if usage else 1)
    try:
        report = read_report(plan.report_path, plan.matrix)
    except ReportError as exc:  # the run's own report: whatever is wrong with it, the run failed
        return RunResult(plan, pytest_exit, None, (str(exc),), 2 if usage else 1)
    summary = evaluate_report(
        report, runner=plan.runner, hardware_matches=plan.hardware_matches, targets=plan.targets
    )
    if report.repeat > 1:  # what N runs of each test measured here, as `gpumatrix flaky` shows history
        from gpumatrix.flaky.history import flaky_history

        registrations = plan.session.registry.files if plan.session is not None else ()
        history = flaky_history([report], registrations, plan.matrix, every_test=True)
        summary = replace(summary, pass_rates=history.tests)
    problems = list(summary.problems)
    if pytest_exit == _PYTEST_USAGE_ERROR:
        problems.append("pytest refused its options (exit 4): see its message above")
    # pytest says "no tests ran" (5) when only disabled files were selected, each skipped with its reason.
    failed = pytest_exit and not (pytest_exit == _PYTEST_NO_TESTS and not problems and summary.disabled)
    exit_code = 2 if pytest_exit == _PYTEST_USAGE_ERROR else 1 if failed or problems else 0
    return RunResult(plan, pytest_exit, summary, tuple(problems), exit_code)
