"""On a real GPU machine: each test's torch sees exactly the GPUs the plugin leased it, and they work.

Several tests run in one process, so all but the first run after CUDA has bound that process to its
first lease: they must be leased exactly those devices again. Run it in parallel too:

    pytest tests/kernels/gpumatrix/running/test_gpu_leases.py tests/e2e/gpumatrix/running/test_gpu_leases_multi.py -n 2
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpumatrix import register

register(on=("h100",), gpus=1, est_time=23, gpu="exclusive")  # about leases: it holds its GPU alone


def _leased() -> list[str]:
    leased = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    assert leased and all(device.startswith("GPU-") for device in leased), (
        leased
    )  # real devices lease by UUID
    return leased


def _visible_uuids() -> list[str]:
    import torch

    return [
        f"GPU-{str(torch.cuda.get_device_properties(i).uuid).removeprefix('GPU-')}"
        for i in range(torch.cuda.device_count())
    ]


@pytest.mark.parametrize("size", [256, 1024, 4096, 123])
def test_torch_sees_exactly_the_leased_gpus_and_computes_on_them(size: int) -> None:
    import torch

    assert _visible_uuids() == _leased()
    x = torch.randn(size, size, device="cuda")
    eye = torch.eye(size, device="cuda")
    assert torch.equal(x @ eye, x)  # fp32 GEMM with an identity is exact: the device really computed


# Run in a fresh interpreter: this process's CUDA is already initialised by the tests above.
_DRIVER_PROBE = """
import ctypes, sys
from gpumatrix.running.leases import cuda_initialized
import torch
assert not cuda_initialized(), "importing torch initialised CUDA"
libcuda = ctypes.CDLL("libcuda.so.1")
assert not cuda_initialized(), "loading libcuda counted as initialising it"
assert libcuda.cuInit(0) == 0
assert cuda_initialized(), "cuInit went unnoticed"
count = ctypes.c_int(0)
assert libcuda.cuDeviceGetCount(ctypes.byref(count)) == 0
print(count.value)
"""


def test_the_cuda_binding_probe_matches_the_real_driver() -> None:
    first = _leased()[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": first}
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER_PROBE], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"]  # the driver honoured CUDA_VISIBLE_DEVICES=GPU-<uuid>
