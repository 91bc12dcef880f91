"""The L2 prefetcher's host side on the CPU: what a fork requests, argument errors, and the kernel's sm_90
code (each mode's prefetch instruction is in the PTX; the interpreter cannot run inline PTX)."""

from __future__ import annotations

import json

import pytest
import torch
from sm90_compile import run_in_child

from gpumatrix import register
from mxfuse.kernels.l2_prefetch import MODES, L2Prefetcher

register(on=("cpu",), est_time=20)


def test_a_fork_requests_tensors_in_order_until_the_budget_is_spent():
    p = L2Prefetcher("cpu", fraction=0.5, l2_bytes=1000)
    a, b, c = torch.empty(300, dtype=torch.uint8), torch.empty(200, dtype=torch.bfloat16), torch.empty(8)
    assert p.budget == 500
    planned = p.plan([a, b, c])
    assert [(t is a, t is b, n) for t, n in planned] == [(True, False, 300), (False, True, 200)]
    # b is 400 bytes: only its first 200 fit; c gets nothing
    assert L2Prefetcher("cpu", l2_bytes=10_000).plan([a, b, c]) == [(a, 300), (b, 400), (c, 32)]


def test_on_the_cpu_nothing_is_launched_and_nothing_is_requested():
    p = L2Prefetcher("cpu")
    assert (p.active, p.l2_bytes, p.budget) == (False, 0, 0)
    assert p.plan([torch.empty(64)]) == []
    assert p.fork([torch.empty(64)]) == 0
    p.join()  # no fork outstanding: nothing to wait for
    off = L2Prefetcher("cpu", enabled=False, l2_bytes=1000)
    assert off.budget == 0 and off.plan([torch.empty(64)]) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fraction": 0}, "fraction must be a number in"),
        ({"fraction": 1.5}, "fraction must be a number in"),
        ({"fraction": True}, "fraction must be a number in"),
        ({"mode": "lines"}, "mode must be one of"),
        ({"chunk": 24}, "chunk must be a power of two >= 16"),
        ({"chunk": 8}, "chunk must be a power of two >= 16"),
        ({"l2_bytes": -1}, "l2_bytes must be an int >= 0"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L2Prefetcher("cpu", **kwargs)


def test_bad_tensors_are_refused_before_anything_is_requested():
    p = L2Prefetcher("cpu", l2_bytes=1 << 20)
    with pytest.raises(TypeError, match=r"tensors\[1\] must be a torch.Tensor"):
        p.plan([torch.empty(4), "w"])
    with pytest.raises(ValueError, match=r"tensors\[0\] must be contiguous"):
        p.plan([torch.empty(4, 4).t()])
    with pytest.raises(ValueError, match=r"tensors\[0\] must be on the prefetcher's device cpu; got meta"):
        p.plan([torch.empty(4, device="meta")])
    with pytest.raises(TypeError, match="enabled must be a bool"):
        L2Prefetcher("cpu", enabled=1)


_COMPILE = """
import json, sys, torch
from sm90_compile import compile_launches
from mxfuse.kernels.l2_prefetch import launch_prefetch_l2
kept = []
def run():
    w = torch.empty(5000, dtype=torch.float8_e4m3fn)
    for mode in {modes!r}:
        launch_prefetch_l2(w, 4999, mode=mode, chunk=4096)
compile_launches(run, keep=kept)
print(json.dumps([k.asm["ptx"] for _, k in kept]))
"""


def test_each_mode_compiles_for_sm90_to_its_prefetch_instruction():
    done = run_in_child(_COMPILE.format(modes=MODES), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ptx = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(ptx) == len(MODES)
    wanted = {
        "bulk": "cp.async.bulk.prefetch.L2.global",
        "line": "prefetch.global.L2 [",
        "line_last": "prefetch.global.L2::evict_last",
    }
    for mode, code in zip(MODES, ptx, strict=True):
        assert wanted[mode] in code, f"{mode}: no {wanted[mode]} in the PTX"
        others = [w for m, w in wanted.items() if m != mode and w not in wanted[mode]]
        assert not any(o in code for o in others), f"{mode}: another mode's instruction in the PTX"
