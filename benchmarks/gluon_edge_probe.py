"""Which part of the Gluon GEMM's edge problem (``gluon_gemm_sweep.edge_problem``) a launch gets wrong:
``python -m benchmarks.gluon_edge_probe`` (a GPU with the ``gluon`` backend; ``benchmarks/gluon_gemm_check.sh``
runs it).

The same 16 x 256 x 2048 problem with one of its features changed at a time (the weight's two extreme
K groups, its NaN code, the activation's scale spread), each launched once with the default-like
configuration and compared with the torch backend: calc_diff over the outputs (NaN as 0), whether NaN sits
where the reference has it, and the four worst columns by relative error. A diagnosis, not a test.
"""

import torch

from gpumatrix.compare import calc_diff
from mxfuse.formats import MxTensor, scale_to_layout
from mxfuse.gemm import mxfp8_gemm
from mxfuse.gemm.weights import MxWeight
from mxfuse.kernels.gemm.gluon_launch import (
    GluonConfig,
    GluonOperands,
    gluon_weight_scale,
    launch_gluon_decode,
)

m, n, k = 16, 256, 2048
cases = (
    ("as swept", 246, 10, True, 100, 151),
    ("group 0 at 200", 200, 10, True, 100, 151),
    ("group 1 at 100", 246, 100, True, 100, 151),
    ("no NaN code", 246, 10, False, 100, 151),
    ("plain groups 0/1", 127, 127, False, 100, 151),
    ("act 120..135", 246, 10, False, 120, 136),
    ("group 0 at 160", 160, 127, False, 100, 151),
    ("group 0 at 140", 140, 127, False, 100, 151),
)
cases += tuple((f"{name}, group 0 clamped", *rest) for name, *rest in cases[:4])
for name, w0, w1, nan_code, a_lo, a_hi in cases:
    clamp = name.endswith("clamped")
    g = torch.Generator(device="cuda").manual_seed(11)
    a = (torch.rand(m, k, generator=g, device="cuda") * 3.5 - 1.75).to(torch.float8_e4m3fn)
    w = (torch.rand(n, k, generator=g, device="cuda") * 3.5 - 1.75).to(torch.float8_e4m3fn)
    sa = torch.randint(a_lo, a_hi, (m, k // 32), generator=g, device="cuda").to(torch.uint8)
    sw = torch.randint(100, 151, (n, k // 32), generator=g, device="cuda").to(torch.uint8)
    sw[:, 0], sw[:, 1] = w0, w1
    if clamp:
        sa[:, 0] = sa[:, 0].clamp(max=108)
    if nan_code:
        w.view(torch.uint8)[5, 40] = 0x7F
    pair = MxTensor(a, scale_to_layout(sa, scale_layout="deepgemm"), "deepgemm")
    weight = MxWeight(MxTensor(w, sw, "e8m0"), gluon_weight_scale(w, sw), "gluon")
    ref = mxfp8_gemm(pair, weight, backend="torch").float()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    launch_gluon_decode(GluonOperands(pair, w, weight.scale, out), config=GluonConfig(64, 16, 128, 1, 4))
    torch.cuda.synchronize()
    o = out.float()
    d = calc_diff(o.nan_to_num(0.0), ref.nan_to_num(0.0))
    rel = ((o - ref).abs() / ref.abs().clamp_min(1e-30)).nan_to_num(0.0)
    worst = rel.amax(dim=0).topk(4)
    print(
        f"{name:18s} calc_diff={d:.2e} nan_match={torch.equal(o.isnan(), ref.isnan())} worst cols "
        f"{worst.indices.tolist()} rel {[f'{v:.1e}' for v in worst.values.tolist()]} "
        f"row0 max {ref[0].nan_to_num(0).abs().max().item():.2e}",
        flush=True,
    )
