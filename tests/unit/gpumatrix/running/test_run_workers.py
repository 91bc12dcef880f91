"""`gpumatrix run` as a GPU job: the workers it starts, the compile caches it points at, and a pytest
command whose every path travels as `--option=value`, so a report outside the tree keeps pytest's config."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from gpumatrix_trees import MATRIX_YAML, registered, write_tree

from gpumatrix import UsageError, register
from gpumatrix.cli import main
from gpumatrix.commands.tree import load_tree
from gpumatrix.config import Runner, WorkersPerGpu, parse_matrix
from gpumatrix.hardware.detection import Hardware
from gpumatrix.running.compile_cache import CacheUse, compile_cache, kernel_entries
from gpumatrix.running.run import RunOptions, choose_workers, plan_run
from gpumatrix.running.session import resolve_workers_per_gpu
from gpumatrix.running.shard import plan_matrix

register(on=("cpu",), est_time=20)

H100 = Runner("1-gpu-h100", "h100", 1, ("gpu-h100",), 45)
FOUR_B200 = Runner("4-gpu-b200", "b200", 4, ("gpu-b200",), 60)
CPU = Runner("cpu", "cpu", 0, ("ubuntu-latest",), 30)


@pytest.mark.parametrize(
    ("runner", "per_gpu", "cpus", "requested", "arg", "reason"),
    [
        (H100, WorkersPerGpu(8, "class h100"), 16, None, "8", "1 GPU(s) x 8 test(s) per GPU"),
        (H100, WorkersPerGpu(8, "class h100"), 4, None, "4", "limited to the 4 CPUs"),
        (FOUR_B200, WorkersPerGpu(2, "runner 4-gpu-b200"), 64, None, "8", "4 GPU(s) x 2 test(s) per GPU"),
        (H100, WorkersPerGpu(1, "the default"), 16, None, "1", "1 GPU(s) x 1 test(s) per GPU"),
        (H100, WorkersPerGpu(8, "class h100"), 16, "3", "3", "-n 3 as asked"),
        (CPU, WorkersPerGpu(8, "the default"), 2, None, "auto", "one per CPU (2)"),
    ],
    ids=["gpu-times-sharing", "cpu-bound", "four-gpus", "alone", "asked", "cpu-runner"],
)
def test_choose_workers(
    runner: Runner, per_gpu: WorkersPerGpu, cpus: int, requested: str | None, arg: str, reason: str
) -> None:
    chosen = choose_workers(runner, per_gpu, cpus=cpus, requested=requested)
    assert chosen.arg == arg and reason in chosen.reason
    assert chosen.parallel == (arg not in ("0", "1"))


_SHARING = MATRIX_YAML.replace(
    'h100: {description: Hopper, compute_capability: ["9.0"]}',
    'h100: {description: Hopper, compute_capability: ["9.0"], workers_per_gpu: 6}',
)
_H200 = Hardware("h100", 1, ("NVIDIA H200",), ((9, 0),), "570", "nvml", ("GPU-a",))


@pytest.mark.parametrize(
    ("environ", "runner", "expected"),
    [
        ({}, "1-gpu-h100", (6, "class h100")),
        ({}, None, (6, "class h100")),
        ({"GPUMATRIX_WORKERS_PER_GPU": "3"}, "1-gpu-h100", (3, "GPUMATRIX_WORKERS_PER_GPU")),
        ({"GPUMATRIX_WORKERS_PER_GPU": " "}, None, (6, "class h100")),
    ],
    ids=["runner", "this-machine", "override", "blank-override"],
)
def test_resolve_workers_per_gpu(
    environ: dict[str, str], runner: str | None, expected: tuple[int, str]
) -> None:
    matrix = parse_matrix(_SHARING)
    chosen = resolve_workers_per_gpu(
        matrix, _H200, matrix.runner(runner) if runner else None, environ=environ
    )
    assert (chosen.count, chosen.source) == expected


@pytest.mark.parametrize("value", ["0", "33", "-1", "two", "1.5", "٣", "9" * 5000])
def test_a_bad_workers_per_gpu_override_is_a_usage_error_naming_it(value: str) -> None:
    with pytest.raises(UsageError, match="GPUMATRIX_WORKERS_PER_GPU=.* must be a whole number from 1 to 32"):
        resolve_workers_per_gpu(
            parse_matrix(_SHARING), _H200, None, environ={"GPUMATRIX_WORKERS_PER_GPU": value}
        )


def test_a_gpu_run_shares_the_gpu_and_points_the_compilers_at_the_cache(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "repo",
        {"tests/kernels/test_k.py": registered(("h100",), body="def test_k():\n    pass\n")},
        matrix=_SHARING,
    )
    environ = {"GPUMATRIX_HARDWARE": "1xh100", "GPUMATRIX_CACHE_DIR": str(tmp_path / "cache"), "PATH": ""}
    plan = plan_run(root, RunOptions(label="1-gpu-h100"), environ=environ)
    assert plan.session is not None and plan.session.workers_per_gpu == 6
    assert plan.workers.arg in {str(n) for n in range(1, 7)}
    assert plan.env["TRITON_CACHE_DIR"] == str(tmp_path / "cache" / "triton")
    assert plan.env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    assert plan.env["PYTORCH_KERNEL_CACHE_PATH"] == str(tmp_path / "cache" / "torch-kernels")
    assert plan.compile_cache is not None and plan.compile_cache.triton_dir == tmp_path / "cache" / "triton"
    if plan.workers.parallel:
        assert f"--numprocesses={plan.workers.arg}" in plan.command and "--dist=worksteal" in plan.command


def test_run_shard_runs_the_files_the_matrix_planned_for_a_shared_gpu(tmp_path: Path) -> None:
    """`gpumatrix run --shard I/N` packs by wall time as `gpumatrix matrix` does (6 tests a GPU here), even
    when this machine's own override asks for another number of tests a GPU."""
    body = "def test_k():\n    pass\n"
    exclusive = (
        f'from gpumatrix import register\nregister(on=("h100",), est_time=1200, gpu="exclusive")\n\n{body}'
    )
    files = {f"tests/kernels/test_s{i}.py": registered(("h100",), est_time=3000, body=body) for i in range(3)}
    files["tests/kernels/test_x.py"] = exclusive
    h100_runner = "{label: 1-gpu-h100, class: h100, gpus: 1, runs_on: [gpu-h100], timeout_minutes: 30}"
    assert h100_runner in _SHARING
    sharded = _SHARING.replace(h100_runner, h100_runner[:-1] + ", max_shards: 4}")
    root = write_tree(tmp_path / "repo", files, matrix=sharded)
    matrix, registry = load_tree(root)
    (plan,) = [p for p in plan_matrix(matrix, registry) if p.runner.label == "1-gpu-h100"]
    # 500 s of wall a shared file (3,000 / 6), 1,200 s the exclusive one, budget 1,440 s: 3 shards. Packed
    # one test a GPU (the override below), the shared files would be 3,000 s each and packed otherwise.
    assert [(s.files, s.est_time) for s in plan.shards] == [
        (("tests/kernels/test_x.py",), 1200.0),
        (("tests/kernels/test_s0.py", "tests/kernels/test_s2.py"), 1000.0),
        (("tests/kernels/test_s1.py",), 500.0),
    ]
    environ = {
        "GPUMATRIX_HARDWARE": "1xh100",
        "GPUMATRIX_CACHE_DIR": str(tmp_path / "cache"),
        "GPUMATRIX_WORKERS_PER_GPU": "1",
        "PATH": "",
    }
    ran = [
        plan_run(root, RunOptions(label="1-gpu-h100", shard=f"{i}/{plan.count}"), environ=environ).targets
        for i in (1, 2, 3)
    ]
    assert [tuple(targets) for targets in ran] == [shard.files for shard in plan.shards]


def test_every_option_of_the_pytest_command_is_one_argument(tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "repo", {"tests/test_a.py": registered(("cpu",), body="def test_a():\n    pass\n")}
    )
    outside = tmp_path / "outside"
    options = RunOptions(
        label="cpu",
        report=outside / "r.json",
        junit_xml=outside / "j.xml",
        html=outside / "p.html",
        workers="0",
    )
    plan = plan_run(root, options, environ={"GPUMATRIX_HARDWARE": "cpu"})
    arguments = plan.command[3:]
    # pytest finds its config file from the arguments that are not options: only the targets may be paths
    assert [a for a in arguments if not a.startswith("-") and a != "no:cacheprovider"] == list(plan.targets)
    assert f"--gpumatrix-report={outside / 'r.json'}" in arguments
    assert f"--gpumatrix-plan={outside / '.r.plan.json'}" in arguments


@pytest.mark.parametrize(
    ("environ", "root", "triton", "kept"),
    [
        ({"GPUMATRIX_CACHE_DIR": "/c"}, "/c", "/c/triton", ()),
        ({"XDG_CACHE_HOME": "/x"}, "/x/gpumatrix", "/x/gpumatrix/triton", ()),
        ({"GPUMATRIX_CACHE_DIR": "/c", "TRITON_CACHE_DIR": "/t"}, "/c", "/t", ("TRITON_CACHE_DIR",)),
    ],
    ids=["named", "xdg", "triton-dir-kept"],
)
def test_compile_cache(environ: dict[str, str], root: str, triton: str, kept: tuple[str, ...]) -> None:
    cache = compile_cache(environ)
    assert (cache.root, cache.triton_dir) == (Path(root), Path(triton))
    assert set(cache.env) == {
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
        "PYTORCH_KERNEL_CACHE_PATH",
    } - set(kept)


def test_prepare_makes_every_cache_directory(tmp_path: Path) -> None:
    cache = compile_cache({"GPUMATRIX_CACHE_DIR": str(tmp_path / "c")})
    cache.prepare()
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["inductor", "torch-kernels", "triton"]


def test_kernel_entries_count_compiled_kernels_only(tmp_path: Path) -> None:
    assert kernel_entries(tmp_path / "missing") == frozenset()
    for name, files in {
        "AAAA": ["__grp__add_kernel.json", "add_kernel.cubin", "add_kernel.json"],
        "BBBB": ["__grp__mm.json", "mm.cubin"],
        "CCCC": ["cuda_utils.so"],  # a driver utility build: no kernel
        "DDDD": [],  # an entry still being written
    }.items():
        (tmp_path / name).mkdir()
        for file in files:
            (tmp_path / name / file).write_text("x")
    (tmp_path / "stray.json").write_text("{}")
    assert kernel_entries(tmp_path) == {"AAAA", "BBBB"}


@pytest.mark.parametrize(
    ("use", "text"),
    [
        (CacheUse(0, 41), "compile cache cold; 41 kernel(s) compiled"),
        (CacheUse(41, 0), "warm, 41 kernels; 0"),
    ],
)
def test_cache_use_says_cold_or_warm(use: CacheUse, text: str) -> None:
    assert text in use.describe()


# -- a report outside the tree ----------------------------------------------------------------------

_CONFIG = """\
[pytest]
pythonpath = tests/support
xfail_strict = true
addopts = --strict-markers
filterwarnings = error::UserWarning
"""
_TESTS = """
import warnings

import pytest
from helper import VALUE


def test_imports_from_the_configured_pythonpath():
    assert VALUE == 42


@pytest.mark.xfail(reason="expected to fail, but passes")
def test_a_strict_xfail_that_passes():
    pass


def test_a_warning_is_an_error():
    warnings.warn("turned into an error by filterwarnings", UserWarning)
"""
_UNDECLARED_MARKER = """
import pytest


@pytest.mark.not_declared
def test_an_undeclared_marker():
    pass
"""


@pytest.mark.parametrize("in_tree", [False, True], ids=["outside-the-tree", "inside-the-tree"])
def test_a_report_outside_the_tree_keeps_the_config(in_tree: bool, tmp_path: Path) -> None:
    root = write_tree(
        tmp_path / "repo",
        {
            "pytest.ini": _CONFIG,
            "tests/support/helper.py": "VALUE = 42\n",
            "tests/test_config_kept.py": registered(("cpu",), body=_TESTS),
            "tests/test_marker.py": registered(("cpu",), body=_UNDECLARED_MARKER),
        },
    )
    out = root / "reports" if in_tree else tmp_path / "elsewhere" / "job"
    out.mkdir(parents=True)

    def run(*tests: str) -> Result:
        (out / "tests.txt").write_text("".join(f"{test}\n" for test in tests))
        return CliRunner().invoke(
            main,
            [
                "run",
                "--runner",
                "cpu",
                "-n",
                "0",
                "--root",
                str(root),
                "--report",
                str(out / "r.json"),
                "--html",
                str(out / "r.html"),
                "--junit-xml",
                str(out / "j.xml"),
                "--tests-file",
                str(out / "tests.txt"),
            ],
            env={"GPUMATRIX_HARDWARE": "cpu", "GPUMATRIX_CACHE_DIR": str(tmp_path / "cache")},
        )

    result = run("tests/test_config_kept.py")
    assert result.exit_code == 1, result.output  # the strict xpass and the warning fail it
    outcomes = json.loads((out / "r.json").read_text())["files"]["tests/test_config_kept.py"]
    assert outcomes["passed"] == ["tests/test_config_kept.py::test_imports_from_the_configured_pythonpath"]
    assert sorted(outcomes["failed"]) == [
        "tests/test_config_kept.py::test_a_strict_xfail_that_passes",
        "tests/test_config_kept.py::test_a_warning_is_an_error",
    ]
    assert "workers: 0 (-n 0 as asked)" in result.output
    assert f"compile cache: {tmp_path / 'cache'} (GPUMATRIX_CACHE_DIR); cold" in result.output
    assert "compile cache cold; 0 kernel(s) compiled" in result.output
    assert (out / "r.html").is_file()
    assert len(list(ElementTree.parse(out / "j.xml").getroot().iter("failure"))) == 2

    marker = run("tests/test_marker.py")  # --strict-markers: a collection error
    assert marker.exit_code == 1, marker.output
    assert "'not_declared' not found in `markers` configuration option" in marker.output
