"""The architecture of both packages, read from their source with ``ast`` (tests/support/architecture.py):

* no import cycle among a package's modules: imports inside functions and under ``TYPE_CHECKING`` count,
  and so do the package ``__init__``s an import runs;
* no module imports another module's private (underscore) name;
* no public function or method takes more than 12 parameters (``@triton.jit`` device code, whose
  parameters are the kernel's launch ABI, is exempt; its host launchers are not);
* mxfuse's imports run one way: formats <- kernels <- (hc, gemm, attention, einsum, norm) <- layers <-
  models, with the root's errors, ``witness`` and ``memory`` leaves every floor may import.

Each check is also run on a small tree built to break it, so that none of them passes vacuously.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from architecture import (
    Package,
    import_cycles,
    long_signatures,
    private_imports,
    read_package,
    upward_imports,
)

import gpumatrix
import mxfuse
from gpumatrix import register

register(on=("cpu",), est_time=4)

SOURCES = {
    name: Path(module.__file__).resolve().parent
    for name, module in (("mxfuse", mxfuse), ("gpumatrix", gpumatrix))
}
MAX_PARAMETERS = 12
# Modules each package must hold, so that a rule is never checked on a tree read short.
LANDMARKS = {
    "mxfuse": {"mxfuse", "mxfuse.formats", "mxfuse.layers.mx_linear", "mxfuse.kernels.gemm"},
    "gpumatrix": {"gpumatrix", "gpumatrix.cli", "gpumatrix.plugin", "gpumatrix.bot", "gpumatrix.bot.state"},
}
# The floors of mxfuse's top-level modules and packages ("" is mxfuse/__init__.py): a module may import
# its own floor and the ones below.
FLOORS = {
    "": 0,
    "witness": 0,
    "memory": 0,
    "formats": 1,
    "kernels": 2,
    "hc": 3,
    "gemm": 3,
    "attention": 3,
    "einsum": 3,
    "norm": 3,
    "layers": 4,
    "models": 5,
}


@pytest.fixture(scope="module", params=sorted(SOURCES))
def package(request: pytest.FixtureRequest) -> Package:
    return read_package(SOURCES[request.param])


def _report(findings) -> str:
    return "\n".join(str(f) for f in findings)


def test_the_whole_package_is_read(package: Package) -> None:
    assert LANDMARKS[package.name] <= set(package.modules)
    assert len(package.modules) > 40


def test_no_import_cycles(package: Package) -> None:
    findings = import_cycles(package)
    assert not findings, "import cycles (imports inside functions count):\n" + _report(findings)


def test_no_module_imports_another_modules_private_names(package: Package) -> None:
    findings = private_imports(package)
    assert not findings, "private names used across modules (give them a public home):\n" + _report(findings)


def test_no_public_function_takes_more_than_12_parameters(package: Package) -> None:
    findings = long_signatures(package, limit=MAX_PARAMETERS)
    assert not findings, "public functions over 12 parameters (group what travels together):\n" + _report(
        findings
    )


def test_mxfuse_imports_run_one_way() -> None:
    findings = upward_imports(read_package(SOURCES["mxfuse"]), FLOORS)
    assert not findings, _report(findings)


# ---------------------------------------------------------------------------------------------
# Each check on a tree that breaks it.


def _tree(tmp_path: Path, files: dict[str, str]):
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for directory in [tmp_path / "pkg", *(p for p in (tmp_path / "pkg").rglob("*") if p.is_dir())]:
        (directory / "__init__.py").touch()
    return read_package(tmp_path / "pkg")


CYCLES = [
    ("top-level", {"a.py": "import pkg.b\n", "b.py": "from pkg import a\n"}, ["pkg.a", "pkg.b"]),
    (
        "inside a function, three modules",
        {
            "a.py": "def f():\n    from pkg.b import g\n",
            "b.py": "from pkg.c import h\ng = 1\n",
            "c.py": "from pkg.a import f\nh = 2\n",
        },
        ["pkg.a", "pkg.b", "pkg.c"],
    ),
    (
        "a package init and its module",
        {"sub/__init__.py": "from pkg.sub.x import y\n", "sub/x.py": "from pkg.sub import z\ny = 1\n"},
        ["pkg.sub", "pkg.sub.x"],
    ),
    ("relative", {"a.py": "from . import b\n", "b.py": "from .a import x\n"}, ["pkg.a", "pkg.b"]),
    (
        "under TYPE_CHECKING",
        {
            "a.py": "from .b import x\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\nx = 1\n",
        },
        ["pkg.a", "pkg.b"],
    ),
    (
        "through the package __init__ an import runs",
        {
            "sub/__init__.py": "from pkg.sub.c import z\n",
            "sub/c.py": "from pkg.a import y\nz = 1\n",
            "a.py": "from pkg.sub.d import x\ny = 1\n",
            "sub/d.py": "x = 1\n",
        },
        ["pkg.a", "pkg.sub", "pkg.sub.c"],
    ),
]


@pytest.mark.parametrize(("name", "files", "members"), CYCLES, ids=[c[0] for c in CYCLES])
def test_a_cycle_is_found(tmp_path, name, files, members):
    findings = import_cycles(_tree(tmp_path, files))
    assert len(findings) == 1 and f"[all of: {', '.join(members)}]" in findings[0].message


def test_a_package_re_exporting_its_own_modules_is_no_cycle(tmp_path):
    tree = _tree(tmp_path, {"sub/__init__.py": "from .c import z\n", "sub/c.py": "z = 1\n"})
    assert import_cycles(tree) == []


def test_a_one_way_chain_has_no_cycle(tmp_path):
    tree = _tree(tmp_path, {"a.py": "import pkg.b\n", "b.py": "def f():\n    import pkg.c\n", "c.py": ""})
    assert import_cycles(tree) == []


PRIVATE = [
    ("from a module", {"a.py": "_x = 1\n", "b.py": "from pkg.a import _x\n"}, "pkg.b"),
    ("a private module", {"sub/_a.py": "x = 1\n", "b.py": "from pkg.sub._a import x\n"}, "pkg.b"),
    ("inside a function", {"a.py": "_x = 1\n", "b.py": "def f():\n    from pkg.a import _x\n"}, "pkg.b"),
    ("an attribute", {"a.py": "_x = 1\n", "b.py": "from pkg import a\ny = a._x\n"}, "pkg.b"),
    ("an aliased module", {"a.py": "_x = 1\n", "b.py": "import pkg.a as m\ny = m._x\n"}, "pkg.b"),
]


@pytest.mark.parametrize(("name", "files", "module"), PRIVATE, ids=[c[0] for c in PRIVATE])
def test_a_private_import_is_found(tmp_path, name, files, module):
    findings = private_imports(_tree(tmp_path, files))
    assert [f.module for f in findings] == [module]


def test_a_package_may_use_its_own_private_modules(tmp_path):
    tree = _tree(
        tmp_path,
        {
            "sub/__init__.py": "from pkg.sub._x import y\n",
            "sub/_x.py": "y = 1\n",
            "sub/z.py": "from pkg.sub._x import y\n",
        },
    )
    assert private_imports(tree) == []


def test_a_private_module_from_outside_its_package_is_found(tmp_path):
    tree = _tree(tmp_path, {"sub/_m.py": "x = 1\n", "a.py": "import pkg.sub._m\n"})
    assert [f.module for f in private_imports(tree)] == ["pkg.a"]


def test_a_dunder_is_not_private(tmp_path):
    tree = _tree(tmp_path, {"__init__.py": "__version__ = '1'\n", "a.py": "from pkg import __version__\n"})
    assert private_imports(tree) == []


SIGNATURES = [
    ("function", "def f(a, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n", ["f takes 13"]),
    ("keyword-only", "def f(a, *, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n", ["f takes 13"]),
    ("varargs", "def f(a, b, c, d, e, f, g, h, i, j, k, *args, **kwargs):\n    pass\n", ["f takes 13"]),
    (
        "method",
        "class C:\n    def m(self, a, b, c, d, e, f, g, h, i, j, k, l, n):\n        pass\n",
        ["C.m takes 13"],
    ),
    (
        "a class's __init__",
        "class C:\n    def __init__(self, a, b, c, d, e, f, g, h, i, j, k, l, n):\n        pass\n",
        ["C.__init__ takes 13"],
    ),
    (
        "a private class",
        "class _C:\n    def m(self, a, b, c, d, e, f, g, h, i, j, k, l, n):\n        pass\n",
        [],
    ),
    ("at the limit", "def f(a, b, c, d, e, f, g, h, i, j, k, l):\n    pass\n", []),
    ("private", "def _f(a, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n", []),
    ("device code", "@triton.jit\ndef k(a, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n", []),
    (
        "device code, options",
        "@triton.jit(do_not_specialize=['a'])\ndef k(a, b, c, d, e, f, g, h, i, j, k, l, m):\n    pass\n",
        [],
    ),
]


@pytest.mark.parametrize(("name", "text", "want"), SIGNATURES, ids=[c[0] for c in SIGNATURES])
def test_long_signatures(tmp_path, name, text, want):
    findings = long_signatures(_tree(tmp_path, {"a.py": text}), limit=12)
    assert [f.message.split(" parameters")[0] for f in findings] == want


def test_an_upward_import_is_found(tmp_path):
    tree = _tree(tmp_path, {"low/a.py": "from pkg.high.b import x\n", "high/b.py": "x = 1\n"})
    findings = upward_imports(tree, {"": 0, "low": 1, "high": 2})
    assert [(f.module, f.line) for f in findings] == [("pkg.low.a", 1)]
    assert upward_imports(tree, {"": 0, "low": 2, "high": 1}) == []


def test_a_module_on_no_floor_is_found(tmp_path):
    tree = _tree(tmp_path, {"a.py": ""})
    assert [f.module for f in upward_imports(tree, {"": 0})] == ["pkg.a"]
