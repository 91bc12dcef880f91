"""Mutation testing (mutmut) of the modules whose logic the CPU tests must pin down: ``make mutation``.

Each group below is one module (or package) and the unit tests that cover it. mutmut mutates the lines of
the group's files that those tests execute (``mutate_only_covered_lines``: CUDA-only branches are the GPU
test files' to kill) one change at a time and runs, for every mutant, the tests of the group that execute
the mutated function; a mutant no test fails "survived". Groups run one after another, each in its own copy of the
tree under ``.mutation/<group>/`` (mutmut reads its configuration from the working directory's
pyproject.toml and keeps its results in ``mutants/`` there, so a re-run resumes). A group's tests are
its own: ``gpumatrix.compare`` is called by every kernel test, and mutating it against all of them
would cost hours.

The score of a group is (killed + timed out) / mutants: a timeout is a mutant that made a test hang,
which a run notices. Every survivor must be listed in docs/mutation.md under its group's heading
(``### `<group>```), its name after the module in backticks, with its reason; the run exits 1 when a
group scores under 95% or a survivor is not listed. A re-run tests the survivors of the run before again.

    python -m benchmarks mutation                     # every group (hours on a shared two-core machine)
    python -m benchmarks mutation --group mxfuse.einsum --max-children 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
DOC = ROOT / "docs" / "mutation.md"
MIN_SCORE = 0.95


@dataclass(frozen=True)
class Group:
    mutate: tuple[str, ...]  # files (globs) under src/ that mutmut changes
    tests: tuple[str, ...]  # the unit tests run against them


GROUPS: dict[str, Group] = {
    "mxfuse.formats": Group(
        ("src/mxfuse/formats/*",),
        (
            "tests/unit/mxfuse/formats/test_mxfp8_formats.py",
            "tests/unit/mxfuse/formats/test_mxfp8_layouts.py",
            "tests/unit/mxfuse/formats/test_mxtensor.py",
            "tests/unit/mxfuse/formats/test_input_checks.py",
        ),
    ),
    "mxfuse.gemm": Group(
        ("src/mxfuse/gemm/api.py", "src/mxfuse/gemm/weights.py", "src/mxfuse/gemm/torch_backend.py"),
        (
            "tests/unit/mxfuse/gemm/test_mxfp8_gemm_api.py",
            "tests/unit/mxfuse/gemm/test_mxfp8_gemm_backends.py",
            "tests/unit/mxfuse/gemm/test_mxfp8_gemm_operands.py",
            "tests/unit/mxfuse/formats/test_input_checks.py",
        ),
    ),
    "mxfuse.layers": Group(
        ("src/mxfuse/layers/*",),
        (
            "tests/unit/mxfuse/layers/test_mx_linear_cpu.py",
            "tests/unit/mxfuse/layers/test_mx_linear_gate.py",
            "tests/unit/mxfuse/layers/test_mx_linear_reload.py",
        ),
    ),
    "mxfuse.hc.reference": Group(
        ("src/mxfuse/hc/reference.py",),
        ("tests/unit/mxfuse/hc/test_hc_reference.py", "tests/unit/mxfuse/hc/test_hc_reference_math.py"),
    ),
    "mxfuse.einsum": Group(
        ("src/mxfuse/einsum.py", "src/mxfuse/kernels/grouped_wo_a/weight.py"),
        (
            "tests/unit/mxfuse/einsum/test_grouped_wo_a_reference.py",
            "tests/unit/mxfuse/formats/test_input_checks.py",
        ),
    ),
    "gpumatrix.compare": Group(
        ("src/gpumatrix/compare/*",),
        (
            "tests/unit/gpumatrix/compare/test_compare.py",
            "tests/unit/gpumatrix/compare/test_compare_properties.py",
        ),
    ),
}

# mutmut adds -x; xdist would fight its own forking.
PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "no:xdist", "-q")
# mutmut's time limit per mutant is multiplier x the covering tests' measured time + constant. Its
# defaults (15x + 1 s) leave little room for pytest's start in the forked child on a loaded two-core
# machine. A mutant that really loops still ends, and counts, as a timeout.
TIMEOUT_MULTIPLIER, TIMEOUT_CONSTANT = 30.0, 120.0


def mutmut_config(group: Group) -> str:
    """The ``[tool.mutmut]`` table of one group."""

    def array(items: tuple[str, ...]) -> str:
        return "[" + ", ".join(json.dumps(i) for i in items) + "]"

    return (
        "\n[tool.mutmut]\n"
        'source_paths = ["src/"]\n'
        f"only_mutate = {array(group.mutate)}\n"
        f"pytest_add_cli_args_test_selection = {array(group.tests)}\n"
        f"pytest_add_cli_args = {array(PYTEST_ARGS)}\n"
        # Only lines the group's tests execute: CUDA-only branches (the kernel launches, their witness
        # records) are the GPU test files' to kill, and a CPU run cannot reach them.
        "mutate_only_covered_lines = true\n"
        f"timeout_multiplier = {TIMEOUT_MULTIPLIER}\n"
        f"timeout_constant = {TIMEOUT_CONSTANT}\n"
    )


def _prepare(name: str, group: Group) -> Path:
    """A copy of src/, tests/ and pyproject.toml (with the group's table) under .mutation/<name>/."""
    here = WORK / name
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("src", "tests"):
        if (here / part).exists():
            shutil.rmtree(here / part)
        shutil.copytree(ROOT / part, here / part, ignore=ignore)
    # mutmut measures coverage on its copies in mutants/ and mutates a source again when the source is
    # newer than its copy. A copy it mutated before has its functions renamed and its lines moved: the
    # lines covered there, mapped onto the source, would leave most of the mutants out. Such a copy goes,
    # so that mutmut copies the source afresh and measures on it (verdicts of unchanged functions stay).
    for copy in (here / "mutants" / "src").rglob("*.py"):
        source = here / copy.relative_to(here / "mutants")
        if not source.exists() or source.stat().st_mtime > copy.stat().st_mtime:
            copy.unlink()
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = re.sub(r"\n\[tool\.mutmut\][^\[]*", "\n", text)
    (here / "pyproject.toml").write_text(text + mutmut_config(group), encoding="utf-8")
    return here


def _forget_stale_test_map(here: Path) -> None:
    """Make mutmut map functions to tests afresh when a test file changed since it last did.

    mutmut records which tests call each function once per test *name* (``mutants/mutmut-stats.json``)
    and afterwards only maps tests it has not seen: a test whose body changed keeps the functions it
    called before, and a mutant of a function it calls now is never run against it (a survivor that
    test kills stays a survivor). Removing the map makes mutmut run every test once to rebuild it; the
    verdicts stay.
    """
    digest = hashlib.sha256()
    for path in sorted((here / "tests").rglob("*.py")):
        digest.update(str(path.relative_to(here)).encode() + b"\0" + path.read_bytes() + b"\0")
    marker = here / "tests.sha256"
    if marker.exists() and marker.read_text(encoding="utf-8") == digest.hexdigest():
        return
    (here / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    marker.write_text(digest.hexdigest(), encoding="utf-8")


def _mutmut(here: Path, *args: str) -> subprocess.CompletedProcess:
    # mutmut forks a worker per mutant from the process that ran the tests once; a child forked after
    # torch's OpenMP pool ran hangs on its first parallel op (mutants of mxfuse.hc "timed out" at 0% CPU).
    # One thread per process keeps torch from starting the pool.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    mutmut = Path(sys.executable).with_name("mutmut")
    return subprocess.run(
        [str(mutmut), *args], cwd=here, env=env, capture_output=True, text=True, check=False
    )


TESTED_UNDETECTED = (": survived", ": no tests", ": suspicious")
UNDETECTED = (*TESTED_UNDETECTED, ": not checked")


def _undetected(here: Path, statuses: tuple[str, ...] = UNDETECTED) -> list[str]:
    """The mutants of the group's last results that no test detected (in one of ``statuses``)."""
    if not (here / "mutants").exists():
        return []
    listed = _mutmut(here, "results").stdout
    return sorted(
        line.split(":")[0].strip() for line in listed.splitlines() if line.strip().endswith(statuses)
    )


def run_group(name: str, group: Group, *, max_children: int) -> dict:
    here = _prepare(name, group)
    _forget_stale_test_map(here)
    # mutmut keeps a verdict as long as the mutated function is unchanged, whatever the tests became: a
    # survivor of an earlier run would stay one after a test that kills it was written. So the survivors
    # of the run before are tested again once the new mutants are done. (A killed mutant stays killed:
    # its killing test still exists unless it was removed; delete .mutation/ for a measurement from scratch.)
    before = _undetected(here, TESTED_UNDETECTED)
    run = _mutmut(here, "run", "--max-children", str(max_children))
    log = run.stdout + run.stderr
    again = sorted(set(before) & set(_undetected(here)))
    if again:
        rerun = _mutmut(here, "run", "--max-children", str(max_children), *again)
        log += (
            f"\n# the {len(again)} survivors of the run before, tested again\n" + rerun.stdout + rerun.stderr
        )
    (here / "run.log").write_text(log, encoding="utf-8")
    _mutmut(here, "export-cicd-stats")
    stats_file = here / "mutants" / "mutmut-cicd-stats.json"
    if not stats_file.exists():
        raise SystemExit(f"{name}: mutmut produced no results; see {here / 'run.log'}")
    stats = json.loads(stats_file.read_text(encoding="utf-8"))
    survivors = _undetected(here)
    detected = stats["killed"] + stats["timeout"]
    return {
        "group": name,
        "mutants": stats["total"],
        "killed": stats["killed"],
        "timeout": stats["timeout"],
        "survived": len(survivors),
        "score": detected / stats["total"] if stats["total"] else 1.0,
        "survivors": survivors,
    }


def group_section(doc: str, name: str) -> str:
    """The part of docs/mutation.md under the heading ``### `<name>```, up to the next heading of that level.

    Survivors are looked up there: mutants of functions of the same name in two groups (``_canonical``
    of gemm and of layers) have the same short name.
    """
    match = re.search(rf"^### `{re.escape(name)}`.*?(?=^### |\Z)", doc, re.M | re.S)
    return match.group(0) if match else ""


# One process shows every survivor of a group: ``mutmut show`` per mutant starts mutmut (and reads the
# group's results) once each, seconds apiece on a loaded machine.
_SHOW = """
import sys
from mutmut.mutation.diff_apply import get_diff_for_mutant

for name in sys.argv[1:]:
    try:
        diff = get_diff_for_mutant(name)
    except Exception as exc:  # a mutant whose function is gone: say so, show the rest
        diff = f"(no diff: {exc})"
    print("\\0" + name)
    print(diff)
"""


def describe(name: str, mutants: list[str]) -> dict[str, str]:
    """The changed lines of each mutant (as ``mutmut show`` gives them), as ``- old`` / ``+ new``."""
    if not mutants:
        return {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    shown = subprocess.run(
        [sys.executable, "-c", _SHOW, *mutants],
        cwd=WORK / name,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    described = {}
    for block in shown.split("\0")[1:]:
        mutant, _, diff = block.partition("\n")
        changed = [line for line in diff.splitlines() if line[:2] in ("- ", "+ ") or line in ("-", "+")]
        described[mutant] = " / ".join(" ".join(line.split()) for line in changed)
    return {m: described.get(m) or "(a change to a line mutmut shows empty)" for m in mutants}


def write_survivors(results: list[dict]) -> Path:
    """``.mutation/survivors.txt``: every survivor of the groups run, with its change, for docs/mutation.md."""
    lines = []
    for result in results:
        lines.append(f"### {result['group']}\n")
        changes = describe(result["group"], result["survivors"])
        for mutant in result["survivors"]:
            lines.append(f"- `{mutant}`: `{changes[mutant]}`")
        lines.append("")
    path = WORK / "survivors.txt"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", action="append", choices=sorted(GROUPS), help="run only this group")
    parser.add_argument("--max-children", type=int, default=2, help="mutants tested at once (default 2)")
    args = parser.parse_args(argv)
    names = args.group or list(GROUPS)
    documented = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    failed = False
    results = []
    for name in names:
        print(f"{name}: mutating {', '.join(GROUPS[name].mutate)}", flush=True)
        result = run_group(name, GROUPS[name], max_children=args.max_children)
        results.append(result)
        section = group_section(documented, name)
        unlisted = [s for s in result["survivors"] if f"`{s.rsplit('.', 1)[-1]}`" not in section]
        ok = result["score"] >= MIN_SCORE and not unlisted
        failed |= not ok
        print(
            f"  {result['mutants']} mutants: {result['killed']} killed, {result['timeout']} timed out, "
            f"{result['survived']} survived; score {100 * result['score']:.1f}%"
            + ("" if ok else f"  FAIL ({len(unlisted)} survivors not in docs/mutation.md)"),
            flush=True,
        )
        for survivor in unlisted:
            print(f"    not listed: {survivor}")
    WORK.mkdir(exist_ok=True)
    (WORK / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    print(f"results: {WORK / 'results.json'}; survivors with their changes: {write_survivors(results)}")
    return 1 if failed else 0
