"""The RMSNorm kernel's logic on the CPU: the Triton interpreter against a float64 reference.

Triton decides at import whether a kernel is interpreted, so the kernel runs in a child process started
with TRITON_INTERPRET=1, which launches ``_rms_norm_kernel`` directly on CPU tensors (the launcher itself
insists on CUDA): rows in NaN-padded wider buffers, outputs NaN-poisoned.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mxfuse
from gpumatrix import register
from gpumatrix.compare import assert_ulp_close

register(on=("cpu",), est_time=20)

CASES = {  # name: (rows, cols, weighted, row stride)
    "one row of 1024, weighted": (1, 1024, True, 1024),
    "heads of 512, no weight": (64, 512, False, 512),
    "300 columns (masked)": (5, 300, True, 300),
    "a column slice": (4, 512, True, 1536),
}

_WORKER = """
import sys, torch, triton
from mxfuse.kernels import rms_norm as m
cases = torch.load(sys.argv[1])
out = {"interpreted": type(m._rms_norm_kernel).__name__}
for name, (x, w, stride) in cases.items():
    rows, cols = x.shape[0], x.shape[1]
    buf = torch.full((rows, stride), float("nan"), dtype=torch.bfloat16)
    buf[:, :cols] = x
    y = torch.full((rows, cols), float("nan"), dtype=torch.bfloat16)
    block = triton.next_power_of_2(cols)
    m._rms_norm_kernel[(rows,)](buf, w if w is not None else buf, y, stride, cols, cols, 1e-6,
                                HAS_WEIGHT=w is not None, BLOCK=block)
    out[name] = y
torch.save(out, sys.argv[2])
"""


def _inputs(name: str):
    rows, cols, weighted, _ = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    x = (torch.randn(rows, cols, generator=g) * 2).to(torch.bfloat16)
    w = (torch.rand(cols, generator=g) + 0.5).to(torch.bfloat16) if weighted else None
    return x, w


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("rms_norm")
    payload = {name: (*_inputs(name), CASES[name][3]) for name in CASES}
    torch.save(payload, tmp / "cases.pt")
    src = str(Path(mxfuse.__file__).resolve().parents[1])
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", _WORKER, str(tmp / "cases.pt"), str(tmp / "out.pt")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, f"interpreter run failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return torch.load(tmp / "out.pt")


def test_kernel_ran_interpreted(interpreted) -> None:
    assert interpreted["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("name", list(CASES))
def test_matches_float64(interpreted, name: str) -> None:
    x, w = _inputs(name)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6)
    if w is not None:
        ref = ref * w.double()
    # The interpreter's fp32 -> bf16 cast truncates (see test_quantize_mxfp8_interpret.py): one ulp.
    assert_ulp_close(interpreted[name], ref.to(torch.bfloat16), max_ulp=1, name=name)


def test_launcher_rejects_bad_input() -> None:
    from mxfuse.kernels.rms_norm import rms_norm_rows

    with pytest.raises(TypeError, match="x must be a floating-point"):
        rms_norm_rows(torch.zeros(2, 4, dtype=torch.int32), None, eps=1e-6)
    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        rms_norm_rows(torch.zeros(2, 4), None, eps=1e-6)
