"""The few pytest settings gpumatrix reads from a repository, without running pytest.

`gpumatrix check` compares the test files pytest would collect with those the registry sees, and
`gpumatrix init` proposes test roots from them, so both need pytest's `testpaths`, `python_files` and
`norecursedirs`. They are read from the file pytest itself would take them from, in pytest's order:
`pytest.ini` (even without a `[pytest]` section), `pyproject.toml` (`[tool.pytest.ini_options]`, or
pytest 9's `[tool.pytest]`), `tox.ini` (`[pytest]`), `setup.cfg` (`[tool:pytest]`); the first that
has the section wins. A file that cannot be parsed is a `UsageError` naming it (exit 2).
"""

from __future__ import annotations

import configparser
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpumatrix import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT_NORECURSE", "DEFAULT_PYTHON_FILES", "PytestSettings", "read_pytest_settings"]

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
# pytest's own default for norecursedirs.
DEFAULT_NORECURSE = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")


@dataclass(frozen=True)
class PytestSettings:
    """What pytest collects by default: under `testpaths` (empty: the whole tree) the files matching
    `python_files`, not descending into `norecursedirs`. `source` names the file read (None: none)."""

    testpaths: tuple[str, ...] = ()
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    norecursedirs: tuple[str, ...] = DEFAULT_NORECURSE
    source: str | None = None


def read_pytest_settings(root: str | Path) -> PytestSettings:
    """The settings of the repository at `root`, from the file pytest would read them from."""
    root = Path(root)
    for name, reader in (
        ("pytest.ini", _ini_section("pytest", always=True)),
        ("pyproject.toml", _pyproject),
        ("tox.ini", _ini_section("pytest")),
        ("setup.cfg", _ini_section("tool:pytest")),
    ):
        path = root / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {path}: {exc}") from None
        options = reader(text, name)
        if options is not None:
            return _settings(options, name)
    return PytestSettings()


def _ini_section(section: str, *, always: bool = False):
    def read(text: str, name: str) -> Mapping[str, Any] | None:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text, source=name)
        except configparser.Error as exc:
            raise UsageError(f"{name}: cannot be parsed: {exc}") from None
        if parser.has_section(section):
            return dict(parser.items(section))
        return {} if always else None

    return read


def _pyproject(text: str, name: str) -> Mapping[str, Any] | None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{name}: cannot be parsed: {exc}") from None
    pytest_table = data.get("tool", {}).get("pytest")
    if not isinstance(pytest_table, dict):
        return None
    options = pytest_table.get("ini_options")
    return options if isinstance(options, dict) else pytest_table


def _settings(options: Mapping[str, Any], source: str) -> PytestSettings:
    def values(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = options.get(key)
        if value is None:
            return default
        if isinstance(value, str):  # an ini value: whitespace-separated
            return tuple(value.split())
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise UsageError(f"{source}: pytest's {key} must be a list of strings, got {value!r}")

    return PytestSettings(
        testpaths=tuple(path.rstrip("/") or "." for path in values("testpaths", ())),
        python_files=values("python_files", DEFAULT_PYTHON_FILES),
        norecursedirs=values("norecursedirs", DEFAULT_NORECURSE),
        source=source,
    )
