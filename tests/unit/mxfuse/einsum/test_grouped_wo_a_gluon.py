"""The Gluon grouped wo_a on CPU: it compiles for sm_90a through its real launcher, its epilogue's pair logic
(in torch, ``gluon_reference``) is ``quantize_mxfp8`` bit for bit, and it is chosen only by the rules.

* Compilation (``sm90_compile``, a child process): ``launch_grouped_wo_a_gluon`` on CPU tensors, both
  launches compiled for sm_90 instead of run. The Gluon kernel's PTX must hold register-A bf16 wgmma
  and no float atomics (split-K takes an integer ticket). The decode GEMM that shares its mainloop is
  compiled by tests/unit/mxfuse/gemm/test_mxfp8_gluon.py.
* The epilogue model: accumulator tiles ``[block_n, block_t]`` (swap-AB) to pair bytes, over the whole
  storage, padding included, against ``quantize_mxfp8_reference`` of the bf16-rounded values, for every
  layout, both roundings, both tile widths and T that does and does not fill a tile.
* Routing (``choose_wo_a_kernel``, pure): a table of cases; and the entry's refusals on the CPU.
* The first launch (``gluon_prep``, Triton) under the interpreter: the bf16 activation bit for bit, the
  out-of-window token flagged and its z computed per group (within the interpreter's truncating bf16 step).

The kernel's numerics run on the GPU: tests/kernels/mxfuse/einsum/test_grouped_wo_a.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from mxfp8_gemm_cases import gluon_operand_columns
from sm90_compile import assert_no_float_atomics, assert_register_a_bf16_wgmma, child_ptx_report

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import MxfuseUnavailableError
from mxfuse import einsum as einsum_module
from mxfuse.einsum import choose_wo_a_kernel, grouped_wo_a, prepare_wo_a_weight
from mxfuse.formats import MxTensor, as_mxtensor, quantize_mxfp8_reference
from mxfuse.kernels.gemm.gluon_launch import GluonConfig
from mxfuse.kernels.grouped_wo_a import gluon_launch
from mxfuse.kernels.grouped_wo_a.gluon_launch import (
    check_wo_a_gluon_config,
    default_wo_a_gluon_config,
    wo_a_gluon_table,
)
from mxfuse.kernels.grouped_wo_a.gluon_reference import pair_from_accumulator_tiles

register(on=("cpu",), est_time=60)

# --- compilation for sm_90a --------------------------------------------------------------------------

_COMPILE = """
import json, torch
from sm90_compile import compile_launches, ptx_report
from mxfuse.einsum import prepare_wo_a_weight
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
from mxfuse.kernels.gemm.gluon_launch import GluonConfig
from mxfuse.kernels.grouped_wo_a.gluon_launch import launch_grouped_wo_a_gluon
torch.manual_seed(0)
keep = []
G, R, r = 2, 256, 512
w = prepare_wo_a_weight(torch.randn(G, R, r))
def run():
    cases = [  # (T, a layout, pair layout or None, z, config)
        (1, "deepgemm", "deepgemm", False, None),
        (16, "e8m0", "swizzled_128x4", True, GluonConfig(128, 16, 128, 1, 3)),
        (5, "swizzled_128x4", "e8m0", False, GluonConfig(64, 8, 128, 2, 2)),
        (70, "deepgemm", None, True, GluonConfig(64, 64, 128, 4, 6)),
    ]
    for t, layout, out_layout, z, config in cases:
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(t, G * r), scale_layout=layout), layout)
        pair = None if out_layout is None else MxTensor.empty(t, G * R, scale_layout=out_layout, device="cpu")
        zz = torch.empty(t, G, R, dtype=torch.bfloat16) if z else None
        launch_grouped_wo_a_gluon(a, w, z=zz, pair=pair, config=config)
compile_launches(run, keep=keep)
print(json.dumps(ptx_report(keep)))
"""


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return child_ptx_report(_COMPILE)


def test_both_launches_compile_for_sm90a_to_cubin(compiled):
    assert [k["name"] for k in compiled] == ["wo_a_gluon_prep_kernel", "grouped_wo_a_gluon_kernel"] * 4
    assert all(k["target"] and k["cubin"] for k in compiled)


def test_the_gluon_kernel_multiplies_with_register_a_bf16_wgmma(compiled):
    assert_register_a_bf16_wgmma(compiled, "grouped_wo_a_gluon_kernel")


def test_no_float_atomics_only_the_integer_split_ticket(compiled):
    assert_no_float_atomics(compiled)
    gluon = [k for k in compiled if k["name"] == "grouped_wo_a_gluon_kernel"]
    assert not gluon[0]["atomics"] and not gluon[1]["atomics"], "one split: no ticket"
    for kernel in gluon[2:]:  # split 2 and 4
        assert any(re.search(r"atom\..*add\.(u32|s32)", line) for line in kernel["atomics"])


# --- the epilogue's pair logic, in torch --------------------------------------------------------------

LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")


def _accumulators(t: int, gr: int, seed: int) -> torch.Tensor:
    """fp32 sums at per-block magnitudes, with zeros, an E4M3-subnormal block, a NaN, an Inf and values
    near fp32's top (FLOOR scales then exceed 448 before saturation)."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(-30, 30, (t, gr // 32, 1), generator=g).float())
    acc = (torch.randn(t, gr // 32, 32, generator=g) * mag).reshape(t, gr)
    if t > 3:
        acc[0, :32] = 0.0
        acc[1, 32:64] = torch.logspace(-140, -120, 32, base=2.0)
        acc[2, 70] = float("nan")
        acc[3, 100] = float("-inf")
        acc[3, 200:232] = torch.linspace(1e38, 3e38, 32)
    return acc


@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("t", "block_n", "block_t"), [(1, 64, 8), (5, 128, 8), (17, 64, 16), (130, 128, 64)])
def test_the_epilogue_writes_quantize_mxfp8_of_its_bf16_values(t, block_n, block_t, layout, rounding):
    gr = 2 * 256
    acc = _accumulators(t, gr, seed=t + block_n)
    pair = MxTensor.empty(t, gr, scale_layout=layout, rounding=rounding, device="cpu")
    pair.data.view(torch.uint8).fill_(0xA5)
    pair.scale_bytes().fill_(0xA5)
    pair_from_accumulator_tiles(acc, pair, block_n=block_n, block_t=block_t)
    want = as_mxtensor(
        quantize_mxfp8_reference(acc.to(torch.bfloat16), scale_layout=layout, rounding=rounding),
        scale_layout=layout,
        argument="want",
    )
    assert_same_bits(pair.data.view(torch.uint8), want.data.view(torch.uint8), name="codes")
    assert_same_bits(pair.scale_bytes(), want.scale_bytes(), name="scale storage, padding included")


# --- routing and refusals ------------------------------------------------------------------------------

_W = prepare_wo_a_weight(torch.randn(2, 128, 256))
_W_OUT = prepare_wo_a_weight(torch.randn(2, 128, 256) * 2.0**-130)  # scale bytes below the window
_W_R96 = prepare_wo_a_weight(torch.randn(2, 128, 96))
SM90, OK = (9, 0), (True, "")

ROUTES = [  # (id, requested, capability, gluon import, weight, table entry?, expected kernel, reason part)
    (
        "auto, empty table",
        "auto",
        SM90,
        OK,
        _W,
        False,
        "triton",
        "no measured Gluon win for G*R x r = 256 x 256",
    ),
    ("auto, measured win", "auto", SM90, OK, _W, True, "gluon", "measured Gluon faster on H200"),
    ("auto, not sm_90", "auto", (10, 0), OK, _W, True, "triton", "this device is sm_100"),
    ("auto, no gluon", "auto", SM90, (False, "no module"), _W, True, "triton", "no module"),
    ("auto, weight outside", "auto", SM90, OK, _W_OUT, True, "triton", "outside [10, 246]"),
    ("auto, r not a multiple of 64", "auto", SM90, OK, _W_R96, True, "triton", "multiple of 64; got r = 96"),
    ("triton named", "triton", SM90, OK, _W, True, "triton", "named: kernel='triton'"),
    ("gluon named, no table", "gluon", SM90, OK, _W, False, "gluon", "named: kernel='gluon'"),
]


@pytest.mark.parametrize(
    ("requested", "capability", "gluon_import", "w", "listed", "kernel", "reason"),
    [c[1:] for c in ROUTES],
    ids=[c[0] for c in ROUTES],
)
def test_choose_wo_a_kernel(monkeypatch, requested, capability, gluon_import, w, listed, kernel, reason):
    table = {"H200": {(w.groups * w.n, w.k): [(1, 64, GluonConfig(block_t=8))]}} if listed else {}
    monkeypatch.setattr(gluon_launch, "wo_a_gluon_table", lambda: table)
    choice = choose_wo_a_kernel(
        requested, capability=capability, gluon_import=gluon_import, device_name="H200", t=4, w=w
    )
    assert choice.kernel == kernel and reason in choice.reason, choice
    assert (choice.gluon_config is not None) == (kernel == "gluon" and listed)


def test_a_table_bucket_covers_only_its_tokens(monkeypatch):
    table = {"H200": {(256, 256): [(5, 16, GluonConfig(block_t=16))]}}
    monkeypatch.setattr(gluon_launch, "wo_a_gluon_table", lambda: table)
    picks = {
        t: choose_wo_a_kernel("auto", capability=SM90, gluon_import=OK, device_name="H200", t=t, w=_W).kernel
        for t in (4, 5, 16, 17)
    }
    assert picks == {4: "triton", 5: "gluon", 16: "gluon", 17: "triton"}


REFUSALS = [  # (id, requested, capability, gluon import, weight, error, match)
    (
        "not sm_90",
        "gluon",
        (8, 9),
        OK,
        _W,
        MxfuseUnavailableError,
        r"cannot run here: .*this device is sm_89",
    ),
    ("no gluon", "gluon", SM90, (False, "no module"), _W, MxfuseUnavailableError, "no module"),
    ("weight outside", "gluon", SM90, OK, _W_OUT, ValueError, r"w \(its scale bytes\) .*outside \[10, 246\]"),
    ("r = 96", "gluon", SM90, OK, _W_R96, ValueError, r"multiple of 64; got r = 96"),
    ("misspelt", "glun", SM90, OK, _W, ValueError, r"kernel must be one of \('auto', 'triton', 'gluon'\)"),
]


@pytest.mark.parametrize(
    ("requested", "capability", "gluon_import", "w", "error", "match"),
    [c[1:] for c in REFUSALS],
    ids=[c[0] for c in REFUSALS],
)
def test_naming_gluon_where_it_cannot_run_raises(requested, capability, gluon_import, w, error, match):
    with pytest.raises(error, match=match):
        choose_wo_a_kernel(
            requested, capability=capability, gluon_import=gluon_import, device_name=None, t=4, w=w
        )


def test_the_checked_in_table_fits_its_shapes_and_the_h200_reads_the_h100s(monkeypatch):
    """Every checked-in entry is a configuration the launcher takes for its weight (G x [R, r] from the
    measured G and the '{G*R}x{r}' key), and the H200, without entries of its own, reads the H100's
    through the stand-in; with stand-ins off it reads none."""
    raw = json.loads((Path(gluon_launch.__file__).parent / "gluon_configs.json").read_text())
    table = wo_a_gluon_table()
    assert table and set(table) == set(raw["devices"])
    for device, shapes in raw["devices"].items():
        for key, buckets in shapes["shapes"].items():
            gr, r = map(int, key.split("x"))
            for bucket, (m_min, m_max, config) in zip(buckets, table[device][(gr, r)], strict=True):
                groups = bucket["measured"]["G"]
                check_wo_a_gluon_config(config, groups=groups, n=gr // groups, k=r)
                assert m_min <= bucket["measured"]["T"] <= m_max
                assert bucket["measured"]["gluon_us"] < bucket["measured"]["triton_us"]
    h100 = "NVIDIA H100 80GB HBM3"
    assert "NVIDIA H200" not in table and h100 in table
    key, buckets = next(iter(raw["devices"][h100]["shapes"].items()))
    gr, r = map(int, key.split("x"))
    groups, m_min = buckets[0]["measured"]["G"], buckets[0]["m_min"]
    config = table[h100][(gr, r)][0][2]
    assert gluon_launch.measured_wo_a_gluon_win("NVIDIA H200", groups, gr // groups, r, m_min) == config
    monkeypatch.setenv("MXFUSE_TABLE_STANDINS", "0")
    assert gluon_launch.measured_wo_a_gluon_win("NVIDIA H200", groups, gr // groups, r, m_min) is None


def test_on_the_cpu_gluon_named_raises_and_the_others_run_the_reference():
    a = quantize_mxfp8_reference(torch.randn(3, 512))
    with pytest.raises(MxfuseUnavailableError, match=r"kernel 'gluon' cannot run here: .* this is cpu"):
        grouped_wo_a(a, _W, kernel="gluon")
    with pytest.raises(ValueError, match=r"kernel must be one of"):
        grouped_wo_a(a, _W, kernel="cuda")
    assert torch.equal(grouped_wo_a(a, _W, kernel="triton"), grouped_wo_a(a, _W))


def test_prepare_records_the_weight_window():
    assert _W.in_window and "in [10, 246]" in _W.window_reason
    assert not _W_OUT.in_window and "outside [10, 246]" in _W_OUT.window_reason
    bare = einsum_module.WoAWeight(_W.qweight, _W.scale, _W.tickets)
    assert not bare.in_window and "not checked" in bare.window_reason


@pytest.mark.parametrize(
    ("config", "n", "k", "match"),
    [
        (GluonConfig(), 128, 192, r"block_k = 128 must divide r = 192"),
        (GluonConfig(block_n=128), 64, 256, r"block_n = 128 must divide R = 64"),
    ],
)
def test_bad_configs_name_the_field(config, n, k, match):
    with pytest.raises(ValueError, match=match):
        check_wo_a_gluon_config(config, groups=2, n=n, k=k)


@pytest.mark.parametrize(("t", "k", "block_t"), [(1, 4096, 8), (16, 4096, 16), (64, 4096, 64), (64, 256, 64)])
def test_default_config(t, k, block_t):
    config = default_wo_a_gluon_config(t, 8, 1024, k)
    assert (config.block_t, config.block_k, config.block_n) == (block_t, 128, 64)
    check_wo_a_gluon_config(config, groups=8, n=1024, k=k)


# --- the first launch, interpreted ------------------------------------------------------------------

_PREP = """
import sys, torch
from mxfuse.einsum import prepare_wo_a_weight
from mxfuse.formats import MxTensor
from mxfuse.kernels.grouped_wo_a.gluon_launch import launch_wo_a_gluon_prep
from mxfuse.kernels.grouped_wo_a.gluon_prep import wo_a_gluon_prep_kernel
(a_q, a_s, layout, w_q, w_s) = torch.load(sys.argv[1])
w = prepare_wo_a_weight(w_q, w_s)
t, gk = a_q.shape
a16 = torch.full((t, gk), float("nan"), dtype=torch.bfloat16)
skip = torch.full((t,), -1, dtype=torch.int32)
exact = torch.full((t, w.groups * w.n), float("nan"), dtype=torch.bfloat16)
launch_wo_a_gluon_prep(MxTensor(a_q, a_s, layout), w, a16, skip, exact)
torch.save({"interpreted": type(wo_a_gluon_prep_kernel).__name__, "out": (a16, skip, exact)}, sys.argv[2])
"""
PREP_T, PREP_G, PREP_R, PREP_K = 4, 2, 128, 128


def _prep_case():
    g = torch.Generator().manual_seed(5)
    a_codes = (torch.randn(PREP_T, PREP_G * PREP_K, generator=g) * 8).to(torch.float8_e4m3fn)
    a_scale = torch.randint(118, 136, (PREP_T, PREP_G * PREP_K // 32), generator=g, dtype=torch.int32)
    a_scale[2, 5] = 250  # token 2, group 1's second block: outside the window, the product stays finite
    w_codes = (torch.randn(PREP_G * PREP_R, PREP_K, generator=g) * 8).to(torch.float8_e4m3fn)
    w_scale = torch.full((PREP_G * PREP_R, PREP_K // 32), 100, dtype=torch.int32)
    return a_codes, a_scale.to(torch.uint8), w_codes, w_scale.to(torch.uint8)


@pytest.fixture(scope="module")
def prepped(tmp_path_factory):
    from interpreter import run_interpreted

    a_codes, a_scale, w_codes, w_scale = _prep_case()
    return run_interpreted(
        tmp_path_factory,
        "wo_a_gluon_prep_interpret",
        _PREP,
        lambda: (
            a_codes,
            a_scale,
            "e8m0",
            w_codes.view(PREP_G, PREP_R, PREP_K),
            w_scale.view(PREP_G, PREP_R, -1),
        ),
    )


def test_prep_flags_the_out_of_window_token_and_computes_its_z_exactly(prepped):
    assert prepped["interpreted"] == "InterpretedFunction"
    a16, skip, exact = prepped["out"]
    a_codes, a_scale, w_codes, w_scale = _prep_case()
    assert skip.tolist() == [0, 0, 1, 0]
    a64 = a_codes.double() * torch.exp2(a_scale.double() - 127).repeat_interleave(32, dim=1)
    w64 = w_codes.double() * torch.exp2(w_scale.double() - 127).repeat_interleave(32, dim=1)
    rows = [0, 1, 3]
    # Each 128 columns in the Gluon mainloop's operand order (r is a multiple of 128).
    expected = torch.empty_like(a64).to(torch.bfloat16)
    expected[:, gluon_operand_columns(PREP_G * PREP_K)] = a64.to(torch.bfloat16)
    assert_same_bits(a16[rows].view(torch.int16), expected[rows].view(torch.int16), name="a16")
    z64 = torch.einsum("gk,gdk->gd", a64[2].view(PREP_G, PREP_K), w64.view(PREP_G, PREP_R, PREP_K)).reshape(
        -1
    )
    # The interpreter's fp32 -> bf16 cast truncates: within one bf16 step of float64.
    got = exact[2].double()
    assert torch.all((got - z64).abs() <= z64.abs() * 2.0**-7 + 1e-30), "exact z of the flagged token"
    assert torch.isnan(exact[rows].float()).all(), "unflagged tokens' rows are the Gluon kernel's"
