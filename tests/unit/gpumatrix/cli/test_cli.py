"""The `gpumatrix` CLI: exit codes, matrix JSON, and the guards of `gpumatrix run`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from coverage_reports import report_from_files
from gpumatrix_trees import RESOLVING_CONFTEST
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.cli import main
from gpumatrix.config import load_matrix
from gpumatrix.hardware.detection import Hardware
from gpumatrix.report import Report
from gpumatrix.running.run import RunError, evaluate_report, select_files, select_runner

register(on=("cpu",), est_time=30)

MATRIX = load_matrix(REPO_ROOT / "ci" / "matrix.yaml")


def make_tree(root: Path, files: dict[str, str]) -> Path:
    (root / "ci").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "ci" / "matrix.yaml", root / "ci" / "matrix.yaml")
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def registered(
    on: str, *, gpus: int = 1, est_time: float = 1, body: str = "def test_ok():\n    assert 1 + 1 == 2\n"
):
    return f"from gpumatrix import register\nregister(on={on}, gpus={gpus}, est_time={est_time})\n\n{body}"


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_check_is_clean_on_the_repository():
    result = invoke("check", "--root", str(REPO_ROOT))
    assert result.exit_code == 0, result.output
    assert "ok:" in result.output


def test_check_exits_2_on_invalid_matrix(tmp_path):
    make_tree(tmp_path, {"tests/test_a.py": registered('("cpu",)')})
    text = (tmp_path / "ci" / "matrix.yaml").read_text().replace("class: b200", "class: b201")
    (tmp_path / "ci" / "matrix.yaml").write_text(text.replace("max_shards: 4", "max_shards: 0", 1))
    result = invoke("check", "--root", str(tmp_path))
    assert result.exit_code == 2
    assert "unknown class 'b201'" in result.output and "max_shards must be positive" in result.output


@pytest.mark.parametrize("command", [["list"], ["matrix", "--json"], ["run"], ["detect"]])
def test_every_command_exits_2_on_invalid_matrix(tmp_path, command):
    make_tree(tmp_path, {"tests/test_a.py": registered('("cpu",)')})
    (tmp_path / "ci" / "matrix.yaml").write_text("classes: {}\nrunners: []\nfoo: 1\n")
    result = CliRunner().invoke(main, [*command, "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": "cpu"})
    assert result.exit_code == 2, result.output


def test_check_exits_1_on_unregistered_file(tmp_path):
    make_tree(tmp_path, {"tests/test_a.py": "def test_x():\n    pass\n"})
    result = invoke("check", "--root", str(tmp_path))
    assert result.exit_code == 1
    assert "tests/test_a.py:1: test file is not registered" in result.output


@pytest.mark.parametrize(
    "command",
    [["check"], ["list"], ["list", "--json"], ["matrix", "--json"], ["run", "--runner", "cpu", "-n", "0"]],
)
def test_every_command_exits_1_on_registration_problems_and_shows_them_alike(tmp_path, command):
    make_tree(
        tmp_path, {"tests/test_a.py": "def test_x():\n    pass\n", "tests/test_b.py": registered('("cpu",)')}
    )
    result = CliRunner().invoke(main, [*command, "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": "cpu"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 1, result.output
    assert (
        "error: test files with registration problems (1 problem(s)):\n"
        "  tests/test_a.py:1: test file is not registered"
    ) in result.output
    assert not (tmp_path / "reports").exists()  # run refused before pytest started


def test_a_bad_matrix_is_drawn_alike_by_every_command(tmp_path):
    make_tree(tmp_path, {"tests/test_a.py": registered('("cpu",)')})
    (tmp_path / "ci" / "matrix.yaml").write_text("classes: {}\nrunners: []\nfoo: 1\n")
    outputs = {
        tuple(command): CliRunner()
        .invoke(main, [*command, "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": "cpu"})
        .output
        for command in (["check"], ["list"], ["matrix"], ["run"], ["detect"])
    }
    matrix_path = tmp_path / "ci" / "matrix.yaml"
    expected = (
        f"error: invalid runner matrix (2 problem(s)):\n  {matrix_path}:1: the class 'cpu' (no GPU) must "
        f"be defined\n  {matrix_path}:3: unknown key 'foo' in the runner matrix"
    )
    assert all(output.startswith(expected) for output in outputs.values()), outputs


def test_matrix_json_packs_runner_shards(tmp_path):
    files = {f"tests/k/test_{i}.py": registered('("h100", "b200")', est_time=12000) for i in range(3)}
    files["tests/u/test_cpu.py"] = registered('("cpu",)', est_time=5)
    make_tree(tmp_path, files)
    result = invoke("matrix", "--json", "--root", str(tmp_path))
    assert result.exit_code == 0, result.output
    include = json.loads(result.output)["include"]
    by_runner: dict[str, list[dict]] = {}
    for entry in include:
        by_runner.setdefault(entry["runner"], []).append(entry)
    # Worker-seconds over the runner's slots (GPUs x 8 tests a GPU). 1-gpu-h100: 12,000 / 8 = 1,500 s a file,
    # 45 min x 0.8 = 2,160 s budget: 3 shards. 4-gpu-b200: 375 s a file against 2,880 s: 1 shard.
    assert [(e["shard"], e["shards"]) for e in by_runner["1-gpu-h100"]] == [(1, 3), (2, 3), (3, 3)]
    assert [(e["shard"], e["shards"]) for e in by_runner["4-gpu-b200"]] == [(1, 1)]
    assert by_runner["cpu"] == [
        {"runner": "cpu", "runs_on": ["ubuntu-latest"], "shard": 1, "shards": 1, "timeout_minutes": 60}
    ]
    assert set(by_runner) == {"cpu", "1-gpu-h100", "4-gpu-b200"}
    only = json.loads(invoke("matrix", "--json", "--runner", "4-gpu-b200", "--root", str(tmp_path)).output)
    assert [e["runner"] for e in only["include"]] == ["4-gpu-b200"]


def test_list_json_and_unknown_runner(tmp_path):
    make_tree(tmp_path, {"tests/test_a.py": registered('("h100",)', gpus=2, est_time=7)})
    rows = json.loads(invoke("list", "--json", "--root", str(tmp_path)).output)
    assert rows == [
        {
            "path": "tests/test_a.py",
            "line": 2,
            "on": ["h100"],
            "gpus": 2,
            "est_time": 7.0,
            "runners": ["2-gpu-h100"],
        }
    ]
    result = CliRunner().invoke(main, ["list", "--runner", "8-gpu-h100", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "--runner '8-gpu-h100' is not a runner of " in result.output


def _hardware(gpu_class: str, count: int) -> Hardware:
    return Hardware(
        gpu_class=gpu_class,
        count=count,
        names=("NVIDIA H200",) * count,
        capabilities=((9, 0),) * count,
        source="override",
        device_ids=tuple(str(i) for i in range(count)),
    )


@pytest.mark.parametrize(
    ("gpu_class", "count", "label", "expected", "visible"),
    [
        ("cpu", 0, "auto", "cpu", None),
        ("h100", 1, "auto", "1-gpu-h100", None),
        ("h100", 2, "auto", "2-gpu-h100", None),
        ("h100", 8, "auto", "2-gpu-h100", "0,1"),
        ("b200", 4, "auto", "4-gpu-b200", None),
        ("h100", 1, "4-gpu-gb300", "4-gpu-gb300", None),
    ],
)
def test_select_runner(gpu_class, count, label, expected, visible):
    runner, env = select_runner(MATRIX, _hardware(gpu_class, count), label)
    assert runner.label == expected
    assert env.get("CUDA_VISIBLE_DEVICES") == visible


def test_select_runner_auto_without_match_names_machine():
    with pytest.raises(RunError, match=r"no runner matches this machine \(2 x b200"):
        select_runner(
            MATRIX, Hardware("b200", 2, ("B200",) * 2, ((10, 0),) * 2, None, "override", ("0", "1")), "auto"
        )


def _report(files: dict[str, dict]) -> Report:
    return report_from_files(files)


GUARDS = [
    ("zero-tests", {}, True, ["ran zero tests"]),
    (
        "only-skips",
        {"tests/a.py": {"skipped": [{"nodeid": "a", "reason": "x", "hardware": False}]}},
        True,
        ["ran zero tests"],
    ),
    (
        "hardware-skip-on-matching-machine",
        {
            "tests/a.py": {
                "passed": ["a::x"],
                "skipped": [{"nodeid": "a::y", "reason": "needs 2 x h100", "hardware": True}],
            }
        },
        True,
        ["skipped for hardware reasons on a machine that matches runner 1-gpu-h100: a::y: needs 2 x h100"],
    ),
    (
        "hardware-skip-elsewhere-is-fine",
        {
            "tests/a.py": {
                "passed": ["a::x"],
                "skipped": [{"nodeid": "a::y", "reason": "needs", "hardware": True}],
            }
        },
        False,
        [],
    ),
    ("failures-count-as-executed", {"tests/a.py": {"failed": ["a::x"]}}, True, []),
    ("clean", {"tests/a.py": {"passed": ["a::x", "a::z"]}}, True, []),
]


@pytest.mark.parametrize(
    ("files", "matches", "problems"), [g[1:] for g in GUARDS], ids=[g[0] for g in GUARDS]
)
def test_run_guards(files, matches, problems):
    summary = evaluate_report(_report(files), runner=MATRIX.runner("1-gpu-h100"), hardware_matches=matches)
    assert len(summary.problems) == len(problems)
    for problem, fragment in zip(summary.problems, problems, strict=True):
        assert fragment in problem


def test_select_files_shards_and_tests_file(tmp_path):
    from gpumatrix.registry.model import Registration

    runner = MATRIX.runner("1-gpu-h100")
    files = [
        Registration(f"tests/test_{i}.py", 2, ("h100",), 1, float(t), ("1-gpu-h100",))
        for i, t in enumerate((50, 40, 30, 20))
    ]
    first = select_files(files, shard="1/2", tests_file=None, runner=runner)
    second = select_files(files, shard="2/2", tests_file=None, runner=runner)
    assert sorted(first + second) == sorted(f.path for f in files) and not set(first) & set(second)
    listed = tmp_path / "tests.txt"
    listed.write_text("tests/test_1.py::test_a[x-1]\n\ntests/test_3.py\n")
    assert select_files(files, shard=None, tests_file=listed, runner=runner) == [
        "tests/test_1.py::test_a[x-1]",
        "tests/test_3.py",
    ]
    listed.write_text("tests/other.py\n")
    with pytest.raises(RunError, match="not registered for runner 1-gpu-h100: tests/other.py"):
        select_files(files, shard=None, tests_file=listed, runner=runner)
    with pytest.raises(RunError, match="--shard must be I/N"):
        select_files(files, shard="3/2", tests_file=None, runner=runner)


def test_run_refuses_a_machine_that_is_not_the_runner(tmp_path):
    make_tree(tmp_path, {"tests/test_k.py": registered('("h100",)')})
    result = CliRunner().invoke(
        main, ["run", "--runner", "1-gpu-h100", "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": "cpu"}
    )
    assert result.exit_code == 2
    assert "this machine (cpu) is not runner 1-gpu-h100 (1 x h100)" in result.output


def test_run_fails_when_zero_tests_ran(tmp_path):
    make_tree(tmp_path, {"tests/test_empty.py": registered('("cpu",)', body="# no tests here\n")})
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--root", str(tmp_path)],
        env={"GPUMATRIX_HARDWARE": "cpu"},
    )
    assert result.exit_code != 0
    assert "ran zero tests" in result.output


def test_run_passes_and_writes_reports(tmp_path):
    make_tree(
        tmp_path,
        {
            "tests/test_cpu.py": registered('("cpu",)'),
            "tests/test_gpu.py": registered('("b200",)', gpus=4),
        },
    )
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--summary-md", str(summary), "--root", str(tmp_path)],
        env={"GPUMATRIX_HARDWARE": "cpu"},
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "reports" / "junit-cpu.xml").is_file()
    report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["files"]["tests/test_cpu.py"]["passed"] == ["tests/test_cpu.py::test_ok"]
    assert "tests/test_gpu.py" in result.output  # shown as gated to 4-gpu-b200
    assert "| `tests/test_cpu.py` | 1 | 0 | 0 | 0 |" in summary.read_text()


def test_run_fails_when_a_test_fails(tmp_path):
    make_tree(
        tmp_path, {"tests/test_cpu.py": registered('("cpu",)', body="def test_bad():\n    assert 1 == 2\n")}
    )
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--root", str(tmp_path)],
        env={"GPUMATRIX_HARDWARE": "cpu"},
    )
    assert result.exit_code == 1, result.output


# (id, command): each reads GPUMATRIX_HARDWARE, whose malformed value is a usage error, not a traceback.
BAD_OVERRIDE_COMMANDS = [
    ("detect", ["detect"]),
    ("detect-json", ["detect", "--json"]),
    ("run-auto", ["run", "-n", "0"]),
    ("run-labelled", ["run", "--runner", "cpu", "-n", "0"]),
]


@pytest.mark.parametrize("override", ["bogus", "1xa100"])
@pytest.mark.parametrize(
    "command", [c[1] for c in BAD_OVERRIDE_COMMANDS], ids=[c[0] for c in BAD_OVERRIDE_COMMANDS]
)
def test_malformed_hardware_override_exits_2_naming_the_variable(tmp_path, command, override):
    make_tree(tmp_path, {"tests/test_cpu.py": registered('("cpu",)')})
    result = CliRunner().invoke(
        main, [*command, "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": override}
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, result.output
    assert f"GPUMATRIX_HARDWARE={override!r}" in result.output
    assert not (tmp_path / "reports").exists()  # refused before pytest started


# (id, override, class, count): `gpumatrix detect` outside any checkout names GPUs by the built-in classes.
DETECT_OUTSIDE = [
    ("cpu", "cpu", "cpu", 0),
    ("two-hopper", "2xh100", "h100", 2),
    ("four-gb300", "4xgb300", "gb300", 4),
]


@pytest.mark.parametrize(
    ("override", "gpu_class", "count"), [r[1:] for r in DETECT_OUTSIDE], ids=[r[0] for r in DETECT_OUTSIDE]
)
def test_detect_works_outside_a_checkout(tmp_path, monkeypatch, override, gpu_class, count):
    monkeypatch.chdir(tmp_path)  # no ci/matrix.yaml here or above
    result = CliRunner().invoke(main, ["detect", "--json"], env={"GPUMATRIX_HARDWARE": override})
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["gpu_class"], data["count"], data["source"]) == (gpu_class, count, "override")
    # An explicit --root still needs its matrix.
    result = CliRunner().invoke(
        main, ["detect", "--root", str(tmp_path)], env={"GPUMATRIX_HARDWARE": override}
    )
    assert result.exit_code == 2, result.output


# (id, --root as given, write an enclosing pytest config): the run uses the --root tree's matrix and
# registry, and reads back the report it asked pytest to write.
RUN_ROOTS = [
    ("relative-root", "inner", False),
    ("inside-another-pytest-config", None, True),
    ("relative-inside-another-pytest-config", "inner", True),
]


@pytest.mark.parametrize(("given", "outer_config"), [r[1:] for r in RUN_ROOTS], ids=[r[0] for r in RUN_ROOTS])
def test_run_honours_root_wherever_it_is(tmp_path, monkeypatch, given, outer_config):
    inner = make_tree(tmp_path / "inner", {"tests/test_cpu.py": registered('("cpu",)')})
    if outer_config:
        (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-ra"\n')
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "0", "--root", given or str(inner)],
        env={"GPUMATRIX_HARDWARE": "cpu"},
    )
    assert result.exit_code == 0, result.output
    report = json.loads((inner / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["files"]["tests/test_cpu.py"]["passed"] == ["tests/test_cpu.py::test_ok"]
    assert (inner / "reports" / "junit-cpu.xml").is_file()


def test_run_shard_runs_exactly_the_files_of_the_matrix_shard(tmp_path):
    from gpumatrix.registry.discovery import load_tree
    from gpumatrix.running.shard import plan_matrix

    # Names and times in different orders; 4,800 s against the cpu runner's 2,880 s budget: 2 shards.
    times = {"a": 400, "b": 1500, "c": 100, "d": 900, "e": 1200, "f": 700}
    make_tree(
        tmp_path, {f"tests/test_{name}.py": registered('("cpu",)', est_time=t) for name, t in times.items()}
    )
    include = json.loads(invoke("matrix", "--json", "--runner", "cpu", "--root", str(tmp_path)).output)[
        "include"
    ]
    (plan,) = plan_matrix(*load_tree(tmp_path))
    assert [(e["shard"], e["shards"]) for e in include] == [(1, 2), (2, 2)] and plan.count == 2
    ran = []
    for entry in include:
        spec = f"{entry['shard']}/{entry['shards']}"
        result = CliRunner().invoke(
            main,
            ["run", "--runner", "cpu", "--shard", spec, "-n", "0", "--root", str(tmp_path)],
            env={"GPUMATRIX_HARDWARE": "cpu"},
        )
        assert result.exit_code == 0, result.output
        report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
        ran.append(tuple(sorted(path for path, entry in report["files"].items() if entry["passed"])))
    assert ran == [shard.files for shard in plan.shards]
    # 1500 -> 1, 1200 -> 2, 900 -> 2 (2100), 700 -> 1 (2200), 400 -> 2 (2500), 100 -> 1 (2300)
    assert ran == [
        ("tests/test_b.py", "tests/test_c.py", "tests/test_f.py"),
        ("tests/test_a.py", "tests/test_d.py", "tests/test_e.py"),
    ]


def test_the_exit_code_table_is_in_every_help_and_in_the_readme():
    from gpumatrix.cli import EXIT_CODES

    readme = (REPO_ROOT / "README.md").read_text()
    for code, meaning in EXIT_CODES:
        assert f"| {code} | {meaning} |" in readme
    for command in (
        ["--help"],
        ["run", "--help"],
        ["check", "--help"],
        ["bot", "handle", "--help"],
        ["plan", "--help"],
        ["coverage", "--help"],
        ["estimate", "--help"],
    ):
        text = " ".join(invoke(*command).output.split())
        for code, meaning in EXIT_CODES:
            assert f"{code} {meaning}" in text, (command, code)


def test_run_hands_pytest_its_plan_and_nothing_is_resolved_again(tmp_path):
    """`gpumatrix run` detects, loads and discovers once; its pytest and the xdist workers take the plan."""
    files = {f"tests/test_{i}.py": registered('("cpu",)') for i in range(3)}
    make_tree(tmp_path, {"conftest.py": RESOLVING_CONFTEST, "pytest.ini": "[pytest]\n", **files})
    resolved = tmp_path / "resolved.jsonl"
    result = CliRunner().invoke(
        main,
        ["run", "--runner", "cpu", "-n", "2", "--root", str(tmp_path)],
        env={"GPUMATRIX_HARDWARE": "cpu", "RESOLVED": str(resolved)},
    )
    assert result.exit_code == 0, result.output
    assert not resolved.exists()
    report = json.loads((tmp_path / "reports" / "gpumatrix-cpu.json").read_text())
    assert report["totals"]["passed"] == 3 and report["runner"] == "cpu"
    assert list((tmp_path / "reports").glob(".*plan*")) == []  # the plan lives as long as the run
