"""The DeepSeek-V4.1 sublayer on tensor-parallel ranks, one process per rank, for the TP tests.

``launch(job)`` starts ``python dsv41_tp.py RANK WORLD JOB`` once per rank (gloo on CPU, NCCL on GPUs;
rendezvous through a file in the job's directory), waits for all of them and returns what each rank
saved: its outputs as CPU tensors and its witness records. The ranks only compute; the test process
compares. A rank that fails stops the others, and the error shows every rank's log.

A job is a dict: ``dir`` (scratch directory), ``checkpoint``, ``config`` (``Dsv41Config`` fields, the
global dims), ``device`` (``cpu`` or ``cuda``: rank r uses ``cuda:r`` of the devices it sees),
``paths``, ``next_pair_layout`` (a layout, None, or ``consumer``: the layout the fused wqkv_a reads),
``cases`` (see ``case``), ``tp1`` (rank 0 also runs the unsharded model on every case), ``partials``
(each rank also runs its shard without the group: the attn_out its wo_b adds to the sum), ``graphs``
(token counts whose decode step each rank captures in a CUDA graph and replays on fresh inputs) and
``refusals`` (check that mismatched process groups are refused).

NVLink multicast stays off in the ranks (NCCL_NVLS_ENABLE=0 and the symmetric-memory and NVSHMEM
switches): the shared machines these tests run on must not use it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

__all__ = ["NO_MULTICAST", "case", "launch", "outputs", "step_inputs"]

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
FIELDS = ("attn_out", "residual", "pre", "post", "comb", "y")


def case(
    name: str,
    tokens: int,
    *,
    seed: int,
    new: int = 1,
    context: str = "decode",
    capacity: int = 40,
    nan_token: int | None = None,
) -> dict[str, Any]:
    """One step's inputs: ``dsv41_cases.decode_inputs`` of these arguments, x[nan_token, 5] = NaN."""
    return {
        "name": name,
        "tokens": tokens,
        "seed": seed,
        "new": new,
        "context": context,
        "capacity": capacity,
        "nan_token": nan_token,
    }


def launch(job: dict[str, Any], *, world: int = 2, timeout: float = 300.0) -> list[dict[str, Any]]:
    """Run ``job`` on ``world`` ranks; each rank's saved results, in rank order."""
    directory = Path(job["dir"])
    directory.mkdir(parents=True, exist_ok=True)
    job_file = directory / "job.pt"
    torch.save(job, job_file)
    env = {**os.environ, **NO_MULTICAST, "PYTHONUNBUFFERED": "1"}
    if job["device"] == "cpu":
        env["OMP_NUM_THREADS"] = "1"  # two ranks share the CI box's two cores
    logs = [directory / f"rank{rank}.log" for rank in range(world)]
    procs = []
    for rank in range(world):
        with open(logs[rank], "w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, __file__, str(rank), str(world), str(job_file)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
    deadline = time.monotonic() + timeout
    failed = timed_out = False
    while any(p.poll() is None for p in procs):
        failed = any(p.poll() not in (None, 0) for p in procs)
        timed_out = time.monotonic() > deadline
        if failed or timed_out:
            break
        time.sleep(0.05)
    for p in procs:  # a rank left waiting in a collective for a failed peer would wait for ever
        if p.poll() is None:
            p.kill()
        p.wait()
    codes = [p.returncode for p in procs]
    if timed_out or any(codes):
        what = f"did not finish within {timeout:g} s" if timed_out else f"exited {codes}"
        tails = "\n".join(f"--- rank {r} log:\n{logs[r].read_text()[-6000:]}" for r in range(world))
        raise AssertionError(f"the tensor-parallel ranks {what}\n{tails}")
    return [torch.load(directory / f"rank{rank}.pt", weights_only=True) for rank in range(world)]


def outputs(saved: dict[str, Any]):
    """A saved step (``_saved``) as ``StepOutputs`` again."""
    from mxfuse.formats import MxTensor, scale_spec
    from mxfuse.models.dsv41 import StepOutputs

    pair = None
    if saved["pair"] is not None:
        q, storage, layout, rounding = saved["pair"]
        spec = scale_spec(q.shape[0], q.shape[1], scale_layout=layout)
        pair = MxTensor(q, storage.as_strided(spec.shape, spec.stride), layout, rounding)
    return StepOutputs(**{f: saved[f] for f in FIELDS}, pair=pair)


# ---- one rank (runs in its own process) ------------------------------------------------------------


def _saved(out) -> dict[str, Any]:
    """A step's outputs on the CPU; the pair's scales with their whole storage (padding included)."""
    saved: dict[str, Any] = {f: getattr(out, f).detach().cpu().clone() for f in FIELDS}
    saved["pair"] = None
    if out.pair is not None:
        p = out.pair
        rounding = None if p.rounding is None else p.rounding.value
        saved["pair"] = [
            p.data.cpu().clone(),
            p.scale_storage().cpu().clone(),
            p.scale_layout.value,
            rounding,
        ]
    return saved


def _plain(records: list[dict]) -> list[dict]:
    return json.loads(json.dumps(records, default=str))


def step_inputs(config, spec: dict[str, Any], device: torch.device):
    """Drawn on the CPU, then moved: every rank (and the test process) gets the same values."""
    from dsv41_cases import decode_inputs

    from mxfuse.models.dsv41 import HcState, KvCache

    state, cache = decode_inputs(
        config, spec["tokens"], seed=spec["seed"], capacity=spec["capacity"], new=spec["new"]
    )
    if spec.get("nan_token") is not None:
        state.x[spec["nan_token"], 5] = float("nan")
    state = HcState(
        *(t.to(device) for t in (state.x, state.residual, state.post, state.comb, state.prev_pre))
    )
    return state, KvCache(cache.kv.to(device), cache.lens.to(device))


def _step(model, state, cache, *, context: str):
    from mxfuse import witness

    with witness.capture() as records:
        out = model(state, cache, context=context)
    if state.x.is_cuda:
        torch.cuda.synchronize()
    return out, records


def _poison(out) -> None:
    """0xA5 into every byte a step writes, so a replay that leaves any unwritten fails the comparison."""
    tensors = [getattr(out, f) for f in FIELDS]
    if out.pair is not None:
        tensors += [out.pair.data, out.pair.scale_storage()]
    for t in tensors:
        t.view(torch.uint8).fill_(0xA5)


def _capture(model, state, cache):
    """One CUDA graph of one decode step, the all-reduce inside it, warmed up on a side stream."""
    from mxfuse import witness

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            model(state, cache, context="decode")
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records, torch.cuda.graph(graph):
        out = model(state, cache, context="decode")
    return graph, out, records


def _graph_runs(models, config, tokens: int, device: torch.device) -> dict[str, Any]:
    """Capture each path's step, replay on two fresh inputs; replays, their KV and eager steps."""
    base = case(f"graph T={tokens}", tokens, seed=100 + tokens, capacity=256)
    static_state, static_cache = step_inputs(config, base, device)
    graphs = {p: _capture(models[p], static_state, static_cache) for p in ("fused", "unfused")}
    result: dict[str, Any] = {"records": {p: _plain(g[2]) for p, g in graphs.items()}, "replays": []}
    for seed in (200, 300):
        state, cache = step_inputs(config, {**base, "seed": seed + tokens}, device)
        replay: dict[str, Any] = {}
        for path, (graph, out, _) in graphs.items():
            static_state.copy_(state)
            static_cache.kv.copy_(cache.kv)
            static_cache.lens.copy_(cache.lens)
            _poison(out)
            graph.replay()
            torch.cuda.synchronize()
            replay[path] = {"out": _saved(out), "kv": static_cache.kv.cpu().clone()}
        for path in graphs:
            eager_cache = cache.clone()
            eager, _ = _step(models[path], state, eager_cache, context="decode")
            replay[path] |= {"eager": _saved(eager), "eager_kv": eager_cache.kv.cpu().clone()}
        result["replays"].append(replay)
    del graphs
    return result


def _refusals(config, group, device: torch.device) -> dict[str, str | None]:
    from mxfuse.models.dsv41 import AttentionSublayer

    attempts = {
        "unsharded config": (dataclasses.replace(config, tp_size=1, tp_rank=0), device),
        "other rank": (dataclasses.replace(config, tp_rank=(config.tp_rank + 1) % config.tp_size), device),
    }
    if device.type == "cuda":
        attempts["nccl on cpu"] = (config, torch.device("cpu"))
    messages: dict[str, str | None] = {}
    for label, (cfg, dev) in attempts.items():
        try:
            AttentionSublayer(cfg, path="fused", device=dev, process_group=group)
        except ValueError as exc:
            messages[label] = str(exc)
        else:
            messages[label] = None
    return messages


def run_rank(rank: int, world: int, job: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    from mxfuse.models.dsv41 import Dsv41Config, load_sublayer, rank_config

    directory = job["dir"]
    if job["device"] == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        backend, extra = "nccl", {"device_id": device}
    else:
        torch.set_num_threads(1)
        device, backend, extra = torch.device("cpu"), "gloo", {}
    dist.init_process_group(
        backend,
        init_method=f"file://{directory}/store",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=job.get("collective_timeout", 300)),
        **extra,
    )
    group = dist.group.WORLD
    host = dist.new_group(backend="gloo")  # waits on the host, with no NCCL kernel spinning on a GPU
    full = Dsv41Config(**job["config"])
    config = rank_config(full, group)

    def load(path: str, cfg, pg, layout):
        return load_sublayer(
            job["checkpoint"], cfg, path=path, device=device, process_group=pg, next_pair_layout=layout
        )

    layout = job["next_pair_layout"]
    if layout == "consumer":
        layout = load("fused", config, group, None).wqkv_a.input_scale_layout.value
    models = {p: load(p, config, group, layout) for p in job["paths"]}
    result: dict[str, Any] = {
        "rank": rank,
        "world": world,
        "backend": dist.get_backend(group),
        "device": str(device),
        "uuid": (
            f"GPU-{str(torch.cuda.get_device_properties(device).uuid).removeprefix('GPU-')}"
            if device.type == "cuda"
            else None
        ),
        "local_groups": config.local_groups,
        "wo_b_in": models[job["paths"][0]].wo_b.in_features,
        "linear_backend": models[job["paths"][0]].wqkv_a.processed.backend,
        "next_pair_layout": layout,
        "eager": {},
        "records": {},
        "tp1": {},
        "partials": {},
        "graphs": {},
        "refusals": {},
    }
    for spec in job["cases"]:
        state, cache = step_inputs(full, spec, device)
        result["eager"][spec["name"]], result["records"][spec["name"]] = {}, {}
        for path, model in models.items():
            out, records = _step(model, state, cache.clone(), context=spec["context"])
            result["eager"][spec["name"]][path] = _saved(out)
            result["records"][spec["name"]][path] = _plain(records)
    if job.get("partials"):  # the same shard without the group: this rank's wo_b partial sums
        for path in job["paths"]:
            alone = load(path, config, None, layout)
            for spec in job["cases"]:
                state, cache = step_inputs(full, spec, device)
                out, _ = _step(alone, state, cache, context=spec["context"])
                result["partials"].setdefault(spec["name"], {})[path] = out.attn_out.cpu().clone()
            del alone
    for tokens in job.get("graphs", ()):
        result["graphs"][tokens] = _graph_runs(models, full, tokens, device)
    if job.get("refusals"):
        result["refusals"] = _refusals(config, group, device)
    if job.get("tp1") and rank == 0:  # no collective: the other ranks wait on the host meanwhile
        del models
        for path in job["paths"]:
            model = load(path, full, None, layout)
            for spec in job["cases"]:
                state, cache = step_inputs(full, spec, device)
                out, _ = _step(model, state, cache, context=spec["context"])
                result["tp1"].setdefault(spec["name"], {})[path] = _saved(out)
    # Every rank leaves together, so no rank tears its NCCL communicator down under a peer still using it.
    dist.barrier(group=host)
    dist.destroy_process_group()
    return result


def main(argv: list[str]) -> None:
    from gpumatrix.report.witnesses import record
    from mxfuse import witness

    # A rank is a fresh interpreter (no conftest): it hands its records to the path coverage of the test that
    # launched it itself, through the file the gpumatrix plugin names in the environment the rank inherits.
    witness.subscribe(record)
    rank, world, job_file = int(argv[0]), int(argv[1]), Path(argv[2])
    job = torch.load(job_file, weights_only=True)
    result = run_rank(rank, world, job)
    torch.save(result, job_file.parent / f"rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1:])
