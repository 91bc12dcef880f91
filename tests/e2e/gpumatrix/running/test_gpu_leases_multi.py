"""On a real 2-GPU machine: a 2-GPU test sees exactly the two GPUs it leased, and they talk.

After a 1-GPU test has bound its process's CUDA to one device, this test must run in a fresh child
process holding a 2-GPU lease; run it after the 1-GPU file in one process to take that path:

    pytest tests/kernels/gpumatrix/running/test_gpu_leases.py tests/e2e/gpumatrix/running/test_gpu_leases_multi.py -n 0
"""

from __future__ import annotations

import os

import pytest

from gpumatrix import register

register(on=("h100",), gpus=2, est_time=30)


@pytest.mark.parametrize("size", [1 << 10, 1 << 20])
def test_two_leased_gpus_are_exactly_the_visible_ones_and_exchange_data(size: int) -> None:
    import torch

    leased = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    assert len(set(leased)) == len(leased) >= 2
    visible = [
        f"GPU-{str(torch.cuda.get_device_properties(i).uuid).removeprefix('GPU-')}"
        for i in range(torch.cuda.device_count())
    ]
    assert visible == leased
    sent = torch.arange(size, device="cuda:0", dtype=torch.float32)
    received = sent.to("cuda:1")
    assert received.device == torch.device("cuda", 1)
    assert torch.equal(received.cpu(), sent.cpu())
    block = received[:1024].reshape(32, 32)
    assert torch.equal(block @ torch.eye(32, device="cuda:1"), block)  # exact: the second GPU computed
