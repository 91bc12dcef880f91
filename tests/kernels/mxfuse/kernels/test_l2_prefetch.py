"""The L2 prefetch kernel and the prefetcher's side stream on the GPU.

A prefetch is a hint: what can be checked is that every mode launches for any byte count (sizes that are
not whole requests, one byte, a tensor's whole storage), writes nothing (the tensor and its neighbour in
the same allocation keep every byte), and that a fork and join captured in a CUDA graph replay with the
consumer reading the same bits. Whether it speeds anything up is ``benchmarks/l2_prefetch.py``'s question.
"""

from __future__ import annotations

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.kernels.l2_prefetch import MODES, L2Prefetcher, launch_prefetch_l2

register(
    on=("h100", "b200", "gb300", "5090"), gpus=1, est_time={"h100": 1, "b200": 20, "gb300": 20, "5090": 20}
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nbytes", [1, 15, 16, 4097, 3 * 2**20 + 5, 8 * 2**20])
def test_every_mode_launches_and_writes_nothing(mode, nbytes):
    g = torch.Generator(device="cuda").manual_seed(nbytes)
    store = torch.randint(0, 256, (8 * 2**20 + 4096,), dtype=torch.uint8, device="cuda", generator=g)
    before = store.clone()
    w = store[: 8 * 2**20].view(torch.float8_e4m3fn)  # the neighbour: the 4096 bytes after it
    launch_prefetch_l2(w, nbytes, mode=mode, chunk=4096)
    torch.cuda.synchronize()
    assert_same_bits(store, before, name=f"{mode}, {nbytes} bytes")


def test_a_fork_and_join_captured_in_a_graph_replay_with_the_same_result():
    p = L2Prefetcher("cuda", fraction=0.5)
    assert p.active and p.budget == p.l2_bytes // 2
    w = torch.randn(2048, 4096, device="cuda").to(torch.bfloat16)
    x = torch.randn(4, 4096, device="cuda").to(torch.bfloat16)
    expected = x @ w.t()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture stream, as capture wants
        p.fork([w])
        out = x @ w.t()
        p.join()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert p.fork([w]) == 2048 * 4096 * 2  # 16 MB: within half of any sm_90 L2
        out = x @ w.t()
        p.join()
    x.copy_(torch.randn(4, 4096, device="cuda").to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert_same_bits(out, x @ w.t(), name="replay")
    assert not torch.equal(out, expected)  # the replay computed on the new x
