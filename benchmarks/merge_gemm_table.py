"""Merge the table a sweep wrote (``benchmarks/mxfp8_gemm_sweep.py``: ``$OUT/mxfp8_gemm_configs.json``) into
the launcher's checked-in table, shape by shape: the sweep's shapes replace the table's for that device,
the other shapes stay, and the device's ``source`` notes where the new ones came from.

    python -m benchmarks merge_gemm_table SWEEP_TABLE [--into src/mxfuse/kernels/gemm/configs.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mxfuse.kernels.gemm.configs import parse_table

TABLE = Path(__file__).resolve().parents[1] / "src" / "mxfuse" / "kernels" / "gemm" / "configs.json"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sweep", type=Path, help="the sweep's mxfp8_gemm_configs.json")
    parser.add_argument("--into", type=Path, default=TABLE, help="the table to update in place")
    args = parser.parse_args(argv)
    merged = merge(json.loads(args.into.read_text()), json.loads(args.sweep.read_text()))
    args.into.write_text(json.dumps(merged, indent=1) + "\n")
    print(f"merged {args.sweep} into {args.into}")
    return 0
