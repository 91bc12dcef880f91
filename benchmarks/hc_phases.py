"""Where the mHC boundary's time goes: each kernel of the fused boundary and of the unfused chain, on one GPU.

    python -m benchmarks hc_phases [--tokens 1,4,16,64,2048] [--hiddens 5120] [--calls 20]

For each shape (normal ordering, MXFP8 pair out, deepgemm scales, the launch table's configuration):
``--calls`` eager calls of each path under the torch profiler, each kernel's device time averaged over
the calls, in launch order (the fused boundary's two launches are its A items, then its F and S items;
the unfused chain is the post kernel, the mixes (A, then F and S), the norm and the quantize). Device
times of eager launches leave out the gaps a CUDA graph still has between kernels; the whole-call times
in graphs are benchmarks/hc_boundary.py's. Prints one line per kernel and writes JSON to --json, else
$OUT/hc_phases.json, else reports/hc_phases.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from benchmarks.hc_boundary import PARAMS, environment, kernel_args, make_set
from mxfuse import hc
from mxfuse.kernels.hc import choose_config


def kernel_times(fn, calls: int) -> list[tuple[str, float]]:
    """(kernel name, mean device us) of each kernel one call of ``fn`` launches, in launch order."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start
    )
    if not kernels or len(kernels) % calls:
        raise RuntimeError(f"{len(kernels)} kernels in {calls} calls: not a whole number per call")
    per = len(kernels) // calls
    out = []
    for i in range(per):
        mine = kernels[i::per]
        name = mine[0].name.split("(")[0][:40]
        out.append((name, sum(e.time_range.elapsed_us() for e in mine) / calls))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tokens", default="1,4,16,64,2048")
    parser.add_argument("--hiddens", default="5120")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    env = environment()
    print(" | ".join(f"{k}: {v}" for k, v in env.items()), flush=True)
    rows = []
    for hidden in (int(h) for h in args.hiddens.split(",")):
        for tokens in (int(t) for t in args.tokens.split(",")):
            s = make_set(tokens, hidden, False, 0)
            config = choose_config(tokens, hidden, shifted=False)
            for path, fused in (("fused", True), ("unfused", False)):
                out = hc.empty_hc_boundary_outputs(tokens, hidden, device="cuda", y=False)

                def call(out=out, fused=fused, s=s):
                    hc.mhc_boundary(*kernel_args(s), params=PARAMS, out=out, fused=fused)

                times = kernel_times(call, args.calls)
                total = sum(t for _, t in times)
                print(f"H={hidden} T={tokens:>5} {path:>7}: {total:8.2f} us in {len(times)} kernels: "
                      + ", ".join(f"{n} {t:.2f}" for n, t in times), flush=True)  # fmt: skip
                rows.append(
                    {"H": hidden, "T": tokens, "path": path, "config": config.to_json(), "kernels": times}
                )
    path = Path(args.json or Path(os.environ.get("OUT", "reports")) / "hc_phases.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    return 0
