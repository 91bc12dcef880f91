"""`python -m benchmarks plot`: one valid PNG per op from the checked-in JSON; a bad data file is named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from benchmarks.plot import PLOTS, DataFile, draw, gemm_benchmark
from gpumatrix import register

register(on=("cpu",), est_time=15)

ROOT = REPO_ROOT
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OPS = ("mxfp8_gemm", "hc_boundary", "grouped_wo_a", "attention", "dsv41_decode")


def _plot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "plot", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
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
        ("mxfp8_gemm", lambda d: d["rows"][5].pop("bf16_us"), "rows[5].bf16_us"),
        ("grouped_wo_a", lambda d: d["rows"][2].update(floor_us=float("nan")), "rows[2].floor_us"),
        ("grouped_wo_a", lambda d: d.pop("rows"), "rows"),
    ],
    ids=["missing-field", "not-a-number", "missing-meta", "missing-gemm-field", "nan", "no-rows"],
)
def test_a_bad_data_file_is_an_error_naming_file_and_field(
    tmp_path: Path, op: str, damage, field: str
) -> None:
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


def _gemm_benchmark_file(path: Path, *, gluon_rows: int) -> Path:
    """A file as `python -m benchmarks mxfp8_gemm --backends triton,gluon,bf16,fp8 --json` writes it: two
    shapes, three M each; gluon timed on the first ``gluon_rows`` rows only (a failed check is not timed)."""
    rows = []
    for shape, scale in (("v41 wqkv_a", 1.0), ("pro wo_b", 6.0)):
        for m in (1, 16, 64):
            row = {"shape": shape, "M": m, "N": 1, "K": 1, "triton_us": 5.0 * scale + m / 8,
                   "bf16_us": 9.0 * scale, "fp8_us": 6.0 * scale, "floor_us": 2.0 * scale}  # fmt: skip
            if len(rows) < gluon_rows:
                row["gluon_us"] = 4.0 * scale
            else:
                row["gluon_error"] = "differs from the torch backend: calc_diff 0.5"
            rows.append(row)
    meta = {"date": "2026-12-04", "gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0",
            "copy_bandwidth_GBps": 4240.0}  # fmt: skip
    path.write_text(json.dumps({"meta": meta, "rows": rows}))
    return path


def test_the_gemm_benchmark_file_draws_each_backend_and_the_fp8_anchor(tmp_path: Path) -> None:
    plot = gemm_benchmark(DataFile(_gemm_benchmark_file(tmp_path / "g.json", gluon_rows=6)))
    assert [p.title for p in plot.panels] == ["pro wo_b", "v41 wqkv_a"]
    wqkv = plot.panels[1]
    assert wqkv.xs == (1, 16, 64)
    assert wqkv.curves["Triton MXFP8"] == (5.125, 7.0, 13.0)
    assert wqkv.curves["Gluon MXFP8"] == (4.0, 4.0, 4.0)
    assert wqkv.curves["FP8 cuBLAS, per-tensor scales (torch._scaled_mm)"] == (6.0, 6.0, 6.0)
    assert wqkv.curves["byte floor"] == (2.0, 2.0, 2.0)
    assert "4.24 TB/s" in plot.run
    width, height = _png_size(draw(plot, tmp_path / "out"))
    assert width >= 600 and height >= 300


def test_a_backend_some_rows_lack_is_left_out_not_drawn_as_zero(tmp_path: Path) -> None:
    plot = gemm_benchmark(DataFile(_gemm_benchmark_file(tmp_path / "g.json", gluon_rows=4)))
    assert all("Gluon MXFP8" not in p.curves for p in plot.panels)
    assert all("Triton MXFP8" in p.curves for p in plot.panels)
