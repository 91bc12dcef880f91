"""Argument checks of ``mxfuse.hc.mhc_boundary``: everything is validated before anything is written.

Errors are ValueError or TypeError naming the argument and what was expected.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mxfuse import MxfuseUnavailableError
from mxfuse.formats import ScaleLayout, ScaleRounding, mxtensor_out, parse_scale_layout, parse_scale_rounding
from mxfuse.hc.reference import N_STREAMS, empty_hc_boundary_outputs
from mxfuse.kernels.hc import (
    HcBoundaryOutputs,
    HcConfig,
    HcInputs,
    HcParams,
    HcProjection,
    HcSideStream,
    HcWeights,
    HcWorkspace,
)
from mxfuse.memory import tensors_overlap

__all__ = ["Call", "check_call"]

_MIN_CAPABILITY = (8, 9)  # the pair's E4M3 conversion (cvt.e4m3x2)


@dataclass(frozen=True)
class Call:
    inputs: HcInputs
    weights: HcWeights
    params: HcParams
    rounding: ScaleRounding
    layout: ScaleLayout
    out: HcBoundaryOutputs

    @property
    def device(self) -> torch.device:
        return self.inputs.x.device

    @property
    def tokens(self) -> int:
        return self.inputs.x.shape[0]

    @property
    def hidden(self) -> int:
        return self.inputs.x.shape[1]

    @property
    def fields(self) -> dict[str, object]:
        fields: dict[str, object] = {"hidden": self.hidden}
        fields["ordering"] = "normal" if self.inputs.prev_pre is None else "shifted"
        if self.out.pair is not None:
            fields["scale_layout"] = self.layout.value
            fields["rounding"] = self.rounding.value
        return fields


_BF16 = (torch.bfloat16,)
_F32 = (torch.float32,)


def _tensor(value: object, name: str, what: str, shape: tuple[int, ...], dtypes: tuple, device: torch.device):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(value).__name__}")
    if value.dtype not in dtypes:
        raise ValueError(f"{name} must be {' or '.join(str(d) for d in dtypes)}; got {value.dtype}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must have shape {what} = {shape}; got {tuple(value.shape)}")
    if value.device != device:
        raise ValueError(f"{name} must be on {device} (where x is); got {value.device}")
    if not value.is_contiguous():
        raise ValueError(f"{name} must be contiguous; got strides {tuple(value.stride())}")
    return value


def _flag(value: object, name: str) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{name} must be True, False or None; got {value!r}")
    return value


def _check_out(
    out: object,
    want_y: object,
    want_pair: object,
    *,
    tokens: int,
    hidden: int,
    layout: ScaleLayout | None,
    rounding: ScaleRounding | None,
    device: torch.device,
) -> HcBoundaryOutputs:
    want_y, want_pair = _flag(want_y, "want_y"), _flag(want_pair, "want_pair")
    if out is None:
        want_y = True if want_y is None else want_y
        want_pair = True if want_pair is None else want_pair
        if not (want_y or want_pair):
            raise ValueError("want_y and want_pair: at least one of y and the MXFP8 pair must be wanted")
        return empty_hc_boundary_outputs(
            tokens,
            hidden,
            device=device,
            y=want_y,
            pair=want_pair,
            scale_layout=layout or ScaleLayout.DEEPGEMM,
            rounding=rounding or ScaleRounding.RCEIL,
        )
    if not isinstance(out, HcBoundaryOutputs):
        raise TypeError(
            f"out must be an HcBoundaryOutputs (see empty_hc_boundary_outputs); got {type(out).__name__}"
        )
    n = N_STREAMS
    _tensor(out.residual, "out.residual", "[T, n, H]", (tokens, n, hidden), _BF16, device)
    _tensor(out.pre, "out.pre", "[T, n]", (tokens, n), _F32, device)
    _tensor(out.post, "out.post", "[T, n]", (tokens, n), _F32, device)
    _tensor(out.comb, "out.comb", "[T, n, n]", (tokens, n, n), _F32, device)
    if out.y is not None:
        _tensor(out.y, "out.y", "[T, H]", (tokens, hidden), _BF16, device)
    pair = out.pair
    if pair is not None:
        pair = mxtensor_out(
            pair,
            m=tokens,
            k=hidden,
            device=device,
            scale_layout=layout,
            rounding=rounding,
            argument="out.pair",
        )
    if out.y is None and pair is None:
        raise ValueError("out: at least one of out.y and out.pair must be a buffer")
    for flag, name, field in ((want_y, "want_y", "y"), (want_pair, "want_pair", "pair")):
        if flag is not None and flag != (getattr(out, field) is not None):
            raise ValueError(f"{name}={flag} disagrees with out.{field}; with out given, leave {name} None")
    if pair is out.pair:
        return out
    return dataclasses.replace(out, pair=pair)


def _check_overlaps(inputs: dict[str, torch.Tensor | None], out: HcBoundaryOutputs) -> None:
    """No output may share memory with an input or another output, but R' may update residual in place."""
    outputs = {"out.residual": out.residual, "out.pre": out.pre, "out.post": out.post, "out.comb": out.comb}
    if out.y is not None:
        outputs["out.y"] = out.y
    if out.pair is not None:
        outputs["out.pair.data"] = out.pair.data
        outputs["out.pair.scale"] = out.pair.scale_storage()  # padding included
    seen = {name: t for name, t in inputs.items() if t is not None}
    residual = inputs["residual"]
    for name, t in outputs.items():
        for other, u in seen.items():
            in_place = name == "out.residual" and u is residual
            if in_place and (t.data_ptr(), t.stride()) == (u.data_ptr(), u.stride()):
                continue
            if tensors_overlap(t, u):
                hint = " (it may be residual itself, for an in-place update)" if in_place else ""
                raise ValueError(f"{name} must not overlap {other}{hint}")
        seen[name] = t


def check_call(
    inputs: object,
    weights: object,
    *,
    params: object,
    want_y: object,
    want_pair: object,
    rounding: object,
    scale_layout: object,
    out: object,
    workspace: object,
    config: object,
    fused: object,
    side: object = None,
) -> Call:
    """The arguments of ``mhc_boundary``, checked in order, as a ``Call`` (outputs allocated if not given)."""
    if not isinstance(inputs, HcInputs):
        raise TypeError(f"inputs must be an mxfuse.hc.HcInputs; got {type(inputs).__name__}")
    if not isinstance(weights, HcWeights):
        raise TypeError(f"weights must be an mxfuse.hc.HcWeights; got {type(weights).__name__}")
    x, residual, post, comb, prev_pre = inputs.x, inputs.residual, inputs.post, inputs.comb, inputs.prev_pre
    fn, scale, base, norm_weight = weights.fn, weights.scale, weights.base, weights.norm_weight
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor; got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D [T, H]; got shape {tuple(x.shape)}")
    tokens, hidden = x.shape
    if hidden <= 0 or hidden % 128:
        raise ValueError(f"x.shape[1] (H) must be a positive multiple of 128; got {hidden}")
    device = x.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"x must be on a CUDA device or the CPU; got {device}")
    _tensor(x, "x", "[T, H]", (tokens, hidden), _BF16, device)
    if isinstance(residual, torch.Tensor) and residual.dim() == 3 and residual.shape[1] != N_STREAMS:
        raise ValueError(
            f"residual.shape[1] (n, the number of streams) must be {N_STREAMS}; got {residual.shape[1]}"
        )
    n, mix = N_STREAMS, N_STREAMS * (N_STREAMS + 2)
    checked = {
        "x": x,
        "residual": _tensor(residual, "residual", "[T, n, H]", (tokens, n, hidden), _BF16, device),
        "post": _tensor(post, "post", "[T, n]", (tokens, n), _F32, device),
        "comb": _tensor(comb, "comb", "[T, n, n]", (tokens, n, n), _F32, device),
        "prev_pre": None
        if prev_pre is None
        else _tensor(prev_pre, "prev_pre", "[T, n]", (tokens, n), _F32, device),
        "fn": _tensor(
            fn.weight if isinstance(fn, HcProjection) else fn,
            "fn",
            "[n(n+2), n*H]",
            (mix, n * hidden),
            _F32,
            device,
        ),
        "fn_pieces": None
        if not isinstance(fn, HcProjection)
        else _tensor(fn.pieces, "fn.pieces", "[3, n(n+2), n*H]", (3, mix, n * hidden), _BF16, device),
        "scale": _tensor(scale, "scale", "[3]", (3,), _F32, device),
        "base": _tensor(base, "base", "[n(n+2)]", (mix,), _F32, device),
        "norm_weight": _tensor(norm_weight, "norm_weight", "[H]", (hidden,), (*_BF16, *_F32), device),
    }
    if not isinstance(params, HcParams):  # HcParams validated its fields when it was made
        raise TypeError(
            "params must be an mxfuse.hc.HcParams (the boundary's scalar settings); "
            f"got {type(params).__name__}"
        )
    rounding = None if rounding is None else parse_scale_rounding(rounding)
    layout = None if scale_layout is None else parse_scale_layout(scale_layout)
    if not isinstance(fused, bool):
        raise TypeError(f"fused must be a bool; got {fused!r}")
    if workspace is not None and not isinstance(workspace, HcWorkspace):
        raise TypeError(f"workspace must be an HcWorkspace or None; got {type(workspace).__name__}")
    if side is not None:
        if not isinstance(side, HcSideStream):
            raise TypeError(f"side must be an HcSideStream or None; got {type(side).__name__}")
        if side.device != device:
            raise ValueError(
                f"side must be a side stream of {device}, the inputs' device; got one of {side.device}"
            )
    if config is not None:
        if not isinstance(config, HcConfig):
            raise TypeError(f"config must be an HcConfig or None; got {type(config).__name__}")
        config.check(hidden)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) < _MIN_CAPABILITY:
        major, minor = torch.cuda.get_device_capability(device)
        raise MxfuseUnavailableError(
            f"mhc_boundary needs FP8 conversion (sm_89+); {device} is sm_{major}{minor}"
        )
    out = _check_out(
        out, want_y, want_pair, tokens=tokens, hidden=hidden, layout=layout, rounding=rounding, device=device
    )
    _check_overlaps(checked, out)
    if out.pair is not None:
        layout, rounding = out.pair.scale_layout, out.pair.rounding
    return Call(
        inputs,
        weights,
        params,
        rounding or ScaleRounding.RCEIL,
        layout or ScaleLayout.DEEPGEMM,
        out,
    )
