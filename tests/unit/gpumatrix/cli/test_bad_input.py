"""One table of unusual or broken input, each answered with a problem and the documented exit code.

Every row runs the real entry point (the `gpumatrix` CLI, pytest with the plugin, or the Python API)
and asserts the exit code, the message (with file and line where there is one), and that no
traceback or INTERNALERROR came out.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import registered, run_pytest
from repo_paths import REPO_ROOT

from gpumatrix import register
from gpumatrix.cli import main

register(on=("cpu",), est_time=25)

MATRIX_TEXT = (REPO_ROOT / "ci" / "matrix.yaml").read_text(encoding="utf-8")
CPU_FILE = registered(("cpu",), body="def test_ok():\n    pass\n")
HEADER = b"from gpumatrix import register\n"


@dataclass(frozen=True)
class Case:
    """An input, how it is given (`cli` args, `pytest` args, or a Python `call`), and the answer."""

    files: dict[str, str | bytes] = field(default_factory=dict)
    matrix: Callable[[str], str | bytes] | None = None  # rewrites ci/matrix.yaml
    cli: tuple[str, ...] = ()
    pytest: tuple[str, ...] | None = None
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 0
    says: tuple[str, ...] = ()  # fragments of the output; {root} is the tree


def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _line(fragment: str) -> int:
    """The line of ci/matrix.yaml holding `fragment` (first occurrence)."""
    return next(i for i, line in enumerate(MATRIX_TEXT.splitlines(), 1) if fragment in line)


M = "{root}/ci/matrix.yaml"
BIG = 40 * 2**20
CASES = {
    # -- ci/matrix.yaml: every one is exit 2, from any command ------------------------------------------
    "matrix-not-utf8": Case(
        matrix=lambda t: t.replace("no GPU", "no G\xe9PU").encode("latin-1"),
        cli=("check",),
        exit_code=2,
        says=(f"{M}:{_line('no GPU')}: not UTF-8 text (byte 0xe9)",),
    ),
    "matrix-int-tag-not-a-number": Case(
        matrix=_replace("gpus: 2\n", "gpus: !!int two\n"),
        cli=("list",),
        exit_code=2,
        says=("gpus: cannot read the value 'two'",),
    ),
    "matrix-python-object-tag": Case(
        matrix=_replace("max_shards: 2\n", "max_shards: !!python/object:os.system x\n"),
        cli=("matrix", "--json"),
        exit_code=2,
        says=("could not determine a constructor for the tag",),
    ),
    "matrix-nested-too-deep": Case(
        matrix=lambda t: t + "extra: " + "[" * 20000 + "]" * 20000 + "\n",
        cli=("check",),
        exit_code=2,
        says=("nested more than 32 levels deep",),
    ),
    "matrix-null-label": Case(
        matrix=_replace("label: cpu", "label: ~"),
        cli=("check",),
        exit_code=2,
        says=(f"{M}:{_line('label: cpu')}: runner #1 label must not be empty (got ~)",),
    ),
    "matrix-empty-workflow": Case(
        matrix=_replace("workflow: gpu-tests.yml", "workflow:"),
        cli=("check",),
        exit_code=2,
        says=("bot workflow must not be empty",),
    ),
    "matrix-empty-ref": Case(
        matrix=_replace("ref: main", "ref: ''"),
        cli=("check",),
        exit_code=2,
        says=(f"{M}:{_line('ref: main')}: bot ref must not be empty",),
    ),
    "matrix-two-runners-one-class-and-count": Case(
        matrix=lambda t: t.replace(
            "runners:\n",
            "runners:\n  - {label: h100-twin, class: h100, gpus: 1, runs_on: [x], timeout_minutes: 9}\n",
            1,
        ),
        cli=("check",),
        exit_code=2,
        says=("runner '1-gpu-h100' has the class 'h100' and GPU count 1 of runner 'h100-twin'",),
    ),
    "matrix-without-a-cpu-runner": Case(
        matrix=_replace(
            "  - label: cpu\n    class: cpu\n    gpus: 0\n    runs_on: [ubuntu-latest]\n"
            "    timeout_minutes: 60\n    max_shards: 4\n",
            "",
        ),
        files={"tests/test_cpu.py": CPU_FILE},
        cli=("check",),
        exit_code=1,
        says=(
            "tests/test_cpu.py:3: register(on=...) names class 'cpu', which no runner of ",
            "serves: add a runner of that class or drop it from on=",
        ),
    ),
    # -- test files ---------------------------------------------------------------------------------------
    "file-utf8-bom": Case(
        files={"tests/test_bom.py": b"\xef\xbb\xbf" + CPU_FILE.encode()},
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "file-pep263-latin1": Case(
        files={
            "tests/test_latin.py": b"# -*- coding: latin-1 -*-\n" + CPU_FILE.encode() + b"NAME = 'caf\xe9'\n"
        },
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "file-expression-too-deep": Case(
        files={
            "tests/test_deep.py": HEADER + b"X = " + b"-" * 200_000 + b"1\n"
            b"register(on=('cpu',), est_time=1)\n"
        },
        cli=("check",),
        exit_code=1,
        says=("tests/test_deep.py:2: cannot parse test file",),
    ),
    "file-40-mb": Case(
        files={"tests/test_big.py": CPU_FILE.encode() + b"DATA = [" + b"0, " * (BIG // 3) + b"]\n"},
        cli=("list", "--json"),
        says=('"path": "tests/test_big.py"',),
    ),
    "file-40-mb-registered-too-late": Case(
        files={"tests/test_big.py": b"# " + b"x" * BIG + b"\n" + CPU_FILE.encode()},
        cli=("check",),
        exit_code=1,
        says=("only the first 1 MiB of this 40.0 MiB file are read",),
    ),
    "file-import-gpumatrix-then-attribute": Case(
        files={"tests/test_mod.py": "import gpumatrix\n\ngpumatrix.register(on=('cpu',), est_time=1)\n"},
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "file-import-gpumatrix-submodule-then-attribute": Case(
        files={
            "tests/test_mod.py": "import gpumatrix.compare\n\ngpumatrix.register(on=('cpu',), est_time=1)\n"
        },
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "file-value-error-on-its-argument-line": Case(
        files={
            "tests/test_args.py": "from gpumatrix import register\nregister(\n    on=('h100',),\n    gpus=0,\n"
            "    est_time=1,\n)\n"
        },
        cli=("check",),
        exit_code=1,
        says=("tests/test_args.py:4: register(gpus=...) must be a positive integer",),
    ),
    "file-cpu-or-two-gpus-is-valid": Case(
        files={"tests/test_either.py": registered(("h100", "cpu"), gpus=2)},
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "file-est-time-integer-past-a-float": Case(
        files={"tests/test_est.py": HEADER + b"register(on=('cpu',), est_time=1" + b"0" * 400 + b")\n"},
        cli=("check",),
        exit_code=1,
        says=(
            "tests/test_est.py:2: register(est_time=...) must be a positive number of seconds (at most 604800",
        ),
    ),
    "file-est-time-integer-past-the-parser": Case(
        files={"tests/test_est.py": HEADER + b"register(on=('cpu',), est_time=1" + b"0" * 5000 + b")\n"},
        cli=("list",),
        exit_code=1,
        says=("tests/test_est.py:2: cannot parse test file: Exceeds the limit (4300 digits)",),
    ),
    # -- gpumatrix run ------------------------------------------------------------------------------------
    "run-tests-file-not-utf8": Case(
        files={"tests/test_cpu.py": CPU_FILE, "list.txt": b"tests/test_\xff.py\n"},
        cli=("run", "--runner", "cpu", "--tests-file", "{root}/list.txt"),
        env={"GPUMATRIX_HARDWARE": "cpu"},
        exit_code=2,
        says=("--tests-file: {root}/list.txt:1: not UTF-8 text (byte 0xff)",),
    ),
    "run-lease-timeout-negative": Case(
        files={"tests/test_gpu.py": registered(("h100",))},
        cli=("run", "--runner", "1-gpu-h100"),
        env={"GPUMATRIX_HARDWARE": "1xh100", "GPUMATRIX_LEASE_TIMEOUT": "-1"},
        exit_code=2,
        says=("GPUMATRIX_LEASE_TIMEOUT='-1' must be a number of seconds",),
    ),
    "run-lease-dir-uncreatable": Case(
        files={"tests/test_gpu.py": registered(("h100",)), "a-file": ""},
        cli=("run", "--runner", "1-gpu-h100"),
        env={"GPUMATRIX_HARDWARE": "1xh100", "GPUMATRIX_LEASE_DIR": "{root}/a-file/x"},
        exit_code=2,
        says=("cannot use GPUMATRIX_LEASE_DIR='{root}/a-file/x' for GPU leases",),
    ),
    # -- pytest with the plugin ---------------------------------------------------------------------------
    "pytest-cpu-or-two-gpus-on-one-gpu": Case(
        files={"tests/test_either.py": registered(("h100", "cpu"), gpus=2)},
        pytest=("-rs",),
        env={"GPUMATRIX_HARDWARE": "1xh100"},
        exit_code=5,
        says=("SKIPPED [1] tests/test_either.py: needs 2 x h100 (or no GPU); this machine: 1 x h100",),
    ),
    "pytest-est-time-integer-past-a-float": Case(
        files={"tests/test_est.py": HEADER + b"register(on=('cpu',), est_time=1" + b"0" * 400 + b")\n"},
        pytest=(),
        exit_code=2,
        says=("ERROR tests/test_est.py - tests/test_est.py:2: register(est_time=...) must be",),
    ),
    "pytest-lease-timeout-negative": Case(
        files={"tests/test_gpu.py": registered(("h100",))},
        pytest=(),
        env={"GPUMATRIX_HARDWARE": "1xh100", "GPUMATRIX_LEASE_TIMEOUT": "-1"},
        exit_code=4,
        says=("GPUMATRIX_LEASE_TIMEOUT='-1' must be a number",),
    ),
    "pytest-lease-dir-uncreatable": Case(
        files={"tests/test_gpu.py": registered(("h100",)), "a-file": ""},
        pytest=(),
        env={"GPUMATRIX_HARDWARE": "1xh100", "GPUMATRIX_LEASE_DIR": "{root}/a-file/x"},
        exit_code=4,
        says=("cannot use GPUMATRIX_LEASE_DIR='{root}/a-file/x'",),
    ),
    "pytest-matrix-python-object-tag": Case(
        matrix=_replace("gpus: 2\n", "gpus: !!python/object:os.system x\n"),
        pytest=(),
        exit_code=4,
        says=("could not determine a constructor",),
    ),
}


def _tree(root: Path, case: Case) -> None:
    (root / "ci").mkdir(parents=True)
    matrix = case.matrix(MATRIX_TEXT) if case.matrix else MATRIX_TEXT
    path = root / "ci" / "matrix.yaml"
    path.write_bytes(matrix if isinstance(matrix, bytes) else matrix.encode())
    (root / "pytest.ini").write_text("[pytest]\n")
    for relative, content in case.files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_unusual_input_gets_a_problem_and_the_documented_exit_code(tmp_path: Path, case: Case) -> None:
    _tree(tmp_path, case)
    env = {key: value.format(root=tmp_path) for key, value in case.env.items()}
    if case.pytest is not None:
        run = run_pytest(
            tmp_path, *case.pytest, hardware=env.pop("GPUMATRIX_HARDWARE", "cpu"), env=env, report=False
        )
        code, output = run.returncode, run.output
    else:
        args = [arg.format(root=tmp_path) for arg in case.cli]
        result = CliRunner().invoke(main, [*args, "--root", str(tmp_path)], env=env)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        code, output = result.exit_code, result.output
    assert code == case.exit_code, output
    assert "Traceback" not in output and "INTERNALERROR" not in output
    for fragment in case.says:
        assert fragment.format(root=tmp_path) in output, output


@pytest.mark.parametrize("kind", ["meta", "nested"])
@pytest.mark.parametrize("which", ["actual", "expected", "both"])
@pytest.mark.parametrize(
    "function",
    [
        "assert_close",
        "calc_diff",
        "assert_same_bits",
        "assert_ulp_close",
        "ulp_distance",
        "rel_error",
        "assert_diff",
    ],
)
def test_compare_refuses_tensors_without_values_to_compare(function: str, which: str, kind: str) -> None:
    """PyTorch's own assert_close suite passes meta tensors; reading one raised RuntimeError here."""
    torch = pytest.importorskip("torch")
    import gpumatrix.compare as compare

    data = torch.ones(4, dtype=torch.bfloat16)
    odd = (
        torch.empty(4, dtype=torch.bfloat16, device="meta")
        if kind == "meta"
        else torch.nested.as_nested_tensor(
            [torch.ones(2, dtype=torch.bfloat16), torch.ones(3, dtype=torch.bfloat16)], layout=torch.jagged
        )
    )
    actual, expected = {"actual": (odd, data), "expected": (data, odd), "both": (odd, odd)}[which]
    kwargs = {"max_diff": 0.1} if function == "assert_diff" else {}
    name = "actual" if which != "expected" else "expected"
    with pytest.raises(TypeError, match=rf"^{name} is a {kind} tensor"):
        getattr(compare, function)(actual, expected, **kwargs)


def test_a_root_that_does_not_exist(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path)
    result = CliRunner().invoke(main, ["check", "--root", str(tmp_path)])
    assert result.exit_code == 2 and "cannot read the runner matrix" in result.output
