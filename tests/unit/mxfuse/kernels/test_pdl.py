"""Programmatic dependent launch: the policy on the CPU, and the sm_90 code of every kernel that takes part.

Every kernel of the decode step is launched as a dependent: it waits (``griddepcontrol.wait``) before it
reads or writes anything and signals (``griddepcontrol.launch_dependents``) after that, except the grouped
wo_a (its dependent launches as it exits); the weight-streaming GEMMs may request their weight rows into L2
before the wait (``prefetch``). Neither can run here:
the launchers run with the policy forced on and every launch is compiled for sm_90, and the PTX is read.
"""

from __future__ import annotations

import json

import pytest
import torch
from sm90_compile import run_in_child

from gpumatrix import register
from mxfuse.kernels.pdl import OFF, PdlPolicy, pdl_policy, programmatic_launch

register(on=("cpu",), est_time=90)


def test_the_policy_is_off_on_the_cpu_and_follows_the_setting(monkeypatch):
    assert pdl_policy(torch.device("cpu")) is OFF
    monkeypatch.setattr("mxfuse.kernels.pdl._supported", lambda device: True)
    cpu = torch.device("cpu")
    assert pdl_policy(cpu) == PdlPolicy(signal=True, wait=True, prefetch=False)  # the default
    assert pdl_policy(cpu, kernel="attention.combine") == PdlPolicy(
        signal=False, wait=True
    )  # quiet by default
    with programmatic_launch(True, prefetch=True):
        assert pdl_policy(cpu, gemm=True) == PdlPolicy(signal=True, wait=True, prefetch=True)
        assert pdl_policy(cpu) == PdlPolicy(signal=True, wait=True, prefetch=False)  # only GEMMs prefetch
    with programmatic_launch(True, scope="gemm"):  # only the GEMMs are dependents; the rest signal
        assert pdl_policy(cpu, gemm=True) == PdlPolicy(signal=True, wait=True)
        assert pdl_policy(cpu) == PdlPolicy(signal=True)
    with pytest.raises(ValueError, match="scope must be one of"):
        with programmatic_launch(True, scope="some"):
            pass
    with programmatic_launch(True, prefetch=True):
        with programmatic_launch(False):
            assert pdl_policy(cpu) is OFF
        assert pdl_policy(cpu).wait
    with pytest.raises(TypeError, match="enabled must be a bool"):
        with programmatic_launch(1):
            pass
    with pytest.raises(TypeError, match="prefetch must be a bool"):
        with programmatic_launch(True, prefetch=None):
            pass
    with programmatic_launch(True):  # the default inside a setting too: waits, does not signal early
        assert pdl_policy(cpu, kernel="attention.combine") == PdlPolicy(signal=False, wait=True)
        assert pdl_policy(cpu) == PdlPolicy(signal=True, wait=True)
    with programmatic_launch(True, quiet=()):  # the combine signals at its start
        assert pdl_policy(cpu, kernel="attention.combine") == PdlPolicy(signal=True, wait=True)
    assert not pdl_policy(cpu, kernel="attention.combine").signal
    with pytest.raises(ValueError, match="kernel must be None or one of"):
        pdl_policy(cpu, kernel="combine")
    for bad in ("attention.combine", ("wo_a",)):
        with pytest.raises(ValueError, match="quiet must be a tuple of names from"):
            with programmatic_launch(True, quiet=bad):
                pass


_COMPILE = """
import json, torch
import mxfuse.kernels.pdl as pdl
from sm90_compile import compile_launches
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
pdl._supported = lambda device: True
PREFETCH = {prefetch}
QUIET = {quiet}
kept = []
def run():
    from mxfuse.gemm.weights import quantize_weight
    from mxfuse.kernels import gemm as mk
    from mxfuse.kernels.quantize.launch import launch_quantize
    from mxfuse.kernels.norm import launch_rms_norm
    from mxfuse.kernels.attention import MqaConfig, launch_mqa_decode, mqa_partials_numel
    from mxfuse.einsum import prepare_wo_a_weight
    from mxfuse.kernels.grouped_wo_a import launch_grouped_wo_a
    with pdl.programmatic_launch(True, prefetch=PREFETCH, **QUIET):
        wq, ws = quantize_weight(torch.randn(256, 512))
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(1, 512), scale_layout="deepgemm"), "deepgemm")
        out = torch.empty(1, 256, dtype=torch.bfloat16)
        mk.launch_mxfp8_gemm(a, wq, mk.weight_scale_kgroup_major(ws), out,
                             config=mk.GemmConfig("stream", 1, 8, 32, 1, 4, 1), w_scale_rows=ws)
        w = prepare_wo_a_weight(torch.randn(2, 128, 256))
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(1, 512), scale_layout="deepgemm"), "deepgemm")
        launch_grouped_wo_a(a, w, pair=MxTensor.empty(1, 256, scale_layout="deepgemm", device="cpu"))
        x = torch.randn(1, 512, dtype=torch.bfloat16)
        launch_rms_norm(x, None, 1e-6, y=torch.empty_like(x))
        launch_quantize(x, MxTensor.empty(1, 512, scale_layout="deepgemm", device="cpu"), hw_cvt=True)
        qq, kv = torch.randn(1, 64, 512).to(torch.bfloat16), torch.randn(1, 100, 512).to(torch.bfloat16)
        a, m = mqa_partials_numel(1, 64, 512, 3)
        launch_mqa_decode(qq, kv, torch.tensor([90]), partials=(torch.empty(a), torch.empty(m)), scale=0.1,
                          config=MqaConfig(splits=3), out=torch.empty(1, 64 * 512, dtype=torch.bfloat16))
compile_launches(run, keep=kept)
print(json.dumps({{name: k.asm["ptx"] for name, k in kept}}))
"""

_WAIT, _SIGNAL, _BULK = "griddepcontrol.wait", "griddepcontrol.launch_dependents", "cp.async.bulk.prefetch.L2"


# (prefetch, quiet): the default quiet combine with the prefetch, then the signalling combine without it.
@pytest.mark.parametrize("prefetch, quiet", [(True, None), (False, ())])
def test_dependents_wait_and_prefetch_and_their_predecessors_signal(prefetch, quiet):
    done = run_in_child(_COMPILE.format(prefetch=prefetch, quiet={} if quiet is None else {"quiet": quiet}))
    assert done.returncode == 0, done.stderr[-4000:]
    ptx = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("mxfp8_stream_kernel", "grouped_wo_a_kernel"):
        assert _WAIT in ptx[name], f"{name}: a dependent must wait"
        assert (_BULK in ptx[name]) == prefetch, f"{name}: weight rows requested before the wait: {prefetch}"
        if prefetch:  # the request comes before the wait
            assert ptx[name].index(_BULK) < ptx[name].index(_WAIT)
    # Every kernel of the step is a dependent: it waits, and signals its own dependents only after that
    # (a dependent's work before its wait must not run ahead of its predecessor's predecessor).
    signalling = ["mxfp8_stream_kernel", "rms_norm_kernel", "quantize_mxfp8_kernel"]
    signalling += [] if quiet is None else ["mqa_combine_kernel"]
    for name in signalling:
        assert _SIGNAL in ptx[name], f"{name}: should signal its dependents"
        assert _WAIT in ptx[name], f"{name}: should wait as a dependent"
        assert ptx[name].index(_WAIT) < ptx[name].index(_SIGNAL), f"{name}: signals before it waits"
    assert _WAIT in ptx["mqa_split_kernel"], "the attention's split kernel waits for the cache write"
    assert _WAIT in ptx["mqa_combine_kernel"], "the combine waits for the split kernel"
    # The grouped wo_a lets wo_b launch only as its programs exit (no early residency beside its stream),
    # and by default the combine lets the grouped wo_a launch only as it exits.
    assert _SIGNAL not in ptx["grouped_wo_a_kernel"]
    if quiet is None:
        assert _SIGNAL not in ptx["mqa_combine_kernel"], "the combine is quiet by default"


_BOUNDARY = """
import json, sys, torch
from sm90_compile import compile_launches
from mxfuse.kernels import pdl
pdl._supported = lambda device: True
from hc_inputs import make_inputs
from mxfuse.hc import empty_hc_boundary_outputs
from mxfuse.kernels.hc import HcWorkspace
from mxfuse.kernels.hc import launch as fused
kept = []
def run():
    inputs = make_inputs(1, 512, shifted=True)
    step, weights = inputs.args()
    out = empty_hc_boundary_outputs(1, 512, device="cpu", y=False, pair=True, scale_layout="deepgemm")
    fused.launch_boundary(step, weights, out, params=inputs.params, workspace=HcWorkspace("cpu"), hw_cvt=True)
compile_launches(run, keep=kept)
print(json.dumps([k.asm["ptx"] for _, k in kept]))
"""


def test_the_boundarys_a_items_load_their_weights_before_they_wait():
    """The default T = 1 boundary: its first launch (A items of one CUDA-core step) requests the projection
    weights, then waits, then signals, and reads x and R only after the wait; the second launch waits."""
    done = run_in_child(_BOUNDARY)
    assert done.returncode == 0, done.stderr[-4000:]
    first, second = json.loads(done.stdout.strip().splitlines()[-1])
    weights = first.index("ld.global.L1::evict_last")  # fn, kept in L2 for the other items
    streams = first.index("ld.global.L1::evict_first")  # x and R, read once
    wait, signal = first.index(_WAIT), first.index(_SIGNAL)
    assert weights < wait < signal and wait < streams
    assert _WAIT in second and _SIGNAL not in second
