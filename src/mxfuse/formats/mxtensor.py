"""``MxTensor``: the one MXFP8 operand value, E4M3 data and UE8M0 scales that know their layout.

A producer returns one, a consumer takes one. It is checked once, when it is built (``MxTensor(...)``,
``MxTensor.empty``, ``as_mxtensor``): the data is a contiguous float8_e4m3fn ``[M, K]`` tensor (K a
multiple of 32), the scales exactly what ``scale_spec(M, K, scale_layout)`` describes (dtype, shape,
strides, storage long enough for the padding rows), both on one device. After that nobody checks the
pair again or tells its layout from dtype and rank: ``scale_layout`` says it.

A plain ``(q, scale)`` tuple is still accepted at the public edges; ``as_mxtensor`` converts it once,
with the layout given, or else told from the scale's dtype and rank (int32 2-D deepgemm, uint8 2-D e8m0,
uint8 1-D swizzled_128x4): the one place in mxfuse where a layout is inferred.

Modelled on torchao's ``MXTensor`` (data, scale, the recipe that made it) and triton_kernels' ``Tensor``
(storage plus a layout object), without being a torch.Tensor subclass: kernels take its parts, and
building one neither synchronises with the device nor allocates, so producers given an ``MxTensor`` to
write into can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mxfuse.formats.config import ScaleLayout, ScaleRounding, parse_scale_layout, parse_scale_rounding
from mxfuse.formats.constants import BLOCK_SIZE
from mxfuse.formats.layouts import ScaleSpec, check_mxfp8_parts, scale_spec, scale_storage_view
from mxfuse.formats.reference import dequantize_mxfp8

__all__ = ["MxTensor", "as_mxtensor", "mxtensor_out"]


def _scale_bytes(scale: object) -> object:
    """E8M0 scales given as ``torch.float8_e8m0fnu`` (the checkpoint dtype) as the uint8 bytes they are."""
    e8m0fnu = getattr(torch, "float8_e8m0fnu", None)
    if isinstance(scale, torch.Tensor) and e8m0fnu is not None and scale.dtype == e8m0fnu:
        return scale.view(torch.uint8)
    return scale


def _check_data(data: object, name: str) -> tuple[int, int]:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(data).__name__}")
    if data.dtype != torch.float8_e4m3fn or data.dim() != 2:
        raise ValueError(
            f"{name} must be a 2-D float8_e4m3fn tensor [M, K]; got {data.dtype} {tuple(data.shape)}"
        )
    m, k = data.shape
    if k % BLOCK_SIZE:
        raise ValueError(f"{name}.shape[1] (K) must be a multiple of {BLOCK_SIZE}; got {k}")
    return m, k


@dataclass(frozen=True, eq=False, repr=False)  # tensors: identity, not elementwise ==
class MxTensor:
    """An MXFP8 tensor: ``data`` float8_e4m3fn ``[M, K]`` (contiguous) and ``scale``, one E8M0 byte per row
    and 32 columns laid out as ``scale_layout`` says (``ScaleLayout``: e8m0, deepgemm or swizzled_128x4),
    padding included. ``rounding``: the rule that chose the scales (``ScaleRounding``), None when not
    known (a pair made elsewhere). ``spec`` is the scales' ``ScaleSpec``.

    The logical shape is ``shape`` = ``(M, K)``; the scales hold ``rows_padded`` rows, of which the
    ``padding_rows`` past M are padding (0). Scale bytes may be given as ``torch.float8_e8m0fnu``: they
    are kept as their uint8 view. Bad parts raise TypeError or ValueError naming the field.
    """

    data: torch.Tensor
    scale: torch.Tensor
    scale_layout: ScaleLayout
    rounding: ScaleRounding | None = None
    spec: ScaleSpec = field(init=False, repr=False)

    def __post_init__(self) -> None:
        _validate(self, ("MxTensor.data", "MxTensor.scale"))

    @classmethod
    def empty(
        cls,
        m: int,
        k: int,
        *,
        scale_layout: ScaleLayout | str,
        rounding: ScaleRounding | str | None = ScaleRounding.RCEIL,
        device: torch.device | str,
    ) -> MxTensor:
        """An ``[m, k]`` MxTensor to be written (contents undefined), laid out exactly as ``scale_spec``
        says: the out-buffer a producer writes in place, for example inside a CUDA graph."""
        spec = scale_spec(m, k, scale_layout=scale_layout)
        data = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=device)
        flat = torch.empty((spec.storage_numel,), dtype=spec.dtype, device=device)
        return _build(data, flat.as_strided(spec.shape, spec.stride), spec, rounding)

    @property
    def shape(self) -> tuple[int, int]:
        """The logical shape ``(M, K)``."""
        m, k = self.data.shape
        return m, k

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def rows_padded(self) -> int:
        """Rows the scales hold: M rounded up to the layout's row alignment."""
        return self.spec.rows_padded

    @property
    def padding_rows(self) -> int:
        """Scale rows past the last row of data (0 bytes)."""
        return self.spec.rows_padded - self.data.shape[0]

    def scale_storage(self) -> torch.Tensor:
        """A 1-D view of every scale element, padding included (what a producer writes)."""
        return scale_storage_view(self.scale, self.spec)

    def scale_bytes(self) -> torch.Tensor:
        """``scale_storage()`` as uint8 bytes (deepgemm's int32 words read little-endian)."""
        return self.scale_storage().view(torch.uint8)

    def dequantize(self) -> torch.Tensor:
        """float32 ``[M, K]``: each element times its block's 2**(s - 127); NaN scales give NaN blocks."""
        return dequantize_mxfp8(self.data, self.scale, scale_layout=self.scale_layout)

    def __repr__(self) -> str:
        rounding = "unknown" if self.rounding is None else self.rounding.value
        m, k = self.shape
        return (
            f"MxTensor([{m}, {k}] float8_e4m3fn, {self.scale_layout.value} scales ({self.rows_padded} rows), "
            f"rounding {rounding}, on {self.device})"
        )

    def with_rounding(self, rounding: ScaleRounding | str) -> MxTensor:
        """The same tensors, recorded as holding scales chosen by ``rounding``."""
        return _build(self.data, self.scale, self.spec, rounding)


def _validate(mx: MxTensor, names: tuple[str, str]) -> None:
    """Check ``mx``'s parts (naming them ``names``) and set its normalized fields and ``spec``."""
    layout = parse_scale_layout(mx.scale_layout, argument="scale_layout")
    rounding = None if mx.rounding is None else parse_scale_rounding(mx.rounding, argument="rounding")
    m, k = _check_data(mx.data, names[0])
    scale = _scale_bytes(mx.scale)
    spec = check_mxfp8_parts(
        mx.data, scale, m=m, k=k, scale_layout=layout, device=mx.data.device, names=names
    )
    object.__setattr__(mx, "scale", scale)
    object.__setattr__(mx, "scale_layout", layout)
    object.__setattr__(mx, "rounding", rounding)
    object.__setattr__(mx, "spec", spec)


def _build(
    data: torch.Tensor, scale: torch.Tensor, spec: ScaleSpec, rounding: ScaleRounding | str | None
) -> MxTensor:
    """An MxTensor of parts already known to fit ``spec`` (allocated for it, or taken from a checked
    MxTensor): not checked again."""
    mx = object.__new__(MxTensor)
    for name, value in (
        ("data", data),
        ("scale", scale),
        ("scale_layout", spec.layout),
        ("rounding", None if rounding is None else parse_scale_rounding(rounding)),
        ("spec", spec),
    ):
        object.__setattr__(mx, name, value)
    return mx


def _infer_scale_layout(scale: object, argument: str) -> ScaleLayout:
    """The layout a scale tensor is in, told apart by dtype and rank: int32 2-D deepgemm, uint8 2-D e8m0,
    uint8 1-D swizzled_128x4; TypeError or ValueError naming ``argument`` for anything else."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(scale).__name__}")
    if scale.dtype == torch.int32 and scale.dim() == 2:
        return ScaleLayout.DEEPGEMM
    if scale.dtype == torch.uint8 and scale.dim() == 2:
        return ScaleLayout.E8M0
    if scale.dtype == torch.uint8 and scale.dim() == 1:
        return ScaleLayout.SWIZZLED_128X4
    raise ValueError(
        f"{argument} must be int32 [M, ceil(K/128)] (deepgemm), uint8 [M, K/32] (e8m0) or 1-D uint8 "
        f"(swizzled_128x4); got {scale.dtype} {tuple(scale.shape)}"
    )


def as_mxtensor(
    value: object,
    *,
    scale_layout: ScaleLayout | str | None = None,
    rounding: ScaleRounding | str | None = None,
    shape: tuple[int, int] | None = None,
    device: torch.device | None = None,
    argument: str = "a",
) -> MxTensor:
    """``value`` as an MxTensor: an MxTensor as it is, or a plain ``(q, scale)`` tuple checked once.

    ``scale_layout``: the layout ``value`` must be in; None takes an MxTensor's own and tells a tuple's
    from its scale's dtype and rank. ``rounding``: what a tuple's scales were made with, when known.
    ``shape`` and ``device``: what the caller needs ``value`` to be, when it needs something. Errors
    name ``argument`` (``a``, ``a[0]``, ``a[1]``): TypeError for a value that is neither, ValueError for a
    layout that is not the one asked for or parts that do not fit it.
    """
    layout = None if scale_layout is None else parse_scale_layout(scale_layout)
    if isinstance(value, MxTensor):
        if layout is not None and value.scale_layout is not layout:
            raise ValueError(
                f"{argument} holds {value.scale_layout.value} scales; {layout.value} scales are required here"
            )
        if shape is not None and value.shape != tuple(shape):
            raise ValueError(f"{argument} must have shape {tuple(shape)}; got {value.shape}")
        if device is not None and value.device != device:
            raise ValueError(f"{argument} must be on {device}; got {value.device}")
        return value
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise TypeError(
            f"{argument} must be an MxTensor or a pair (fp8 [M, K], scale); got {type(value).__name__}"
        )
    data, scale = value
    names = (f"{argument}[0]", f"{argument}[1]")
    if shape is None:
        m, k = _check_data(data, names[0])
    else:
        m, k = shape
    scale = _scale_bytes(scale)
    if layout is None:
        layout = _infer_scale_layout(scale, names[1])
    where = data.device if device is None and isinstance(data, torch.Tensor) else device
    spec = check_mxfp8_parts(data, scale, m=m, k=k, scale_layout=layout, device=where, names=names)
    return _build(data, scale, spec, rounding)


def mxtensor_out(
    out: object,
    *,
    m: int,
    k: int,
    device: torch.device,
    scale_layout: ScaleLayout | str | None = None,
    rounding: ScaleRounding | str | None = None,
    argument: str = "out",
) -> MxTensor:
    """The MxTensor a producer writes its ``[m, k]`` result into on ``device``.

    ``out``: an MxTensor, a ``(q, scale)`` tuple (converted once by ``as_mxtensor``), or None for a new
    one (``MxTensor.empty``; deepgemm scales unless ``scale_layout`` says otherwise). ``scale_layout``:
    the layout asked for (None: ``out``'s). ``rounding``: the scales to write; None takes ``out``'s own,
    else RCEIL; an ``out`` that records another rounding is a ValueError. The result records the rounding
    it will hold.
    """
    wanted = None if rounding is None else parse_scale_rounding(rounding)
    if out is None:
        layout = ScaleLayout.DEEPGEMM if scale_layout is None else scale_layout
        return MxTensor.empty(
            m, k, scale_layout=layout, rounding=wanted or ScaleRounding.RCEIL, device=device
        )
    mx = as_mxtensor(
        out, scale_layout=scale_layout, rounding=wanted, shape=(m, k), device=device, argument=argument
    )
    if mx.rounding is None:
        return mx.with_rounding(wanted or ScaleRounding.RCEIL)
    if wanted is not None and mx.rounding is not wanted:
        raise ValueError(
            f"rounding={wanted.value!r} disagrees with {argument}, an MxTensor for {mx.rounding.value} scales"
        )
    return mx
