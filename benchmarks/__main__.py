"""The one driver of the benchmarks: ``python -m benchmarks ROUTINE [args...]``, from the repository root.

``python -m benchmarks list`` (or ``--help``) names each routine with its purpose; ``python -m benchmarks
ROUTINE --help`` gives the routine's own options. Each routine is the module ``benchmarks.ROUTINE`` and its
``main(argv)``; only the chosen one is imported, so listing them needs neither torch nor a GPU.
"""

from __future__ import annotations

import argparse
import importlib
import sys

__all__ = ["ROUTINES", "main"]

# name -> one-line purpose. tests/unit/benchmarks/test_benchmarks_driver.py checks that this names exactly the
# modules of the package that define main().
ROUTINES: dict[str, str] = {
    "attention": "multi-query decode attention: the split-KV kernel vs SDPA vs the byte floor (GPU)",
    "bot": "the /rerun-test bot's latency and REST calls against the GitHub emulator (CPU)",
    "compare": "gpumatrix.compare.assert_close on 16M-element tensors (CPU or GPU)",
    "dsv41_decode": "one DeepSeek-V4.1 decode step: fused vs unfused vs all-bf16, per stage (GPU; --dry-run on CPU)",
    "dsv41_timeline": "each kernel's start and end inside a graph replay of the decode step (GPU)",
    "dsv41_tp2": "the decode step on one GPU (TP=1) and two (TP=2, NCCL) (2 GPUs; --dry-run on CPU)",
    "exhaustive_mxfp8": "the quantize kernel's integer rules checked on every input they can see (CPU)",
    "fold_sass_stats": "registers, spills and SASS per weight byte of the fold GEMM candidates (CPU, sm_90 cubins)",
    "gluon_profile": "one shape of the Gluon decode GEMM for a profiler, or its configurations timed against bf16 (GPU)",
    "gpu_job": "the GPU job `gpumatrix run --runner LABEL`, timed cold and warm (GPU)",
    "grouped_wo_a": "the grouped wo_a projection: fused epilogue vs separate quantize vs bf16 (GPU)",
    "hc_boundary": "the fused mHC boundary against its baselines and the byte floor (GPU)",
    "hc_boundary_sweep": "choose the mHC boundary kernel's configuration per shape; writes its table (GPU)",
    "hc_phases": "each kernel of the fused mHC boundary and of the unfused chain (GPU)",
    "lease_log": "check GPU lease logs: no GPU held by two tests at once (CPU)",
    "leases": "pytest -n 0 against -n N with GPU leases on a throwaway tree (GPU; CPU dry run)",
    "merge_gemm_table": "merge a GEMM sweep's table into the launcher's checked-in table, Triton or Gluon (CPU)",
    "mutation": "mutation testing (mutmut) of the CPU-side modules: `make mutation` (CPU, hours)",
    "mxfp8_gemm": "the Triton MXFP8 GEMM against bf16 cuBLAS and the byte floor (GPU)",
    "mxfp8_gemm_sweep": "check, sweep and time MXFP8 GEMM configurations (Triton, or --kernel gluon); writes the launcher's table (GPU)",
    "ncu_probe": "launch the decode kernels a few times each for Nsight Compute (GPU)",
    "quantize": "the MXFP8 quantize kernel against its baselines and the byte floor (GPU)",
    "plot": "draw one PNG per op from the checked-in JSON under benchmarks/data/ (CPU)",
    "registry_discovery": "static registry discovery, cold and warm, against pytest --collect-only (CPU)",
    "step_digest": "SHA-256 digests of the decode step's outputs: a refactor must leave them unchanged (GPU)",
}


def routine_listing() -> str:
    """One line per routine: its name and purpose."""
    width = max(map(len, ROUTINES))
    return "\n".join(f"  {name:<{width}}  {purpose}" for name, purpose in ROUTINES.items())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run one benchmark routine (from the repository root).",
        epilog="routines (`python -m benchmarks ROUTINE --help` for each one's options):\n"
        + routine_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("routine", metavar="ROUTINE", help="a routine below, or `list`")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the routine's own arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.routine == "list":
        print(routine_listing())
        return 0
    if args.routine not in ROUTINES:
        parser.error(f"unknown routine {args.routine!r}; known routines: {', '.join(ROUTINES)}")
    module = importlib.import_module(f"benchmarks.{args.routine}")
    # The routine's own parser takes its name from argv[0]: make its usage read as the command it is.
    sys.argv[0] = f"python -m benchmarks {args.routine}"
    result = module.main(args.args)
    return 0 if result is None else int(result)


if __name__ == "__main__":
    sys.exit(main())
