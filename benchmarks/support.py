"""What the routines share besides the timer: the repository root, a routine's own command line (for the
routines that start copies of themselves), and the test helpers a few routines drive.

The helpers under ``tests/support`` import one another by bare name (pytest puts that directory on its
``pythonpath``). ``import_test_support`` loads them under those same names, from their files, without
putting anything on ``sys.path``: inside a pytest run it returns the module pytest already imported, so a
test and the routine it drives share one copy.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["REPO_ROOT", "TEST_SUPPORT", "import_test_support", "routine_command"]

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_SUPPORT = REPO_ROOT / "tests" / "support"


def routine_command(name: str, *args: str) -> list[str]:
    """The argv that runs routine ``name`` in a fresh interpreter; run it with ``cwd=REPO_ROOT``."""
    return [sys.executable, "-m", "benchmarks", name, *args]


def import_test_support(*names: str) -> ModuleType:
    """Import the ``tests/support`` modules ``names`` in order (a module's bare-name imports of its
    siblings must come before it) and return the last."""
    if not names:
        raise TypeError("import_test_support() needs at least one module name")
    modules = [sys.modules.get(name) or _load(name) for name in names]
    return modules[-1]


def _load(name: str) -> ModuleType:
    spec = importlib.machinery.PathFinder.find_spec(name, [str(TEST_SUPPORT)])
    if spec is None or spec.loader is None:
        raise ImportError(f"no module {name!r} under {TEST_SUPPORT}", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
