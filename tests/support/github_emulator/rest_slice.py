"""Regenerate tests/fixtures/github/rest-api.slice.openapi.json from GitHub's published REST description.

    python tests/support/github_emulator/rest_slice.py            # npm pack @octokit/openapi@<SOURCE.md version>
    python tests/support/github_emulator/rest_slice.py --package octokit-openapi-23.0.2.tgz
    python tests/support/github_emulator/rest_slice.py --check    # exit 1 when the file would change

The slice is `generated/api.github.com.json` of the `@octokit/openapi` npm package, at the version SOURCE.md
records, cut to `OPERATIONS` (whole path items' shared keys, only the listed methods) with every component
those operations reference, transitively. Nothing is edited by hand: the emulator's readings of the document
(`normalize_description` in spec.py) are applied in memory when it is loaded. The package is fetched with the
npm client (`npm pack`), the only part that needs the network; the cut itself is `cut_description`, a pure
function the tests run on the committed slice.

Standard library only, and no relative imports, so the file also runs as a plain script.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["OPERATIONS", "PACKAGE", "SLICE_TITLE", "cut_description", "dump_slice", "recorded_version"]

PACKAGE = "@octokit/openapi"
MEMBER = "package/generated/api.github.com.json"
SLICE_TITLE = "GitHub's official OpenAPI spec + Octokit extension (slice used by the rerun-test bot)"
FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "github"
SLICE_PATH = FIXTURES_DIR / "rest-api.slice.openapi.json"
SOURCE_PATH = FIXTURES_DIR / "SOURCE.md"

# Every operation the bot calls or the emulator serves, by operationId.
OPERATIONS = (
    # workflows, runs, jobs, artifacts
    "actions/list-repo-workflows",
    "actions/get-workflow",
    "actions/create-workflow-dispatch",
    "actions/list-workflow-runs",
    "actions/list-workflow-runs-for-repo",  # also by head_sha: the CI-states summary
    "actions/get-workflow-run",
    "actions/cancel-workflow-run",
    "actions/re-run-workflow-failed-jobs",
    "actions/list-jobs-for-workflow-run",
    "actions/list-workflow-run-artifacts",  # the runner's JSON report, for a check run's summary
    "actions/download-artifact",
    # issues and comments
    "issues/list-comments",
    "issues/create-comment",
    "issues/get-comment",
    "issues/update-comment",
    "issues/delete-comment",  # a duplicate CI-states comment two first syncs created at once
    "reactions/create-for-issue-comment",
    # pull requests, people, contents
    "pulls/get",
    "pulls/list-files",
    "repos/get-collaborator-permission-level",
    "orgs/check-membership-for-user",
    "repos/get-content",
    # checks and statuses
    "checks/create",
    "checks/update",
    "checks/list-for-ref",
    "repos/create-commit-status",
)

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
_VERSION_RE = re.compile(r"`@octokit/openapi` (\d+\.\d+\.\d+)")


def cut_description(
    full: Mapping[str, Any], operations: Iterable[str], *, title: str = SLICE_TITLE
) -> dict[str, Any]:
    """The part of `full` (an OpenAPI document) that `operations` need; raises when one is missing."""
    wanted = set(operations)
    paths: dict[str, Any] = {}
    for template, item in full["paths"].items():
        kept = {m: op for m, op in item.items() if m in _METHODS and op.get("operationId") in wanted}
        if kept:
            shared = {key: value for key, value in item.items() if key not in _METHODS}
            paths[template] = {**shared, **kept}
    found = {op["operationId"] for item in paths.values() for m, op in item.items() if m in _METHODS}
    if found != wanted:
        raise ValueError(f"operations: not in the description: {', '.join(sorted(wanted - found))}")

    components: dict[str, dict[str, Any]] = {}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/"):
                _, _, kind, name = ref.split("/", 3)
                if name not in components.setdefault(kind, {}):
                    components[kind][name] = full["components"][kind][name]
                    visit(components[kind][name])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(paths)
    return {
        "components": components,
        "info": {**full["info"], "title": title},
        "openapi": full["openapi"],
        "paths": paths,
        "servers": full["servers"],
    }


def dump_slice(document: Mapping[str, Any]) -> str:
    """The file's text: sorted keys, one-space indent, ASCII (the committed slice's format)."""
    return json.dumps(document, indent=1, sort_keys=True)


def recorded_version(source_md: Path = SOURCE_PATH) -> str:
    """The `@octokit/openapi` version SOURCE.md records for the slice."""
    found = _VERSION_RE.search(source_md.read_text(encoding="utf-8"))
    if found is None:
        raise ValueError(f"source_md: {source_md} records no `@octokit/openapi` version")
    return found.group(1)


def _read_package(tarball: Path) -> dict[str, Any]:
    with tarfile.open(tarball, "r:gz") as archive:
        member = archive.extractfile(MEMBER)
        if member is None:
            raise ValueError(f"package: {tarball} has no {MEMBER}")
        return json.load(member)


def _npm_pack(version: str, directory: Path) -> Path:
    done = subprocess.run(
        ["npm", "pack", "--silent", f"{PACKAGE}@{version}"],
        cwd=directory,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"npm pack {PACKAGE}@{version} failed:\n{done.stderr}")
    return directory / done.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--package", type=Path, help="a downloaded @octokit/openapi .tgz (default: npm pack it)"
    )
    parser.add_argument(
        "--check", action="store_true", help="compare with the committed slice; write nothing"
    )
    args = parser.parse_args(argv)

    version = recorded_version()
    with tempfile.TemporaryDirectory(prefix="octokit-openapi-") as tmp:
        tarball = args.package or _npm_pack(version, Path(tmp))
        full = _read_package(tarball)
    if full["info"]["version"] != version:
        raise SystemExit(f"the package is {PACKAGE} {full['info']['version']}; SOURCE.md records {version}")
    text = dump_slice(cut_description(full, OPERATIONS))
    if args.check:
        same = SLICE_PATH.read_text(encoding="utf-8") == text
        print(
            f"{SLICE_PATH.name}: {'up to date' if same else 'differs from a fresh cut'} ({PACKAGE} {version})"
        )
        return 0 if same else 1
    SLICE_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SLICE_PATH} ({len(OPERATIONS)} operations, {PACKAGE} {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
