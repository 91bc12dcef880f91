"""ci/paths.yaml: validated like ci/matrix.yaml (every problem at once, with its line), and in step with the
witness names mxfuse emits."""

from __future__ import annotations

import pytest
from repo_paths import REPO_ROOT

from gpumatrix import UsageError, register
from gpumatrix.config import load_matrix, parse_matrix
from gpumatrix.coverage.paths import PathsError, load_paths, parse_paths
from gpumatrix.registry.discovery import load_tree
from mxfuse import witness

register(on=("cpu",), est_time=2)

MATRIX = parse_matrix(
    """\
classes:
  cpu: {compute_capability: []}
  h100: {compute_capability: ["9.0"]}
  b200: {compute_capability: ["10.0"]}
  gb300: {compute_capability: ["10.3"]}
  "5090": {compute_capability: ["12.0"]}
runners:
  - {label: cpu, class: cpu, gpus: 0, runs_on: [x], timeout_minutes: 30}
  - {label: 1-gpu-h100, class: h100, gpus: 1, runs_on: [x], timeout_minutes: 30}
  - {label: 4-gpu-b200, class: b200, gpus: 4, runs_on: [x], timeout_minutes: 30}
  - {label: 4-gpu-gb300, class: gb300, gpus: 4, runs_on: [x], timeout_minutes: 30}
"""
)


def _repository_paths():
    return load_paths(REPO_ROOT / "ci" / "paths.yaml", load_matrix(REPO_ROOT / "ci" / "matrix.yaml"))


def test_the_repository_declares_exactly_the_witness_names_mxfuse_emits():
    # Both ways: a PATHS entry missing here could never be required anywhere, and a name here that mxfuse
    # cannot emit (emit() refuses names outside PATHS) would be a requirement no test can ever meet.
    assert set(_repository_paths().paths) == set(witness.PATHS)


# (path, classes it must be exercised on): the registrations of the tests about each path decide these
# (the kernel tests are registered for h100, b200, gb300 and 5090; DeepGEMM's for b200 and gb300;
# FlashInfer's for b200, gb300 and 5090; the Gluon backend's kernel tests run on h100; the references and the fallback run in the CPU suite).
GPU = ("h100", "b200", "gb300", "5090")
REQUIRED = [
    ("hc.boundary.kernel.pair", GPU),
    ("hc.boundary.kernel.bf16", GPU),
    ("hc.boundary.reference", ("cpu",)),
    ("hc.boundary.unfused", GPU),
    ("gemm.torch", ("cpu", *GPU)),
    ("gemm.triton", GPU),
    ("gemm.gluon", ("h100",)),
    ("gemm.deepgemm", ("b200", "gb300")),
    ("gemm.flashinfer", ("b200", "gb300", "5090")),
    ("linear.pair_consumed", ("cpu", *GPU)),
    ("linear.self_quantized", ("cpu", *GPU)),
    ("linear.bf16", ("cpu", *GPU)),
    ("linear.pair_fallback", ("cpu",)),
    ("linear.rebind", ("cpu", *GPU)),
    ("einsum.wo_a.kernel.pair", GPU),
    ("einsum.wo_a.kernel.bf16", GPU),
    ("einsum.wo_a.reference", ("cpu",)),
    ("norm.kernel.pair", GPU),
    ("norm.kernel.bf16", GPU),
    ("norm.reference", ("cpu",)),
    ("tp.all_reduce", ("cpu", "h100", "b200", "gb300")),  # gloo on CPU; the 2-GPU test's classes
]


@pytest.mark.parametrize(("path", "classes"), REQUIRED, ids=[r[0] for r in REQUIRED])
def test_repository_requirements(path, classes):
    assert set(_repository_paths().paths[path].required_on) == set(classes)


def test_every_required_class_has_a_registered_test_file():
    """A class a path is required on runs some registered test file, or the path could never be met there."""
    _, registry = load_tree(REPO_ROOT)
    registered = {name for f in registry.files for name in f.on}
    required = {name for d in _repository_paths().paths.values() for name in d.required_on}
    assert required <= registered


def test_a_valid_file_loads_into_frozen_declarations():
    catalog = parse_paths(
        "paths:\n"
        "  gemm.deepgemm:\n"
        "    required_on: [b200, gb300]\n"
        "    description: DeepGEMM\n"
        "  linear.rebind:\n"
        "    required_on: []\n"
        "    why: no class can promise it\n",
        MATRIX,
    )
    assert list(catalog.paths) == ["gemm.deepgemm", "linear.rebind"]
    deepgemm = catalog.paths["gemm.deepgemm"]
    assert (deepgemm.required_on, deepgemm.line, deepgemm.description) == (("b200", "gb300"), 2, "DeepGEMM")
    assert catalog.required("gemm.deepgemm", "b200") and not catalog.required("gemm.deepgemm", "h100")
    assert not catalog.required("linear.rebind", "cpu") and not catalog.required("gemm.nope", "b200")
    assert catalog.declares("linear.rebind") and not catalog.declares("gemm.nope")


BAD = """\
paths:
  gemm.triton:
    required_on: [h100, h900, h100]
  Gemm.Torch:
    required_on: [cpu]
  gemm.flashinfer:
    required_on: ["5090"]
  linear.rebind:
    required_on: []
  hc.boundary.kernel.pair:
    runs_on: [h100]
  einsum.wo_a:
    required_on: h100
    colour: blue
  gemm.triton:
    required_on: [cpu]
"""


def test_every_problem_is_reported_at_once_with_its_line():
    with pytest.raises(PathsError) as caught:
        parse_paths(BAD, MATRIX, source="ci/paths.yaml")
    found = [(p.line, p.message) for p in caught.value.problems]
    assert found == [
        (
            3,
            "path 'gemm.triton' required_on names unknown class 'h900' (known: cpu, h100, b200, gb300, 5090)",
        ),
        (3, "path 'gemm.triton' required_on names class 'h100' twice"),
        (
            4,
            "path 'Gemm.Torch': a path name is dotted lower-case words (letters, digits, '_'), such as "
            "'gemm.triton', of at most 100 characters",
        ),
        (
            7,
            "path 'gemm.flashinfer' required_on names class '5090', which no runner of ci/matrix.yaml "
            "serves: it could never be exercised there",
        ),
        (
            9,
            "path 'linear.rebind' is required on no class: say why in 'why', or name the classes it must "
            "run on",
        ),
        (
            11,
            "unknown key 'runs_on' in path 'hc.boundary.kernel.pair' (expected one of: required_on, "
            "description, why)",
        ),
        (11, "path 'hc.boundary.kernel.pair' needs 'required_on' (a list of classes; [] with a 'why')"),
        (13, "path 'einsum.wo_a' required_on must be a list of class names"),
        (
            14,
            "unknown key 'colour' in path 'einsum.wo_a' (expected one of: required_on, description, why)",
        ),
        (15, "duplicate key 'gemm.triton' in paths"),
    ]
    assert str(caught.value).startswith("invalid path declarations (10 problem(s)):\n  ci/paths.yaml:3: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the path declarations are empty (expected 'paths')"),
        ("paths: {}\n", "paths must declare at least one path"),
        ("classes: []\n", "unknown key 'classes' in the path declarations (expected one of: paths)"),
        ("paths: [a, b]\n", "paths must be a mapping"),
        ("paths: {gemm.x: {required_on: [cpu]\n", "not valid YAML"),
        ("[" * 40 + "]" * 40, "nested more than 32 levels deep; path declarations need three"),
        ("paths:\n  gemm.x:\n    required_on: [yes]\n", "must be a string, got the boolean yes; quote it"),
    ],
    ids=["empty", "no paths", "unknown top key", "not a mapping", "bad yaml", "deep", "boolean class"],
)
def test_malformed_files(text, message):
    with pytest.raises(PathsError) as caught:
        parse_paths(text, MATRIX)
    assert any(message in p.message for p in caught.value.problems), caught.value.problems
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"paths:\n  gemm.x:\n    why: \xff\n", "ci/paths.yaml:3: not UTF-8 text (byte 0xff)"),
        (None, "cannot read"),
    ],
    ids=["not utf-8", "missing"],
)
def test_unreadable_files(tmp_path, data, message):
    path = tmp_path / "ci" / "paths.yaml"
    if data is not None:
        path.parent.mkdir()
        path.write_bytes(data)
    with pytest.raises(PathsError) as caught:
        load_paths(path, MATRIX)
    assert message.replace("ci/paths.yaml", str(path)) in str(caught.value)
