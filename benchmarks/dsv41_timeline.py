"""The decode step's kernels on the GPU's clock inside a graph replay: when each starts and ends.

    python -m benchmarks dsv41_timeline [--tokens 1] [--variants pdl,pdl-gemm,base] [--paths fused,unfused]

Each (variant, path) step is captured as one CUDA graph (``dsv41_decode.capture``) and replayed
``--replays`` times under the torch profiler; the kernels of each replay are put in start order and the
replay whose span (first start to last end) is the median is printed: each kernel's start and end in us
from the replay's first start. Under programmatic dependent launch a kernel's span includes the time it
waits for its predecessor, so the ends (not the durations) show where the time goes; the eager kernel
lists of ``dsv41_decode.py`` cannot show that.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

import torch

from benchmarks.dsv41_decode import VARIANTS, capture, decode_inputs, load_paths, variant
from mxfuse.models.dsv41 import CONFIGS


def replays_of(events, per: int) -> list[list[tuple[str, float, float]]]:
    """Kernel events (start order) cut into replays of ``per`` kernels: (name, start us, end us)."""
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in events]
    kernels.sort(key=lambda k: k[1])
    return [kernels[i : i + per] for i in range(0, len(kernels) - per + 1, per)]


def main(argv: list[str] | None = None) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--kv", type=int, default=4096)
    parser.add_argument("--config", default="flash", choices=sorted(CONFIGS))
    parser.add_argument("--variants", default="pdl,pdl-gemm,base")
    parser.add_argument("--paths", default="fused,unfused")
    parser.add_argument("--replays", type=int, default=21)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    config, device = CONFIGS[args.config], torch.device("cuda")
    paths, variants = args.paths.split(","), args.variants.split(",")
    models = load_paths(config, paths, device=device)
    state, cache = decode_inputs(config, args.tokens, args.kv, device=device)
    out = {}
    for name in variants:
        for path in paths:
            with variant(models, name):
                graph = capture(models[path], state, cache.clone())
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.replays):
                    graph.replay()
                torch.cuda.synchronize()
            kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
            per = len(kernels) // args.replays
            reps = replays_of(kernels, per)
            spans = [r[-1][2] - r[0][1] for r in reps]
            mid = reps[spans.index(statistics.median_low(spans))]
            t0 = mid[0][1]
            rows = [{"name": n, "start": s - t0, "end": e - t0} for n, s, e in mid]
            out[f"{name}/{path}"] = {"span_us": statistics.median(spans), "kernels": rows}
            print(f"\n{name} / {path}: median span {statistics.median(spans):.1f} us ({per} kernels)")
            prev_end = 0.0
            for r in rows:
                print(f"  {r['start']:7.1f} {r['end']:7.1f}  (+{r['end'] - prev_end:5.1f})  {r['name'][:60]}")
                prev_end = max(prev_end, r["end"])
            del graph
    path = Path(args.json or Path(os.environ.get("OUT", "reports")) / "dsv41_timeline.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tokens": args.tokens, "config": args.config, "variants": {v: VARIANTS[v] for v in variants},
                                "timelines": out}, indent=1))  # fmt: skip
    print(f"wrote {path}")
    return 0
