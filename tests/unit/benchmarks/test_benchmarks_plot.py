"""`python -m benchmarks plot`: one valid PNG per op from the checked-in JSON; a bad data file is named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from benchmarks.plot import PLOTS
from gpumatrix import register

register(on=("cpu",), est_time=15)

ROOT = REPO_ROOT
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OPS = ("mxfp8_gemm", "hc_boundary", "grouped_wo_a", "attention", "dsv41_decode")


def _plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "plot", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_every_op_gets_a_valid_png(tmp_path: Path) -> None:
    done = _plot("--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{op}.png" for op in OPS)
    for op in OPS:
        path = tmp_path / f"{op}.png"
        width, height = _png_size(path)
        assert width >= 600 and height >= 300, (op, width, height)
        assert path.stat().st_size > 20_000, f"{op}.png is {path.stat().st_size} bytes: nearly empty"


def test_the_checked_in_plots_are_the_ops_plots() -> None:
    assert set(PLOTS) == set(OPS)
    for op, (name, _) in PLOTS.items():
        assert (ROOT / "benchmarks" / "data" / name).is_file(), name
        _png_size(ROOT / "benchmarks" / "plots" / f"{op}.png")


@pytest.mark.parametrize(
    ("op", "damage", "field"),
    [
        ("hc_boundary", lambda d: d["rows"][1].pop("unfused_us"), "rows[1].unfused_us"),
        ("attention", lambda d: d["rows"][0].update(sdpa="fast"), "rows[0].sdpa"),
        ("dsv41_decode", lambda d: d["meta"].pop("copy_bandwidth"), "meta.copy_bandwidth"),
        ("mxfp8_gemm", lambda d: d["problems"]["pro wo_b M=4"]["best"].pop("us"), "problems.pro wo_b M=4.best.us"),
        ("grouped_wo_a", lambda d: d["rows"][2].update(floor_us=float("nan")), "rows[2].floor_us"),
        ("grouped_wo_a", lambda d: d.pop("rows"), "rows"),
    ],
    ids=["missing-field", "not-a-number", "missing-meta", "missing-nested", "nan", "no-rows"],
)
def test_a_bad_data_file_is_an_error_naming_file_and_field(tmp_path: Path, op: str, damage, field: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(ROOT / "benchmarks" / "data", data, ignore=shutil.ignore_patterns("*.log", "*.txt"))
    name = PLOTS[op][0]
    document = json.loads((data / name).read_text())
    damage(document)
    (data / name).write_text(json.dumps(document))
    done = _plot("--data", str(data), "--out", str(tmp_path / "out"), "--ops", op)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert name in done.stderr and repr(field) in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
