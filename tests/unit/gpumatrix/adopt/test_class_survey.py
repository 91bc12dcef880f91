"""`gpumatrix init`'s survey of a tree: the classes and GPU counts its test files need, and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpumatrix import register
from gpumatrix.adopt.class_survey import FileNeed, choose_classes, file_need
from gpumatrix.adopt.evidence import Evidence, Sign
from gpumatrix.adopt.init import InitOptions, plan_init, survey_repository
from gpumatrix.config import parse_matrix

register(on=("cpu",), est_time=10)

CUDA = frozenset({"nvidia", "amd"})


def _need(path: str, vendors=CUDA, capability=None, gpus: int = 1) -> FileNeed:
    return FileNeed(path, frozenset(vendors), capability, gpus)


# (id, needs, start, classes, counts, reasons)
CHOICES = [
    (
        "any-gpu-and-blackwell",
        [
            _need("a"),
            _need("b"),
            _need("c"),
            _need("d", {"nvidia"}, (10, 0)),
            _need("e", {"nvidia"}, (10, 0)),
        ],
        (),
        ("h100", "b200"),
        {"h100": (1,), "b200": (1,)},
        [
            "3 files use CUDA (any NVIDIA GPU) -> h100",
            "2 files skip unless compute capability >= 10.0 -> b200",
        ],
    ),
    (
        "one-file-of-each",
        [_need("a", {"nvidia"}, (12, 0)), _need("b", {"intel"}), _need("c", {"amd"})],
        (),
        ("5090", "mi300x", "pvc"),
        {"5090": (1,), "mi300x": (1,), "pvc": (1,)},
        [
            "1 file uses xpu (Intel only) -> pvc",
            "1 file uses ROCm (AMD only) -> mi300x",
            "1 file skips unless compute capability >= 12.0 -> 5090",
        ],
    ),
    (
        "hopper-serves-ampere-and-any",
        [_need("a", {"nvidia"}, (8, 0)), _need("b", {"nvidia"}, (9, 0)), _need("c")],
        (),
        ("h100",),
        {"h100": (1,)},
        [
            "1 file uses CUDA (any NVIDIA GPU); 1 file skips unless compute capability >= 8.0; "
            "1 file skips unless compute capability >= 9.0 -> h100"
        ],
    ),
    (
        "eight-gpus",
        [_need("a"), _need("b", gpus=8), _need("c", gpus=8), _need("d", {"nvidia"}, (10, 3), gpus=2)],
        (),
        ("h100", "gb300"),
        {"h100": (1, 8), "gb300": (1, 2, 8)},
        [
            "3 files use CUDA (any NVIDIA GPU) -> h100",
            "1 file skips unless compute capability >= 10.3 -> gb300",
            "1 file needs 2 GPUs -> runners of 2 x gb300",
            "2 files need 8 GPUs -> runners of 8 x h100, gb300",
        ],
    ),
    (
        "workflow-classes-first",
        [_need("a"), _need("b", {"nvidia"}, (9, 0))],
        ("b200",),
        ("b200",),
        {"b200": (1,)},
        [],
    ),
    (
        "nothing-known-fits",
        [_need("a", {"nvidia"}, (13, 0))],
        (),
        (),
        {},
        ["a: no known class can run it (skip unless compute capability >= 13.0)"],
    ),
    ("no-gpu-file", [], (), (), {}, []),
]


@pytest.mark.parametrize(
    ("needs", "start", "classes", "counts", "reasons"), [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES]
)
def test_choose_classes(needs, start, classes, counts, reasons) -> None:
    choice = choose_classes(needs, start=start)
    assert choice.classes == classes
    assert dict(choice.gpus) == counts
    assert list(choice.reasons) == reasons


def test_file_need_takes_the_union_of_vendors_the_highest_capability_and_most_gpus() -> None:
    evidence = Evidence(
        (
            Sign(3, "cuda", CUDA),
            Sign(5, "cap", frozenset({"nvidia"}), (9, 0), in_test="test_a"),
            Sign(7, "cap", frozenset({"nvidia"}), (10, 0), in_test="test_b"),
            Sign(9, "count", gpus=2, in_test="test_b"),
        ),
        ("test_a", "test_b"),
    )
    assert file_need("t.py", evidence) == FileNeed("t.py", CUDA, (10, 0), 2)
    assert file_need("t.py", Evidence((), ("test_a",))) is None


_SM100 = """
import pytest, torch

@pytest.mark.skipif(torch.cuda.get_device_capability()[0] < 10, reason="Blackwell")
def test_gemm():
    pass
"""
_XPU = "import torch\n\ndef test_x():\n    torch.ones(1, device='xpu')\n"
_EIGHT = "import pytest, torch\npytestmark = pytest.mark.skipif(torch.cuda.device_count() < 8, reason='8')\n\ndef test_tp():\n    pass\n"
_CUDA = "import torch\n\ndef test_c():\n    torch.ones(1).cuda()\n"
_REGISTERED = (
    'from gpumatrix import register\nregister(on=("mi300x",), est_time=1)\n\ndef test_r():\n    pass\n'
)


def test_plain_init_declares_what_the_files_need_and_says_why(tmp_path: Path) -> None:
    files = {
        "tests/test_sm100_a.py": _SM100,
        "tests/test_sm100_b.py": _SM100,
        "tests/test_xpu.py": _XPU,
        "tests/test_tp.py": _EIGHT,
        "tests/test_c.py": _CUDA,
        "tests/test_registered.py": _REGISTERED,
        "tests/test_broken.py": "def test_(:\n",  # left to --suggest, which says why
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    plan = plan_init(survey_repository(tmp_path), InitOptions())
    assert plan.classes == ("h100", "b200", "mi300x", "pvc")
    assert "classes: mi300x (named by registered test files)" in plan.reasons
    assert "test files: 2 files skip unless compute capability >= 10.0 -> b200" in plan.reasons
    assert "test files: 1 file uses xpu (Intel only) -> pvc" in plan.reasons
    # a device count names no vendor: every class can run the file, so every class gets 8 GPUs
    assert "test files: 1 file needs 8 GPUs -> runners of 8 x h100, b200, mi300x, pvc" in plan.reasons
    matrix = parse_matrix(plan.files[0].text or "")
    assert {(r.gpu_class, r.gpus) for r in matrix.runners} == {
        ("cpu", 0),
        ("h100", 1),
        ("h100", 8),
        ("b200", 1),
        ("b200", 8),
        ("mi300x", 1),
        ("mi300x", 8),
        ("pvc", 1),
        ("pvc", 8),
    }
    asked = plan_init(survey_repository(tmp_path), InitOptions(classes=("h100",), gpus=(1, 2)))
    assert asked.classes == ("h100",)  # --classes and --gpus override the survey
    assert {(r.gpu_class, r.gpus) for r in parse_matrix(asked.files[0].text or "").runners} == {
        ("cpu", 0),
        ("h100", 1),
        ("h100", 2),
    }
