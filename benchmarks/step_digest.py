"""The bits of the V4.1 decode step's outputs, as SHA-256 digests: a refactor must leave them unchanged.

    python -m benchmarks step_digest [--tokens 1,4,16,64] [--config flash] [--json PATH] [--dry-run]
    python -m benchmarks step_digest --against benchmarks/data/step_digest_DATE.json

The sublayer is loaded from the random checkpoint of seed 0 in the native format (as
benchmarks/dsv41_decode.py loads it), each path (fused, unfused, bf16) runs one eager step per T on the
state and KV cache of seed T, and every output field (``attn_out``, ``residual``, ``pre``, ``post``,
``comb``, ``y``) is hashed as raw bytes with its dtype and shape. ``--against`` compares with a digest
file written before (same machine class, versions and config): exit 1 naming each field that changed.
``--dry-run`` runs the tiny config on the CPU.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
from pathlib import Path

import torch
import triton

from benchmarks.dsv41_decode import decode_inputs, load_paths
from mxfuse.models.dsv41 import CONFIGS

PATHS = ("fused", "unfused", "bf16")
FIELDS = ("attn_out", "residual", "pre", "post", "comb", "y")


def digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and raw bytes."""
    data = tensor.detach().contiguous().cpu()
    hasher = hashlib.sha256(f"{data.dtype}{tuple(data.shape)}".encode())
    hasher.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return hasher.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", default="1,4,16,64")
    parser.add_argument("--kv", type=int, default=4096)
    parser.add_argument("--config", default=None, choices=sorted(CONFIGS))
    parser.add_argument("--json", default=None, help="write the digests here (default: $OUT or reports/)")
    parser.add_argument("--against", default=None, help="a digest file to compare with")
    parser.add_argument("--dry-run", action="store_true", help="the CPU, the tiny config")
    args = parser.parse_args(argv)
    on_cpu = args.dry_run
    config_name = args.config or ("tiny" if on_cpu else "flash")
    config = CONFIGS[config_name]
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    kv = min(args.kv, 64) if on_cpu else args.kv
    models = load_paths(config, PATHS, device=device)
    found: dict[str, dict[str, str]] = {}
    for t in (int(x) for x in args.tokens.split(",")):
        state, cache = decode_inputs(config, t, kv, device=device)
        for path, model in models.items():
            out = model(state, cache.clone(), context="decode")
            found[f"T={t} {path}"] = {field: digest(getattr(out, field)) for field in FIELDS}
    meta = {
        "date": datetime.date.today().isoformat(),
        "gpu": "cpu (dry run)" if on_cpu else torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "config": config_name,
        "kv": kv,
    }
    out_dir = Path(os.environ.get("OUT") or "reports")
    target = Path(args.json) if args.json else out_dir / "step_digest.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"meta": meta, "digests": found}, indent=1) + "\n", encoding="utf-8")
    for key, fields in found.items():
        print(key, " ".join(f"{f}={d[:12]}" for f, d in fields.items()))
    if args.against is None:
        return 0
    before = json.loads(Path(args.against).read_text(encoding="utf-8"))["digests"]
    changed = [
        f"{key} {field}"
        for key, fields in found.items()
        for field, value in fields.items()
        if before.get(key, {}).get(field) != value
    ]
    missing = sorted(set(before) - set(found))
    print(f"against {args.against}: {len(changed)} field(s) changed, {len(missing)} case(s) not run")
    for line in changed:
        print(f"  changed: {line}")
    return 1 if changed else 0
