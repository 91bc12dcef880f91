"""Gating before import: files this machine cannot run are skipped whole and never imported."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpumatrix_trees import read_jsonl, registered, run_pytest, write_tree
from repo_paths import TESTS

from gpumatrix import register
from gpumatrix.config import Runner
from gpumatrix.hardware.detection import Hardware
from gpumatrix.problems import Problem
from gpumatrix.registry.model import Registration
from gpumatrix.running.gating import FileDecision, decide_file, forwarded_options, unplugged_skip_reason

register(on=("cpu",), est_time=30)

# A Blackwell-only test file as the kernel tests will be: it imports optional libraries at module
# top, which do not exist here, and leaves a mark if it is ever imported.
_BLACKWELL_IMPORTS = """
    import os, pathlib
    pathlib.Path(os.environ["MARKS"], "imported-" + pathlib.Path(__file__).stem).touch()
    import deep_gemm
    import flashinfer

    def test_gemm():
        assert deep_gemm and flashinfer
"""
GATED_TREE = {
    "tests/kernels/test_deepgemm.py": registered(("b200", "gb300"), body=_BLACKWELL_IMPORTS),
    "tests/kernels/test_flashinfer.py": registered(("b200", "gb300", "5090"), body=_BLACKWELL_IMPORTS),
    "tests/kernels/test_hopper.py": registered(("h100",), body="def test_h():\n    pass\n"),
    "tests/unit/test_cpu.py": registered(("cpu",), body="def test_c():\n    pass\n"),
}


@pytest.mark.parametrize(
    ("machine", "args", "skipped", "passed"),
    [
        (
            "cpu",
            (),
            {
                "tests/kernels/test_deepgemm.py": "needs 1 x b200|gb300; this machine: cpu",
                "tests/kernels/test_flashinfer.py": "needs 1 x b200|gb300|5090; this machine: cpu",
                "tests/kernels/test_hopper.py": "needs 1 x h100; this machine: cpu",
            },
            ["tests/unit/test_cpu.py::test_c"],
        ),
        (
            "cpu",
            ("-n", "2"),
            {
                "tests/kernels/test_deepgemm.py": "needs 1 x b200|gb300; this machine: cpu",
                "tests/kernels/test_flashinfer.py": "needs 1 x b200|gb300|5090; this machine: cpu",
                "tests/kernels/test_hopper.py": "needs 1 x h100; this machine: cpu",
            },
            ["tests/unit/test_cpu.py::test_c"],
        ),
        (
            "1xh100",
            (),
            {
                "tests/kernels/test_deepgemm.py": "needs 1 x b200|gb300; this machine: 1 x h100 (fake h100, sm_90)",
                "tests/kernels/test_flashinfer.py": "needs 1 x b200|gb300|5090; this machine: 1 x h100 "
                "(fake h100, sm_90)",
            },
            ["tests/kernels/test_hopper.py::test_h", "tests/unit/test_cpu.py::test_c"],
        ),
    ],
    ids=["cpu", "cpu-xdist", "hopper"],
)
def test_gated_files_are_skipped_whole_and_never_imported(
    tmp_path: Path, machine: str, args: tuple[str, ...], skipped: dict[str, str], passed: list[str]
) -> None:
    write_tree(tmp_path, GATED_TREE)
    run = run_pytest(tmp_path, "-rs", *args, hardware=machine, env={"MARKS": str(tmp_path)})
    assert run.returncode == 0, run.output
    assert not list(tmp_path.glob("imported-*")), "a gated file was imported"
    assert run.report is not None
    files = run.report["files"]
    assert {
        path: [(s["nodeid"], s["reason"], s["hardware"]) for s in entry["skipped"]]
        for path, entry in files.items()
        if entry["skipped"]
    } == {path: [(path, reason, True)] for path, reason in skipped.items()}
    assert sorted(nodeid for entry in files.values() for nodeid in entry["passed"]) == passed
    for path, reason in skipped.items():
        assert f"SKIPPED [1] {path}: {reason}" in run.stdout


def test_a_runner_slice_deselects_other_files_without_importing_them(tmp_path: Path) -> None:
    write_tree(tmp_path, GATED_TREE)
    run = run_pytest(tmp_path, "--runner", "1-gpu-h100", hardware="1xh100", env={"MARKS": str(tmp_path)})
    assert run.returncode == 0, run.output
    assert not list(tmp_path.glob("imported-*"))
    assert run.report is not None and run.report["totals"]["deselected"] == 3
    assert run.report["totals"]["hardware_skipped"] == 0 and run.report["totals"]["passed"] == 1


def test_the_runner_that_a_file_is_for_imports_it(tmp_path: Path) -> None:
    """The gate is the registration, not a guess: on a b200 the Blackwell files are imported (and fail here)."""
    write_tree(tmp_path, GATED_TREE)
    run = run_pytest(
        tmp_path, "tests/kernels/test_deepgemm.py", hardware="4xb200", env={"MARKS": str(tmp_path)}
    )
    assert (tmp_path / "imported-test_deepgemm").exists()
    assert run.returncode == 2 and "No module named 'deep_gemm'" in run.stdout


@pytest.mark.parametrize(
    ("machine", "outcome"),
    [
        ("cpu", "passed"),  # a CPU test here
        ("4xb200", "passed"),  # a CPU test on a GPU class it does not name
        ("1xh100", "needs 2 x h100 (or no GPU); this machine: 1 x h100 (fake h100, sm_90)"),
        ("2xh100", "passed"),  # with both GPUs leased
    ],
    ids=["cpu", "other-class", "too-few-gpus", "enough-gpus"],
)
def test_cpu_or_two_hopper_gpus(tmp_path: Path, machine: str, outcome: str) -> None:
    """register(on=("h100", "cpu"), gpus=2) is valid; on one H100 it is skipped, not a crash in the lease code."""
    write_tree(
        tmp_path,
        {
            "tests/test_either.py": registered(
                ("h100", "cpu"),
                gpus=2,
                body="""
        import os

        def test_a():
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            assert visible is None or len(visible.split(",")) == 2
    """,
            )
        },
    )
    run = run_pytest(tmp_path, hardware=machine)
    assert run.returncode == (0 if outcome == "passed" else 5), run.output  # 5: nothing ran
    assert "INTERNALERROR" not in run.output and "Traceback" not in run.output
    assert run.report is not None
    entry = run.report["files"]["tests/test_either.py"]
    if outcome == "passed":
        assert entry["passed"] == ["tests/test_either.py::test_a"]
    else:
        assert entry["skipped"] == [{"nodeid": "tests/test_either.py", "reason": outcome, "hardware": True}]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GPUMATRIX_LEASE_TIMEOUT": "-1"}, "GPUMATRIX_LEASE_TIMEOUT='-1' must be a number of seconds >= 0"),
        (
            {"GPUMATRIX_LEASE_TIMEOUT": "nan"},
            "GPUMATRIX_LEASE_TIMEOUT='nan' must be a number of seconds >= 0",
        ),
        (
            {"GPUMATRIX_LEASE_TIMEOUT": "soon"},
            "GPUMATRIX_LEASE_TIMEOUT='soon' must be a number of seconds >= 0",
        ),
        (
            {"GPUMATRIX_LEASE_DIR": "{tmp}/a-file/leases"},
            "cannot use GPUMATRIX_LEASE_DIR='{tmp}/a-file/leases' for GPU leases: Not a directory",
        ),
        (
            {"GPUMATRIX_LEASE_LOG": "{tmp}/a-file/log.jsonl"},
            "cannot write the lease log GPUMATRIX_LEASE_LOG='{tmp}/a-file/log.jsonl'",
        ),
    ],
    ids=["negative-timeout", "nan-timeout", "word-timeout", "uncreatable-dir", "unwritable-log"],
)
@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_bad_lease_settings_are_one_usage_error(
    tmp_path: Path, env: dict[str, str], message: str, args: tuple[str, ...]
) -> None:
    write_tree(
        tmp_path,
        {f"tests/test_{i}.py": registered(("h100",), body="def test_a():\n    pass\n") for i in range(3)},
    )
    (tmp_path / "a-file").write_text("")
    env = {key: value.format(tmp=tmp_path) for key, value in env.items()}
    run = run_pytest(tmp_path, *args, hardware="1xh100", env=env)
    assert run.returncode == 4, run.output  # pytest's usage error: before any test
    assert run.stderr.count("ERROR: ") == 1 and message.format(tmp=tmp_path) in run.stderr
    assert "INTERNALERROR" not in run.output and "passed" not in run.stdout


def test_xdist_workers_take_the_controllers_registry(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "conftest.py": """
import json, os
import gpumatrix.running.session

_discover = gpumatrix.running.session.discover

def _recording(*args, **kwargs):
    with open(os.environ["DISCOVERIES"], "a") as stream:
        stream.write(json.dumps({"worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\\n")
    return _discover(*args, **kwargs)

gpumatrix.running.session.discover = _recording
""",
            **{
                f"tests/test_{i}.py": registered(("cpu",), body="def test_a():\n    pass\n") for i in range(4)
            },
            "tests/test_gpu.py": registered(("b200",), body="def test_a():\n    pass\n"),
            "tests/test_bad.py": "def test_a():\n    pass\n",
        },
    )
    discoveries = tmp_path / "discoveries.jsonl"
    run = run_pytest(tmp_path, "-n", "2", hardware="cpu", env={"DISCOVERIES": str(discoveries)})
    assert read_jsonl(discoveries) == [{"worker": None}]  # the controller only
    assert run.report is not None and run.report["totals"]["passed"] == 4  # the workers had the registry
    assert run.report["files"]["tests/test_bad.py"]["errors"] == ["tests/test_bad.py"]
    assert run.report["files"]["tests/test_gpu.py"]["skipped"][0]["hardware"] is True


def test_without_the_plugin_gpu_files_skip_through_the_conftest_guard(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "tests/conftest.py": (TESTS / "conftest.py").read_text(),
            **GATED_TREE,
            "tests/unit/test_cpu_or_gpu.py": registered(("cpu", "h100"), body="def test_e():\n    pass\n"),
            "tests/unit/test_plain.py": "def test_p():\n    pass\n",
        },
    )
    run = run_pytest(
        tmp_path, "-rs", "-p", "no:gpumatrix", hardware=None, report=False, env={"MARKS": str(tmp_path)}
    )
    assert run.returncode == 0, run.output
    assert not list(tmp_path.glob("imported-*"))
    assert "3 passed, 3 skipped" in run.stdout
    assert (
        "SKIPPED [1] tests/kernels/test_deepgemm.py: registered for b200|gb300 and the gpumatrix plugin is "
        "disabled (-p no:gpumatrix): nothing checks this machine or leases GPUs, so it is not run"
    ) in run.stdout


def test_with_the_plugin_the_conftest_guard_steps_aside(tmp_path: Path) -> None:
    write_tree(tmp_path, {"tests/conftest.py": (TESTS / "conftest.py").read_text(), **GATED_TREE})
    run = run_pytest(tmp_path, "-rs", hardware="1xh100", env={"MARKS": str(tmp_path)})
    assert run.returncode == 0, run.output
    assert "the gpumatrix plugin is disabled" not in run.stdout and "2 passed, 2 skipped" in run.stdout


# -- decisions as plain functions -------------------------------------------------------------------

H100 = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), "570", "nvml", ("GPU-a",))
REG = Registration("tests/kernels/test_k.py", 3, ("h100",), 1, 5.0, ("1-gpu-h100",))
RUNNER_1 = Runner("1-gpu-h100", "h100", 1, ("x",), 30)
RUNNER_2 = Runner("2-gpu-h100", "h100", 2, ("x",), 30)
PROBLEM = Problem("tests/kernels/test_k.py", 2, "register(on=...) names unknown class 'h900'")


@pytest.mark.parametrize(
    ("registration", "problems", "hardware", "runner", "expected"),
    [
        (REG, [], H100, None, FileDecision("collect")),
        (REG, [], H100, RUNNER_1, FileDecision("collect")),
        (REG, [], H100, RUNNER_2, FileDecision("deselect", reason="not in runner 2-gpu-h100's slice")),
        (REG, [], Hardware("cpu", 0), None, FileDecision("skip", reason="needs 1 x h100; this machine: cpu")),
        (None, [PROBLEM], H100, None, FileDecision("error", problems=(PROBLEM,))),
        (None, [PROBLEM], H100, RUNNER_1, FileDecision("error", problems=(PROBLEM,))),
    ],
    ids=["runs", "in-slice", "other-slice", "gated", "invalid", "invalid-beats-runner"],
)
def test_decide_file(
    registration: Registration | None,
    problems: list[Problem],
    hardware: Hardware,
    runner: Runner | None,
    expected: FileDecision,
) -> None:
    assert (
        decide_file("tests/kernels/test_k.py", registration, problems, hardware=hardware, runner=runner)
        == expected
    )


@pytest.mark.parametrize(
    ("on", "reason"),
    [
        (("cpu",), None),
        (("cpu", "h100"), None),
        (None, None),
        (
            ("h100", "b200"),
            "registered for h100|b200 and the gpumatrix plugin is disabled (-p no:gpumatrix): "
            "nothing checks this machine or leases GPUs, so it is not run",
        ),
    ],
    ids=["cpu", "cpu-or-gpu", "unregistered", "gpu"],
)
def test_unplugged_skip_reason(on: tuple[str, ...] | None, reason: str | None) -> None:
    registration = Registration("tests/t.py", 2, on, 1, 1.0) if on is not None else None
    assert unplugged_skip_reason(registration) == reason


# (id, the run's command line, what its child pytest gets)
FORWARDED = [
    ("nothing", ["tests", "-q", "-k", "x and not y", "-n", "4"], []),
    ("plugin-separate", ["-p", "no:randomly", "tests"], ["-p", "no:randomly"]),
    ("plugin-attached", ["-pno:randomly"], ["-p", "no:randomly"]),
    ("plugin-in-a-flag-group", ["-vpno:randomly"], ["-p", "no:randomly"]),
    (
        "override-ini",
        ["-o", "xfail_strict=false", "-oconsole_output_style=classic"],
        ["-o", "xfail_strict=false", "-o", "console_output_style=classic"],
    ),
    ("override-ini-long", ["--override-ini=a=1", "--override-ini", "b=2"], ["-o", "a=1", "-o", "b=2"]),
    (
        "warnings",
        ["-W", "error::DeprecationWarning", "-Wignore", "--pythonwarnings=default"],
        ["-W", "error::DeprecationWarning", "-W", "ignore", "-W", "default"],
    ),
    ("exitfirst", ["-x", "--exitfirst"], ["-x", "-x"]),
    ("exitfirst-in-a-group", ["-qx", "-xvs"], ["-x", "-x"]),
    ("values-are-not-flags", ["-k", "x", "-m", "gpu", "-rx", "-n", "2"], []),
    ("valued-option-swallows-the-rest", ["-kxp"], []),
    ("after-double-dash", ["--", "-p", "no:x"], []),
    ("long-options-untouched", ["--maxfail=2", "--tb", "short", "--pdb"], []),
]


@pytest.mark.parametrize(("args", "expected"), [r[1:] for r in FORWARDED], ids=[r[0] for r in FORWARDED])
def test_forwarded_options(args: list[str], expected: list[str]) -> None:
    assert forwarded_options(args) == expected
