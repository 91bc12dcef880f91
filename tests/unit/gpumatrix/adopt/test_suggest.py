"""`gpumatrix register --suggest [--write]`: a registration per unregistered file, from what it says."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner
from gpumatrix_trees import registered

from gpumatrix import register
from gpumatrix.adopt.suggest import (
    SuggestOptions,
    find_evidence,
    insert_registration,
    suggest_registration,
    suggest_tree,
)
from gpumatrix.cli import main
from gpumatrix.config import parse_matrix

register(on=("cpu",), est_time=10)

MATRIX_YAML = """\
test_roots: [test]
classes:
  cpu: {compute_capability: []}
  a100: {compute_capability: ["8.0"]}
  h100: {compute_capability: ["9.0"]}
  b200: {compute_capability: ["10.0"]}
  mi300x: {vendor: amd, gfx: [gfx942]}
  pvc: {vendor: intel, device_names: [Data Center GPU Max]}
runners:
  - {label: cpu, class: cpu, gpus: 0, runs_on: [u], timeout_minutes: 9}
  - {label: a, class: a100, gpus: 1, runs_on: [a], timeout_minutes: 9}
  - {label: h, class: h100, gpus: 1, runs_on: [h], timeout_minutes: 9}
  - {label: h2, class: h100, gpus: 2, runs_on: [h2], timeout_minutes: 9}
  - {label: b, class: b200, gpus: 1, runs_on: [b], timeout_minutes: 9}
  - {label: m, class: mi300x, gpus: 1, runs_on: [m], timeout_minutes: 9}
  - {label: p, class: pvc, gpus: 1, runs_on: [p], timeout_minutes: 9}
"""
MATRIX = parse_matrix(MATRIX_YAML)


def _suggest(source: str, name: str = "test_x.py", **options) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    evidence = find_evidence(ast.parse(source), f"test/{name}", options.pop("gpu_modules", ()))
    return suggest_registration(evidence, MATRIX, SuggestOptions(**options))


@pytest.mark.parametrize(
    ("source", "name", "on", "gpus", "reason"),
    [
        ("def test_a():\n    assert 1\n", "test_x.py", ("cpu",), 1, "no sign of a GPU: the default, cpu"),
        (
            "import pytest, torch\npytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='x')\n"
            "def test_a():\n    pass\n",
            "test_x.py",
            ("a100", "h100", "b200", "mi300x"),
            1,
            "line 2: checks torch.cuda.is_available()",
        ),
        (
            "import torch\n@pytest.mark.skipif(torch.cuda.get_device_capability() < (9, 0), reason='x')\n"
            "def test_a():\n    pass\n",
            "test_x.py",
            ("h100", "b200"),
            1,
            "checks the compute capability against 9.0 (at least that)",
        ),
        (
            "import torch\n@pytest.mark.skipif(torch.cuda.device_count() < 2, reason='x')\ndef test_a():\n    pass\n",
            "test_x.py",
            ("a100", "h100", "b200", "mi300x", "pvc"),
            2,
            "checks the device count against 2 (2 GPUs)",
        ),
        ("import flash_attn\n", "test_x.py", ("a100", "h100", "b200"), 1, "imports flash_attn"),
        (
            "def test_a():\n    pass\n",
            "test_gemm_sm90.py",
            ("h100", "b200"),
            1,
            "its name (test_gemm_sm90.py)",
        ),
        ("def test_a():\n    pass\n", "test_rope_xpu.py", ("pvc",), 1, "its name"),
        (
            "import torch\nif torch.version.hip:\n    pass\ndef test_a():\n    pass\n",
            "test_x.py",
            ("mi300x",),
            1,
            "checks torch.version.hip",
        ),
        (
            "def test_cpu():\n    pass\ndef test_gpu():\n    x = 'cuda'\n",
            "test_x.py",
            ("cpu", "a100", "h100", "b200", "mi300x"),
            1,
            "1 of 2 tests show a GPU sign",
        ),
        ("from mykernels import op\n", "test_x.py", ("cpu",), 1, "the default, cpu"),
    ],
    ids=[
        "nothing",
        "availability",
        "capability",
        "device-count",
        "gpu-library",
        "name-sm90",
        "name-xpu",
        "hip",
        "mixed",
        "local-module-unknown",
    ],
)
def test_suggestions(source: str, name: str, on: tuple[str, ...], gpus: int, reason: str) -> None:
    found_on, found_gpus, reasons = _suggest(source, name)
    assert (found_on, found_gpus) == (on, gpus)
    assert any(reason in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("options", "on"),
    [
        ({"gpu_modules": ("mykernels",)}, ("a100", "h100", "b200", "mi300x", "pvc")),
        ({"default_on": "gpu"}, ("a100", "h100", "b200", "mi300x", "pvc")),
    ],
    ids=["gpu-module", "default-gpu"],
)
def test_options_move_the_default(options: dict, on: tuple[str, ...]) -> None:
    assert _suggest("from mykernels import op\n", **options)[0] == on


CALL = 'register(on=("h100",), est_time=60)'


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            '"""Doc."""\nfrom __future__ import annotations\n\nimport torch\n\ndef test_a():\n    pass\n',
            '"""Doc."""\nfrom __future__ import annotations\n\nimport torch\n\nfrom gpumatrix import register\n\n'
            f"{CALL}\n\ndef test_a():\n    pass\n",
        ),
        (
            "import torch\ntry:\n    import x\nexcept ImportError:\n    pass\nfrom y import z\nDEVICE = 1\n",
            "import torch\ntry:\n    import x\nexcept ImportError:\n    pass\nfrom y import z\n\n"
            f"from gpumatrix import register\n\n{CALL}\n\nDEVICE = 1\n",
        ),
        (
            "# Copyright\n# License\n\ndef test_a():\n    pass\n",
            f"# Copyright\n# License\n\nfrom gpumatrix import register\n\n{CALL}\n\ndef test_a():\n    pass\n",
        ),
        ("def test_a():\n    pass", f"from gpumatrix import register\n\n{CALL}\n\ndef test_a():\n    pass"),
        (
            '"""Doc."""\r\nimport os\r\n',
            f'"""Doc."""\r\nimport os\r\n\r\nfrom gpumatrix import register\r\n\r\n{CALL}\r\n',
        ),
        ('"""Doc."""', f'"""Doc."""\n\nfrom gpumatrix import register\n\n{CALL}\n'),
    ],
    ids=["docstring-future-imports", "import-blocks", "licence-comments", "code-first", "crlf", "no-newline"],
)
def test_insert_adds_lines_and_changes_none(before: str, after: str) -> None:
    assert insert_registration(before, ast.parse(before), CALL) == after


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in {"ci/matrix.yaml": MATRIX_YAML, **files}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(text.encode("utf-8"))
    return root


def test_suggest_prints_a_diff_and_writes_nothing_then_write_registers(tmp_path: Path) -> None:
    gpu = "import torch\n\ndef test_a():\n    torch.ones(1).cuda()\n"
    _tree(
        tmp_path,
        {
            "test/test_gpu.py": gpu,
            "test/test_done.py": registered(("cpu",)),
            "test/test_broken.py": "def test(:\n",
        },
    )
    shown = CliRunner().invoke(main, ["register", "--suggest", "--root", str(tmp_path)])
    assert shown.exit_code == 1, shown.output  # the file that does not parse
    assert '+register(on=("a100", "h100", "b200", "mi300x"), est_time=60)' in shown.output
    assert "test/test_broken.py:1: no suggestion" in shown.output
    assert "test_done.py" not in shown.output
    assert (tmp_path / "test/test_gpu.py").read_text() == gpu

    written = CliRunner().invoke(
        main,
        ["register", "--suggest", "--write", "--root", str(tmp_path), str(tmp_path / "test/test_gpu.py")],
    )
    assert written.exit_code == 0, written.output
    assert "1 file(s) registered" in written.output
    assert (tmp_path / "test/test_gpu.py").read_text() == (
        'import torch\n\nfrom gpumatrix import register\n\nregister(on=("a100", "h100", "b200", "mi300x"), '
        "est_time=60)\n\ndef test_a():\n    torch.ones(1).cuda()\n"
    )
    again = CliRunner().invoke(
        main, ["register", "--suggest", "--root", str(tmp_path), str(tmp_path / "test/test_gpu.py")]
    )
    assert "0 file(s) to register" in again.output


def test_a_gpu_of_no_declared_class_is_a_problem() -> None:
    matrix = parse_matrix(
        "classes:\n  cpu: {compute_capability: []}\n  h100: {compute_capability: ['9.0']}\n"
        "runners:\n  - {label: cpu, class: cpu, gpus: 0, runs_on: [u], timeout_minutes: 9}\n"
        "  - {label: h, class: h100, gpus: 1, runs_on: [h], timeout_minutes: 9}\n"
    )
    from gpumatrix import UsageError

    evidence = find_evidence(ast.parse("import torch\nx = torch.version.hip\n"), "test/test_x.py")
    with pytest.raises(UsageError, match=r"needs a GPU \(amd\), and ci/matrix.yaml declares no such class"):
        suggest_registration(evidence, matrix, SuggestOptions())


_UTILS = """import pytest
import torch

device = "cuda"


def supports_bfloat16():
    if device == "cuda":
        return torch.cuda.get_device_capability() >= (8, 0)
    return True


requires_sm90 = pytest.mark.skipif(torch.cuda.get_device_capability() < (9, 0), reason="Hopper")


def set_seed(seed):
    return seed
"""
_PARAMS = """import pytest
import torch

from test.utils import set_seed, supports_bfloat16


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, pytest.param(torch.bfloat16, marks=pytest.mark.skipif(not supports_bfloat16(), reason="bf16"))],
)
def test_dtypes(dtype):
    set_seed(0)


def test_plain():
    set_seed(1)
"""
_MARKED = """from .utils import requires_sm90

pytestmark = [requires_sm90]


def test_wgmma():
    pass
"""
_NEITHER = """from os.path import join

from ...outside import helper
from .utils import set_seed


def test_join():
    assert join("a", "b") == "a/b"
    set_seed(helper)
"""


@pytest.mark.parametrize(
    ("path", "on", "reason"),
    [
        (
            "test/test_params.py",
            ("cpu", "a100", "h100", "b200", "mi300x"),
            "line 9: uses supports_bfloat16 (test/utils.py:9: checks the compute capability against 8.0 "
            "(at least that))",
        ),
        ("test/test_marked.py", ("h100", "b200"), "line 3: uses requires_sm90 (test/utils.py:13: checks the"),
        ("test/test_neither.py", ("cpu",), "no sign of a GPU: the default, cpu"),
    ],
    ids=["param-marks-in-one-test", "pytestmark-list-of-an-imported-mark", "no-helper-sign"],
)
def test_signs_in_helpers_of_the_trees_own_modules_count_where_they_are_used(
    path: str, on: tuple[str, ...], reason: str, tmp_path: Path
) -> None:
    root = _tree(
        tmp_path / "repo",
        {
            "test/__init__.py": "",
            "test/utils.py": _UTILS,
            "test/test_params.py": _PARAMS,
            "test/test_marked.py": _MARKED,
            "test/test_neither.py": _NEITHER,
        },
    )
    # beside the tree, not in it: a relative import that climbs out is not followed
    (tmp_path / "outside.py").write_text("import torch\nhelper = torch.cuda.is_available()\n")
    result = suggest_tree(root, SuggestOptions(), only=(root / path,))
    assert result.problems == ()
    (suggestion,) = result.suggestions
    assert suggestion.on == on
    assert any(line.startswith(reason) for line in suggestion.reasons), suggestion.reasons
