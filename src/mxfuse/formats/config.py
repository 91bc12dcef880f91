"""The two modes of MXFP8 quantization: how a block's scale is rounded and where scales are stored."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

__all__ = ["ScaleLayout", "ScaleRounding", "parse_scale_layout", "parse_scale_rounding"]


class ScaleRounding(str, Enum):
    """How the E8M0 scale byte ``s`` of a block with maximum magnitude ``amax`` is chosen.

    ``RCEIL`` (NVIDIA hardware rule, the default)::

        q = fp32(amax / 448)                      # one IEEE round-to-nearest-even division
        s = biased_exponent(q) + (mantissa(q) != 0)

      The scaled block maximum never exceeds 448, so no element saturates.

    ``FLOOR`` (OCP MX v1.0 rule)::

        s = floor(log2(amax)) - 8 + 127           # exponent read exactly, never a float log2

      The scaled block maximum lies in [256, 512): values above 448 saturate to 448.

    Both clamp ``s`` to [0, 254]; ``amax == 0`` gives ``s = 0``; a block holding NaN or +-Inf gets ``0xFF``.
    """

    RCEIL = "rceil"
    FLOOR = "floor"


class ScaleLayout(str, Enum):
    """Where the scale bytes of an ``[M, K]`` MXFP8 tensor live (G = K / 32 groups per row).

    ``E8M0``: uint8 ``[M, G]``, row-major.

    ``DEEPGEMM``: int32 ``[M, ceil(G / 4)]`` with strides ``(1, align(M, 4))`` (MN-major, TMA-aligned);
    byte ``j`` (little-endian) of word ``p`` is the scale of group ``4p + j``; padding rows and slots are 0.

    ``SWIZZLED_128X4`` (FlashInfer / cuBLAS block-scaled): 1-D uint8 of ``align(M, 128) * align(G, 4)``
    bytes; the scale of ``(m, g)`` is at ``(m // 128) * (nK4 * 512) + (g // 4) * 512 + (m % 32) * 16
    + ((m % 128) // 32) * 4 + g % 4`` with ``nK4 = align(G, 4) / 4``; padding is 0.
    """

    E8M0 = "e8m0"
    DEEPGEMM = "deepgemm"
    SWIZZLED_128X4 = "swizzled_128x4"


_E = TypeVar("_E", bound=Enum)


def _parse_choice(enum: type[_E], value: _E | str, argument: str) -> _E:
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in enum)
        raise ValueError(f"{argument} must be one of {choices}; got {value!r}") from None


def parse_scale_rounding(value: ScaleRounding | str, *, argument: str = "rounding") -> ScaleRounding:
    """Return ``value`` as a ``ScaleRounding``; ValueError naming ``argument`` if it is none of them."""
    return _parse_choice(ScaleRounding, value, argument)


def parse_scale_layout(value: ScaleLayout | str, *, argument: str = "scale_layout") -> ScaleLayout:
    """Return ``value`` as a ``ScaleLayout``; ValueError naming ``argument`` if it is none of them."""
    return _parse_choice(ScaleLayout, value, argument)
