"""Graph-safe reloads: ``copy_or_rebind_param`` semantics, and MxLinear reloads that keep every prepared
tensor's storage (copy) unless its shape, dtype or device changes (rebind, reported and witnessed)."""

from __future__ import annotations

import pytest
import torch
from mx_linear_cases import SOURCES, activations, bf16_weight, data_ptrs, load, native_weight
from torch import nn

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse import witness
from mxfuse.formats import pack_ue8m0_deepgemm
from mxfuse.layers import MxLinear, ParamUpdate, can_copy_into, copy_or_rebind_param
from mxfuse.layers.mx_linear import _same_tensor

register(on=("cpu",), est_time=3)

N, K = 64, 96


# ---- copy_or_rebind_param --------------------------------------------------------------------------


def _module_with(weight: torch.Tensor | None = None, buffer: torch.Tensor | None = None) -> nn.Module:
    module = nn.Module()
    if weight is not None:
        module.weight = nn.Parameter(weight, requires_grad=weight.is_floating_point())
    if buffer is not None:
        module.register_buffer("table", buffer)
    return module


def test_same_shape_and_dtype_copies_in_place_without_a_record():
    module = _module_with(torch.zeros(4, 8))
    param, ptr = module.weight, module.weight.data_ptr()
    new = torch.arange(32, dtype=torch.float32).view(4, 8)
    with witness.capture() as records:
        update = copy_or_rebind_param(module, "weight", new, site="s")
    assert update == ParamUpdate("weight", "copied", "weight: copied in place (torch.float32 (4, 8) on cpu)")
    assert update.graph_safe
    assert module.weight is param and module.weight.data_ptr() == ptr
    assert_same_bits(module.weight.detach(), new, name="copied values")
    assert records == []


def test_copy_keeps_the_old_strides_and_padding():
    # DeepGEMM-packed scales are an MN-major view over padded storage: a copy must keep both.
    scales = torch.randint(0, 255, (6, 8), dtype=torch.uint8)
    packed = pack_ue8m0_deepgemm(scales)
    module = nn.Module()
    copy_or_rebind_param(module, "packed", packed)
    storage_before = module.packed.untyped_storage().data_ptr()
    update = copy_or_rebind_param(module, "packed", pack_ue8m0_deepgemm(scales.flip(0)))
    assert update.action == "copied"
    assert (
        module.packed.stride() == packed.stride()
        and module.packed.untyped_storage().data_ptr() == storage_before
    )
    assert_same_bits(module.packed.detach(), pack_ue8m0_deepgemm(scales.flip(0)), name="packed scales")


@pytest.mark.parametrize(
    ("new", "changed"),
    [
        (torch.zeros(4, 9), "shape"),
        (torch.zeros(4, 8, dtype=torch.bfloat16), "dtype"),
        (torch.zeros(8, 4, dtype=torch.float16), "shape and dtype"),
        (torch.zeros(4, 8, device="meta"), "device"),
    ],
    ids=["shape", "dtype", "shape and dtype", "device"],
)
def test_a_changed_tensor_is_rebound_reported_and_witnessed(new, changed):
    module = _module_with(torch.zeros(4, 8))
    old = module.weight
    with witness.capture() as records:
        update = copy_or_rebind_param(module, "weight", new, site="layers.3.wo_b")
    assert update.action == "rebound" and not update.graph_safe
    assert f"{changed} changed" in update.reason and "captured again" in update.reason
    assert module.weight is not old and isinstance(module.weight, nn.Parameter)
    assert module.weight.shape == new.shape and module.weight.dtype == new.dtype
    assert not module.weight.requires_grad
    (record,) = records
    assert record == {
        "path": "linear.rebind",
        "reason": update.reason,
        "site": "layers.3.wo_b",
        "param": "weight",
        "old": "torch.float32 (4, 8) on cpu",
        "new": f"{new.dtype} {tuple(new.shape)} on {new.device}",
    }


def test_a_missing_or_none_slot_is_registered_new():
    module = nn.Module()
    module.register_parameter("scale", None)
    with witness.capture() as records:
        update = copy_or_rebind_param(module, "scale", torch.ones(3, dtype=torch.uint8))
        assert update == ParamUpdate("scale", "new", "scale: registered torch.uint8 (3,) on cpu")
        assert copy_or_rebind_param(module, "other", torch.ones(2)).action == "new"
    assert records == []
    assert isinstance(module.scale, nn.Parameter) and module.scale.dtype == torch.uint8
    assert "other" in dict(module.named_parameters())


def test_an_empty_buffer_slot_is_filled_as_a_buffer():
    module = nn.Module()
    module.register_buffer("table", None)
    assert copy_or_rebind_param(module, "table", torch.ones(3)).action == "new"
    assert "table" in dict(module.named_buffers()) and "table" not in dict(module.named_parameters())


def test_a_buffer_stays_a_buffer():
    module = _module_with(buffer=torch.zeros(3))
    assert copy_or_rebind_param(module, "table", torch.ones(3)).action == "copied"
    assert copy_or_rebind_param(module, "table", torch.ones(5)).action == "rebound"
    assert "table" in dict(module.named_buffers()) and "table" not in dict(module.named_parameters())


def test_can_copy_into_is_the_rule():
    a = torch.zeros(2, 3)
    assert can_copy_into(a, torch.ones(2, 3)) and can_copy_into(a, torch.ones(3, 2).t())
    assert not can_copy_into(a, torch.ones(3, 2)) and not can_copy_into(
        a, torch.ones(2, 3, dtype=torch.float16)
    )


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((object(), "w", torch.zeros(1)), TypeError, "module must be a torch.nn.Module; got object$"),
        ((nn.Module(), "not a name", torch.zeros(1)), ValueError, "name must be an attribute name"),
        ((nn.Module(), "w", [0.0]), TypeError, "value must be a torch.Tensor; got list$"),
        (
            (nn.Linear(2, 2), "training", torch.zeros(1)),
            ValueError,
            "name 'training' is an attribute of Linear that is not a tensor slot$",
        ),
    ],
    ids=["module", "name", "value", "non-tensor attribute"],
)
def test_copy_or_rebind_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        copy_or_rebind_param(*args)


# ---- MxLinear reloads --------------------------------------------------------------------------------


def _fresh(source: str, seed: int, **kwargs) -> MxLinear:
    layer = MxLinear(K, N, **kwargs)
    load(layer, source, seed=seed)
    layer.process_weights_after_loading()
    return layer


@pytest.mark.parametrize("second", SOURCES)
@pytest.mark.parametrize("first", SOURCES)
def test_a_same_shape_reload_copies_every_tensor_in_place(first, second):
    layer = _fresh(first, seed=1, mxfp8_input=True)
    x = activations(5, K, seed=2)
    before = layer(x, context="decode")
    ptrs = data_ptrs(layer)
    load(layer, second, seed=3)
    with witness.capture() as records:
        result = layer.process_weights_after_loading()
    assert result.graph_safe and result.rebound == ()
    assert {u.action for u in result.updates} == {"copied"}
    assert data_ptrs(layer) == ptrs
    assert [r for r in records if r["path"] == "linear.rebind"] == []
    after = layer(x, context="decode")
    assert_same_bits(after, _fresh(second, seed=3, mxfp8_input=True)(x, context="decode"), name="reloaded")
    assert not torch.equal(after, before)  # the reload really changed the weights


def test_a_format_changing_reload_rebinds_and_says_so():
    # Without the request a bf16 weight stays bf16 and a native one is MXFP8: the weight's dtype changes.
    layer = _fresh("bf16", seed=4)
    old_weight = layer.weight
    load(layer, "native_32x32", seed=5)
    with witness.capture() as records:
        result = layer.process_weights_after_loading()
    assert not result.graph_safe and result.rebound == ("weight",)
    assert {u.name: u.action for u in result.updates} == {"weight": "rebound", "weight_scale": "new"}
    assert layer.weight is not old_weight and layer.weight.dtype == torch.float8_e4m3fn
    (record,) = [r for r in records if r["path"] == "linear.rebind"]
    assert record["param"] == "weight" and "dtype changed" in record["reason"]
    assert record["site"] == "MxLinear[64x96]"  # the layer's default name

    load(layer, "bf16", seed=6)
    with witness.capture() as records:
        result = layer.process_weights_after_loading()
    assert result.rebound == ("weight", "weight_scale")
    assert {u.name: u.action for u in result.updates} == {"weight": "rebound", "weight_scale": "removed"}
    assert layer.weight_scale is None and layer.weight.dtype == torch.bfloat16
    removed = "weight_scale: removed (the new weights do not use it); re-capture CUDA graphs"
    assert result.updates[1] == ParamUpdate("weight_scale", "removed", removed)
    rebind = [r for r in records if r["path"] == "linear.rebind"]
    assert [r["param"] for r in rebind] == ["weight", "weight_scale"]
    assert rebind[1] == {
        "path": "linear.rebind",
        "reason": removed,
        "site": "MxLinear[64x96]",
        "param": "weight_scale",
        "old": "torch.uint8 (64, 3) on cpu",
        "new": None,
    }
    x = activations(3, K, seed=7)
    assert_same_bits(layer(x, context="decode"), _fresh("bf16", seed=6)(x, context="decode"), name="reloaded")


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no bias"])
@pytest.mark.parametrize("request_pairs", [True, False], ids=["mxfp8 weight", "bf16 weight kept"])
def test_a_reload_never_writes_into_the_callers_tensors(request_pairs, bias):
    layer = MxLinear(K, N, mxfp8_input=request_pairs, bias=bias)
    w1, b1 = bf16_weight(N, K, seed=8), torch.zeros(N, dtype=torch.bfloat16)
    w1_copy, b1_copy = w1.clone(), b1.clone()
    layer.load_weights(w1, bias=b1 if bias else None)
    layer.process_weights_after_loading()
    layer.load_weights(bf16_weight(N, K, seed=9), bias=torch.ones(N, dtype=torch.bfloat16) if bias else None)
    layer.process_weights_after_loading()
    assert_same_bits(w1, w1_copy, name="caller's weight")
    assert_same_bits(b1, b1_copy, name="caller's bias")


def test_a_native_reload_never_writes_into_the_callers_tensors():
    layer = MxLinear(K, N)
    q1, s1 = native_weight(N, K, block_rows=1, seed=10)
    q1_copy, s1_copy = q1.clone(), s1.clone()
    layer.load_weights(q1, s1)
    layer.process_weights_after_loading()
    layer.load_weights(*native_weight(N, K, block_rows=1, seed=11))
    layer.process_weights_after_loading()
    assert_same_bits(q1.view(torch.uint8), q1_copy.view(torch.uint8), name="caller's codes")
    assert_same_bits(s1, s1_copy, name="caller's scales")


def test_processing_again_without_a_load_returns_the_same_result():
    layer = _fresh("bf16", seed=12, mxfp8_input=True)
    assert layer.process_weights_after_loading() is layer.processed


def test_a_second_view_of_the_same_scales_is_not_a_second_tensor():
    # process_weights_after_loading keeps no weight_scale_packed when a backend's weight scales are the E8M0
    # scales themselves; a backend may hand them back as another view of the same memory, not the same object.
    scales = torch.randint(0, 255, (N, K // 32), dtype=torch.uint8)
    assert _same_tensor(scales, scales)
    assert _same_tensor(scales, scales.view(torch.uint8)) and scales.view(torch.uint8) is not scales
    assert _same_tensor(scales, scales[:])
    assert not _same_tensor(scales, scales.clone())  # equal values, other memory
    assert not _same_tensor(scales, scales[: N // 2])  # a part of it
    assert not _same_tensor(scales, scales.view(torch.int8))  # another dtype
    square = scales[:3, :3]
    assert not _same_tensor(square, square.t())  # the same memory read in another order
