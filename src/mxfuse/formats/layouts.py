"""Scale layouts of MXFP8 tensors: what each consumer reads, and conversions from row-major E8M0.

Every layout here is defined by ``ScaleLayout``'s docstring (and docs/mxfp8.md). The
conversions are plain torch on any device; padding is always written as 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse.formats.config import ScaleLayout, parse_scale_layout
from mxfuse.formats.constants import BLOCK_SIZE, SCALE_GROUPS_PER_WORD, SWIZZLE_ROW_TILE

__all__ = [
    "ScaleSpec",
    "align",
    "check_mxfp8_pair",
    "check_mxfp8_parts",
    "empty_mxfp8_pair",
    "pack_ue8m0_deepgemm",
    "scale_from_layout",
    "scale_spec",
    "scale_storage_view",
    "scale_to_layout",
    "swizzle_128x4",
    "unpack_ue8m0_deepgemm",
    "unswizzle_128x4",
]


def align(n: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is ``>= n``."""
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class ScaleSpec:
    """The exact tensor a consumer reads for ``[m, k]`` elements: dtype, shape, strides and storage.

    ``storage_numel`` counts elements of ``dtype`` from the tensor's first element to the end of its
    padding: a producer writes all of them, padding included. ``rows_padded``: the rows whose scales the
    storage holds, ``m`` rounded up to the layout's row alignment (1 e8m0, 4 deepgemm, 128
    swizzled_128x4); the rows past ``m`` are padding, written as 0.
    """

    layout: ScaleLayout
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_numel: int
    rows_padded: int


def _check_mk(m: int, k: int) -> None:
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise ValueError(f"m must be an int >= 0; got {m!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 0 or k % BLOCK_SIZE:
        raise ValueError(f"k must be an int >= 0 and a multiple of {BLOCK_SIZE}; got {k!r}")


def scale_spec(m: int, k: int, *, scale_layout: ScaleLayout | str) -> ScaleSpec:
    """The scale tensor of an ``[m, k]`` MXFP8 tensor in ``scale_layout``."""
    _check_mk(m, k)
    layout = parse_scale_layout(scale_layout)
    groups = k // BLOCK_SIZE
    words = -(-groups // SCALE_GROUPS_PER_WORD)
    if layout is ScaleLayout.E8M0:
        return ScaleSpec(layout, torch.uint8, (m, groups), (groups, 1), m * groups, m)
    if layout is ScaleLayout.DEEPGEMM:
        m4 = align(m, 4)
        return ScaleSpec(layout, torch.int32, (m, words), (1, m4), m4 * words, m4)
    m128 = align(m, SWIZZLE_ROW_TILE)
    nbytes = m128 * align(groups, SCALE_GROUPS_PER_WORD)
    return ScaleSpec(layout, torch.uint8, (nbytes,), (1,), nbytes, m128)


def _check_e8m0(scale: torch.Tensor, argument: str) -> None:
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"{argument} must be a torch.Tensor; got {type(scale).__name__}")
    if scale.dtype != torch.uint8 or scale.dim() != 2:
        raise ValueError(
            f"{argument} must be a 2-D uint8 tensor [M, K/32]; got {scale.dtype} {tuple(scale.shape)}"
        )


def pack_ue8m0_deepgemm(scale: torch.Tensor) -> torch.Tensor:
    """Row-major E8M0 ``[M, G]`` -> DeepGEMM packed int32 ``[M, ceil(G/4)]``, strides ``(1, align(M, 4))``."""
    _check_e8m0(scale, "scale")
    m, groups = scale.shape
    words, m4 = -(-groups // SCALE_GROUPS_PER_WORD), align(m, 4)
    padded = torch.zeros((m4, words * SCALE_GROUPS_PER_WORD), dtype=torch.int64, device=scale.device)
    padded[:m, :groups] = scale
    # Little-endian by arithmetic, not by viewing bytes, so the result does not depend on the host.
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=scale.device)
    packed = (padded.view(m4, words, SCALE_GROUPS_PER_WORD) << shifts).sum(dim=-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    # Storage is [words, align(M, 4)] and holds the padding rows; the view has the MN-major strides.
    storage = packed.t().contiguous().reshape(-1)
    return storage.as_strided((m, words), (1, m4))


def unpack_ue8m0_deepgemm(packed: torch.Tensor, *, k: int) -> torch.Tensor:
    """DeepGEMM packed int32 ``[M, ceil(K/128)]`` -> row-major E8M0 uint8 ``[M, K/32]``."""
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor; got {type(packed).__name__}")
    m = packed.shape[0] if packed.dim() == 2 else -1
    if m < 0:
        raise ValueError(f"packed must be a 2-D int32 tensor [M, ceil(K/128)]; got {tuple(packed.shape)}")
    spec = scale_spec(m, k, scale_layout=ScaleLayout.DEEPGEMM)
    _check_tensor(packed, spec, "packed", device=packed.device)
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=packed.device)
    bytes_ = (packed.to(torch.int64)[..., None] >> shifts) & 0xFF
    return (
        bytes_.reshape(m, spec.shape[1] * SCALE_GROUPS_PER_WORD)[:, : k // BLOCK_SIZE]
        .to(torch.uint8)
        .contiguous()
    )


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    """Row-major E8M0 ``[M, G]`` -> 1-D uint8 in the 128x4 block-scaled layout, zero padded."""
    _check_e8m0(scale, "scale")
    m, groups = scale.shape
    m128, g4 = align(m, SWIZZLE_ROW_TILE), align(groups, SCALE_GROUPS_PER_WORD)
    padded = torch.zeros((m128, g4), dtype=torch.uint8, device=scale.device)
    padded[:m, :groups] = scale
    # (m, g) = (mb*128 + r4*32 + r32, kb*4 + k4) -> offset mb*nK4*512 + kb*512 + r32*16 + r4*4 + k4.
    tiles = padded.view(m128 // 128, 4, 32, g4 // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(-1)


def unswizzle_128x4(swizzled: torch.Tensor, *, m: int, k: int) -> torch.Tensor:
    """1-D uint8 in the 128x4 layout -> row-major E8M0 uint8 ``[m, k/32]``."""
    if not isinstance(swizzled, torch.Tensor):
        raise TypeError(f"swizzled must be a torch.Tensor; got {type(swizzled).__name__}")
    spec = scale_spec(m, k, scale_layout=ScaleLayout.SWIZZLED_128X4)
    _check_tensor(swizzled, spec, "swizzled", device=swizzled.device)
    groups = k // BLOCK_SIZE
    m128, g4 = align(m, SWIZZLE_ROW_TILE), align(groups, SCALE_GROUPS_PER_WORD)
    tiles = swizzled.view(m128 // 128, g4 // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(m128, g4)[:m, :groups].contiguous()


def scale_to_layout(scale: torch.Tensor, *, scale_layout: ScaleLayout | str) -> torch.Tensor:
    """Row-major E8M0 ``[M, G]`` -> the same scales in ``scale_layout``."""
    layout = parse_scale_layout(scale_layout)
    _check_e8m0(scale, "scale")
    if layout is ScaleLayout.DEEPGEMM:
        return pack_ue8m0_deepgemm(scale)
    if layout is ScaleLayout.SWIZZLED_128X4:
        return swizzle_128x4(scale)
    return scale.contiguous()


def scale_from_layout(
    scale: torch.Tensor, *, scale_layout: ScaleLayout | str, m: int, k: int
) -> torch.Tensor:
    """Scales of an ``[m, k]`` tensor in ``scale_layout`` -> row-major E8M0 uint8 ``[m, k/32]``."""
    layout = parse_scale_layout(scale_layout)
    if layout is ScaleLayout.DEEPGEMM:
        return unpack_ue8m0_deepgemm(scale, k=k)
    if layout is ScaleLayout.SWIZZLED_128X4:
        return unswizzle_128x4(scale, m=m, k=k)
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"scale must be a torch.Tensor; got {type(scale).__name__}")
    _check_tensor(scale, scale_spec(m, k, scale_layout=layout), "scale", device=scale.device)
    return scale


def empty_mxfp8_pair(
    m: int, k: int, *, scale_layout: ScaleLayout | str, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate ``(fp8 [m, k], scale)`` with exactly the layout a consumer reads; contents undefined."""
    spec = scale_spec(m, k, scale_layout=scale_layout)
    q = torch.empty((m, k), dtype=torch.float8_e4m3fn, device=device)
    flat = torch.empty((spec.storage_numel,), dtype=spec.dtype, device=device)
    return q, flat.as_strided(spec.shape, spec.stride)


def scale_storage_view(scale: torch.Tensor, spec: ScaleSpec) -> torch.Tensor:
    """A 1-D view of every element a producer writes for ``scale``, padding included."""
    return scale.as_strided((spec.storage_numel,), (1,))


def _check_tensor(t: torch.Tensor, spec: ScaleSpec, argument: str, *, device: torch.device) -> None:
    what = f"{spec.layout.value} scales of an [M, K] tensor"
    if t.dtype != spec.dtype:
        raise ValueError(f"{argument} must have dtype {spec.dtype} for {what}; got {t.dtype}")
    if tuple(t.shape) != spec.shape:
        raise ValueError(f"{argument} must have shape {spec.shape} for {what}; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{argument} must be on {device}; got {t.device}")
    if spec.storage_numel == 0:
        return
    # Strides of size-1 dimensions never address anything (torch's own contiguity rule ignores them).
    if any(n > 1 and got != want for n, got, want in zip(spec.shape, t.stride(), spec.stride, strict=True)):
        raise ValueError(f"{argument} must have strides {spec.stride} for {what}; got {tuple(t.stride())}")
    have = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    if have < spec.storage_numel:
        raise ValueError(
            f"{argument} must own {spec.storage_numel} elements from its first one, padding included, for "
            f"{what}; its storage holds {have}"
        )
    # Packed layouts are written as whole 32-bit words.
    if spec.layout is not ScaleLayout.E8M0 and t.data_ptr() % 4:
        raise ValueError(
            f"{argument} must start on a 4-byte boundary for {what}; got address {t.data_ptr():#x}"
        )


def check_mxfp8_parts(
    q: object,
    scale: object,
    *,
    m: int,
    k: int,
    scale_layout: ScaleLayout | str,
    device: torch.device,
    names: tuple[str, str] = ("q", "scale"),
) -> ScaleSpec:
    """Validate the parts of an ``[m, k]`` MXFP8 tensor; ValueError naming the part (``names``) that is
    wrong. Returns the scales' ``ScaleSpec``.

    ``q`` must be a contiguous float8_e4m3fn ``[m, k]`` tensor and ``scale`` exactly ``scale_spec(...)``
    (dtype, shape, strides, storage large enough for its padding), both on ``device``.
    """
    for name, t in zip(names, (q, scale), strict=True):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
    spec = scale_spec(m, k, scale_layout=scale_layout)
    if q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{names[0]} must have dtype torch.float8_e4m3fn; got {q.dtype}")
    if tuple(q.shape) != (m, k):
        raise ValueError(f"{names[0]} must have shape {(m, k)}; got {tuple(q.shape)}")
    if q.device != device:
        raise ValueError(f"{names[0]} must be on {device}; got {q.device}")
    if q.numel() and not q.is_contiguous():
        raise ValueError(f"{names[0]} must be contiguous (strides {(k, 1)}); got {tuple(q.stride())}")
    _check_tensor(scale, spec, names[1], device=device)
    return spec


def check_mxfp8_pair(
    pair: object,
    *,
    m: int,
    k: int,
    scale_layout: ScaleLayout | str,
    device: torch.device,
    argument: str = "out",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a ``(q, scale)`` pair for an ``[m, k]`` tensor (``check_mxfp8_parts``, the parts named
    ``argument[0]`` and ``argument[1]``); returns it."""
    if not isinstance(pair, tuple | list) or len(pair) != 2:
        raise ValueError(f"{argument} must be a tuple (q, scale); got {type(pair).__name__}")
    q, scale = pair
    check_mxfp8_parts(
        q,
        scale,
        m=m,
        k=k,
        scale_layout=scale_layout,
        device=device,
        names=(f"{argument}[0]", f"{argument}[1]"),
    )
    return q, scale
