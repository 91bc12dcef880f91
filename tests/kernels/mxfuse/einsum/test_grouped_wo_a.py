"""The grouped wo_a kernel on the GPU at the model's shapes (r = 4096, R = 1024).

z is compared with the reference (dequantize + fp32 einsum, no TF32, rounded to bf16) row by row, a row
being one token's R outputs of one group: ``assert_diff(max_diff=1e-6, per_row=True)`` and elementwise
``assert_close(rtol=1.6e-2, atol_of_row_rms=1e-3)``: both sides are fp32 sums of the same exact products
in different orders, rounded to bf16, so they differ only where the two sums straddle a bf16 rounding
boundary (one bf16 step, 2**-8 relative) or, for outputs near 0, by the fp32 summation error (about 1e-6
of the row's rms at r = 4096). With E4M3 subnormal codes, zero and tiny tokens
(``test_subnormal_codes_zero_and_tiny_tokens``), z is held element by element to float64
(``assert_gemm_matches_float64``); on operands whose sums are exact in fp32 (``wo_a_cases.exact_case``,
a third of the activation codes subnormal), bit for bit. The pair is compared bit
for bit, over the whole storage including padding, with ``quantize_mxfp8_reference`` of the bf16 z the
same kernel wrote with the epilogue off. Every output buffer is poisoned first, so an unwritten byte
fails.

On sm_90 the same contract is checked on the Gluon kernel (``kernel="gluon"``): z against the reference,
its pair bit for bit ``quantize_mxfp8`` of its own z in every layout, NaN confined to its (token, group),
bitwise reruns and duplicated rows, exact sums bit for bit; elsewhere those tests skip, naming the GPU.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from mxfp8_gemm_cases import assert_gemm_matches_float64
from mxfp8_operands import activation_rows, checkpoint_weight, is_subnormal
from wo_a_cases import exact_case, numpy_wo_a, to_bf16_bits

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_diff, assert_same_bits
from mxfuse import MxfuseUnavailableError, witness
from mxfuse.einsum import (
    WoAWeight,
    choose_wo_a_kernel,
    grouped_wo_a,
    grouped_wo_a_reference,
    prepare_wo_a_weight,
)
from mxfuse.formats import MxTensor, as_mxtensor, quantize_mxfp8_reference
from mxfuse.kernels.gemm.gluon_launch import GluonConfig
from mxfuse.kernels.gemm.launch import device_facts

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 360, "b200": 150, "gb300": 150, "5090": 150},
)

_kernel = importlib.import_module("mxfuse.kernels.grouped_wo_a")

K, N = 4096, 1024  # r (inputs per group) and R (o_lora_rank), DeepSeek-V4 family
TS = (1, 5, 16, 64, 129, 2048)
GS = (2, 8, 16)
LAYOUTS = ("e8m0", "deepgemm", "swizzled_128x4")
_WEIGHTS: dict[int, WoAWeight] = {}


def _weight(groups: int) -> WoAWeight:
    if groups not in _WEIGHTS:
        g = torch.Generator(device="cuda").manual_seed(groups)
        mag = torch.exp2(torch.randint(-6, 2, (groups, N, K // 32, 1), generator=g, device="cuda").float())
        w = (torch.randn(groups, N, K // 32, 32, generator=g, device="cuda") * mag).reshape(groups, N, K)
        _WEIGHTS[groups] = prepare_wo_a_weight(w.bfloat16())
    return _WEIGHTS[groups]


def _bf16_input(t: int, groups: int, *, seed: int) -> torch.Tensor:
    """Gaussian blocks at per-block magnitudes; block 0 of row 2 spans 2**-18..1: E4M3 subnormals and 0."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    mag = torch.exp2(torch.randint(-4, 5, (t, groups * K // 32, 1), generator=g, device="cuda").float())
    x = (torch.randn(t, groups * K // 32, 32, generator=g, device="cuda") * mag).reshape(t, groups * K)
    if t > 2:
        x[2, :32] = torch.logspace(-18, 0, 32, base=2.0, device="cuda")
    return x.bfloat16()


def _pair(t: int, groups: int, layout: str = "deepgemm", *, seed: int = 0) -> MxTensor:
    x = _bf16_input(t, groups, seed=seed)
    return as_mxtensor(
        quantize_mxfp8_reference(x, scale_layout=layout), scale_layout=layout, rounding="rceil"
    )


def _poisoned_z(t: int, groups: int) -> torch.Tensor:
    z = torch.empty(t, groups, N, dtype=torch.bfloat16, device="cuda")
    z.view(torch.int16).fill_(-1)  # 0xFFFF is a NaN: an unwritten element fails every comparison
    return z


def _poisoned_pair(t: int, k: int, layout: str, poison: int = 0xA5, rounding: str = "rceil") -> MxTensor:
    pair = MxTensor.empty(t, k, scale_layout=layout, rounding=rounding, device="cuda")
    pair.data.view(torch.uint8).fill_(poison)
    pair.scale_bytes().fill_(poison)
    return pair


def _stored(pair, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The bytes of ``pair`` (an MxTensor, or the reference's tuple), the scales' padding included."""
    mx = as_mxtensor(pair, scale_layout=layout, argument="pair")
    return mx.data.view(torch.uint8), mx.scale_bytes()


def _assert_z_close(z: torch.Tensor, want: torch.Tensor) -> None:
    assert_diff(z, want, max_diff=1e-6, per_row=True, name="z")
    assert_close(z, want, rtol=1.6e-2, atol_of_row_rms=1e-3, name="z")


def _assert_pair_is_quantized_z(pair, z: torch.Tensor, layout: str, rounding: str = "rceil") -> None:
    t, groups, n = z.shape
    want = quantize_mxfp8_reference(z.reshape(t, groups * n), rounding=rounding, scale_layout=layout)
    got_q, got_s = _stored(pair, layout)
    want_q, want_s = _stored(want, layout)
    assert_same_bits(got_q, want_q, name="q")
    assert_same_bits(got_s, want_s, name="scale storage, padding included")


@pytest.mark.parametrize("groups", GS)
@pytest.mark.parametrize("t", TS)
def test_matches_reference_and_quantizes_its_own_z(t, groups):
    w = _weight(groups)
    a = _pair(t, groups, seed=t)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, "deepgemm")
    with witness.capture() as records:
        assert grouped_wo_a(a, w, out=z) is z
        got = grouped_wo_a(a, w, out_pair=pair)
    torch.cuda.synchronize()
    assert got is pair
    assert [r["path"] for r in records] == ["einsum.wo_a.kernel.bf16", "einsum.wo_a.kernel.pair"]
    # The default ("auto") runs the kernel the pure rule names for this device and T: Gluon where the
    # measured table has a win (on sm_90), else Triton.
    assert {r["backend"] for r in records} == {_auto_kernel(t, w)}
    assert records[1]["out_scale_layout"] == "deepgemm"
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, "deepgemm")
    assert int(w.tickets.abs().sum()) == 0


def _auto_kernel(t: int, w: WoAWeight) -> str:
    device = torch.device("cuda", torch.cuda.current_device())
    capability = torch.cuda.get_device_capability(device)
    choice = choose_wo_a_kernel(
        "auto", capability=capability, gluon_import=(True, ""), device_name=device_facts(device)[0], t=t, w=w
    )
    return choice.kernel


@pytest.mark.parametrize("t", [1, 64, 129])
def test_exact_sums_with_subnormal_codes_bit_for_bit(t):
    """r = 128 (so every fp32 partial sum is exact): z equals float64 rounded once to bf16, bit for bit;
    a flushed subnormal code changes the exact sum."""
    groups, k, n = 8, 128, N
    case = exact_case(t, groups, k, n, seed=t, subnormals=True)
    assert float(is_subnormal(torch.from_numpy(case.a_codes).view(torch.float8_e4m3fn)).float().mean()) > 0.2
    w = prepare_wo_a_weight(case.weight.qweight.cuda(), case.weight.scale_e8m0.cuda())
    a = case.pair("deepgemm", device="cuda")
    want = to_bf16_bits(numpy_wo_a(case)).cuda()
    z = grouped_wo_a(a, w, out=_poisoned_z(t, groups))
    pair = grouped_wo_a(a, w, out_pair=_poisoned_pair(t, groups * n, "deepgemm"))
    torch.cuda.synchronize()
    assert_same_bits(z, want, name="z")
    _assert_pair_is_quantized_z(pair, want, "deepgemm")


def test_subnormal_codes_zero_and_tiny_tokens():
    """A 32x32-block checkpoint weight whose small rows are E4M3 subnormal codes, and subnormal, zero and
    tiny (2**-60) tokens: each group's z element by element against float64 (mxfp8_gemm_cases)."""
    t, groups = 16, 8
    kinds = ["gaussian", "subnormal", "zero", "tiny"] * 4
    wq, ws32 = checkpoint_weight(groups * N, K, seed=31, device="cuda")
    aq, as_ = activation_rows(kinds, groups * K, seed=32, device="cuda")
    w = prepare_wo_a_weight(wq, ws32, groups=groups)
    z = grouped_wo_a((aq, as_), w, out=_poisoned_z(t, groups))
    pair = grouped_wo_a((aq, as_), w, out_pair=_poisoned_pair(t, groups * N, "e8m0"))
    torch.cuda.synchronize()
    per_row = ws32.repeat_interleave(32, dim=0)
    for g in range(groups):
        cols, rows = slice(g * K, (g + 1) * K), slice(g * N, (g + 1) * N)
        assert_gemm_matches_float64(
            z[:, g],
            aq[:, cols],
            as_[:, g * K // 32 : (g + 1) * K // 32],
            wq[rows],
            per_row[rows],
            name=f"z group {g}",
        )
    zero = [i for i, kind in enumerate(kinds) if kind == "zero"]
    assert not (z[zero].view(torch.int16) & 0x7FFF).any(), "a zero token's z is 0"
    _assert_pair_is_quantized_z(pair, z, "e8m0")


@pytest.mark.parametrize("out_layout", LAYOUTS)
@pytest.mark.parametrize("a_layout", LAYOUTS)
def test_every_scale_layout_in_and_out(a_layout, out_layout):
    t, groups = 129, 2
    w = _weight(groups)
    a = _pair(t, groups, a_layout, seed=3)
    z = grouped_wo_a(a, w, scale_layout=a_layout)
    rounding = "floor" if a_layout == out_layout else "rceil"  # each combination compiles once
    pair = _poisoned_pair(t, groups * N, out_layout, poison=0x5A, rounding=rounding)
    grouped_wo_a(a, w, out_pair=pair, out_scale_layout=out_layout, rounding=rounding)
    _assert_pair_is_quantized_z(pair, z, out_layout, rounding)
    _assert_z_close(z, grouped_wo_a_reference(a, w))


@pytest.mark.parametrize("out_layout", ["swizzled_128x4", "e8m0"])
def test_padding_rows_of_one_token(out_layout):
    """T = 1: swizzled scales hold 127 padding rows, written as 0 by the only M tile."""
    w = _weight(8)
    a = _pair(1, 8, seed=11)
    z = grouped_wo_a(a, w)
    pair = grouped_wo_a(a, w, out_pair=_poisoned_pair(1, 8 * N, out_layout))
    _assert_pair_is_quantized_z(pair, z, out_layout)


def test_bf16_input_is_quantized_first():
    t, groups = 16, 8
    w = _weight(groups)
    x = _bf16_input(t, groups, seed=5)
    got = grouped_wo_a(x, w, out_pair=_poisoned_pair(t, groups * N, "deepgemm"))
    want = grouped_wo_a(quantize_mxfp8_reference(x, scale_layout="e8m0"), w, out_scale_layout="deepgemm")
    for got_bytes, want_bytes in zip(_stored(got, "deepgemm"), _stored(want, "deepgemm"), strict=True):
        assert_same_bits(got_bytes, want_bytes, name="pair")


def test_nan_block_reaches_only_its_token_and_group():
    t, groups = 64, 8
    w = _weight(groups)
    x = _bf16_input(t, groups, seed=7)
    clean_z = grouped_wo_a(quantize_mxfp8_reference(x), w)
    clean = grouped_wo_a(quantize_mxfp8_reference(x), w, out_scale_layout="e8m0")
    x[5, 3 * K + 100] = float("nan")  # token 5, group 3: one NaN block of the activation
    a = quantize_mxfp8_reference(x)
    z = grouped_wo_a(a, w)
    pair = grouped_wo_a(a, w, out_pair=_poisoned_pair(t, groups * N, "e8m0"))
    nan = torch.zeros(t, groups, N, dtype=torch.bool, device="cuda")
    nan[5, 3] = True
    assert_same_bits(z.isnan(), nan, name="NaN positions in z")
    assert_same_bits(z[~nan], clean_z[~nan], name="untouched z")
    q, s = pair.data.view(torch.uint8).reshape(t, groups * N), pair.scale
    cols = nan.reshape(t, groups * N)
    assert_same_bits(q[cols], torch.full((N,), 0x7F, dtype=torch.uint8, device="cuda"), name="NaN codes")
    assert_same_bits(q[~cols], clean.data.view(torch.uint8)[~cols], name="untouched codes")
    blocks = cols[:, ::32]
    assert_same_bits(
        s[blocks], torch.full((N // 32,), 0xFF, dtype=torch.uint8, device="cuda"), name="NaN scales"
    )
    assert_same_bits(s[~blocks], clean.scale[~blocks], name="untouched scales")


@pytest.mark.parametrize(("t", "groups"), [(1, 2), (64, 8), (129, 2), (2048, 8)])
def test_twenty_reruns_are_bitwise_identical(t, groups):
    """Split-K (t = 1, 64, 129) reduces in split order whoever arrives last: no run-to-run drift."""
    w = _weight(groups)
    a = _pair(t, groups, seed=13)
    first_z = grouped_wo_a(a, w)
    first = _stored(grouped_wo_a(a, w, out_scale_layout="deepgemm"), "deepgemm")
    for _ in range(19):
        assert_same_bits(grouped_wo_a(a, w), first_z, name="z rerun")
        again = _stored(grouped_wo_a(a, w, out_scale_layout="deepgemm"), "deepgemm")
        assert_same_bits(again[0], first[0], name="q rerun")
        assert_same_bits(again[1], first[1], name="scale rerun")


def test_duplicated_rows_give_row_zeros_bits():
    """Rows copied from row 0 on tile boundaries (63, 64) and in the last tile (128) come out equal to it."""
    t, groups = 129, 8
    w = _weight(groups)
    x = _bf16_input(t, groups, seed=17)
    x[[63, 64, 128]] = x[0].clone()
    z = grouped_wo_a(quantize_mxfp8_reference(x), w)
    for row in (63, 64, 128):
        assert_same_bits(z[row], z[0], name=f"row {row}")


def test_cuda_graph_capture_and_replay():
    t, groups = 16, 8
    w = _weight(groups)
    a = _pair(t, groups, seed=19)
    a_q, a_s = a.data, a.scale  # given as a plain tuple: converted inside the capture without a sync
    pair = _poisoned_pair(t, groups * N, "deepgemm")
    grouped_wo_a((a_q, a_s), w, out_pair=pair)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records:
        with torch.cuda.graph(graph):
            got = grouped_wo_a((a_q, a_s), w, out_pair=pair)
    assert got is pair
    assert [r["path"] for r in records] == ["einsum.wo_a.kernel.pair"]
    for seed in (20, 21):
        new = _pair(t, groups, seed=seed)
        a_q.copy_(new.data)
        a.scale_storage().copy_(new.scale_storage())
        for buffer in _stored(pair, "deepgemm"):
            buffer.fill_(0x5A)
        with witness.capture() as replayed:
            graph.replay()
        torch.cuda.synchronize()
        assert replayed == []  # the path was decided, and recorded, at capture
        z = grouped_wo_a(new, w)
        _assert_pair_is_quantized_z(pair, z, "deepgemm")
        _assert_z_close(z, grouped_wo_a_reference(new, w))
    assert int(w.tickets.abs().sum()) == 0


def _launch_z_then_pair(a: MxTensor, w, z, pair: MxTensor, config) -> None:
    """The kernel at ``config`` on a deepgemm-scaled ``a``: once writing bf16 ``z``, once wo_b's pair (its
    own layout, RCEIL scales)."""
    assert a.scale_layout.value == "deepgemm" and pair.rounding.value == "rceil"
    for out, out_pair in ((z, None), (None, pair)):
        _kernel.launch_grouped_wo_a(a, w, z=out, pair=out_pair, config=config)


@pytest.mark.parametrize(
    "config",
    [
        _kernel.WoAConfig(16, 128, 64, 4, 4, 4, "fp8", True),
        _kernel.WoAConfig(64, 128, 32, 2, 4, 4, "fp8", False),
        _kernel.WoAConfig(16, 256, 64, 2, 8, 3, "dq16", False),
        _kernel.WoAConfig(32, 128, 128, 8, 4, 2, "dq16", True),
        _kernel.WoAConfig(128, 128, 64, 1, 8, 3, "dq16", False),
        _kernel.WoAConfig(16, 128, 64, 2, 4, 2, "fp32", True),
    ],
    ids=lambda c: f"{c.dot}{' swap' if c.swap_ab else ''} {c.block_m}x{c.block_n}x{c.block_k} split{c.split}",
)
@pytest.mark.parametrize("t", [16, 129])
def test_other_configurations(t, config):
    """The benchmark's sweep may pick any of these; each must meet the same contract."""
    groups = 2
    w = _weight(groups)
    a = _pair(t, groups, seed=23)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, "deepgemm")
    _launch_z_then_pair(a, w, z, pair, config)
    torch.cuda.synchronize()
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, "deepgemm")


@pytest.mark.parametrize(
    ("t", "config"),
    [
        (1, _kernel.WoAConfig(1, 128, 128, 8, 4, 1, "stream", False)),
        (2, _kernel.WoAConfig(2, 256, 128, 16, 8, 1, "stream", False)),
        (3, _kernel.WoAConfig(4, 128, 64, 4, 4, 1, "stream", False)),
        (7, _kernel.WoAConfig(4, 128, 256, 2, 8, 1, "stream", False)),  # two M tiles
    ],
    ids=lambda v: (
        f"{v.block_m}x{v.block_n}x{v.block_k} split{v.split} w{v.num_warps}"
        if not isinstance(v, int)
        else f"T{v}"
    ),
)
@pytest.mark.parametrize("out_layout", LAYOUTS)
def test_stream_configurations(t, config, out_layout):
    """The CUDA-core mode the default takes up to 4 tokens, at other tiles, splits and token counts: z
    against the reference, the pair (padding rows included) bit for bit the quantized z, tickets back at 0."""
    groups = 2
    w = _weight(groups)
    a = _pair(t, groups, seed=29)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, out_layout)
    _launch_z_then_pair(a, w, z, pair, config)
    torch.cuda.synchronize()
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, out_layout)
    assert int(w.tickets.abs().sum()) == 0


def test_interpreter_path_on_the_gpu():
    """hw_cvt=False (integer conversions, IEEE fp32 dot) is what the CPU tests interpret; run it here too."""
    t, groups = 5, 2
    w = _weight(groups)
    a = _pair(t, groups, "swizzled_128x4", seed=29)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, "swizzled_128x4")
    for out, out_pair in ((z, None), (None, pair)):
        _kernel.launch_grouped_wo_a(a, w, z=out, pair=out_pair, hw_cvt=False)
    torch.cuda.synchronize()
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, "swizzled_128x4")


@pytest.mark.parametrize("out_layout", [None, *LAYOUTS])
def test_no_tokens(out_layout):
    got = grouped_wo_a(_pair(0, 2), _weight(2), out_scale_layout=out_layout)
    if out_layout is None:
        assert got.is_cuda and tuple(got.shape) == (0, 2, N)
    else:
        assert isinstance(got, MxTensor) and got.data.is_cuda and got.shape == (0, 2 * N)
        assert got.scale_layout.value == out_layout


def test_refusals_write_nothing(monkeypatch):
    w = _weight(2)
    a = _pair(4, 2)
    pair = _poisoned_pair(4, 2 * N, "deepgemm")
    with pytest.raises(ValueError, match="a must be on the weight's device"):
        grouped_wo_a((a.data.cpu(), a.scale.cpu()), w)
    with pytest.raises(ValueError, match=r"out_pair\[0\] must be on cuda"):
        grouped_wo_a(a, w, out_pair=(pair.data.cpu(), pair.scale))
    with pytest.raises(ValueError, match=r"a must have G \* r = 2 \* 4096"):
        grouped_wo_a(_pair(4, 8), w, out_pair=pair)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    with pytest.raises(MxfuseUnavailableError, match=r"sm_89\+.* is sm_86"):
        grouped_wo_a(a, w, out_pair=pair)
    for buffer in _stored(pair, "deepgemm"):
        assert_same_bits(buffer, torch.full_like(buffer, 0xA5), name="out_pair untouched")


# --- the Gluon kernel (sm_90 only; named: auto does not take it until its table is measured) ------------

GLUON_CONFIGS = [
    None,  # default_wo_a_gluon_config
    GluonConfig(128, 16, 128, 1, 3),
    GluonConfig(64, 8, 128, 3, 2),
    GluonConfig(64, 64, 128, 4, 6),
]


def _require_gluon() -> None:
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        pytest.skip(
            f"the Gluon grouped wo_a runs on sm_90 only; this GPU is sm_{capability[0]}{capability[1]}"
        )


@pytest.mark.parametrize("out_layout", LAYOUTS)
@pytest.mark.parametrize(("t", "groups"), [(1, 8), (5, 2), (16, 8), (64, 8), (129, 2)])
def test_gluon_matches_reference_and_its_pair_is_quantized_z(t, groups, out_layout):
    _require_gluon()
    w = _weight(groups)
    a = _pair(t, groups, seed=t)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, out_layout)
    with witness.capture() as records:
        assert grouped_wo_a(a, w, out=z, kernel="gluon") is z
        assert grouped_wo_a(a, w, out_pair=pair, kernel="gluon") is pair
    torch.cuda.synchronize()
    assert [r["path"] for r in records] == ["einsum.wo_a.kernel.bf16", "einsum.wo_a.kernel.pair"]
    assert {r["backend"] for r in records} == {"gluon"}
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, out_layout)


@pytest.mark.parametrize("config", GLUON_CONFIGS, ids=lambda c: "default" if c is None else repr(c))
@pytest.mark.parametrize("t", [3, 40])
def test_gluon_configurations_write_z_and_pair_at_once(t, config):
    """z and the pair from one launch, at tiles of 64 and 128 rows, one to four splits, with and without
    the overlapped conversion; the floor rounding in the pair."""
    _require_gluon()
    from mxfuse.kernels.grouped_wo_a.gluon_launch import launch_grouped_wo_a_gluon

    groups = 2
    w = _weight(groups)
    a = _pair(t, groups, "e8m0", seed=37)
    z = _poisoned_z(t, groups)
    pair = _poisoned_pair(t, groups * N, "swizzled_128x4", rounding="floor")
    launch_grouped_wo_a_gluon(a, w, z=z, pair=pair, config=config)
    torch.cuda.synchronize()
    _assert_z_close(z, grouped_wo_a_reference(a, w))
    _assert_pair_is_quantized_z(pair, z, "swizzled_128x4", "floor")


def test_gluon_nan_block_reaches_only_its_token_and_group():
    _require_gluon()
    t, groups = 64, 8
    w = _weight(groups)
    x = _bf16_input(t, groups, seed=7)
    clean_z = grouped_wo_a(quantize_mxfp8_reference(x), w, kernel="gluon")
    x[5, 3 * K + 100] = float("nan")  # token 5, group 3: one NaN block of the activation
    a = quantize_mxfp8_reference(x)
    z = grouped_wo_a(a, w, kernel="gluon")
    pair = grouped_wo_a(a, w, out_pair=_poisoned_pair(t, groups * N, "e8m0"), kernel="gluon")
    nan = torch.zeros(t, groups, N, dtype=torch.bool, device="cuda")
    nan[5, 3] = True
    assert_same_bits(z.isnan(), nan, name="NaN positions in z")
    assert_same_bits(z[~nan], clean_z[~nan], name="untouched z")
    _assert_pair_is_quantized_z(pair, z, "e8m0")


@pytest.mark.parametrize(("t", "groups"), [(1, 2), (16, 8), (129, 2)])
def test_gluon_reruns_are_bitwise_identical_and_duplicated_rows_equal_row_zero(t, groups):
    """Split-K sums in split order whoever arrives last; a row's result does not depend on its tile."""
    _require_gluon()
    w = _weight(groups)
    x = _bf16_input(t, groups, seed=13)
    dups = [r for r in (7, 8, 63, 64, 128) if r < t]
    x[dups] = x[0].clone()
    a = quantize_mxfp8_reference(x)
    first_z = grouped_wo_a(a, w, kernel="gluon")
    first = _stored(grouped_wo_a(a, w, out_scale_layout="deepgemm", kernel="gluon"), "deepgemm")
    for _ in range(19):
        assert_same_bits(grouped_wo_a(a, w, kernel="gluon"), first_z, name="z rerun")
        again = _stored(grouped_wo_a(a, w, out_scale_layout="deepgemm", kernel="gluon"), "deepgemm")
        assert_same_bits(again[0], first[0], name="q rerun")
        assert_same_bits(again[1], first[1], name="scale rerun")
    for row in dups:
        assert_same_bits(first_z[row], first_z[0], name=f"row {row}")


def test_gluon_exact_sums_with_subnormal_codes_bit_for_bit():
    """r = 128: every fp32 partial sum is exact, so z is float64 rounded once, whatever the order."""
    _require_gluon()
    t, groups, k, n = 16, 8, 128, N
    case = exact_case(t, groups, k, n, seed=t, subnormals=True)
    w = prepare_wo_a_weight(case.weight.qweight.cuda(), case.weight.scale_e8m0.cuda())
    a = case.pair("deepgemm", device="cuda")
    want = to_bf16_bits(numpy_wo_a(case)).cuda()
    z = grouped_wo_a(a, w, out=_poisoned_z(t, groups), kernel="gluon")
    pair = grouped_wo_a(a, w, out_pair=_poisoned_pair(t, groups * n, "deepgemm"), kernel="gluon")
    torch.cuda.synchronize()
    assert_same_bits(z, want, name="z")
    _assert_pair_is_quantized_z(pair, want, "deepgemm")


def test_auto_keeps_triton_until_the_gluon_table_is_measured():
    t, groups = 16, 8
    with witness.capture() as records:
        grouped_wo_a(_pair(t, groups), _weight(groups))
    assert records[-1]["backend"] == "triton"
    if torch.cuda.get_device_capability() == (9, 0):
        assert "no measured Gluon win" in records[-1]["kernel_reason"]
