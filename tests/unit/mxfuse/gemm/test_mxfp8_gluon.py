"""The Gluon decode GEMM on CPU: it compiles for sm_90a through its real launcher, its first launch computes
what it must (Triton interpreter), and the ``gluon`` backend is chosen only by the rules.

* Compilation (``sm90_compile``): the launcher runs on CPU tensors in a child process, each launch
  compiled for sm_90 instead, the Gluon kernel with its TMA descriptors typed as the launcher types them.
  The PTX must hold register-A bf16 wgmma (``wgmma.mma_async ... .bf16.bf16``) and no float atomics (the
  split-K ticket is an integer atomic). Gluon has no interpreter: the kernel's numerics are checked on
  the GPU (tests/kernels/mxfuse/gemm/test_mxfp8_gemm.py runs every backend, this one included).
* The first launch (``gluon_prep``, Triton) under the interpreter: the bf16 activation is bit for bit
  ``bf16(code * 2**(s - 127))`` inside the scale window, tokens with a block outside it are flagged, and
  their rows are computed exactly (float64 oracle, row- and element-local).
* Routing: ``auto`` never takes ``gluon`` while its measured table is empty, takes it where the table
  names the shape, hands calls at an M the table does not name to ``triton``; weights outside the
  window are refused by name or passed over by ``auto``; an unavailable device raises the same error
  as every other backend.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from interpreter import run_interpreted
from mxfp8_gemm_cases import (
    RTOL_VS_BF16,
    assert_gemm_matches_float64,
    gluon_operand_columns,
    random_codes,
    random_scales,
)
from sm90_compile import assert_no_float_atomics, assert_register_a_bf16_wgmma, child_ptx_report

import mxfuse.gemm.backend as gemm_backend
from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import MxfuseUnavailableError, witness
from mxfuse.formats import scale_to_layout
from mxfuse.gemm import (
    AUTO_ORDER,
    MxWeight,
    auto_rule,
    backend_status,
    mxfp8_gemm,
    prepare_mxfp8_weight,
    select_backend,
)
from mxfuse.gemm import api as gemm_api
from mxfuse.gemm.backend import Availability
from mxfuse.gemm.gluon_backend import GLUON
from mxfuse.gemm.triton_backend import TRITON
from mxfuse.kernels.gemm import gluon_launch
from mxfuse.kernels.gemm import launch as gemm_launch
from mxfuse.kernels.gemm.gluon_launch import (
    GluonConfig,
    default_gluon_config,
    gluon_table,
    parse_gluon_table,
    weight_in_window,
)

register(on=("cpu",), est_time=90)

CUDA0 = torch.device("cuda", 0)

# --- compilation for sm_90a --------------------------------------------------------------------------

_COMPILE = """
import json, torch
from sm90_compile import compile_launches, ptx_report
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
from mxfuse.gemm.weights import quantize_weight
from mxfuse.kernels.gemm import weight_scale_kgroup_major
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, GluonOperands, launch_gluon_decode
torch.manual_seed(0)
keep = []
def run():
    wq, ws = quantize_weight(torch.randn(200, 1056))  # N not a multiple of 64, K of 128
    wst = weight_scale_kgroup_major(ws)
    cases = [(1, "deepgemm", None), (16, "e8m0", None), (64, "swizzled_128x4", None), (70, "deepgemm", None),
             (4, "deepgemm", GluonConfig(64, 8, 128, 1, 2)), (32, "e8m0", GluonConfig(128, 32, 128, 3, 6)),
             (16, "deepgemm", GluonConfig(64, 16, 128, 4, 4, False, True)),
             (64, "e8m0", GluonConfig(128, 64, 128, 1, 3, False, True))]
    for m, layout, config in cases:
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(m, 1056), scale_layout=layout), layout)
        launch_gluon_decode(GluonOperands(a, wq, wst, torch.empty(m, 200, dtype=torch.bfloat16)), config=config)
compile_launches(run, keep=keep)
print(json.dumps(ptx_report(keep)))
"""


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    return child_ptx_report(_COMPILE)


_COMPILE_PDL = """
import json, torch
from sm90_compile import compile_launches
from mxfuse.formats import MxTensor, quantize_mxfp8_reference
from mxfuse.gemm.weights import quantize_weight
from mxfuse.kernels.gemm import weight_scale_kgroup_major
from mxfuse.kernels.gemm import gluon_launch
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, GluonOperands, launch_gluon_decode
from mxfuse.kernels.pdl import PdlPolicy
# The policy on a GPU of sm_90 (CPU tensors get OFF): both launches take part.
gluon_launch.pdl_policy = lambda device, gemm=False: PdlPolicy(signal=True, wait=True)
torch.manual_seed(0)
keep = []
def run():
    wq, ws = quantize_weight(torch.randn(200, 1056))
    wst = weight_scale_kgroup_major(ws)
    for config in (GluonConfig(64, 8, 128, 1, 3), GluonConfig(64, 16, 128, 2, 4, False, True)):
        a = MxTensor(*quantize_mxfp8_reference(torch.randn(8, 1056), scale_layout="deepgemm"), "deepgemm")
        launch_gluon_decode(GluonOperands(a, wq, wst, torch.empty(8, 200, dtype=torch.bfloat16)), config=config)
compile_launches(run, keep=keep)
facts = []
for name, kernel in keep:
    # instructions without their predicate ("@%p2 cp.async..." -> "cp.async...")
    lines = [line.strip().split(" ", 1)[-1] if line.strip().startswith("@") else line.strip()
             for line in kernel.asm["ptx"].splitlines()]
    waits = [i for i, line in enumerate(lines) if line.startswith("griddepcontrol.wait")]
    signals = [i for i, line in enumerate(lines) if line.startswith("griddepcontrol.launch_dependents")]
    copies = [i for i, line in enumerate(lines) if line.startswith("cp.async.bulk.tensor")]
    first = waits[0] if waits else len(lines)
    facts.append({"name": name, "waits": len(waits), "signals": len(signals), "first_wait": first,
                  "first_signal": signals[0] if signals else None, "copies_before": sum(i < first for i in copies),
                  "copies_after": sum(i > first for i in copies), "cubin": len(kernel.asm.get("cubin", b"")) > 0})
print(json.dumps(facts))
"""


def test_with_programmatic_launch_the_weight_tiles_are_requested_before_the_wait():
    """The first launch waits and then signals; the Gluon kernel (plain and with its producer warp) has
    the ring's first weight tiles' TMA before its first ``griddepcontrol.wait``, every activation tile's
    after it, and signals nothing (the kernel after it launches as it exits)."""
    prep_plain, main_plain, prep_producer, main_producer = child_ptx_report(_COMPILE_PDL)
    for prep in (prep_plain, prep_producer):
        assert prep["name"] == "gluon_prep_kernel" and prep["cubin"]
        assert prep["waits"] == 1 and prep["signals"] == 1 and prep["first_wait"] < prep["first_signal"]
    for main, stages in ((main_plain, 3), (main_producer, 4)):
        assert main["name"] == "mxfp8_gluon_decode_kernel" and main["cubin"]
        assert main["waits"] >= 1 and main["signals"] == 0
        # One copy a [64, 128] E4M3 weight tile per stage before the wait; each stage's activation tile
        # and the later steps' tiles after it.
        assert main["copies_before"] == stages, main
        assert main["copies_after"] >= stages + 2, main


def test_both_launches_compile_for_sm90a_to_cubin(compiled):
    assert [k["name"] for k in compiled] == ["gluon_prep_kernel", "mxfp8_gluon_decode_kernel"] * 8
    assert all(k["target"] and k["cubin"] for k in compiled)


def test_the_gluon_kernel_multiplies_with_register_a_bf16_wgmma(compiled):
    assert_register_a_bf16_wgmma(compiled, "mxfp8_gluon_decode_kernel")


def test_no_float_atomics_only_the_integer_split_ticket(compiled):
    assert_no_float_atomics(compiled)
    split = [k for k in compiled if k["name"] == "mxfp8_gluon_decode_kernel" and k["atomics"]]
    assert split, "the split-K launches take an arrival ticket"
    assert all(any(re.search(r"atom\..*add\.(u32|s32)", line) for line in k["atomics"]) for k in split)


# --- the first launch, interpreted ------------------------------------------------------------------

_PREP = """
import sys, torch
from mxfuse.formats import MxTensor
from mxfuse.kernels.gemm.gluon_launch import GluonOperands, launch_gluon_prep, padded_k, prep_chunks
from mxfuse.kernels.gemm.gluon_prep import gluon_prep_kernel
cases = torch.load(sys.argv[1])
results = {"interpreted": type(gluon_prep_kernel).__name__}
for key, (a_q, a_scale, layout, w_q, w_scale_t) in cases.items():
    m, k = a_q.shape
    out = torch.full((m, w_q.shape[0]), float("nan"), dtype=torch.bfloat16)
    a16 = torch.full((m, padded_k(k)), float("nan"), dtype=torch.bfloat16)
    skip = torch.full((m,), -1, dtype=torch.int32)
    flags = torch.full((m, prep_chunks(k)), -1, dtype=torch.int32)
    tickets = torch.zeros((m,), dtype=torch.int32)
    ops = GluonOperands(MxTensor(a_q, a_scale, layout), w_q, w_scale_t, out)
    launch_gluon_prep(ops, a16, skip, flags, tickets)
    results[key] = (a16, skip, out, tickets)
torch.save(results, sys.argv[2])
"""
M, N, K = 6, 37, 384
K_RAGGED = 352  # not a multiple of the kernel's 128-wide step: the activation row is padded with zeros
K_CHUNKS = 2176  # 68 groups: three programs per row (1024 K each, the last one short)
CASE_K = {False: K, True: K, "ragged": K_RAGGED, "chunks": K_CHUNKS}


def _prep_operands(layout: str, *, extreme: bool, k: int = K):
    aq, sa = random_codes(M, k, seed=1, limit=1.75), random_scales(M, k, seed=2)
    wq, sw = random_codes(N, k, seed=3, limit=1.75), random_scales(N, k, seed=4)
    if extreme:
        # Rows 1 and 3 pair with the weight's bytes so that every block product is 2**0 (finite), except
        # row 1's block 2, which leaves the window from below (byte 9): both rows are computed exactly.
        sw[:, :] = torch.tensor([254, 253, 1, 0], dtype=torch.uint8).repeat(K // 128)
        sa[1, :] = sa[3, :] = torch.tensor([0, 1, 253, 254], dtype=torch.uint8).repeat(K // 128)
        sa[1, 2] = 9
        sa[4, 5] = 0xFF  # NaN block: in the window's sense (it reaches its row through the GEMM)
        aq.view(torch.uint8)[5, 64:96] = 0
        sa[5, 2] = 0  # a zero block under byte 0 is exact
    if k == K_CHUNKS:
        # Rows flagged from their first and from their last program's chunk: the row's last program to
        # arrive (whichever it is) must see both.
        sa[2, 5] = 5
        sa[4, 67] = 3
    return aq, sa, wq, sw


def _prep_cases() -> dict:
    cases = {}
    for layout in ("e8m0", "deepgemm", "swizzled_128x4"):
        for extreme in (False, True, "ragged", "chunks"):
            if extreme == "chunks" and layout != "e8m0":
                continue
            aq, sa, wq, sw = _prep_operands(layout, extreme=extreme is True, k=CASE_K[extreme])
            cases[(layout, extreme)] = (
                aq,
                scale_to_layout(sa, scale_layout=layout),
                layout,
                wq,
                sw.t().contiguous(),
            )
    return cases


@pytest.fixture(scope="module")
def prepped(tmp_path_factory):
    return run_interpreted(tmp_path_factory, "gluon_prep_interpret", _PREP, _prep_cases)


@pytest.mark.parametrize(
    ("layout", "extreme"),
    [
        *(
            (layout, extreme)
            for layout in ("e8m0", "deepgemm", "swizzled_128x4")
            for extreme in (False, True, "ragged")
        ),
        ("e8m0", "chunks"),
    ],
    ids=lambda v: {False: "window", True: "extreme", "ragged": "ragged-k", "chunks": "three-chunks"}.get(
        v, v
    ),
)
def test_prep_dequantizes_exactly_and_flags_rows_outside_the_window(prepped, layout, extreme):
    assert prepped["interpreted"] == "InterpretedFunction"
    a16, skip, out, tickets = prepped[(layout, extreme)]
    k = CASE_K[extreme]
    aq, sa, wq, sw = _prep_operands(layout, extreme=extreme is True, k=k)
    flagged = {True: [1, 3], "chunks": [2, 4]}.get(extreme, [])
    assert skip.tolist() == [int(i in flagged) for i in range(M)]
    assert tickets.tolist() == [0] * M, "every row's last program resets its ticket"
    factors = torch.exp2(sa.to(torch.float64) - 127).repeat_interleave(32, dim=1)
    factors[sa.repeat_interleave(32, dim=1) == 255] = float("nan")
    dequantized = (aq.to(torch.float64) * factors).to(torch.bfloat16)
    # In the decode kernel's operand order, zeros past K up to the 128-wide step.
    assert a16.shape == (M, -(-k // 128) * 128)
    expected = torch.zeros(M, a16.shape[1], dtype=torch.bfloat16)
    expected[:, gluon_operand_columns(k)] = dequantized
    rows = [i for i in range(M) if i not in flagged]
    nan = torch.isnan(expected[rows])
    assert torch.equal(torch.isnan(a16[rows]), nan), "NaN exactly in the NaN blocks"
    assert_same_bits(
        torch.where(nan, 0, a16[rows].view(torch.int16)),
        torch.where(nan, 0, expected[rows].view(torch.int16)),
        name="bf16 activation",
    )
    assert torch.isnan(out[rows].float()).all(), "unflagged rows are the Gluon kernel's to write"
    if flagged:
        assert_gemm_matches_float64(
            out[flagged], aq[flagged], sa[flagged], wq, sw, name="exact rows", rtol=RTOL_VS_BF16
        )  # the interpreter truncates to bf16: a whole step
        assert torch.isfinite(out[flagged[1]].float()).all()


def test_the_operand_order_is_a_permutation_within_each_step():
    """Each 128-wide step's columns stay in their step, all of them once, and each thread's 32-group
    (physical columns 32c .. 32c + 31) lands on the operand columns wgmma gives lane c (2c, 2c + 1,
    2c + 8, 2c + 9 of every 16-wide slice)."""
    cols = gluon_operand_columns(256)
    assert sorted(cols.tolist()) == list(range(256))
    assert torch.equal(cols // 128, torch.arange(256) // 128)
    for c in range(4):
        lane = sorted((cols[32 * c : 32 * c + 32] % 16).unique().tolist())
        assert lane == [2 * c, 2 * c + 1, 2 * c + 8, 2 * c + 9]


def _cvt_emulated(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``_CVT_ASM`` step by step on int64 words (a pair of bytes per word: prmt 0x4140), bf16 multiplies
    rounded as the GPU's ``mul.rn.bf16x2`` (exact products here, so float64 then bf16)."""
    b = codes.view(torch.uint8).to(torch.int64)
    u = b  # the byte in the low 8 bits of its 16-bit lane
    g = u & 0x80
    u = ((g * 15 + u) << 4) & 0xFFFF
    raw = u.to(torch.int32).to(torch.int16).view(torch.bfloat16).to(torch.float64)  # e4m3 * 2**-120
    step1 = (raw * 2.0**120).to(torch.bfloat16).to(torch.float64)
    factor = torch.where(scale == 255, float("nan"), torch.exp2(scale.to(torch.float64) - 127))
    return (step1 * factor.to(torch.bfloat16).to(torch.float64)).to(torch.bfloat16)


def test_the_weight_conversion_arithmetic_is_exact_for_every_code_and_window_byte():
    """The arithmetic of the kernel's conversion (the GPU tests run the instructions themselves): every
    non-NaN E4M3 code, both signs, zero and subnormals, at every scale byte of the window and 0xFF."""
    codes = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn)
    keep = ~torch.isnan(codes.to(torch.float32))
    for byte in (*range(gluon_launch.W_LO, gluon_launch.W_HI + 1), 255):
        scale = torch.full((256,), byte, dtype=torch.int64)
        got = _cvt_emulated(codes, scale)
        want = (codes.to(torch.float64) * (2.0 ** (byte - 127) if byte != 255 else float("nan"))).to(
            torch.bfloat16
        )
        if byte == 255:
            assert torch.isnan(got[keep].float()).all()
            continue
        assert_same_bits(got[keep].view(torch.int16), want[keep].view(torch.int16), name=f"byte {byte}")


def test_the_raw_bits_are_e4m3_times_two_to_minus_120():
    codes = torch.arange(256, dtype=torch.int64).to(torch.uint8)
    u = codes.to(torch.int64)
    bits = ((((u & 0x80) * 15 + u) << 4) & 0xFFFF).to(torch.int32).to(torch.int16)
    value = bits.view(torch.bfloat16).to(torch.float64)
    e4m3 = codes.view(torch.float8_e4m3fn).to(torch.float64)
    finite = ~torch.isnan(e4m3)
    assert torch.equal(value[finite], e4m3[finite] * 2.0**-120)
    assert torch.equal(torch.signbit(value[finite]), torch.signbit(e4m3[finite]))  # -0 stays -0


def test_blocks_with_nan_codes_carry_scale_byte_255_for_the_kernel(monkeypatch):
    """``gluon_weight_scale`` and the weight ``prepare_mxfp8_weight`` makes for the gluon backend (the path
    layers take) fold NaN-code blocks to 0xFF; the operand keeps the original bytes, other backends too."""
    wq, ws = random_codes(8, 128, seed=3), random_scales(8, 128, seed=4)
    wq.view(torch.uint8)[2, 70] = 0x7F
    wq.view(torch.uint8)[6, 5] = 0xFF
    want = ws.clone()
    want[2, 2] = want[6, 0] = 255
    got = gluon_launch.gluon_weight_scale(wq, ws)
    assert_same_bits(got, want.t().contiguous(), name="kernel scale bytes")
    assert got.shape == (4, 8) and got.is_contiguous()
    _pretend_sm90(monkeypatch)
    _runs_here(monkeypatch, GLUON, TRITON)
    w = prepare_mxfp8_weight(wq, ws, backend="gluon")
    assert_same_bits(w.scale, want.t().contiguous(), name="prepared gluon scale bytes")
    assert_same_bits(w.scale_e8m0, ws, name="the original bytes are kept")
    w = prepare_mxfp8_weight(wq, ws, backend="triton")
    assert_same_bits(w.scale, ws.t().contiguous(), name="other backends' bytes are not folded")


# --- routing ----------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_backend_status():
    gemm_api._status.cache_clear()
    yield
    gemm_api._status.cache_clear()


def _pretend_sm90(monkeypatch) -> None:
    """Every device reports sm_90 and, to the launch table, no name (the CPU's answer)."""
    monkeypatch.setattr(gemm_backend, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(gemm_launch, "device_facts", lambda device: (None, 132))


def _table(monkeypatch, entries: dict) -> None:
    """The measured table, replaced: ``{(n, k): [(m_min, m_max, config)]}`` for the device this test runs on (no
    name: the CPU, whose ``device_facts`` name is None, reads the entry ``""``) and for cuda:0 here."""
    monkeypatch.setattr(gluon_launch, "gluon_table", lambda: {"": entries})


def test_the_checked_in_table_holds_decode_buckets_measured_on_named_devices():
    """What a sweep wrote: per device name, [N, K] keys with disjoint M buckets inside the decode regime
    (M <= 64), each with a configuration the launcher accepts; a device the table does not name (this
    CPU's, None) gets nothing from it, so ``auto`` passes over ``gluon`` there."""
    table = gluon_table()
    assert "" not in table and None not in table
    for shapes in table.values():
        for (n, k), buckets in shapes.items():
            assert n > 0 and k > 0 and k % 128 == 0
            assert all(1 <= lo <= hi <= 64 and isinstance(c, GluonConfig) for lo, hi, c in buckets)
    assert gluon_launch.measured_gluon_win(None, 7168, 16384) is None
    assert AUTO_ORDER.index("gluon") < AUTO_ORDER.index("triton")


def test_auto_passes_over_gluon_on_sm90_until_the_table_names_the_shape(monkeypatch):
    _pretend_sm90(monkeypatch)
    assert backend_status(CUDA0, n=7168, k=16384)["gluon"].ok  # it runs here, by name
    name, passed_over = select_backend(CUDA0, n=7168, k=16384)
    assert name == "triton"
    assert "not chosen automatically" in passed_over["gluon"]
    assert "name backend='gluon'" in passed_over["gluon"]
    name, passed_over = select_backend(CUDA0)
    assert name == "triton" and "without the weight's [N, K]" in passed_over["gluon"]
    _table(monkeypatch, {(7168, 16384): [(1, 64, GluonConfig())]})
    assert select_backend(CUDA0, n=7168, k=16384)[0] == "gluon"
    assert select_backend(CUDA0, n=5120, k=8192)[0] == "triton"
    assert auto_rule("triton", CUDA0, n=None, k=None).ok


@pytest.mark.parametrize(
    ("capability", "reason"), [((8, 9), "this device is sm_89"), ((10, 0), "this device is sm_100")]
)
def test_gluon_runs_on_sm90_only(monkeypatch, capability, reason):
    monkeypatch.setattr(gemm_backend, "cuda_capability", lambda device: capability)
    status = backend_status(CUDA0)["gluon"]
    assert not status.ok and reason in status.reason


def test_gluon_is_unavailable_when_its_module_does_not_import(monkeypatch):
    _pretend_sm90(monkeypatch)
    monkeypatch.setitem(__import__("sys").modules, "triton.experimental.gluon.language.nvidia.hopper", None)
    status = backend_status(CUDA0)["gluon"]
    assert (
        not status.ok
        and "triton.experimental.gluon.language.nvidia.hopper is not importable" in status.reason
    )


def test_naming_gluon_where_it_cannot_run_raises_the_unavailable_error():
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    with pytest.raises(MxfuseUnavailableError, match=r"backend 'gluon' cannot run on cpu: .*CUDA sm_90"):
        prepare_mxfp8_weight(wq, ws, backend="gluon")


def _runs_here(monkeypatch, *backends) -> None:
    """``backends`` report that they run on every device (the CPU included): prepare-time rules only."""
    for backend in backends:
        monkeypatch.setattr(type(backend), "available", lambda self, device: Availability(True, "pretend"))


def test_a_weight_prepared_for_gluon_then_run_where_it_cannot(monkeypatch):
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    with monkeypatch.context() as patch:
        _runs_here(patch, GLUON)
        w = prepare_mxfp8_weight(wq, ws, backend="gluon")
    gemm_api._status.cache_clear()
    assert w.backend == "gluon" and w.scale.shape == (256 // 32, 64)  # K-group-major, as triton reads it
    pair = (random_codes(3, 256, seed=5), random_scales(3, 256, seed=6))
    with pytest.raises(MxfuseUnavailableError, match=r"backend 'gluon' cannot run on cpu"):
        mxfp8_gemm(pair, w, backend="gluon")


def test_a_gluon_weight_written_in_place_after_its_check_is_refused(monkeypatch):
    """The window is checked when the weight is prepared; a weight written in place afterwards is refused on
    the ``gluon`` backend (its kernel would read values nobody checked), the other backends still take it."""
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    _runs_here(monkeypatch, GLUON)
    ran = []
    monkeypatch.setattr(type(GLUON), "run", lambda self, a, w, out: ran.append(out.shape))
    w = prepare_mxfp8_weight(wq, ws, backend="gluon")
    assert w.checked is not None
    pair = (random_codes(3, 256, seed=5), random_scales(3, 256, seed=6))
    mxfp8_gemm(pair, w, backend="gluon")
    assert ran == [(3, 64)]
    before = w.scale.clone()
    w.scale[1, 5] = 250  # out of the window, written where the kernel reads it
    with pytest.raises(
        ValueError, match=r"w: its tensors were written in place after its values were checked"
    ):
        mxfp8_gemm(pair, w, backend="gluon")
    assert ran == [(3, 64)]  # nothing launched
    w.scale.copy_(before)  # the old values again: still unchecked writes, still refused
    with pytest.raises(ValueError, match=r"prepare the weight again \(prepare_mxfp8_weight\)"):
        mxfp8_gemm(pair, w, backend="gluon")
    w.qweight.view(torch.uint8)[0, 0] ^= 1
    assert mxfp8_gemm(pair, w, backend="torch").shape == (3, 64)  # any values: no check
    again = prepare_mxfp8_weight(w.qweight, w.scale_e8m0, backend="gluon")
    mxfp8_gemm(pair, again, backend="gluon")
    assert ran == [(3, 64), (3, 64)]


def test_a_weight_without_version_counters_is_not_rechecked(monkeypatch):
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    _runs_here(monkeypatch, GLUON)
    monkeypatch.setattr(type(GLUON), "run", lambda self, a, w, out: None)
    with torch.inference_mode():
        w = prepare_mxfp8_weight(wq.clone(), ws.clone(), backend="gluon")
    assert w.checked is None  # inference tensors keep no counter
    mxfp8_gemm((random_codes(2, 256, seed=5), random_scales(2, 256, seed=6)), w, backend="gluon")


@pytest.mark.parametrize("checked", [(1,), (1, 2, 3), ("1", 2), (1.0, 2), [1, 2]])
def test_mxweight_checked_must_be_a_pair_of_ints(checked):
    w = prepare_mxfp8_weight(random_codes(8, 64, seed=1), random_scales(8, 64, seed=2), backend="torch")
    with pytest.raises(TypeError, match="MxWeight.checked must be None or a pair of ints"):
        MxWeight(w.operand, w.scale, w.backend, checked=checked)


@pytest.mark.parametrize(
    ("label", "byte", "codes_zero", "ok"),
    [
        ("in the window", 10, False, True),
        ("top of the window", 246, False, True),
        ("below", 9, False, False),
        ("above", 247, False, False),
        ("NaN block", 255, False, True),
        ("zero block under byte 0", 0, True, True),
        ("byte 0 with codes", 0, False, False),
    ],
)
def test_weight_window(label, byte, codes_zero, ok):
    wq, ws = random_codes(8, 128, seed=7, limit=100.0), random_scales(8, 128, seed=8)
    ws[3, 2] = byte
    if codes_zero:
        wq.view(torch.uint8)[3, 64:96] = 0
    got, why = weight_in_window(wq, ws)
    assert got is ok, f"{label}: {why}"
    assert GLUON.supports_weight(wq, ws).ok is ok


def test_weights_outside_the_window_are_refused_by_name_and_passed_over_by_auto(monkeypatch):
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    ws[5, 1] = 250
    _pretend_sm90(monkeypatch)
    _runs_here(monkeypatch, GLUON, TRITON)
    with pytest.raises(
        ValueError, match=r"weight \(its scale bytes\) cannot be used by backend 'gluon': .*250"
    ):
        prepare_mxfp8_weight(wq, ws, backend="gluon")
    _table(monkeypatch, {(64, 256): [(1, 64, GluonConfig())]})
    assert prepare_mxfp8_weight(wq, random_scales(64, 256, seed=2)).backend == "gluon"
    w = prepare_mxfp8_weight(wq, ws)
    assert w.backend == "triton" and "outside [10, 246]" in dict(w.passed_over)["gluon"]


def test_auto_hands_a_call_outside_the_measured_m_to_triton(monkeypatch):
    wq, ws = random_codes(64, 256, seed=1), random_scales(64, 256, seed=2)
    _table(monkeypatch, {(64, 256): [(1, 16, GluonConfig())]})
    with monkeypatch.context() as patch:
        _runs_here(patch, GLUON)
        w = prepare_mxfp8_weight(wq, ws)
    gemm_api._status.cache_clear()
    assert w.backend == "gluon"
    for m, record in ((4, "gluon cannot run here"), (32, "no measured win at M = 32")):
        pair = (random_codes(m, 256, seed=m), random_scales(m, 256, seed=m + 1))
        with witness.capture() as records:
            mxfp8_gemm(pair, w)  # neither runs on this CPU: the torch backend does, and says why
        assert records[-1]["path"] == "gemm.torch"
        assert record in json.dumps(records[-1]["passed_over"])


# --- configurations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("m", "n", "k", "block_t", "split"),
    [(1, 7168, 16384, 8, 4), (16, 1792, 5120, 16, 8), (64, 5120, 2048, 64, 4), (5, 64, 128, 8, 1)],
)
def test_default_config(m, n, k, block_t, split):
    cfg = default_gluon_config(m, n, k)
    assert (cfg.block_t, cfg.split_k, cfg.block_n, cfg.num_warps) == (block_t, split, 64, 4)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"format": 2, "devices": {}}, r"'format': 1"),
        ({"format": 1, "devices": {"H": {"shapes": {"7x": []}}}}, r"the key must be 'NxK'"),
        (
            {"format": 1, "devices": {"H": {"shapes": {"8x32": [{"m_max": 4, "config": {"bogus": 1}}]}}}},
            r"\[0\]",
        ),
        (
            {"format": 1, "devices": {"H": {"shapes": {"8x32": [{"m_max": 4, "config": {"block_t": 12}}]}}}},
            r"block_t",
        ),
        (
            {
                "format": 1,
                "devices": {
                    "H": {"shapes": {"8x32": [{"m_max": 4, "config": {}}, {"m_max": 4, "config": {}}]}}
                },
            },
            r"m_max must increase",
        ),
    ],
)
def test_bad_tables_name_the_entry(data, match):
    with pytest.raises(ValueError, match=match):
        parse_gluon_table(data, source="t.json")


def _buckets(*buckets: dict) -> dict:
    return {"format": 1, "devices": {"H": {"shapes": {"64x256": list(buckets)}}}}


@pytest.mark.parametrize(
    ("buckets", "match"),
    [
        (({"m_min": 0, "m_max": 4, "config": {}},), r"'m_min' must be an int from 1 .* got 0"),
        (({"m_min": 5, "m_max": 4, "config": {}},), r"from 1 .* to m_max = 4; got 5"),
        (({"m_min": True, "m_max": 4, "config": {}},), r"got True"),
        (
            ({"m_max": 4, "config": {}}, {"m_min": 4, "m_max": 16, "config": {}}),
            r"\[1\]: 'm_min' must be an int from 5 \(past the previous bucket\)",
        ),
    ],
    ids=["zero", "above m_max", "bool", "overlaps the previous bucket"],
)
def test_bad_lower_bounds_name_the_bucket(buckets, match):
    with pytest.raises(ValueError, match=match):
        parse_gluon_table(_buckets(*buckets), source="t.json")


def test_a_shape_key_is_written_one_way():
    data = {"format": 1, "devices": {"H": {"shapes": {"064x256": [{"m_max": 4, "config": {}}]}}}}
    with pytest.raises(ValueError, match=r"write the key as '64x256'"):
        parse_gluon_table(data, source="t.json")


WINS = [  # (id, m, expected: the bucket's block_t, or None for "not gluon's")
    ("below the first bucket", 1, None),
    ("the first bucket's lower edge", 5, 16),
    ("inside the first bucket", 9, 16),
    ("between buckets", 20, None),
    ("the second bucket", 33, 64),
    ("above every bucket", 65, None),
]


@pytest.mark.parametrize(("m", "block_t"), [c[1:] for c in WINS], ids=[c[0] for c in WINS])
def test_a_bucket_covers_m_min_to_m_max_and_nothing_else(monkeypatch, m, block_t):
    table = parse_gluon_table(
        _buckets(
            {"m_min": 5, "m_max": 16, "config": {"block_t": 16}},
            {"m_min": 33, "m_max": 64, "config": {"block_t": 64}},
        ),
        source="t.json",
    )
    assert [(lo, hi) for lo, hi, _ in table["H"][(64, 256)]] == [(5, 16), (33, 64)]
    monkeypatch.setattr(gluon_launch, "gluon_table", lambda: table)
    got = gluon_launch.measured_gluon_win("H", 64, 256, m)
    assert (got.block_t if got else None) == block_t
    assert gluon_launch.measured_gluon_win("H", 64, 256) == GluonConfig(block_t=16)  # any bucket


def test_without_m_min_a_bucket_starts_past_the_previous_one():
    table = parse_gluon_table(
        _buckets({"m_max": 4, "config": {}}, {"m_max": 16, "config": {}}), source="t.json"
    )
    assert [(lo, hi) for lo, hi, _ in table["H"][(64, 256)]] == [(1, 4), (5, 16)]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("block_n", 32),
        ("block_t", 24),
        ("block_k", 64),
        ("block_k", 256),
        ("num_stages", 1),
        ("overlap", 1),
        ("overlap", True),
    ],
)
def test_bad_configs_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"GluonConfig\.{field}"):
        GluonConfig(**{field: value})


def test_an_h100_sxm_reads_the_h200_s_wins_until_it_has_its_own(monkeypatch):
    monkeypatch.setattr(gemm_backend, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(gemm_launch, "device_facts", lambda device: ("NVIDIA H100 80GB HBM3", 132))
    config = GluonConfig()
    monkeypatch.setattr(
        gluon_launch, "gluon_table", lambda: {"NVIDIA H200": {(7168, 16384): [(1, 16, config)]}}
    )
    assert gluon_launch.measured_gluon_win("NVIDIA H100 80GB HBM3", 7168, 16384, 16) is config
    assert gluon_launch.measured_gluon_win("NVIDIA H100 80GB HBM3", 7168, 16384, 17) is None
    assert select_backend(CUDA0, n=7168, k=16384)[0] == "gluon"
    why = GLUON.measured_win(CUDA0, 7168, 16384).reason
    assert "measured it faster for [7168, 16384] on NVIDIA H200, NVIDIA H100 80GB HBM3's stand-in" in why
    monkeypatch.setenv("MXFUSE_TABLE_STANDINS", "0")
    gemm_api._status.cache_clear()
    assert gluon_launch.measured_gluon_win("NVIDIA H100 80GB HBM3", 7168, 16384, 16) is None
    assert select_backend(CUDA0, n=7168, k=16384)[0] == "triton"


@pytest.mark.parametrize("standins", ["1", "0"])
@pytest.mark.parametrize("device_name", ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"])
def test_the_gpu_tests_routing_restatement_agrees_with_the_library(monkeypatch, device_name, standins):
    """``tests/support/gemm_routing.py`` (what the GPU tests expect, read from the checked-in table itself)
    and ``measured_gluon_win`` (what ``auto`` does) route every listed shape the same way at every M of
    the decode range, for a named device, a stand-in's user and an unlisted one, stand-ins on and off."""
    from types import SimpleNamespace

    import gemm_routing

    monkeypatch.setenv("MXFUSE_TABLE_STANDINS", standins)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(name=device_name))
    shapes = {shape for entries in gluon_table().values() for shape in entries}
    assert shapes, "the checked-in table lists no shape"
    for n, k in sorted(shapes):
        library = gluon_launch.measured_gluon_win(device_name, n, k) is not None
        assert gemm_routing.expected_weight_backend("cuda", n, k, default="triton") == (
            "gluon" if library else "triton"
        )
        for m in range(1, 66):
            expected = gemm_routing.expected_call_backend("cuda", n, k, m, default="triton")
            ran = "gluon" if gluon_launch.measured_gluon_win(device_name, n, k, m) is not None else "triton"
            assert expected == ran, (device_name, n, k, m)
