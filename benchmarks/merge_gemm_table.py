"""Merge the table a sweep wrote into the launcher's checked-in table.

    python -m benchmarks merge_gemm_table SWEEP_TABLE [--kernel triton|gluon] [--into TABLE]

``--kernel triton`` (``benchmarks/mxfp8_gemm_sweep.py``: ``$OUT/mxfp8_gemm_configs.json``, into
``src/mxfuse/kernels/gemm/configs.json``): shape by shape, the sweep's shapes replace the table's for that
device, the other shapes stay, and the device's ``source`` notes where the new ones came from.

``--kernel gluon`` (``mxfp8_gemm_sweep.py --kernel gluon``: ``$OUT/gluon_configs_sweep.json``, into
``gluon_configs.json``): M by M (``merge_gluon``). The Gluon table lists only where Gluon won, so a bucket
the sweep measured and Gluon lost must go: every bucket of the table that covers an M the sweep measured
(its ``swept``), or overlaps one of the sweep's buckets, is replaced by the sweep's buckets; the others
stay with their ``m_min`` written out.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

from mxfuse.kernels.gemm.configs import parse_table
from mxfuse.kernels.gemm.gluon_launch import parse_gluon_table

GEMM_DIR = Path(__file__).resolve().parents[1] / "src" / "mxfuse" / "kernels" / "gemm"
TABLE = GEMM_DIR / "configs.json"
GLUON_TABLE = GEMM_DIR / "gluon_configs.json"


def merge(table: dict, sweep: dict) -> dict:
    """``table`` with ``sweep``'s shapes put in, per device (both in the table format, checked first)."""
    parse_table(table, source="table")
    parse_table(sweep, source="sweep")
    for device, entry in sweep["devices"].items():
        into = table["devices"].setdefault(device, {"source": "", "shapes": {}})
        into["shapes"].update(entry["shapes"])
        shapes = ", ".join(entry["shapes"])
        into["source"] = "; ".join(
            filter(None, [into.get("source", ""), f"{shapes}: {entry.get('source', '')}"])
        )
    parse_table(table, source="merged table")
    return table


def merge_gluon(table: dict, sweep: dict) -> dict:
    """``table`` (a Gluon table) with a Gluon sweep's measurements put in, M by M (module docstring); the
    device's ``source`` notes the sweep. Both are checked first, and the result before it is returned."""
    parsed = parse_gluon_table(table, source="table")
    parse_gluon_table(sweep, source="sweep")
    table = copy.deepcopy(table)
    for device, entry in sweep["devices"].items():
        into = table["devices"].setdefault(device, {"source": "", "shapes": {}})
        new_shapes, swept = entry["shapes"], entry.get("swept", {})
        for shape in sorted(set(swept) | set(new_shapes)):
            n, k = (int(v) for v in shape.split("x"))
            old = parsed.get(device, {}).get((n, k), [])
            raw = into["shapes"].get(shape, [])
            new = new_shapes.get(shape, [])
            ranges = [(b.get("m_min", b["m_max"]), b["m_max"]) for b in new]
            kept = [
                {**bucket, "m_min": lo}  # written out: the bucket below it may be gone
                for (lo, hi, _), bucket in zip(old, raw, strict=True)
                if not any(lo <= m <= hi for m in swept.get(shape, []))
                and not any(lo <= b_hi and b_lo <= hi for b_lo, b_hi in ranges)
            ]
            buckets = sorted(kept + new, key=lambda b: b["m_max"])
            if buckets:
                into["shapes"][shape] = buckets
            else:
                into["shapes"].pop(shape, None)
        note = ", ".join(f"{shape} M {ms}" for shape, ms in swept.items())
        into["source"] = "; ".join(
            filter(None, [into.get("source", ""), f"{note}: {entry.get('source', '')}"])
        )
    parse_gluon_table(table, source="merged table")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", type=Path, help="the sweep's table")
    parser.add_argument(
        "--kernel",
        choices=("triton", "gluon"),
        default="triton",
        help="which kernel's table (default triton)",
    )
    parser.add_argument(
        "--into",
        type=Path,
        default=None,
        help="the table to update in place (default: the kernel's checked-in one)",
    )
    args = parser.parse_args(argv)
    into = args.into or (GLUON_TABLE if args.kernel == "gluon" else TABLE)
    merger = merge_gluon if args.kernel == "gluon" else merge
    merged = merger(json.loads(into.read_text()), json.loads(args.sweep.read_text()))
    into.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"merged {args.sweep} into {into}")
    return 0
