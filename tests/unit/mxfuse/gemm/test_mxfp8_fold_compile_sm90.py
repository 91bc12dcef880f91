"""The folded-scale kernels compile for sm_90 (Hopper) on this CPU-only machine, and the design the sweep
tries first compiles the way it was designed to (tests/support/sm90_compile.py compiles each launch).

Every variant the sweep may time compiles: fp16 with Triton's cast, moved bits and the inline
``cvt.rn.f16x2.e4m3x2``; bf16; the activation folded in the loop or by a first launch; the weight's scales
in its operand or on each group's sum; both operand orders; PDL; the activation-folding kernel; the
grouped wo_a on the fold mainloop. For the prefolded design (``act="prefold"``, ``wscale="operand"``)
the compiled code must show what it exists for: the weight tile converted in registers and fed to the
wgmma as its A operand (a ``dot_op`` tensor operand, not a shared-memory copy), the main loop's wgmmas
left in flight (a ``warp_group_dot_wait`` with pendings > 0), and no local-memory spills.
"""

from __future__ import annotations

import json

import pytest
from sm90_compile import run_in_child

from gpumatrix import register

register(on=("cpu",), est_time=120)


# name: GemmConfig fields of the fold launch (besides block_m = 16, split_k = 2, num_warps = 4, num_stages = 3)
VARIANTS = {
    "prefold f16 cast": {"act": "prefold", "cvt": "cast", "block_n": 64, "block_g": 4},
    "prefold f16 cast bn128 w8": {
        "act": "prefold",
        "cvt": "cast",
        "block_n": 128,
        "block_g": 4,
        "num_warps": 8,
    },
    "prefold f16 asm": {"act": "prefold", "cvt": "asm", "block_n": 64, "block_g": 4},
    "prefold f16 bits": {"act": "prefold", "cvt": "bits", "block_n": 64, "block_g": 4},
    "prefold bf16": {"act": "prefold", "operand": "bf16", "block_n": 64, "block_g": 4},
    "prefold pdl": {"act": "prefold", "block_n": 64, "block_g": 4, "pdl": True},
    "prefold m64": {"act": "prefold", "block_n": 64, "block_g": 4, "block_m": 64},
    "prefold no swap": {"act": "prefold", "block_n": 64, "block_g": 2, "swap_ab": False},
    "inloop operand": {"act": "inloop", "block_n": 64, "block_g": 4},
    "inloop acc": {"act": "inloop", "wscale": "acc", "block_n": 64, "block_g": 4},
}
ASYNC_DESIGN = ("prefold f16 cast", "prefold f16 cast bn128 w8", "prefold bf16", "prefold pdl", "prefold m64")

_CHILD = """
import json, os, re, subprocess, sys, tempfile, torch, triton
from sm90_compile import compile_launches
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
from mxfuse.kernels.gemm import launch as mf
from mxfuse.kernels.gemm.configs import GemmConfig
from mxfuse.kernels.splitk import split_workspace
variants = json.loads(sys.argv[1])
cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
report = {}

def facts(name, compiled):
    ttgir = compiled.asm["ttgir"]
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    regs = re.search(r"REG:(\\d+)", usage)
    local = re.search(r"LOCAL:(\\d+)", usage)
    dots = re.findall(r"ttng\\.warp_group_dot %[^{]*\\{[^}]*\\} : (.*?) \\* ", ttgir)
    return {
        "kernel": name,
        "pendings": [int(p) for p in re.findall(r"warp_group_dot_wait .*?pendings = (\\d+)", ttgir)],
        "register_a": [t.startswith("tensor<") and "dot_op" in t for t in dots],
        "regs": int(regs.group(1)) if regs else None,
        "local": int(local.group(1)) if local else None,
    }

wq = torch.zeros(256, 512).to(torch.float8_e4m3fn)
ws = torch.full((16, 256), 127, dtype=torch.uint8)
a = MxTensor(*quantize_mxfp8_reference(torch.randn(5, 512), scale_layout="deepgemm"), "deepgemm")
for label, kw in variants.items():
    opts = {"block_m": 16, "split_k": 2, "swap_ab": True, "operand": "f16", "cvt": "cast", "act": "inloop",
            "wscale": "operand", "w_bias": 120, "pdl": False, "num_warps": 4, "num_stages": 3, **kw}
    kept = []
    def run():
        out = torch.empty(5, 256, dtype=torch.bfloat16)
        workspace = split_workspace(torch.device("cpu"), 1 << 16, 64)
        mf.launch_fold(mf.GemmOperands(a, wq, ws, out), workspace, GemmConfig("fold", **opts))
    compile_launches(run, keep=kept)
    report[label] = [facts(n, c) for n, c in kept]

from mxfuse.einsum import prepare_wo_a_weight
from mxfuse.kernels.grouped_wo_a import WoAConfig, launch_grouped_wo_a
w = prepare_wo_a_weight(torch.randn(2, 128, 256))
a2 = MxTensor(*quantize_mxfp8_reference(torch.randn(5, 512), scale_layout="deepgemm"), "deepgemm")
kept = []
def run_wo_a():
    for act in ("prefold", "inloop"):
        pair = MxTensor.empty(5, 256, scale_layout="deepgemm", device="cpu")
        launch_grouped_wo_a(a2, w, pair=pair,
                            config=WoAConfig(16, 128, 128, 1, 4, 3, "fold", True, "f16", "cast", act, "operand", 120))
compile_launches(run_wo_a, keep=kept)
report["wo_a fold"] = [facts(n, c) for n, c in kept]
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    done = run_in_child(_CHILD, json.dumps(VARIANTS), timeout=1200)
    assert done.returncode == 0, f"sm_90 compilation failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("label", [*VARIANTS, "wo_a fold"])
def test_variant_compiles_for_sm90(compiled, label):
    names = [k["kernel"] for k in compiled[label]]
    if label == "wo_a fold":
        assert names == ["fold_activation_kernel", "grouped_wo_a_kernel", "grouped_wo_a_kernel"], names
    elif VARIANTS[label]["act"] == "prefold":
        assert names == ["fold_activation_kernel", "mxfp8_fold_kernel"], names
    else:
        assert names == ["mxfp8_fold_kernel"], names


@pytest.mark.parametrize("label", ASYNC_DESIGN)
def test_prefolded_design_keeps_the_weight_in_registers_and_the_wgmma_in_flight(compiled, label):
    fold = next(k for k in compiled[label] if k["kernel"] == "mxfp8_fold_kernel")
    assert fold["register_a"] and fold["register_a"][0], (
        f"the main loop's wgmma takes A from shared memory: {fold}"
    )
    assert max(fold["pendings"], default=0) >= 1, f"every wgmma is waited for at once: {fold}"
    assert fold["local"] == 0, f"local memory (spills): {fold}"


def test_facts_are_read_from_the_compiled_code(compiled):
    """Guard the regular expressions: every fold kernel with weight rows in the MMA's M slot shows
    wgmmas, and every one a register count. (With 16 token rows in the M slot, ``swap_ab=False``,
    the dot is below the wgmma's M of 64 and Triton emits mma.sync instead.)"""
    for label, kw in VARIANTS.items():
        fold = next(k for k in compiled[label] if k["kernel"] == "mxfp8_fold_kernel")
        assert isinstance(fold["regs"], int) and fold["regs"] > 0, (label, fold)
        assert bool(fold["register_a"]) == kw.get("swap_ab", True), (label, fold)
