"""Draw the checked-in measurements: one PNG per op, time against M or T, baselines and the byte floor.

    python -m benchmarks plot [--out benchmarks/plots] [--data benchmarks/data]

Each op's plot reads one JSON file under ``benchmarks/data/`` (``PLOTS`` names it: the op's latest run)
and draws microseconds per call against M (GEMM rows) or T (decode tokens), log-log: our kernel, the
baselines measured in the same run (bf16 cuBLAS, the unfused chain, SDPA, torch.compile), and the byte
floor. The floor is the bytes a call must move over the copy bandwidth measured in that run
(``benchmarks.timing.copy_bandwidth``: 4.22-4.25 TB/s on the H200, read + written; RESULTS.md quotes it as
4.24 TB/s; 3.02 TB/s on the H100 of the GEMM plot), which each routine writes as ``floor_us``. The GEMM
plot also draws the FP8 cuBLAS GEMM (``torch._scaled_mm``, per-tensor scales) timed in the same run; the
quantize routine's runs were not checked in, so quantize has no plot. A data file without a field a plot needs is an error naming the file and the field.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.support import REPO_ROOT

__all__ = ["PLOTS", "Panel", "PlotDataError", "Plot", "draw", "main", "read_plot"]

DATA = REPO_ROOT / "benchmarks" / "data"
OUT = REPO_ROOT / "benchmarks" / "plots"


class PlotDataError(ValueError):
    """A data file lacks a field a plot needs, or holds the wrong kind of value there."""


@dataclass(frozen=True)
class Panel:
    """One axes: x values and, per curve label, one y value (us) per x."""

    title: str
    xs: tuple[int, ...]
    curves: dict[str, tuple[float, ...]]


@dataclass(frozen=True)
class Plot:
    """What one op's PNG shows, and the run it came from."""

    op: str
    title: str
    x_label: str
    panels: tuple[Panel, ...]
    run: str  # date, GPU, versions and bandwidth, for the caption
    source: str = field(default="")


class DataFile:
    """Field access into one data file that fails with the file and the field's path."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PlotDataError(f"{path}: no such data file") from None
        except json.JSONDecodeError as exc:
            raise PlotDataError(f"{path}: not JSON ({exc})") from None

    def get(self, node: object, *keys: str | int, where: str = "") -> object:
        for key in keys:
            where = f"{where}.{key}" if where else str(key)
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
                node = node[key]
            else:
                raise PlotDataError(f"{self.path}: missing field {where!r}")
        return node

    def number(self, node: object, *keys: str | int, where: str = "") -> float:
        value = self.get(node, *keys, where=where)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value <= 0:
            path = ".".join(map(str, (where, *keys) if where else keys))
            raise PlotDataError(f"{self.path}: field {path!r} is {value!r}, not a positive number")
        return float(value)

    def rows(self, key: str = "rows") -> list[dict]:
        rows = self.get(self.doc, key)
        if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
            raise PlotDataError(f"{self.path}: field {key!r} is not a non-empty list of rows")
        return rows

    def run(self, meta_key: str, bandwidth: float) -> str:
        meta = self.get(self.doc, meta_key)
        date, gpu = self.get(meta, "date", where=meta_key), self.get(meta, "gpu", where=meta_key)
        torch_v, triton_v = self.get(meta, "torch", where=meta_key), self.get(meta, "triton", where=meta_key)
        return (
            f"{date}, {gpu}, torch {torch_v}, Triton {triton_v}, copy bandwidth {bandwidth / 1e12:.2f} TB/s"
        )


def _table(
    reader: DataFile, rows: list[dict], *, x: str, group: str | None, curves: dict[str, str]
) -> list[Panel]:
    """Rows -> one panel per value of ``group``: x ascending, one curve per (label, field)."""
    keys = sorted({r.get(group) for r in rows}) if group else [None]
    panels = []
    for key in keys:
        chosen = sorted((r for r in rows if group is None or r.get(group) == key), key=lambda r: r.get(x, 0))
        xs = tuple(int(reader.number(r, x, where=f"rows[{rows.index(r)}]")) for r in chosen)
        ys = {
            label: tuple(reader.number(r, name, where=f"rows[{rows.index(r)}]") for r in chosen)
            for label, name in curves.items()
        }
        panels.append(Panel(f"{group} = {key}" if group else "", xs, ys))
    return panels


def gemm_benchmark(reader: DataFile) -> Plot:
    """The GEMM benchmark's file (``python -m benchmarks mxfp8_gemm --json``: ``meta`` and one row per shape
    and M): one panel per shape, time against M for each backend the run timed (``triton_us``, and
    ``gluon_us`` where every row has it), bf16 cuBLAS, the FP8 cuBLAS anchor (``fp8_us``,
    per-tensor scales) where every row has it, and the byte floor."""
    rows = reader.rows()
    named = {"Triton MXFP8": "triton_us", "Gluon MXFP8": "gluon_us", "bf16 cuBLAS (torch.mm)": "bf16_us",
             "FP8 cuBLAS, per-tensor scales (torch._scaled_mm)": "fp8_us", "byte floor": "floor_us"}  # fmt: skip
    always = ("triton_us", "bf16_us", "floor_us")
    curves = {label: key for label, key in named.items() if key in always or all(key in r for r in rows)}
    panels = [Panel(p.title.removeprefix("shape = "), p.xs, p.curves)
              for p in _table(reader, rows, x="M", group="shape", curves=curves)]  # fmt: skip
    bandwidth = reader.number(reader.get(reader.doc, "meta"), "copy_bandwidth_GBps", where="meta") * 1e9
    return Plot(
        "mxfp8_gemm", "MXFP8 GEMM, per weight shape", "M (rows)", tuple(panels), reader.run("meta", bandwidth)
    )


def _hc_boundary(reader: DataFile) -> Plot:
    curves = {"fused boundary": "fused_us", "unfused chain": "unfused_us", "torch.compile (fp32)": "compiled_us",
              "byte floor": "floor_us"}  # fmt: skip
    panels = _table(reader, reader.rows(), x="T", group="H", curves=curves)
    bandwidth = reader.number(reader.get(reader.doc, "env"), "copy_GBps", where="env") * 1e9
    return Plot("hc_boundary", "mHC boundary (shifted ordering)", "T (tokens)", tuple(panels),
                reader.run("env", bandwidth))  # fmt: skip


def _grouped_wo_a(reader: DataFile) -> Plot:
    curves = {"fused (epilogue writes the pair)": "fused_us", "unfused (+ quantize)": "unfused_us",
              "bf16 (same kernel)": "kernel_bf16_us", "bf16 torch.einsum": "einsum_bf16_us",
              "byte floor": "floor_us"}  # fmt: skip
    panels = _table(reader, reader.rows(), x="T", group="G", curves=curves)
    bandwidth = reader.number(reader.get(reader.doc, "env"), "copy_GBps", where="env") * 1e9
    return Plot(
        "grouped_wo_a", "grouped wo_a projection", "T (tokens)", tuple(panels), reader.run("env", bandwidth)
    )


def _attention(reader: DataFile) -> Plot:
    curves = {"split-KV kernel": "kernel", "PyTorch SDPA": "sdpa", "byte floor": "floor_us"}
    panels = _table(reader, reader.rows(), x="tokens", group="length", curves=curves)
    bandwidth = reader.number(reader.doc, "bandwidth")
    device = reader.get(reader.doc, "device")
    run = f"{device}, copy bandwidth {bandwidth / 1e12:.2f} TB/s (the file records no date or versions)"
    return Plot(
        "attention", "MQA decode attention (64 heads, head_dim 512)", "T (sequences)", tuple(panels), run
    )


def _decode_step(reader: DataFile) -> Plot:
    rows = reader.rows()
    flat = [
        {"tokens": r.get("tokens"), **{f"us_{k}": v for k, v in dict(reader.get(r, "us", where=f"rows[{i}]")).items()},
         **{f"floor_{k}": v for k, v in dict(reader.get(r, "floor_us", where=f"rows[{i}]")).items()}}
        for i, r in enumerate(rows)
    ]  # fmt: skip
    curves = {"fused": "us_fused", "unfused": "us_unfused", "all-bf16": "us_bf16",
              "byte floor (MXFP8 weights)": "floor_fused", "byte floor (bf16 weights)": "floor_bf16"}  # fmt: skip
    panels = _table(reader, flat, x="tokens", group=None, curves=curves)
    bandwidth = reader.number(reader.get(reader.doc, "meta"), "copy_bandwidth", where="meta")
    return Plot("dsv41_decode", "DeepSeek-V4.1-Flash attention decode step (KV 4096, PDL)", "T (tokens)",
                tuple(panels), reader.run("meta", bandwidth))  # fmt: skip


# op -> (data file, reader). The latest checked-in run of each op.
PLOTS: dict[str, tuple[str, Callable[[DataFile], Plot]]] = {
    "mxfp8_gemm": ("mxfp8_gemm_h100_2026-12-05.json", gemm_benchmark),
    "hc_boundary": ("hc_boundary_2026-12-02f.json", _hc_boundary),
    "grouped_wo_a": ("grouped_wo_a_2026-12-02e.json", _grouped_wo_a),
    "attention": ("attention_2026-12-02.json", _attention),
    "dsv41_decode": ("dsv41_decode_main_2026-12-05f.json", _decode_step),
}


def read_plot(op: str, data_dir: Path = DATA) -> Plot:
    """What op ``op``'s PNG shows, read from its data file; ``PlotDataError`` names a missing field."""
    name, read = PLOTS[op]
    plot = read(DataFile(data_dir / name))
    return Plot(plot.op, plot.title, plot.x_label, plot.panels, plot.run, source=f"benchmarks/data/{name}")


def draw(plot: Plot, out: Path) -> Path:
    """Write ``plot`` as ``out/OP.png`` (Agg backend: no display needed) and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = len(plot.panels)
    cols = min(count, 3)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(4.6 * cols, 7.5), 3.6 * rows + 1.0), squeeze=False)
    for ax, panel in zip(axes.flat, plot.panels, strict=False):
        floors = 0
        for label, ys in panel.curves.items():
            floor = label.startswith("byte floor")
            style = ("--", ":")[floors % 2] if floor else "-"
            floors += floor
            ax.plot(panel.xs, ys, linestyle=style, marker="" if floor else "o", color="grey" if floor else None,
                    label=label)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(panel.xs, [str(x) for x in panel.xs])
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(plot.x_label)
        ax.set_ylabel("us per call (median)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[count:]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{plot.title}\n{plot.run}\n{plot.source}", fontsize=9)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{plot.op}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help="directory for the PNGs (default: benchmarks/plots)"
    )
    parser.add_argument(
        "--data", type=Path, default=DATA, help="directory of the JSON (default: benchmarks/data)"
    )
    parser.add_argument("--ops", default=",".join(PLOTS), help=f"comma-separated, of {', '.join(PLOTS)}")
    args = parser.parse_args(argv)
    ops = [op for op in args.ops.split(",") if op]
    unknown = [op for op in ops if op not in PLOTS]
    if unknown:
        parser.error(f"--ops: unknown {unknown}; known: {', '.join(PLOTS)}")
    try:
        plots = [read_plot(op, args.data) for op in ops]
    except PlotDataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for plot in plots:
        print(f"wrote {draw(plot, args.out)}  ({plot.source})")
    return 0
