"""The folded-scale MXFP8 kernels (``mxfuse.kernels.gemm.launch``, and the grouped wo_a on the same
mainloop) under the Triton interpreter, at small shapes: every fp16 mode, both operand orders, split-K,
all three activation scale layouts, N and K that no tile divides.

Most operands are *exact*: E4M3 values whose every product and partial sum is exact in fp32 (and
float64), so any correct summation order gives the same bits and the output is checked bit for bit
against a float64 oracle (the interpreter's fp32 -> bf16 cast truncates, so the expected bf16 is the
exact value truncated). Each launch also records, per program, whether its folded loop's result was kept
or the exact path ran (``launch_fold(path_log=)``): in-window data must take the folded loop, and
extreme scale bytes (0, 1, 253, 254), a NaN block, a zero block beside nonzero ones must take the exact
path and still give the oracle's bits (NaN exactly on the NaN block's row). Gaussian operands check the
closeness rule, duplicated rows (bitwise equal to row 0) and split-K determinism.

bf16 operands are not run here: the interpreter's bf16 dots and bitcasts are wrong (they compile for
sm_90 in test_mxfp8_fold_compile_sm90.py and are checked on the GPU by benchmarks/mxfp8_gemm_sweep.py).
As in the other interpreter tests, one child process (``interpreter.run_interpreted``) runs every case.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter import run_interpreted
from wo_a_cases import exact_case

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits
from mxfuse.einsum import grouped_wo_a_reference
from mxfuse.formats import quantize_mxfp8_reference, scale_spec, scale_storage_view, scale_to_layout

register(on=("cpu",), est_time=150)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
# E4M3 codes of 0 and +-1.mmm * 2**e, e in {0, 1} (values in [1, 4), multiples of 2**-3), and subnormals.
_NORMAL = np.array([0] + [(e << 3) | m | s for e in (7, 8) for m in range(8) for s in (0, 0x80)], np.uint8)
_ONE = np.array([0] + [(7 << 3) | m | s for m in range(8) for s in (0, 0x80)], np.uint8)  # [1, 2)
_SUBNORMAL = np.array([m | s for m in range(1, 8) for s in (0, 0x80)], np.uint8)

# name: (act, wscale, cvt, swap_ab, block_m, block_n, block_g, split_k)
MODES = {
    "prefold cast": ("prefold", "operand", "cast", True, 16, 16, 2, 1),
    "prefold cast split3": ("prefold", "operand", "cast", True, 16, 32, 1, 3),
    "prefold bits": ("prefold", "operand", "bits", True, 16, 16, 4, 2),
    "prefold cast no swap": ("prefold", "operand", "cast", False, 16, 32, 2, 2),
    "inloop cast": ("inloop", "operand", "cast", True, 16, 16, 2, 2),
    "inloop bits no swap": ("inloop", "operand", "bits", False, 16, 16, 1, 1),
    "inloop acc": ("inloop", "acc", "cast", True, 16, 32, 4, 1),
    "inloop acc bits split3": ("inloop", "acc", "bits", True, 16, 16, 2, 3),
}
W_BIAS = 126  # the weights' scale bytes below are 124..127: inside [W_BIAS - 14, W_BIAS + 7]


def _codes(rng, pool, shape) -> torch.Tensor:
    return torch.from_numpy(rng.choice(pool, size=shape).astype(np.uint8)).view(torch.float8_e4m3fn)


def _operands(kind: str, m: int, n: int, k: int, seed: int):
    """(a codes, a scale bytes [m, k/32], w codes, w scale bytes [n, k/32]) for a case kind."""
    rng = np.random.default_rng(seed)
    g = k // 32
    if kind == "exact":  # products multiples of 2**-8 below 2**4: sums of K <= 288 need <= 21 bits
        a, w = _codes(rng, _NORMAL, (m, k)), _codes(rng, _NORMAL, (n, k))
        sa = rng.integers(126, 128, size=(m, g))
        sw = rng.integers(126, 128, size=(n, g))
    elif kind == "subnormal":  # scales 2**0, K <= 128: products multiples of 2**-12 below 2**4
        a = _codes(rng, np.concatenate([_NORMAL, _SUBNORMAL]), (m, k))
        w = _codes(rng, _NORMAL, (n, k))
        sa = np.full((m, g), 127)
        sw = np.full((n, g), 127)
    elif kind == "extreme":  # bytes 0, 1, 253, 254 against 254, 253, 1, 0: every block product is 2**0
        a, w = _codes(rng, _ONE, (m, k)), _codes(rng, _ONE, (n, k))
        cyc = np.array([0, 1, 253, 254])[np.arange(g) % 4]
        sa = np.tile(cyc, (m, 1))
        sw = np.tile(254 - cyc, (n, 1))
    else:  # gaussian: E4M3 of N(0, 1) * 16 under scale bytes 120..127
        gen = torch.Generator().manual_seed(seed)
        a = (torch.randn(m, k, generator=gen) * 16).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, generator=gen) * 16).to(torch.float8_e4m3fn)
        sa = rng.integers(120, 128, size=(m, g))
        sw = rng.integers(124, 128, size=(n, g))
    return a, torch.from_numpy(sa.astype(np.uint8)), w, torch.from_numpy(sw.astype(np.uint8))


def _case_list() -> list[dict]:
    cases = []
    shapes = [(5, 37, 288), (1, 24, 160), (17, 40, 96)]
    for i, mode in enumerate(MODES):
        for j, (m, n, k) in enumerate(shapes):
            cases.append({"name": f"{mode} exact {m}x{n}x{k}", "mode": mode, "kind": "exact", "shape": (m, n, k),
                          "layout": LAYOUTS[(i + j) % 3], "seed": 10 * i + j, "special": None})  # fmt: skip
    for i, mode in enumerate(("prefold cast", "inloop cast", "inloop acc")):
        base = {"mode": mode, "layout": LAYOUTS[i], "seed": 100 + i}
        cases += [
            {
                **base,
                "name": f"{mode} subnormal",
                "kind": "subnormal",
                "shape": (5, 37, 128),
                "special": None,
            },
            {
                **base,
                "name": f"{mode} extreme bytes",
                "kind": "extreme",
                "shape": (5, 37, 128),
                "special": None,
            },
            {**base, "name": f"{mode} NaN block", "kind": "exact", "shape": (17, 24, 96), "special": "nan"},
            {
                **base,
                "name": f"{mode} zero row",
                "kind": "exact",
                "shape": (5, 24, 96),
                "special": "zero row",
            },
            {
                **base,
                "name": f"{mode} zero block",
                "kind": "exact",
                "shape": (5, 24, 96),
                "special": "zero block",
            },
            {
                **base,
                "name": f"{mode} gaussian",
                "kind": "gaussian",
                "shape": (6, 40, 256),
                "special": "copies",
            },
        ]
    for mode in ("prefold cast", "inloop cast"):  # split-K determinism on data whose sums round
        for split in (1, 3):
            spec = MODES[mode]
            cases.append({"name": f"{mode} gaussian split{split}", "mode": mode, "kind": "gaussian",
                          "shape": (6, 40, 256), "layout": "deepgemm", "seed": 7, "special": None,
                          "override": {"split_k": split, "block_g": 1, "block_n": spec[5]}})  # fmt: skip
    return cases


def _special(case, a, sa):
    m, _, k = case["shape"]
    if case["special"] == "nan":  # row 1, group 1: NaN scale and NaN codes, as a quantizer writes them
        sa[1, 1] = 0xFF
        a.view(torch.uint8)[1, 32:64] = 0x7F
    elif case["special"] == "zero row":
        a.view(torch.uint8)[m - 1] = 0
        sa[m - 1] = 0
    elif case["special"] == "zero block":  # a zero block with scale 0 beside nonzero ones
        a.view(torch.uint8)[2, 32:64] = 0
        sa[2, 1] = 0
    elif case["special"] == "copies":
        a.view(torch.uint8)[2:5] = a.view(torch.uint8)[0]
        sa[2:5] = sa[0]
    return a, sa


def _inputs(case):
    m, n, k = case["shape"]
    a, sa, w, sw = _operands(case["kind"], m, n, k, case["seed"])
    a, sa = _special(case, a, sa)
    return a, sa, w, sw


_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels.gemm import launch as mf
from mxfuse.kernels.gemm.configs import GemmConfig
from mxfuse.kernels.splitk import split_workspace
import triton
cases = torch.load(sys.argv[1], weights_only=False)
results = {"interpreted": type(mf.mxfp8_fold_kernel).__name__}
for c in cases:
    a, a_scale, layout, w, sw_t, opts = c["a"], c["a_scale"], c["layout"], c["w"], c["sw_t"], c["opts"]
    m, k = a.shape
    n = w.shape[0]
    tiles = triton.cdiv(n, opts["block_n"]) * triton.cdiv(m, opts["block_m"])
    workspace = split_workspace(torch.device("cpu"), tiles * opts["split_k"] * opts["block_m"] * opts["block_n"], tiles)
    counters = workspace.counters
    path = torch.full((tiles * opts["split_k"],), -1, dtype=torch.int32)
    config = GemmConfig("fold", **opts)
    outs = []
    for _ in range(2):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        mf.launch_fold(mf.GemmOperands(MxTensor(a, a_scale, layout), w, sw_t, out), workspace, config, path_log=path)
        outs.append(out)
    results[c["name"]] = {"out": outs[0], "again": outs[1], "path": path.clone(), "counters": int(counters.abs().sum())}
torch.save(results, sys.argv[2])
"""


def _opts(case) -> dict:
    act, wscale, cvt, swap, bm, bn, bg, split = MODES[case["mode"]]
    opts = {"block_m": bm, "block_n": bn, "block_g": bg, "split_k": split, "swap_ab": swap, "operand": "f16",
            "cvt": cvt, "act": act, "wscale": wscale, "w_bias": W_BIAS, "pdl": False, "num_warps": 4,
            "num_stages": 1}  # fmt: skip
    opts.update(case.get("override", {}))
    return opts


def _payload() -> list[dict]:
    payload = []
    for case in CASES:
        a, sa, w, sw = _inputs(case)
        payload.append({"name": case["name"], "a": a, "a_scale": scale_to_layout(sa, scale_layout=case["layout"]),
                        "layout": case["layout"], "w": w, "sw_t": sw.t().contiguous(), "opts": _opts(case)})  # fmt: skip
    return payload


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    return run_interpreted(tmp_path_factory, "mxfp8_fold_interpret", _WORKER, _payload, timeout=1500)


CASES = _case_list()


def _oracle(case) -> torch.Tensor:
    """float64 deq(a) @ deq(w).T, NaN blocks as NaN."""
    a, sa, w, sw = _inputs(case)

    def deq(q, s):
        f = torch.where(s == 255, torch.nan, torch.exp2(s.double() - 127)).repeat_interleave(32, dim=1)
        return q.to(torch.float64) * f

    return deq(a, sa) @ deq(w, sw).t()


def _truncated_bf16(x: torch.Tensor) -> torch.Tensor:
    """bf16 of float64 values that fp32 holds exactly, truncated as the interpreter's cast does."""
    bits = x.to(torch.float32).view(torch.int32) >> 16
    return bits.to(torch.int16).view(torch.bfloat16)


def test_worker_ran_the_interpreter(interpreted):
    assert interpreted["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_output(interpreted, case):
    got = interpreted[case["name"]]
    want = _oracle(case)
    assert_same_bits(
        got["again"].view(torch.int16), got["out"].view(torch.int16), name="the same launch twice"
    )
    assert got["counters"] == 0, "split-K counters must be back at zero"
    out = got["out"]
    nan_rows = want.isnan().any(dim=1)
    assert_same_bits(out.isnan(), want.isnan(), name="NaN positions")
    assert bool(out[~nan_rows].isfinite().all()), "finite where the products are finite"
    if case["kind"] == "gaussian":
        atol = 1e-6 * float(want.abs().max())
        assert_close(out.double(), want, rtol=2.0**-7, atol=atol, name="out")
        if case["special"] == "copies":
            assert_same_bits(
                out[2:5].view(torch.int16), out[:1].expand(3, -1).view(torch.int16), name="copied rows"
            )
    else:
        keep = ~nan_rows
        assert_same_bits(
            out[keep].view(torch.int16), _truncated_bf16(want[keep]).view(torch.int16), name="out"
        )


def _expected_paths(case) -> torch.Tensor:
    """Per program (tile-major, then split), whether the folded loop's result is kept: the window rules
    of ``mxfp8_fold_steps`` applied to the case's bytes over the program's rows, columns and groups."""
    act, wscale = MODES[case["mode"]][:2]
    o = _opts(case)
    bm, bn, bg, split = o["block_m"], o["block_n"], o["block_g"], o["split_k"]
    m, n, k = case["shape"]
    a, sa, _, sw = _inputs(case)
    sa, sw = sa.to(torch.int32), sw.to(torch.int32)
    groups = k // 32
    steps = -(-groups // bg)
    per_split = -(-steps // split) * bg
    nonzero = (a.view(torch.uint8).to(torch.int32) & 0x7F).view(m, groups, 32).amax(dim=2) > 0
    flags = []
    for pm in range(-(-m // bm)):
        rows = slice(pm * bm, min((pm + 1) * bm, m))
        for pn in range(-(-n // bn)):
            cols = slice(pn * bn, min((pn + 1) * bn, n))
            for pk in range(split):
                g0, g1 = pk * per_split, min((pk + 1) * per_split, groups)
                if g0 >= g1:
                    flags.append(1)
                    continue
                w = sw[cols, g0:g1]
                lo, hi = (-14, 7) if wscale == "operand" else (-94, 83)
                bias = W_BIAS if wscale == "operand" else 127
                ok = bool(((w - bias >= lo) & (w - bias <= hi) & (w < 255)).all())
                s = sa[rows, g0:g1]
                if act == "prefold":  # the folding launch's rule, per whole row
                    full = sa[rows]
                    ref = torch.where(full == 255, 0, full).amax(dim=1, keepdim=True)
                    inexact = ((full - ref < -14) | (full - ref > 7)) & (full != 255) & nonzero[rows]
                    ok = ok and not bool(inexact.any())
                else:  # against each row's largest byte in the range's first step
                    first = sa[rows, g0 : min(g0 + bg, g1)]
                    ref = torch.where(first == 255, 0, first).amax(dim=1, keepdim=True)
                    ok = ok and bool(((s - ref >= -14) & (s - ref <= 7) & (s < 255)).all())
                flags.append(int(ok))
    return torch.tensor(flags, dtype=torch.int32)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_path_taken(interpreted, case):
    path = interpreted[case["name"]]["path"]
    assert_same_bits(path, _expected_paths(case), name="folded loop kept (1) or exact path (0), per program")


def test_the_cases_take_both_paths():
    """In-window data keeps the folded loop; extreme bytes, NaN and zero blocks send programs down the
    exact path (the expectation itself must see both, or test_path_taken proves nothing)."""
    kept = {c["name"]: bool(_expected_paths(c).all()) for c in CASES}
    assert all(
        kept[c["name"]] for c in CASES if c["kind"] in ("exact", "subnormal", "gaussian") and not c["special"]
    )
    assert not any(kept[c["name"]] for c in CASES if c["kind"] == "extreme")
    assert (
        not kept["inloop cast NaN block"]
        and not kept["inloop cast zero block"]
        and not kept["inloop acc zero block"]
    )
    assert kept["prefold cast zero block"] and kept["prefold cast NaN block"]


def test_split_k_results_differ_only_by_summation_order(interpreted):
    """Split 1 and split 3 sum in different orders (each launch repeats its own bits: test_output)."""
    for mode in ("prefold cast", "inloop cast"):
        one = interpreted[f"{mode} gaussian split1"]["out"]
        three = interpreted[f"{mode} gaussian split3"]["out"]
        assert_close(
            one.double(), three.double(), rtol=2.0**-7, atol=1e-6 * float(one.double().abs().max()), name=mode
        )


def test_cases_cover_the_launch_space():
    modes = {MODES[c["mode"]] for c in CASES}
    assert {m[0] for m in modes} == {"prefold", "inloop"} and {m[1] for m in modes} == {"operand", "acc"}
    assert {m[2] for m in modes} == {"cast", "bits"} and {m[3] for m in modes} == {True, False}
    assert {m[7] for m in modes} >= {1, 2, 3} and {c["layout"] for c in CASES} == set(LAYOUTS)
    assert {c["kind"] for c in CASES} == {"exact", "subnormal", "extreme", "gaussian"}


# The grouped wo_a on the fold mainloop: z bit for bit the reference's (exact operands), the pair bit for
# bit quantize_mxfp8 of that z.
WOA_CASES = [  # (name, (T, G, r, R), config (block_m, block_n, block_k, split, warps, stages, dot, swap, operand,
    # cvt, act, wscale, w_bias), a_layout, out_layout)
    ("prefold", (5, 2, 128, 128), (16, 128, 64, 1, 4, 1, "fold", True, "f16", "cast", "prefold", "operand", 126),
     "deepgemm", "deepgemm"),
    ("inloop split2", (5, 3, 64, 128), (16, 128, 32, 2, 4, 1, "fold", True, "f16", "cast", "inloop", "operand", 126),
     "e8m0", "swizzled_128x4"),
    ("acc", (20, 2, 128, 128), (16, 128, 64, 2, 4, 1, "fold", True, "f16", "bits", "inloop", "acc", 126),
     "swizzled_128x4", "e8m0"),
]  # fmt: skip

_WOA_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels import grouped_wo_a as k
cases = torch.load(sys.argv[1], weights_only=False)
results = {}
for c in cases:
    t, groups, r, n = c["shape"]
    z = torch.empty(t, groups, n, dtype=torch.bfloat16)
    pair = MxTensor.empty(t, groups * n, scale_layout=c["out_layout"], device="cpu")
    k.launch_grouped_wo_a(MxTensor(c["a_q"], c["a_scale"], c["a_layout"]), k.WoAWeight(c["w_q"], c["w_scale"], c["tickets"]),
                          z=z, pair=pair, hw_cvt=False, config=k.WoAConfig(*c["config"]))
    results[c["name"]] = (z, pair.data.view(torch.uint8), pair.scale_bytes())
torch.save(results, sys.argv[2])
"""


def _wo_a_payload() -> list[dict]:
    payload = []
    for i, (name, shape, config, a_layout, out_layout) in enumerate(WOA_CASES):
        data = exact_case(*shape, seed=300 + i)
        a_q, a_scale = data.pair(a_layout)
        w = data.weight
        payload.append({"name": name, "shape": shape, "config": config, "a_layout": a_layout,
                        "out_layout": out_layout, "a_q": a_q, "a_scale": a_scale, "w_q": w.qweight,
                        "w_scale": w.scale, "tickets": w.tickets})  # fmt: skip
    return payload


@pytest.fixture(scope="module")
def wo_a_interpreted(tmp_path_factory) -> dict:
    return run_interpreted(
        tmp_path_factory, "mxfp8_fold_wo_a_interpret", _WOA_WORKER, _wo_a_payload, timeout=1500
    )


@pytest.mark.parametrize("index", range(len(WOA_CASES)), ids=[c[0] for c in WOA_CASES])
def test_grouped_wo_a_on_the_fold_mainloop(wo_a_interpreted, index):
    name, shape, _, a_layout, out_layout = WOA_CASES[index]
    z, q, s = wo_a_interpreted[name]
    data = exact_case(*shape, seed=300 + index)
    want = grouped_wo_a_reference(data.pair(a_layout), data.weight)
    assert_same_bits(z, want, name="z")
    t, groups, _, n = shape
    want_q, want_s = quantize_mxfp8_reference(z.reshape(t, groups * n), scale_layout=out_layout)
    spec = scale_spec(t, groups * n, scale_layout=out_layout)
    assert_same_bits(q, want_q.view(torch.uint8), name="pair codes")
    assert_same_bits(s, scale_storage_view(want_s, spec).view(torch.uint8), name="pair scales")


# The activation-folding launch on its own: per row, ref (its largest non-NaN byte for fp16, 127 for bf16)
# or -1 where a nonzero block folds inexactly, and the folded values bit for bit.
FOLD_ROWS = 6
FOLD_K = 256

_FOLD_WORKER = """
import sys, torch
from mxfuse.kernels.gemm import launch as mf
c = torch.load(sys.argv[1], weights_only=False)
results = {}
for dtype in (torch.float16, torch.bfloat16):
    folded = torch.full(c["a"].shape, float("nan"), dtype=dtype)
    refs = torch.full((1, c["a"].shape[0]), -7, dtype=torch.int32)
    mf.launch_fold_activation(c["a"], c["scale"], 0, folded, refs)
    results[str(dtype)] = (folded, refs)
torch.save(results, sys.argv[2])
"""


def _fold_rows():
    """Row 0 in window; 1 zero; 2 a zero block under byte 0; 3 bytes 27 binades apart; 4 a NaN block;
    5 a byte (60) whose bf16 products could leave the normal range."""
    rng = np.random.default_rng(11)
    g = FOLD_K // 32
    a = rng.choice(np.concatenate([_NORMAL, _SUBNORMAL]), size=(FOLD_ROWS, FOLD_K)).astype(np.uint8)
    a[a == 0] = 0x38  # every block nonzero unless made zero below
    s = rng.integers(120, 128, size=(FOLD_ROWS, g))
    a[1], s[1] = 0, 0
    a[2, 96:128], s[2, 3] = 0, 0
    s[3, 0], s[3, 1] = 127, 100
    s[4, 2], a[4, 64:96] = 255, 0x7F
    s[5, 4] = 60
    return torch.from_numpy(a).view(torch.float8_e4m3fn), torch.from_numpy(s.astype(np.uint8))


@pytest.fixture(scope="module")
def folded_rows(tmp_path_factory) -> dict:
    def payload() -> dict:
        a, s = _fold_rows()
        return {"a": a, "scale": s.reshape(-1)}

    return run_interpreted(
        tmp_path_factory, "mxfp8_fold_activation_interpret", _FOLD_WORKER, payload, timeout=1500
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_the_activation_fold_launch(folded_rows, dtype):
    a, s = _fold_rows()
    folded, refs = folded_rows[str(dtype)]
    sf = s.to(torch.int32)
    if dtype == torch.float16:
        ref = torch.where(sf == 255, 0, sf).amax(dim=1)
        want_refs = torch.tensor([int(ref[0]), 0, int(ref[2]), -1, int(ref[4]), -1], dtype=torch.int32)
    else:
        ref = torch.full((FOLD_ROWS,), 127)
        want_refs = torch.tensor([127, 127, 127, 127, 127, -1], dtype=torch.int32)
    assert_same_bits(refs.reshape(-1), want_refs, name="references (-1: the row does not fold exactly)")
    exp = torch.where(sf == 255, torch.nan, torch.exp2((sf - ref[:, None]).double())).repeat_interleave(
        32, dim=1
    )
    want = (a.to(torch.float64) * exp).to(dtype)
    keep = want_refs >= 0
    assert_same_bits(folded[keep].isnan(), want[keep].isnan(), name="NaN elements")
    assert_same_bits(
        folded[keep].nan_to_num().view(torch.int16), want[keep].nan_to_num().view(torch.int16), name="folded"
    )
