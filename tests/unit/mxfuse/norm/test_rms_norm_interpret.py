"""The RMSNorm kernel's logic on the CPU: the Triton interpreter against a float64 reference and the
reference quantizer.

The kernel runs under the interpreter in a child process (``interpreter.run_interpreted``), through
``launch_rms_norm`` on CPU tensors with the integer conversions (``hw_cvt=False``: the interpreter's own
fp32 -> bf16 cast truncates and its fp8 cast rounds half-up).
Rows sit in NaN-padded wider buffers; y, the codes and the scale storage are poisoned first, twice with
two poisons for the pair, so a byte the kernel leaves unwritten cannot pass.
"""

from __future__ import annotations

import pytest
import torch
from interpreter import run_interpreted

from gpumatrix import register
from gpumatrix.compare import assert_same_bits, assert_ulp_close
from mxfuse.formats import quantize_mxfp8_reference, scale_spec, scale_storage_view

register(on=("cpu",), est_time=30)

CASES = {  # name: (rows, cols, weighted, row stride, pair layout or None, rounding)
    "one row of 1024, weighted, deepgemm pair": (1, 1024, True, 1024, "deepgemm", "rceil"),
    "heads of 512, no weight": (64, 512, False, 512, None, "rceil"),
    "300 columns (masked)": (5, 300, True, 300, None, "rceil"),
    "a column slice, e8m0 pair": (4, 512, True, 1536, "e8m0", "floor"),
    "5 rows of 96, swizzled pair (128 padding rows)": (5, 96, True, 96, "swizzled_128x4", "rceil"),
    "3 rows of 160, e8m0 bytes pair": (3, 160, False, 160, "e8m0", "rceil"),
}
POISONS = (0xA5, 0x5A)

_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels import norm as m
cases = torch.load(sys.argv[1])
out = {"interpreted": type(m.rms_norm_kernel).__name__}
for name, (x, w, stride, layout, rounding) in cases.items():
    rows, cols = x.shape
    buf = torch.full((rows, stride), float("nan"), dtype=torch.bfloat16)
    buf[:, :cols] = x
    view = buf[:, :cols]
    y = torch.full((rows, cols), float("nan"), dtype=torch.bfloat16)
    m.launch_rms_norm(view, w, 1e-6, y=y, hw_cvt=False)
    out[name] = {"y": y}
    if layout is not None:
        for poison in (0xA5, 0x5A):
            pair = MxTensor.empty(rows, cols, scale_layout=layout, rounding=rounding, device="cpu")
            pair.data.view(torch.uint8).fill_(poison)
            pair.scale_bytes().fill_(poison)
            m.launch_rms_norm(view, w, 1e-6, pair=pair, hw_cvt=False)
            out[name][poison] = (pair.data.view(torch.uint8), pair.scale_bytes())
# Into a KV cache: 3 sequences x 2 new tokens at lens (0, 5, 7) of capacity 8 (the last token falls outside).
x, w = cases["a column slice, e8m0 pair"][:2]
x6 = torch.cat([x, x[:2] * 0.5])  # 6 rows of 512
kv = torch.full((3, 8, 512), -7.0, dtype=torch.bfloat16)
m.launch_rms_norm(x6, w, 1e-6, y=kv, lens=torch.tensor([0, 5, 7], dtype=torch.int32), hw_cvt=False)
y6 = torch.full((6, 512), float("nan"), dtype=torch.bfloat16)
m.launch_rms_norm(x6, w, 1e-6, y=y6, hw_cvt=False)
out["cache"] = {"kv": kv, "y": y6}
# The same six rows into a cache in the launch of the unweighted 64 heads of 512 (two sets of rows).
heads, _ = cases["heads of 512, no weight"][:2]
kv2 = torch.full((3, 8, 512), -7.0, dtype=torch.bfloat16)
y_heads = torch.full((64, 512), float("nan"), dtype=torch.bfloat16)
m.launch_rms_norm(heads, None, 1e-6, y=y_heads, lens=torch.tensor([0, 5, 7], dtype=torch.int32), hw_cvt=False,
                  cache_rows=(x6, w, kv2))
alone = torch.full((64, 512), float("nan"), dtype=torch.bfloat16)
m.launch_rms_norm(heads, None, 1e-6, y=alone, hw_cvt=False)
out["two sets"] = {"kv": kv2, "y": y_heads, "alone": alone}
torch.save(out, sys.argv[2])
"""


def _inputs(name: str):
    rows, cols, weighted, _, _, _ = CASES[name]
    g = torch.Generator().manual_seed(len(name))
    x = (torch.randn(rows, cols, generator=g) * 2).to(torch.bfloat16)
    x[0, :7] = torch.tensor([1e-30, -3e-39, 448.0, -0.0, 2.0**-126, 65504.0, -1.5])  # subnormals, big values
    w = (torch.rand(cols, generator=g) + 0.5).to(torch.bfloat16) if weighted else None
    return x, w


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    def cases():
        return {n: (*_inputs(n), CASES[n][3], CASES[n][4], CASES[n][5]) for n in CASES}

    return run_interpreted(tmp_path_factory, "rms_norm_interpret", _WORKER, cases, timeout=600)


def test_kernel_ran_interpreted(interpreted) -> None:
    assert interpreted["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("name", list(CASES))
def test_y_matches_float64(interpreted, name: str) -> None:
    x, w = _inputs(name)
    xd = x.double()
    ref = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + 1e-6)
    if w is not None:
        ref = ref * w.double()
    assert_ulp_close(interpreted[name]["y"], ref.to(torch.bfloat16), max_ulp=1, name=name)


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][4] is not None])
def test_the_pair_is_the_reference_quantization_of_its_y(interpreted, name: str) -> None:
    """Every byte, padding included, under both poisons: the pair ``quantize_mxfp8_reference`` makes of the
    y the same kernel writes."""
    rows, cols, _, _, layout, rounding = CASES[name]
    y = interpreted[name]["y"]
    want_q, want_s = quantize_mxfp8_reference(y, rounding=rounding, scale_layout=layout)
    spec = scale_spec(rows, cols, scale_layout=layout)
    want_storage = scale_storage_view(want_s, spec).contiguous().view(torch.uint8).flatten()
    for poison in POISONS:
        q, storage = interpreted[name][poison]
        assert_same_bits(q, want_q.view(torch.uint8), name=f"{name}: codes (poison {poison:#x})")
        assert_same_bits(storage, want_storage, name=f"{name}: scale storage (poison {poison:#x})")


def test_rows_written_into_a_cache_land_at_their_positions(interpreted) -> None:
    """Row b * 2 + s goes to cache position lens[b] + s, bit for bit the row the plain launch writes; every
    other cache row, and a position past the capacity, is left as it was."""
    kv, y = interpreted["cache"]["kv"], interpreted["cache"]["y"]
    want = torch.full((3, 8, 512), -7.0, dtype=torch.bfloat16)
    for row, (b, pos) in enumerate([(0, 0), (0, 1), (1, 5), (1, 6), (2, 7), (2, 8)]):
        if pos < 8:
            want[b, pos] = y[row]
    assert not torch.isnan(y).any()
    assert_same_bits(kv, want, name="cache after the norm")


def test_two_sets_of_rows_in_one_launch_write_what_two_launches_write(interpreted) -> None:
    """The per-head rows and the rows into the cache in one launch: each set the bytes of its own launch."""
    got, cache = interpreted["two sets"], interpreted["cache"]
    assert not torch.isnan(got["alone"]).any()
    assert_same_bits(got["y"], got["alone"], name="heads: one launch of both vs alone")
    assert_same_bits(got["kv"], cache["kv"], name="cache: one launch of both vs alone")


def test_launcher_rejects_bad_input() -> None:
    from mxfuse.kernels.norm import rms_norm_rows

    with pytest.raises(TypeError, match="x must be a floating-point"):
        rms_norm_rows(torch.zeros(2, 4, dtype=torch.int32), None, eps=1e-6)
    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        rms_norm_rows(torch.zeros(2, 4), None, eps=1e-6)
    from mxfuse.kernels.norm import rms_norm_into_cache

    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        rms_norm_into_cache(torch.zeros(2, 4), None, eps=1e-6, kv=torch.zeros(1, 4, 4), lens=torch.zeros(1))
    from mxfuse.kernels.norm import rms_norm_rows_and_cache

    with pytest.raises(ValueError, match="x must be on a CUDA device"):
        rms_norm_rows_and_cache(
            torch.zeros(2, 4), None, eps=1e-6, kv_x=torch.zeros(1, 4), kv_weight=None, kv=torch.zeros(1, 4, 4),
            lens=torch.zeros(1),
        )  # fmt: skip
