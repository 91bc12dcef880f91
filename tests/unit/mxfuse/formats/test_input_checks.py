"""Input checks fed the bad input each one exists for, at its edge, and the state the torch backend restores.

The edges: strides of size-1 dimensions (ignored, as torch's contiguity rule ignores them) next to a real
non-contiguous scale; a scale storage exactly one element short of what the layout addresses, and exactly
long enough (with and without a storage offset); K = 0 at every place a weight's K is checked; E8M0
scales that are views (non-contiguous) for both weight types, which must be copied, not rejected or
misread; rows of a bf16 wo_a input that overlap by one element. Bad input is a ValueError or TypeError
naming the argument; good input at the edge gives what the contiguous input gives.
"""

from __future__ import annotations

import pytest
import torch

import mxfuse.gemm.torch_backend as torch_backend
from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.einsum import WoAWeight, grouped_wo_a, grouped_wo_a_reference, prepare_wo_a_weight
from mxfuse.formats import MxTensor, check_mxfp8_pair, dequantize_mxfp8, scale_from_layout, scale_spec
from mxfuse.gemm import MxWeight, backend_status, expand_block_scales, mxfp8_gemm, prepare_mxfp8_weight
from mxfuse.memory import tensors_overlap

register(on=("cpu",), est_time=4)


def _codes(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * 4).to(torch.float8_e4m3fn)


def _scales(*shape: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(120, 134, shape, generator=g, dtype=torch.int32).to(torch.uint8)


# ---------------------------------------------------------------------------------------------
# Scale layouts: strides and storage size at their edges


def test_strides_of_size_1_dimensions_are_ignored_and_others_are_not():
    q1 = _codes(1, 128)
    one_row = torch.zeros(99 * 4, dtype=torch.uint8).as_strided((1, 4), (99, 1))  # M = 1: stride 99 unused
    assert check_mxfp8_pair((q1, one_row), m=1, k=128, scale_layout="e8m0", device=q1.device)[1] is one_row
    q = _codes(6, 32)
    one_group = _scales(6, 4)[:, :1]  # K = 32: one group per row, but rows 4 bytes apart
    assert tuple(one_group.stride()) == (4, 1)
    with pytest.raises(ValueError, match=r"out\[1\] must have strides \(1, 1\)"):
        check_mxfp8_pair((q, one_group), m=6, k=32, scale_layout="e8m0", device=q.device)
    column_major = _scales(4, 6).t()  # [6, 4] e8m0 scales stored column-major
    with pytest.raises(ValueError, match=r"scale must have strides \(4, 1\)"):
        scale_from_layout(column_major, scale_layout="e8m0", m=6, k=128)
    with pytest.raises(ValueError, match=r"scale must have strides \(4, 1\)"):
        dequantize_mxfp8(_codes(6, 128), column_major, scale_layout="e8m0")


@pytest.mark.parametrize("offset", [0, 1])
def test_scale_storage_exactly_long_enough_and_one_short(offset):
    """deepgemm [5, 3] words, strides (1, 8): 24 words addressed, padding rows included."""
    m, k = 5, 288
    spec = scale_spec(m, k, scale_layout="deepgemm")
    assert spec.storage_numel == 24
    q = _codes(m, k)
    exact = torch.zeros(offset + 24, dtype=torch.int32)[offset:].as_strided(spec.shape, spec.stride)
    assert check_mxfp8_pair((q, exact), m=m, k=k, scale_layout="deepgemm", device=q.device)[1] is exact
    short = torch.zeros(offset + 23, dtype=torch.int32)[offset:].as_strided(spec.shape, spec.stride)
    with pytest.raises(ValueError, match=r"out\[1\] must own 24 elements .* its storage holds 23"):
        check_mxfp8_pair((q, short), m=m, k=k, scale_layout="deepgemm", device=q.device)


# ---------------------------------------------------------------------------------------------
# K = 0 wherever a weight's K is checked


def test_k_zero_is_refused_for_every_weight():
    empty_q, empty_s = torch.zeros(4, 0, dtype=torch.float8_e4m3fn), torch.zeros(4, 0, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"MxWeight.operand must hold a weight \[N, K\] with K > 0"):
        MxWeight(MxTensor(empty_q, empty_s, "e8m0"), empty_s, "torch")
    with pytest.raises(ValueError, match=r"weight.shape\[1\] \(K\) must be a positive multiple of 32; got 0"):
        prepare_mxfp8_weight(empty_q, empty_s)
    rule = torch_backend.TORCH.supports_shape(4, 0)
    assert not rule.ok and "K must be a positive multiple of 32" in rule.reason and "got K = 0" in rule.reason
    assert not torch_backend.TORCH.supports_shape(4, 48).ok and torch_backend.TORCH.supports_shape(4, 32).ok
    status = backend_status("cpu", n=4, k=0)["torch"]
    assert not status.ok and status.reason.startswith("[N, K] = [4, 0]: K must be a positive multiple")
    with pytest.raises(ValueError, match=r"weight.shape\[1\] \(K\) must be a positive multiple of 32; got 0"):
        prepare_wo_a_weight(torch.zeros(1, 128, 0))
    w = prepare_wo_a_weight(torch.zeros(1, 128, 32))
    with pytest.raises(ValueError, match=r"r \(columns per group\) .* got G = 1, r = 0"):
        WoAWeight(
            torch.zeros(1, 128, 0, dtype=torch.float8_e4m3fn),
            torch.zeros(1, 0, 128, dtype=torch.uint8),
            w.tickets,
        )


# ---------------------------------------------------------------------------------------------
# Non-contiguous E8M0 scales of both weight types


def test_mx_weight_refuses_non_contiguous_tensors():
    """The weight's MxTensor refuses them when it is built, before any MxWeight holds it."""
    q, s = _codes(64, 128), _scales(64, 4)
    with pytest.raises(ValueError, match=r"MxTensor.scale must have strides \(4, 1\) .*; got \(1, 64\)"):
        MxTensor(q, s.t().contiguous().t(), "e8m0")
    with pytest.raises(ValueError, match=r"MxTensor.data must be contiguous"):
        MxTensor(q.t().contiguous().t(), s, "e8m0")
    with pytest.raises(TypeError, match=r"MxWeight.operand must be an MxTensor; got tuple"):
        MxWeight((q, s), s, "torch")


@pytest.mark.parametrize("block_rows", [1, 32])
def test_non_contiguous_checkpoint_scales_are_copied_not_misread(block_rows):
    n, k = 64, 128
    q = _codes(n, k)
    scale = _scales(-(-n // block_rows), k // 32)
    viewed = scale.t().contiguous().t()  # the same values, column-major
    assert not viewed.is_contiguous()
    w = prepare_mxfp8_weight(q, viewed, backend="torch")
    want = prepare_mxfp8_weight(q, scale, backend="torch")
    assert w.scale_e8m0.is_contiguous()
    assert_same_bits(w.scale_e8m0, want.scale_e8m0, name="per-row scales")
    a = (_codes(3, k, seed=5), _scales(3, k // 32, seed=6))
    assert_same_bits(mxfp8_gemm(a, w), mxfp8_gemm(a, want), name="GEMM with the viewed scales")


@pytest.mark.parametrize("block_rows", [1, 32])
def test_non_contiguous_wo_a_scales_are_copied_not_misread(block_rows):
    groups, n, k = 2, 128, 64
    q = _codes(groups, n, k)
    scale = _scales(groups, n // block_rows, k // 32)
    viewed = scale.transpose(1, 2).contiguous().transpose(1, 2)
    assert not viewed.is_contiguous()
    w, want = prepare_wo_a_weight(q, viewed), prepare_wo_a_weight(q, scale)
    assert w.scale.is_contiguous()
    assert_same_bits(w.scale, want.scale, name="wo_a scales")
    with pytest.raises(ValueError, match=r"scale must be a contiguous uint8 tensor \(2, 2, 128\)"):
        WoAWeight(w.qweight, w.scale.transpose(1, 2).contiguous().transpose(1, 2), w.tickets)


# ---------------------------------------------------------------------------------------------
# Rows of a bf16 wo_a input: overlapping by one element is refused, padded rows are read right


def test_wo_a_input_rows_that_overlap_by_one_element_are_refused():
    w = prepare_wo_a_weight(torch.randn(2, 128, 64))
    x = torch.randn(4, 128).bfloat16()
    flat = torch.zeros(4 * 130, dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match=r"a must have contiguous, non-overlapping rows; got strides \(127, 1\)"
    ):
        grouped_wo_a(flat[: 3 * 127 + 128].as_strided((4, 128), (127, 1)), w)
    with pytest.raises(
        ValueError, match=r"a must have contiguous, non-overlapping rows; got strides \(127, 1\)"
    ):
        grouped_wo_a(flat[: 127 + 128].as_strided((2, 128), (127, 1)), w)  # two rows are enough to overlap
    padded = flat.as_strided((4, 128), (130, 1))
    padded.copy_(x)
    assert_same_bits(grouped_wo_a(padded, w), grouped_wo_a(x, w), name="z of a padded-row input")
    one_row = flat[:128].as_strided((1, 128), (5, 1))  # a lone row's stride addresses nothing
    assert_same_bits(
        grouped_wo_a(one_row, w), grouped_wo_a(flat[:128].view(1, 128).clone(), w), name="one row"
    )
    with pytest.raises(
        ValueError, match=r"a must have contiguous, non-overlapping rows; got strides \(1, 4\)"
    ):
        grouped_wo_a(torch.zeros(128, 4, dtype=torch.bfloat16).t(), w)


# ---------------------------------------------------------------------------------------------
# The TF32 flag: off during the fp32 products, restored after, also when the product raises


def _flag_spy(monkeypatch, module, name: str, *, fail: bool) -> list[bool]:
    seen: list[bool] = []
    real = getattr(torch, name)

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        if fail:
            raise RuntimeError("product failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def _gemm_call():
    w = prepare_mxfp8_weight(_codes(8, 64), _scales(8, 2), backend="torch")
    return lambda: mxfp8_gemm((_codes(2, 64, seed=3), _scales(2, 2, seed=4)), w, backend="torch")


def _wo_a_call():
    w = prepare_wo_a_weight(torch.randn(1, 128, 64))
    a = (_codes(2, 64, seed=3), _scales(2, 2, seed=4))
    return lambda: grouped_wo_a_reference(a, w)


@pytest.mark.parametrize("fail", [False, True], ids=["returns", "raises"])
@pytest.mark.parametrize("before", [True, False], ids=["tf32 on", "tf32 off"])
@pytest.mark.parametrize(("where", "product"), [("gemm", "mm"), ("wo_a", "einsum")])
def test_tf32_is_off_for_the_product_and_restored(monkeypatch, where, product, before, fail):
    call = _gemm_call() if where == "gemm" else _wo_a_call()
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = before
        seen = _flag_spy(monkeypatch, torch, product, fail=fail)
        if fail:
            with pytest.raises(RuntimeError, match="product failed"):
                call()
        else:
            call()
        assert seen == [False]
        assert torch.backends.cuda.matmul.allow_tf32 is before
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


# ---------------------------------------------------------------------------------------------
# GEMM arguments: messages name the argument and what was given (mutation survivors)


def test_32x32_block_scales_of_a_weight_whose_rows_are_no_multiple_of_33():
    """66 rows: three 32-row blocks (ceil(66/32)), where ceil(66/33) would say two."""
    q, scale = _codes(66, 64), _scales(3, 2)
    w = prepare_mxfp8_weight(q, scale, backend="torch")
    assert_same_bits(w.scale_e8m0, scale.repeat_interleave(32, dim=0)[:66], name="expanded scales")


def test_quantize_weight_rounds_with_rceil_by_default():
    from mxfuse.formats import quantize_mxfp8_reference
    from mxfuse.gemm.weights import quantize_weight

    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(9))
    q, s = quantize_weight(x)
    want_q, want_s = quantize_mxfp8_reference(x, rounding="rceil", scale_layout="e8m0")
    assert_same_bits(q.view(torch.uint8), want_q.view(torch.uint8), name="codes")
    assert_same_bits(s, want_s, name="scales")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda w: mxfp8_gemm((_codes(2, 64), _scales(2, 2)), "w"),
            "w must be an MxWeight (see prepare_mxfp8_weight); got str",
        ),
        (lambda w: mxfp8_gemm(5, w), "a must be an MxTensor or a pair (fp8 [M, K], scale); got int"),
        (lambda w: mxfp8_gemm(("q", _scales(2, 2)), w), "a[0] must be a torch.Tensor; got str"),
        (lambda w: mxfp8_gemm((_codes(2, 64), 3), w), "a[1] must be a torch.Tensor; got int"),
        (
            lambda w: mxfp8_gemm((_codes(2, 64), _scales(2, 2)), w, out=7),
            "out must be a torch.Tensor; got int",
        ),
        (lambda w: prepare_mxfp8_weight(7), "weight must be a torch.Tensor; got int"),
        (lambda w: prepare_mxfp8_weight(_codes(8, 64), 7), "scale must be a torch.Tensor; got int"),
        (lambda w: backend_status("cpu", n=-1, k=32), "n must be an int >= 0; got -1"),
        (lambda w: backend_status("cpu", n=4, k=1.5), "k must be an int >= 0; got 1.5"),
    ],
)
def test_gemm_messages_name_the_argument_and_what_was_given(call, message):
    w = prepare_mxfp8_weight(_codes(8, 64), _scales(8, 2), backend="torch")
    with pytest.raises((TypeError, ValueError)) as caught:
        call(w)
    assert str(caught.value) == message


def test_the_torch_backends_answers_in_full():
    from mxfuse.gemm import Availability

    cpu = torch.device("cpu")
    assert torch_backend.TORCH.available(cpu) == Availability(
        True, "dequantize + fp32 matmul runs on any device"
    )
    assert torch_backend.TORCH.supports_shape(4, 32) == Availability(
        True, "any [N, K] weight with K a multiple of 32"
    )
    refused = Availability(False, "K must be a positive multiple of 32 (one scale block); got K = 0")
    assert torch_backend.TORCH.supports_shape(4, 0) == refused
    assert backend_status("cpu", n=4, k=0)["torch"] == Availability(
        False, f"[N, K] = [4, 0]: {refused.reason}"
    )


def _deepgemm_weight():
    q, s = _codes(8, 128), _scales(8, 4)
    return MxWeight(MxTensor(q, s, "e8m0"), s, "deepgemm"), (_codes(2, 128, seed=3), _scales(2, 4, seed=4))


def test_a_weight_for_a_backend_that_cannot_run_here():
    """A deepgemm weight on the CPU: auto falls back to torch and says why; torch may be named; deepgemm
    named with e8m0 scales is refused for the layout before anything runs."""
    from mxfuse import witness

    w, a = _deepgemm_weight()
    want = mxfp8_gemm(a, MxWeight(w.operand, w.scale_e8m0, "torch"))
    with witness.capture() as records:
        got = mxfp8_gemm(a, w)
    assert_same_bits(got, want, name="auto on the CPU")
    assert records[0]["backend"] == "torch" and records[0]["reason"].startswith(
        "auto: deepgemm cannot run here ("
    )
    assert_same_bits(mxfp8_gemm(a, w, backend="torch"), want, name="torch named")
    with pytest.raises(ValueError) as caught:
        mxfp8_gemm(a, w, backend="deepgemm")
    assert str(caught.value) == "a holds e8m0 scales; backend 'deepgemm' reads deepgemm"


def test_a_backend_named_for_a_device_it_cannot_run_on_says_which_device():
    """deepgemm named with a pair in its own layout passes the layout check; on the CPU it is refused
    for the weight's device, which the message names with deepgemm's own reason."""
    from mxfuse import MxfuseUnavailableError
    from mxfuse.formats import pack_ue8m0_deepgemm

    w, (a_q, a_scale) = _deepgemm_weight()
    with pytest.raises(MxfuseUnavailableError) as caught:
        mxfp8_gemm((a_q, pack_ue8m0_deepgemm(a_scale)), w, backend="deepgemm")
    assert str(caught.value) == (
        "backend 'deepgemm' cannot run on cpu: needs a CUDA device of sm_100 or sm_103; got cpu"
    )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: MxWeight(MxTensor(_codes(2, 64), _scales(2, 2), "e8m0"), [1], "torch"),
            TypeError,
            "MxWeight.scale must be a torch.Tensor; got list",
        ),
        (
            lambda: MxWeight(
                MxTensor(_codes(4, 64), _scales(4, 2), "e8m0"), _scales(4, 2), "torch", [("a", "b")]
            ),
            TypeError,
            "MxWeight.passed_over must be a tuple of (backend, reason) string pairs",
        ),
        (
            lambda: MxWeight(
                MxTensor(_codes(4, 64), _scales(4, 2), "e8m0"), _scales(4, 2), "torch", (("a", 1),)
            ),
            TypeError,
            "MxWeight.passed_over must be a tuple",
        ),
        (
            lambda: MxWeight(
                MxTensor(_codes(4, 64), _scales(4, 2), "e8m0"), _scales(4, 2), "torch", (["a", "b"],)
            ),
            TypeError,
            "MxWeight.passed_over must be a tuple",
        ),
        (
            lambda: mxfp8_gemm(
                (_codes(2, 64), torch.zeros(8, dtype=torch.int32)),
                prepare_mxfp8_weight(_codes(4, 64), _scales(4, 2)),
            ),
            ValueError,
            "a[1] must be int32 [M, ceil(K/128)] (deepgemm), uint8 [M, K/32] (e8m0) or 1-D uint8 (swizzled_128x4); got torch.int32 (8,)",
        ),
        (
            lambda: prepare_mxfp8_weight(_codes(4, 64)),
            ValueError,
            "scale is required with an E4M3 weight (E8M0 per 1x32 or 32x32 block)",
        ),
        (
            lambda: prepare_mxfp8_weight(torch.zeros(4, 64), _scales(4, 2)),
            ValueError,
            "scale must be None with a float weight (it is quantized here)",
        ),
        (
            lambda: expand_block_scales(
                torch.zeros(4, 2, dtype=torch.int32), n=4, k=64, argument="weight_scale"
            ),
            ValueError,
            "weight_scale must hold E8M0 bytes",
        ),
    ],
)
def test_weight_and_layout_messages(call, error, message):
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value).startswith(message), str(caught.value)


# tensors_overlap, which every out= check uses: one shared element overlaps, adjacent ranges do not.
def test_tensors_overlap_at_one_shared_element_and_not_when_adjacent():
    flat = torch.zeros(64, dtype=torch.bfloat16)
    assert tensors_overlap(flat[:33], flat[32:])  # element 32 in both
    assert not tensors_overlap(flat[:32], flat[32:])  # adjacent, nothing shared
    assert tensors_overlap(flat[10:11], flat[10:11])
    # Strided views: their first-to-last spans decide, in elements of their own size.
    assert tensors_overlap(flat.as_strided((2, 4), (8, 1)), flat[11:12])  # inside the span
    assert not tensors_overlap(flat.as_strided((2, 4), (8, 1)), flat[12:20])
    assert not tensors_overlap(flat[:0], flat)  # an empty tensor addresses nothing
