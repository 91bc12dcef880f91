"""The grouped wo_a kernel's logic on CPU: the Triton interpreter against the reference and the quantizer.

The interpreter runs in one child process (``interpreter.run_interpreted``; Triton decides at import
whether kernels are interpreted; see tests/support/interpreter.py), with the epilogue's integer
conversions (``hw_cvt=False``: the interpreter's own fp32 -> bf16 cast truncates and its fp8 cast rounds
half-up) and each of the three dot modes; NaN codes go only through the fp32 mode, since the
interpreter's fp8 casts read E4M3 0x7F as 480. For every case the child launches the kernel three ways into poisoned buffers: bf16 z
only (the epilogue off), the pair only (twice, two poisons, so an unwritten byte cannot pass), and both
at once. This process checks z against the reference, and the pair bit for bit against
``quantize_mxfp8_reference`` of the z the same kernel wrote.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter import run_interpreted
from wo_a_cases import exact_case, gaussian_case

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_diff, assert_same_bits
from mxfuse.einsum import grouped_wo_a_reference
from mxfuse.formats import quantize_mxfp8_reference, scale_spec, scale_storage_view

register(on=("cpu",), est_time=45)

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
POISONS = (0xA5, 0x5A)
DOTS = ("fp32", "dq16", "fp8")
SHAPES = [  # (T, G, r, R)
    (1, 1, 64, 128),
    (5, 2, 128, 256),
    (5, 3, 64, 128),
    (0, 2, 64, 128),
    (1, 3, 128, 256),
    (20, 2, 64, 128),  # two 16-row tiles; swizzled scales pad 20 rows to 128
    (5, 1, 128, 128),
]


def _case_list() -> list[dict]:
    cases = []
    for i, (t, groups, k, n) in enumerate(SHAPES):
        for j, out_layout in enumerate(LAYOUTS):
            split = 1 + (i + j) % 2
            block_k = min(64 if j < 2 else 32, k // split)
            dot = DOTS[(i + 2 * j) % 3]
            swap = (i + j) % 3 == 1
            cases.append(
                {
                    "name": f"T{t} G{groups} r{k} R{n} {LAYOUTS[(i + j) % 3]}->{out_layout} {dot}"
                    f"{' swap' if swap else ''} split{split}",
                    "shape": (t, groups, k, n),
                    "kind": "exact" if (i + j) % 2 == 0 else "gaussian",
                    "seed": 100 * i + j,
                    "a_layout": LAYOUTS[(i + j) % 3],
                    "out_layout": out_layout,
                    "rounding": "floor" if j == 1 else "rceil",
                    # WoAConfig(block_m, block_n, block_k, split, warps, stages, dot, swap_ab)
                    "config": (
                        16 if i % 2 else 32,
                        256 if n == 256 and j == 1 else 128,
                        block_k,
                        split,
                        4,
                        2,
                        dot,
                        swap,
                    ),
                }
            )
    # NaN codes (0x7F) only in the fp32 mode: the interpreter's fp8 casts read 0x7F as 480.
    base = {"shape": (6, 3, 64, 128), "kind": "exact", "seed": 7, "a_layout": "deepgemm", "rounding": "rceil"}
    for split in (1, 2):
        for nan in (False, True):
            cases.append(
                {
                    **base,
                    "name": f"{'NaN' if nan else 'clean'} split{split}",
                    "nan": nan,
                    "out_layout": "e8m0",
                    "config": (16, 128, 32, split, 4, 2, "fp32", split == 2),
                }
            )
    for dot in ("fp32", "dq16"):
        cases.append(
            {
                **base,
                "name": f"E4M3 subnormal activations {dot}",
                "kind": "subnormal",
                "out_layout": "swizzled_128x4",
                "config": (16, 128, 64, 1, 4, 2, dot, dot == "dq16"),
            }
        )
    # dot "stream" (CUDA cores, T <= 4 a tile): one and two M tiles, splits, every layout, subnormals.
    stream = [
        ((1, 2, 64, 128), (1, 128, 32, 1, 4, 1), "exact", "e8m0", "deepgemm"),
        ((3, 3, 128, 128), (4, 128, 64, 2, 4, 1), "gaussian", "deepgemm", "swizzled_128x4"),
        ((5, 2, 64, 256), (4, 256, 32, 2, 4, 1), "exact", "swizzled_128x4", "e8m0"),
        ((2, 2, 128, 128), (2, 128, 128, 1, 4, 1), "subnormal", "e8m0", "swizzled_128x4"),
    ]
    for i, (shape, config, kind, a_layout, out_layout) in enumerate(stream):
        cases.append(
            {
                "name": f"stream T{shape[0]} G{shape[1]} r{shape[2]} R{shape[3]} {a_layout}->{out_layout} {kind}",
                "shape": shape,
                "kind": kind,
                "seed": 900 + i,
                "a_layout": a_layout,
                "out_layout": out_layout,
                "rounding": "rceil",
                "config": (*config, "stream", False),
            }
        )
    return cases


CASES = _case_list()

_WORKER = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels import grouped_wo_a as module
cases = torch.load(sys.argv[1], weights_only=False)
results = {"interpreted": type(module.grouped_wo_a_kernel).__name__}

def pair_for(t, gr, layout, rounding, poison):
    pair = MxTensor.empty(t, gr, scale_layout=layout, rounding=rounding, device="cpu")
    pair.data.view(torch.uint8).fill_(poison)
    pair.scale_bytes().fill_(poison)
    return pair

def stored(pair, t, gr, layout):
    return pair.data.view(torch.uint8), pair.scale_bytes()

for c in cases:
    t, groups, k, n = c["shape"]
    layout = c["out_layout"]
    a = MxTensor(c["a_q"], c["a_scale"], c["a_layout"])
    w = module.WoAWeight(c["w_q"], c["w_scale"], c["tickets"])
    def run(z, pair):
        module.launch_grouped_wo_a(a, w, z=z, pair=pair, hw_cvt=False, config=module.WoAConfig(*c["config"]))
    z = torch.empty(t, groups, n, dtype=torch.bfloat16)
    z.view(torch.int16).fill_(-23131)  # 0xA5A5
    run(z, None)
    out = {"z": z, "tickets": [c["tickets"].abs().sum().item()]}
    for poison in (0xA5, 0x5A):
        pair = pair_for(t, groups * n, layout, c["rounding"], poison)
        run(None, pair)
        out[poison] = stored(pair, t, groups * n, layout)
    out["tickets"].append(c["tickets"].abs().sum().item())
    z_both = torch.zeros(t, groups, n, dtype=torch.bfloat16)
    pair = pair_for(t, groups * n, layout, c["rounding"], 0x33)
    run(z_both, pair)
    out["both"] = (z_both, *stored(pair, t, groups * n, layout))
    results[c["name"]] = out
torch.save(results, sys.argv[2])
"""


def _operands(case: dict):
    t, groups, k, n = case["shape"]
    if case["kind"] == "gaussian":
        data = gaussian_case(t, groups, k, n, seed=case["seed"])
    else:
        data = exact_case(t, groups, k, n, seed=case["seed"], subnormals=case["kind"] == "subnormal")
    if case.get("nan"):
        data.a_scale[4, 1 * (k // 32) + 1] = 0xFF  # token 4, group 1, its second K block
        data.a_codes[2, 2 * k + 7] = 0x7F  # token 2, group 2, one NaN element
    return data


def _payload() -> list[dict]:
    payload = []
    for case in CASES:
        data = _operands(case)
        a_q, a_scale = data.pair(case["a_layout"])
        w = data.weight
        payload.append(
            {
                **case,
                "a_q": a_q,
                "a_scale": a_scale,
                "w_q": w.qweight,
                "w_scale": w.scale,
                "tickets": w.tickets,
            }
        )
    return payload


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory) -> dict:
    return run_interpreted(tmp_path_factory, "grouped_wo_a_interpret", _WORKER, _payload)


def _reference(case: dict) -> torch.Tensor:
    data = _operands(case)
    return grouped_wo_a_reference(data.pair(case["a_layout"]), data.weight)


def _quantized(z: torch.Tensor, case: dict) -> tuple[torch.Tensor, torch.Tensor]:
    t, groups, _, n = case["shape"]
    q, s = quantize_mxfp8_reference(
        z.reshape(t, groups * n), rounding=case["rounding"], scale_layout=case["out_layout"]
    )
    spec = scale_spec(t, groups * n, scale_layout=case["out_layout"])
    return q.view(torch.uint8), scale_storage_view(s, spec).view(torch.uint8)


def test_worker_ran_the_interpreter(interpreted):
    assert interpreted["interpreted"] == "InterpretedFunction"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_z_matches_the_reference(interpreted, case):
    z = interpreted[case["name"]]["z"]
    want = _reference(case)
    if case["kind"] != "gaussian":  # every sum exact in fp32: any order gives the same bits
        # NaN payloads are not part of the contract (the reference's einsum makes 0xFFFF here).
        nan = want.isnan()
        assert_same_bits(z.isnan(), nan, name="NaN positions")
        assert_same_bits(z[~nan], want[~nan], name="z")
    else:  # fp32 sums in two orders, both rounded to bf16 (tolerance: see the GPU test)
        assert_diff(z, want, max_diff=1e-6, name="z")
        rms = float(want.float().square().mean().sqrt()) if want.numel() else 0.0
        assert_close(z, want, rtol=1.6e-2, atol=1e-3 * rms, name="z")


@pytest.mark.parametrize("poison", POISONS, ids=[f"poison {p:#04x}" for p in POISONS])
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_epilogue_pair_is_quantize_of_the_kernels_z(interpreted, case, poison):
    got = interpreted[case["name"]]
    want_q, want_s = _quantized(got["z"], case)
    assert_same_bits(got[poison][0], want_q, name="q")
    assert_same_bits(got[poison][1], want_s, name="scale storage, padding included")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_both_outputs_in_one_launch(interpreted, case):
    got = interpreted[case["name"]]
    z, q, s = got["both"]
    assert_same_bits(z, got["z"], name="z")
    assert_same_bits(q, got[POISONS[0]][0], name="q")
    assert_same_bits(s, got[POISONS[0]][1], name="scale storage")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_tickets_are_left_at_zero(interpreted, case):
    assert interpreted[case["name"]]["tickets"] == [0, 0]


@pytest.mark.parametrize("split", [1, 2])
def test_nan_reaches_only_its_token_and_group(interpreted, split):
    clean = interpreted[f"clean split{split}"]
    dirty = interpreted[f"NaN split{split}"]
    nan = torch.zeros(6, 3, 128, dtype=torch.bool)
    nan[4, 1] = nan[2, 2] = True
    assert_same_bits(dirty["z"].isnan(), nan, name="NaN positions in z")
    assert_same_bits(dirty["z"][~nan], clean["z"][~nan], name="untouched z")
    # The pair: [T, G*R] e8m0 scales, 4 blocks of 32 per group of 128 columns.
    q, s = dirty[POISONS[0]]
    q_clean, s_clean = clean[POISONS[0]]
    nan_cols = nan.reshape(6, 384)
    assert_same_bits(
        q.reshape(6, 384)[nan_cols], torch.full((256,), 0x7F, dtype=torch.uint8), name="NaN codes"
    )
    assert_same_bits(q.reshape(6, 384)[~nan_cols], q_clean.reshape(6, 384)[~nan_cols], name="untouched codes")
    nan_blocks = nan_cols[:, ::32]
    assert_same_bits(
        s.reshape(6, 12)[nan_blocks], torch.full((8,), 0xFF, dtype=torch.uint8), name="NaN scales"
    )
    assert_same_bits(
        s.reshape(6, 12)[~nan_blocks], s_clean.reshape(6, 12)[~nan_blocks], name="untouched scales"
    )


def test_split_k_changes_no_bit_of_an_exact_sum(interpreted):
    assert_same_bits(interpreted["clean split2"]["z"], interpreted["clean split1"]["z"], name="z")


def test_cases_cover_the_launch_space():
    """Guard the table: every layout in and out, both roundings, split and unsplit, exact and Gaussian."""
    seen = {(c["a_layout"], c["out_layout"]) for c in CASES}
    assert len(seen) == 9 and {c["rounding"] for c in CASES} == {"rceil", "floor"}
    assert {c["config"][3] for c in CASES} == {1, 2} and {c["config"][1] for c in CASES} == {128, 256}
    assert {c["config"][6] for c in CASES} == {*DOTS, "stream"} and {c["config"][7] for c in CASES} == {
        True,
        False,
    }
    # every tensor-core dot mode with and without swapped operands, and the stream mode (never swapped)
    assert len({c["config"][6:] for c in CASES}) == 7
    assert {c["config"][0] for c in CASES if c["config"][6] == "stream"} == {1, 2, 4}
    assert {c["kind"] for c in CASES} == {"exact", "gaussian", "subnormal"} and {
        c["shape"][0] for c in CASES
    } >= {0, 1, 5, 20}
    assert np.unique([c["shape"][1] for c in CASES]).tolist() == [1, 2, 3]
