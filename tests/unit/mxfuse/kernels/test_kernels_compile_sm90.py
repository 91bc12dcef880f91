"""Every Triton kernel compiles for sm_90 (Hopper) on this CPU-only machine, through its real launcher.

The interpreter tests check what the kernels compute; they cannot see what only the GPU compiler refuses
(a non-constexpr global read inside a kernel, a string passed to a nested jit function, a layout sm_90
cannot lower), which otherwise surfaces on the first GPU run. Each family runs its launchers with CPU
tensors in a child process where every launch is compiled for sm_90 instead (tests/support/sm90_compile.py).
"""

from __future__ import annotations

import json

import pytest
from sm90_compile import run_in_child

from gpumatrix import register

register(on=("cpu",), est_time=60)

_PRELUDE = """
import json, sys, torch
from sm90_compile import compile_launches
from mxfuse.formats import MxTensor, ScaleLayout, ScaleRounding, quantize_mxfp8_reference
torch.manual_seed(0)
def run():
{body}
print(json.dumps(compile_launches(run)))
"""

FAMILIES = {
    "quantize_mxfp8": (
        """
    from mxfuse.kernels.quantize.launch import launch_quantize
    x = torch.randn(5, 256, dtype=torch.bfloat16)
    for layout in ("e8m0", "deepgemm", "swizzled_128x4"):
        launch_quantize(x, MxTensor.empty(5, 256, scale_layout=layout, device="cpu"), hw_cvt=True)
""",
        {"quantize_mxfp8_kernel"},
    ),
    "mxfp8_gemm": (
        """
    from mxfuse.gemm.weights import quantize_weight
    from mxfuse.kernels import gemm as mk
    wq, ws = quantize_weight(torch.randn(256, 512))
    wst = mk.weight_scale_kgroup_major(ws)
    configs = [None, mk.GemmConfig("gemv", 4, 4, 32, 2, 4, 3, bits=True), mk.GemmConfig("dq16", 64, 128, 2, 1, 8, 3),
               mk.GemmConfig("stream", 4, 64, 8, 2, 4, 1)]
    for m in (1, 4, 64, 300):
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(m, 512), scale_layout="deepgemm"), "deepgemm")
        for config in configs:
            if config is not None and config.kind in ("gemv", "stream") and m > 4:
                continue
            out = torch.empty(m, 256, dtype=torch.bfloat16)
            mk.launch_mxfp8_gemm(a, wq, wst, out, config=config)
""",
        {"mxfp8_gemv_kernel", "mxfp8_stream_kernel", "mxfp8_mma_kernel", "mxfp8_dq16_kernel"},
    ),
    "grouped_wo_a": (
        """
    from mxfuse.einsum import prepare_wo_a_weight
    from mxfuse.kernels.grouped_wo_a import launch_grouped_wo_a
    w = prepare_wo_a_weight(torch.randn(2, 128, 256))
    for t in (1, 300):
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(t, 512), scale_layout="deepgemm"), "deepgemm")
        z = torch.empty(t, 2, 128, dtype=torch.bfloat16)
        launch_grouped_wo_a(a, w, z=z, pair=MxTensor.empty(t, 256, scale_layout="deepgemm", device="cpu"))
""",
        {"grouped_wo_a_kernel"},
    ),
    "hc_boundary": (
        """
    from hc_inputs import make_inputs
    from mxfuse.hc import empty_hc_boundary_outputs
    from mxfuse.kernels.hc import launch as fused, steps
    from mxfuse.kernels.hc import HcConfig, HcProjection, HcWeights, HcWorkspace
    # two launches, the second a programmatic dependent one on 16 warps whose one-step finish loads w first
    two = HcConfig(16, 64, 2, 16, 4, 0, 8, 2, warps_f=16)
    # one launch whose one-row Sinkhorn items sum their records after the A items
    one = HcConfig(1, 32, 1, 1, 64, 0, 4, 1, "fma", 1, 0, 1)
    for t, shifted, config in ((1, False, None), (1, True, None), (129, False, None), (129, True, None),
                               (3, False, two), (2, True, one)):
        inputs = make_inputs(t, 512, shifted=shifted)
        step, weights = inputs.args()
        if t == 129:
            weights = HcWeights(HcProjection.prepare(inputs.fn), inputs.scale, inputs.base, inputs.norm_weight)
        out = empty_hc_boundary_outputs(t, 512, device="cpu", y=True, pair=True, scale_layout="deepgemm")
        fused.launch_boundary(step, weights, out, params=inputs.params, workspace=HcWorkspace("cpu"),
                              config=config, hw_cvt=True)
        ws = HcWorkspace("cpu")
        steps.launch_post(step, residual_out=out.residual, hw_cvt=True)
        steps.launch_mixes(out, inputs.args()[1], params=inputs.params, workspace=ws, hw_cvt=True)
        collapse = out.pre if inputs.prev_pre is None else inputs.prev_pre
        steps.launch_norm(out.residual, collapse, inputs.norm_weight, params=inputs.params, y_out=out.y,
                          workspace=ws, hw_cvt=True, split=inputs.prev_pre is not None)
""",
        {"hc_kernel"},
    ),
    "mqa_decode": (
        """
    from mxfuse.kernels.attention import MqaConfig, choose_mqa_config, launch_mqa_decode, mqa_partials_numel
    for dim, heads, new in ((512, 64, 1), (64, 16, 4)):
        q = torch.randn(2 * new, heads, dim).to(torch.bfloat16)
        kv = torch.randn(2, 100, dim).to(torch.bfloat16)
        lens = torch.tensor([3, 90])
        out = torch.empty(2 * new, heads * dim, dtype=torch.bfloat16)
        configs = (choose_mqa_config(2, new, heads, dim), MqaConfig(d_parts=2, splits=3, pdl=True),
                   MqaConfig(d_parts=1, splits=1), MqaConfig(block_n=16, block_m=16, splits=70, num_stages=1))
        for cfg in configs:
            a, m = mqa_partials_numel(2, new * heads, dim, cfg.splits)
            launch_mqa_decode(q, kv, lens, partials=(torch.empty(a), torch.empty(m)), scale=0.1, config=cfg, out=out)
    # The combine writing wo_a's MxTensor (deepgemm words, then e8m0 words with FLOOR), bf16 out off.
    q, kv = torch.randn(2, 64, 512).to(torch.bfloat16), torch.randn(2, 100, 512).to(torch.bfloat16)
    a, m = mqa_partials_numel(2, 64, 512, 3)
    for layout, rounding in (("deepgemm", "rceil"), ("e8m0", "floor")):
        pair = MxTensor.empty(2, 64 * 512, scale_layout=layout, rounding=rounding, device="cpu")
        launch_mqa_decode(q, kv, torch.tensor([3, 90]), partials=(torch.empty(a), torch.empty(m)), scale=0.1,
                          config=MqaConfig(splits=3), pair=pair)
""",
        {"mqa_split_kernel", "mqa_combine_kernel"},
    ),
    "rms_norm": (
        """
    from mxfuse.kernels.norm import launch_rms_norm
    for cols, weighted in ((1024, True), (512, False), (300, True)):
        x = torch.randn(3, 2 * cols).to(torch.bfloat16)[:, :cols]
        w = torch.rand(cols).to(torch.bfloat16) if weighted else None
        launch_rms_norm(x, w, 1e-6, y=torch.empty(3, cols, dtype=torch.bfloat16))
    x = torch.randn(3, 1024).to(torch.bfloat16)
    for layout in ("deepgemm", "e8m0", "swizzled_128x4"):
        pair = MxTensor.empty(3, 1024, scale_layout=layout, device="cpu")
        launch_rms_norm(x, None, 1e-6, y=torch.empty(3, 1024, dtype=torch.bfloat16), pair=pair)
    # q's heads and the KV rows into the cache in one launch
    heads, kv_x = torch.randn(64, 512).to(torch.bfloat16), torch.randn(2, 512).to(torch.bfloat16)
    launch_rms_norm(heads, None, 1e-6, y=torch.empty(64, 512, dtype=torch.bfloat16),
                    lens=torch.zeros(2, dtype=torch.int32),
                    cache_rows=(kv_x, torch.rand(512).to(torch.bfloat16), torch.empty(2, 8, 512, dtype=torch.bfloat16)))
""",
        {"rms_norm_kernel"},
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_kernels_compile_for_sm90(family):
    body, expected = FAMILIES[family]
    done = run_in_child(_PRELUDE.format(body=body))
    assert done.returncode == 0, f"sm_90 compilation failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    compiled = json.loads(done.stdout.strip().splitlines()[-1])
    assert expected <= set(compiled), (
        f"expected {sorted(expected)} among the compiled kernels; got {compiled}"
    )
