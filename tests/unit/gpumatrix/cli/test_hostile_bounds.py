"""Hostile sizes and kinds of input, each refused with a located problem and the documented exit code.

Integers past Python's 4,300-digit limit (or past any sane count) in ci/matrix.yaml and in registrations,
expressions nested past the parser's limits, files too large to read whole, shard counts of thirty digits,
and paths that are not regular files (a FIFO, whose open for reading waits for a writer forever). Every row
runs `python -m gpumatrix` in a child process under a timeout, so a hang fails the row instead of the
suite, and asserts the exit code, the message and that no traceback came out.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from gpumatrix_trees import registered
from repo_paths import REPO_ROOT

from gpumatrix import register

register(on=("cpu",), est_time=40)

MATRIX_TEXT = (REPO_ROOT / "ci" / "matrix.yaml").read_text(encoding="utf-8")
CPU_FILE = registered(("cpu",), body="def test_ok():\n    pass\n")
HEADER = "from gpumatrix import register\n"
M = "{root}/ci/matrix.yaml"
TIMEOUT = 60  # seconds; each row takes about one
PATHS = "paths:\n  ref.torch:\n    required_on: [cpu]\n"


def _replace(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, old
        return text.replace(old, new, 1)

    return edit


def _line(fragment: str) -> int:
    return next(i for i, line in enumerate(MATRIX_TEXT.splitlines(), 1) if fragment in line)


@dataclass(frozen=True)
class Case:
    files: dict[str, str | bytes] = field(default_factory=dict)
    fifos: tuple[str, ...] = ()  # paths made FIFOs (nothing ever writes to them)
    matrix: Callable[[str], str] | None = None
    cli: tuple[str, ...] = ()
    exit_code: int = 0
    says: tuple[str, ...] = ()


HEX = "0x" + "f" * 5000  # no digit limit holds a hexadecimal literal back: 6,021 decimal digits
DECIMAL = "9" * 4200  # under Python's 4,300-digit limit, so it converts
CASES = {
    # -- integers in ci/matrix.yaml ----------------------------------------------------------------------
    "matrix-hex-timeout": Case(
        matrix=_replace("timeout_minutes: 45", f"timeout_minutes: {HEX}"),
        cli=("check",),
        exit_code=2,
        says=(f"{M}:{_line('timeout_minutes: 45')}:", "timeout_minutes must be an integer from 1 to"),
    ),
    "matrix-decimal-max-shards": Case(
        matrix=_replace("max_shards: 4", f"max_shards: {DECIMAL}"),
        cli=("matrix", "--json"),
        exit_code=2,
        says=(f"{M}:{_line('max_shards: 4')}:", "an integer literal of 4200 digits"),
    ),
    "matrix-shards-past-github": Case(
        matrix=_replace("max_shards: 4", "max_shards: 1000"),
        cli=("check",),
        exit_code=2,
        says=(f"{M}:{_line('max_shards: 4')}:", "max_shards must be at most 256, got 1000"),
    ),
    "matrix-gpus-past-any-machine": Case(
        matrix=_replace("gpus: 2\n", "gpus: 100000\n"),
        cli=("list",),
        exit_code=2,
        says=(f"{M}:{_line('gpus: 2')}:", "gpus must be at most 1024, got 100000"),
    ),
    # -- integers in registrations ----------------------------------------------------------------------
    "register-hex-gpus": Case(
        files={"tests/test_big.py": f"{HEADER}register(on=('cpu',), gpus={HEX}, est_time=3)\n"},
        cli=("check",),
        exit_code=1,
        says=(
            "tests/test_big.py:2: register(gpus=...) must be a positive integer (at most 1024), got an "
            "integer of 20000 bits",
        ),
    ),  # fmt: skip
    "register-decimal-gpus": Case(
        files={"tests/test_big.py": f"{HEADER}register(on=('cpu',), gpus={DECIMAL}, est_time=3)\n"},
        cli=("list", "--json"),
        exit_code=1,
        says=("tests/test_big.py:2: register(gpus=...) must be a positive integer (at most 1024)",),
    ),
    "register-hex-est-time": Case(
        files={"tests/test_big.py": f"{HEADER}register(on=('cpu',), est_time={HEX})\n"},
        cli=("check",),
        exit_code=1,
        says=("tests/test_big.py:2: register(est_time=...) must be a positive number of seconds",),
    ),
    "register-hex-in-a-class-mapping": Case(
        files={
            "tests/test_big.py": f"{HEADER}register(on=('cpu',), est_time=3, disabled_on={{{HEX}: 'x'}})\n"
        },
        cli=("check",),
        exit_code=1,
        says=("tests/test_big.py:2: register(disabled_on=...) keys must be class names, got an integer",),
    ),
    "register-plain-form-gpus-past-any-machine": Case(
        files={"tests/test_big.py": f'{HEADER}register(on=("h100",), gpus=99999, est_time=3)\n'},
        cli=("check",),
        exit_code=1,
        says=(
            "tests/test_big.py:2: register(gpus=...) must be a positive integer (at most 1024), got 99999",
        ),
    ),
    "marker-hex-gpus": Case(
        files={
            "tests/test_marked.py": f"import pytest\n{HEADER}register(on=('cpu',), est_time=3)\n\n"
            f"@pytest.mark.gpumatrix(gpus={HEX})\ndef test_x():\n    pass\n"
        },
        cli=("check",),
        exit_code=1,
        says=(
            "tests/test_marked.py:5: test_x: gpus= must be a positive integer (at most 1024), got an integer",
        ),
    ),
    # -- nesting --------------------------------------------------------------------------------------------
    "marker-nested-too-deep": Case(
        files={
            "tests/test_marked.py": f"import pytest\n{HEADER}register(on=('cpu',), est_time=3)\n\n"
            f"@pytest.mark.gpumatrix(gpus={'-' * 100_000}1)\ndef test_x():\n    pass\n"
        },
        cli=("check",),
        exit_code=1,
        says=("tests/test_marked.py:5: cannot parse test file: an expression here nests too deeply",),
    ),
    "marker-attribute-chain-long": Case(
        files={
            "tests/test_marked.py": f"import pytest\n{HEADER}register(on=('cpu',), est_time=3)\n\n"
            f"@{'a.' * 2000}mark.gpumatrix(gpus=1)\ndef test_x():\n    pass\n"
        },
        cli=("check",),
        says=("ok: 6 runners, 1 registered test files",),
    ),
    "marker-attribute-chain-too-deep": Case(
        files={
            "tests/test_marked.py": f"import pytest\n{HEADER}register(on=('cpu',), est_time=3)\n\n"
            f"@{'a.' * 100_000}mark.gpumatrix(gpus=1)\ndef test_x():\n    pass\n"
        },
        cli=("check",),
        exit_code=1,
        says=("tests/test_marked.py:5: cannot parse test file: an expression here nests too deeply",),
    ),
    "suggest-nested-too-deep": Case(
        files={"tests/test_deep.py": f"import torch\nX = {'-' * 100_000}1\n\ndef test_x():\n    pass\n"},
        cli=("register", "--suggest"),
        exit_code=1,
        says=("tests/test_deep.py:2: no suggestion: cannot parse test file: an expression here nests too",),
    ),
    "suggest-literal-nested-too-deep": Case(
        files={
            "tests/test_deep.py": "import torch\n\ndef test_x():\n    if torch.cuda.get_device_capability() >= "
            + "(" * 190
            + "9, 0"
            + ")" * 190
            + ":\n        pass\n"
        },
        cli=("register", "--suggest"),
        exit_code=0,
        says=("+register(on=",),
    ),
    # -- sizes ----------------------------------------------------------------------------------------------
    "suggest-20-mb-file": Case(
        files={"tests/test_huge.py": "import torch\nX = [" + "0, " * (7 << 20) + "]\n"},
        cli=("register", "--suggest"),
        exit_code=1,
        says=("tests/test_huge.py: no suggestion: the file is larger than 1 MiB",),
    ),
    "run-shard-of-thirty-digits": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        cli=("run", "--runner", "cpu", "--shard", "1/" + "9" * 30),
        exit_code=2,
        says=("--shard must be I/N with 1 <= I <= N <= 4 (for example 1/2), got '1/9999",),
    ),
    "run-shard-past-max-shards": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        cli=("run", "--runner", "cpu", "--shard", "1/5"),
        exit_code=2,
        says=("the runner is split into at most 4 shards (max_shards)",),
    ),
    "run-shard-of-fullwidth-digits": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        cli=("run", "--runner", "cpu", "--shard", "１/２"),
        exit_code=2,
        says=("--shard must be I/N",),
    ),
    # -- files that are not regular files ------------------------------------------------------------------
    "fifo-report-coverage": Case(
        files={"ci/paths.yaml": PATHS},
        fifos=("report.json",),
        cli=("coverage", "{root}/report.json"),
        exit_code=2,
        says=("cannot read report {root}/report.json: it is a FIFO, not a regular file",),
    ),
    "fifo-report-estimate": Case(
        fifos=("report.json",),
        cli=("estimate", "{root}/report.json"),
        exit_code=2,
        says=("it is a FIFO, not a regular file",),
    ),
    "fifo-report-flaky": Case(
        fifos=("report.json",),
        cli=("flaky", "{root}/report.json"),
        exit_code=2,
        says=("it is a FIFO, not a regular file",),
    ),
    "fifo-report-durations": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        fifos=("report.json",),
        cli=("matrix", "--durations", "{root}/report.json"),
        exit_code=2,
        says=("it is a FIFO, not a regular file",),
    ),
    "fifo-test-file": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        fifos=("tests/test_fifo.py",),
        cli=("check",),
        exit_code=1,
        says=("tests/test_fifo.py: cannot read test file: it is a FIFO, not a regular file",),
    ),
    "fifo-test-file-run": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        fifos=("tests/test_fifo.py",),
        cli=("run", "--runner", "cpu"),
        exit_code=1,
        says=("tests/test_fifo.py: cannot read test file: it is a FIFO, not a regular file",),
    ),
    "fifo-tests-file": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        fifos=("tests.txt",),
        cli=("run", "--runner", "cpu", "--tests-file", "{root}/tests.txt"),
        exit_code=2,
        says=("--tests-file: cannot read {root}/tests.txt: it is a FIFO, not a regular file",),
    ),
    "fifo-matrix": Case(
        fifos=("ci/matrix.yaml",),
        cli=("check",),
        exit_code=2,
        says=(f"{M}: cannot read the runner matrix: it is a FIFO, not a regular file",),
    ),
    "fifo-event": Case(
        fifos=("event.json",),
        cli=("bot", "handle", "--event", "{root}/event.json"),
        exit_code=2,
        says=("cannot read the event file {root}/event.json: it is a FIFO, not a regular file",),
    ),
    "fifo-registry-cache": Case(
        files={"tests/test_cpu.py": CPU_FILE},
        fifos=(".gpumatrix/registry-cache.json",),
        cli=("list",),
        exit_code=0,
        says=("tests/test_cpu.py",),
    ),
    "device-report": Case(
        files={"ci/paths.yaml": PATHS},
        cli=("coverage", "/dev/zero"),
        exit_code=2,
        says=("cannot read report /dev/zero: it is a character device, not a regular file",),
    ),
}


def _tree(root: Path, case: Case) -> None:
    (root / "ci").mkdir(parents=True)
    matrix = case.matrix(MATRIX_TEXT) if case.matrix else MATRIX_TEXT
    (root / "pytest.ini").write_text("[pytest]\n")
    if "ci/matrix.yaml" not in case.fifos:
        (root / "ci" / "matrix.yaml").write_text(matrix)
    for relative, content in case.files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content if isinstance(content, bytes) else content.encode())
    for relative in case.fifos:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(root / relative)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_hostile_input_is_a_problem_never_a_hang_or_a_traceback(tmp_path: Path, case: Case) -> None:
    _tree(tmp_path, case)
    args = [arg.format(root=tmp_path) for arg in case.cli]
    env = {**os.environ, "GPUMATRIX_HARDWARE": "cpu", "GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "o/r"}
    env.pop("GITHUB_STEP_SUMMARY", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "gpumatrix", *args, "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,  # a hang fails this row (TimeoutExpired) instead of the whole suite
    )
    output = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == case.exit_code, output
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    for fragment in case.says:
        assert " ".join(fragment.format(root=tmp_path).split()) in output, output
    assert time.monotonic() - started < TIMEOUT / 2


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("12", None),
        ("-" + "9" * 18, None),
        ("1" * 19, "an integer literal of 19 digits (at most 18)"),
        ("0x" + "f" * 5000, "an integer literal of 5000 digits"),
        ("0b_1_0", None),
        ("1_000_000_000_000_000_000", "an integer literal of 19 digits"),
    ],
)
def test_integer_literals_are_measured_before_they_are_converted(text: str, problem: str | None) -> None:
    from gpumatrix.bounds import int_literal_problem

    found = int_literal_problem(text)
    assert (found is None) == (problem is None) and (problem is None or problem in found)


def test_a_registration_past_the_digit_limit_is_a_problem_whatever_the_limit_is_set_to(
    tmp_path: Path,
) -> None:
    """With `sys.set_int_max_str_digits(0)` (any library may call it) a 5,000-digit literal parses; the
    registry still refuses it at its line, and ci/matrix.yaml's reader still refuses one of its own."""
    from gpumatrix.config import MatrixError, parse_matrix
    from gpumatrix.registry.reader import read_registration

    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        registration, problems = read_registration(
            f"{HEADER}register(on=('cpu',), est_time={'9' * 5000})\n", "tests/test_x.py"
        )
        with pytest.raises(MatrixError, match="an integer literal of 5000 digits"):
            parse_matrix(MATRIX_TEXT.replace("max_shards: 4", f"max_shards: {'9' * 5000}", 1))
    finally:
        sys.set_int_max_str_digits(before)
    assert registration is None
    assert [(p.line, p.message[:59]) for p in problems] == [
        (2, "register(est_time=...) must be a positive number of seconds")
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX thing")
def test_read_regular_refuses_what_is_not_a_regular_file_without_waiting(tmp_path: Path) -> None:
    from gpumatrix.regular_files import NotRegularFile, read_regular

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "file").write_bytes(b"0123456789")
    os.symlink(tmp_path / "file", tmp_path / "link")
    for path, kind in (
        (fifo, "a FIFO"),
        (tmp_path, "a directory"),
        (Path("/dev/null"), "a character device"),
    ):
        with pytest.raises(NotRegularFile, match=f"it is {kind}, not a regular file"):
            read_regular(path, limit=10)
    assert read_regular(tmp_path / "file", limit=4) == b"01234"  # limit + 1: the caller sees it is over
    assert read_regular(tmp_path / "link", limit=100) == b"0123456789"  # a link to a file reads the file
