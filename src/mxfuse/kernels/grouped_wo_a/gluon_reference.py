"""The Gluon grouped wo_a's epilogue in torch: accumulator tiles to wo_b's MXFP8 pair, step by step as
``gluon_device._write_tile`` does it, so that the tiling, the per-(token, 32 columns) maxima, the
byte-wise scale stores and the padding rows can be checked on a CPU against ``quantize_mxfp8`` (the Gluon
kernel has no interpreter).
"""

from __future__ import annotations

import torch

from mxfuse.formats import MxTensor, ScaleRounding
from mxfuse.kernels.mxfp8 import LAYOUT_CODE

__all__ = ["pair_from_accumulator_tiles", "scale_byte_offsets"]


def scale_byte_offsets(
    t: torch.Tensor, grp: torch.Tensor, *, n_groups: int, rows_padded: int, layout: int
) -> torch.Tensor:
    """Byte offset of the scale of (token ``t``, k-group ``grp``) in a pair's scale storage
    (``decode.act_scale_offsets`` with the pair's padded rows and packed words)."""
    if layout == 0:
        return t * n_groups + grp
    if layout == 1:
        return (t + (grp // 4) * rows_padded) * 4 + grp % 4
    n_k4 = n_groups // 4
    return (t // 128) * (n_k4 * 512) + (grp // 4) * 512 + (t % 32) * 16 + ((t % 128) // 32) * 4 + grp % 4


def _scale_bytes(amax_bits: torch.Tensor, floor: bool) -> torch.Tensor:
    e = amax_bits >> 23
    if floor:
        s = (e - 8).clamp(0, 254)
    else:
        f = amax_bits & 0x7FFFFF
        s = torch.where(
            e == 0, (f > 224).to(torch.int32), (e - 8 + (f > 0x600000).to(torch.int32)).clamp(min=1)
        )
        s = s.clamp(max=254)
    return torch.where(amax_bits >= 0x7F800000, 255, s)


def _codes(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    inv = torch.where(s == 254, 0x00400000, (254 - s) << 23)
    inv = torch.where(s == 255, 0x7FC00000, inv).to(torch.int32).view(torch.float32)
    v = x * inv[..., None]
    v = torch.where(v.isnan(), v, v.clamp(-448.0, 448.0))  # saturating, as cvt.rn.satfinite
    return v.to(torch.float8_e4m3fn).view(torch.uint8)


def pair_from_accumulator_tiles(
    acc: torch.Tensor,
    pair: MxTensor,
    *,
    block_n: int,
    block_t: int,
) -> None:
    """Write ``pair`` (``[T, G*R]``, any layout, a rounding) from the fp32 accumulators ``acc``
    ``[T, G*R]``, one ``[block_n, block_t]`` tile (``acc`` transposed, as swap-AB holds it) at a time:
    rounded to bf16, tokens past T as 0, per-(token, 32 columns) maxima of the bits, scale bytes and
    E4M3 codes by the ``mxfp8`` rules, each scale byte stored at its offset, and the last token tile
    zeroing the swizzled layout's padding rows past its end."""
    t_count, gr = acc.shape
    nb = block_n // 32
    q = pair.data.view(torch.uint8)
    s_bytes = pair.scale_bytes()
    layout = LAYOUT_CODE[pair.scale_layout.value]
    floor = pair.rounding is ScaleRounding.FLOOR
    rows_padded = pair.rows_padded
    n_t_tiles = -(-t_count // block_t)
    for t0 in range(0, n_t_tiles * block_t, block_t):
        for col0 in range(0, gr, block_n):
            tile = torch.zeros(block_n, block_t, dtype=torch.float32)  # the kernel's acc[n, t]
            rows = slice(t0, min(t0 + block_t, t_count))
            tile[:, : rows.stop - t0] = acc[rows, col0 : col0 + block_n].t()
            tt = torch.arange(t0, t0 + block_t)
            half = tile.t().to(torch.bfloat16)
            half = torch.where((tt < t_count)[:, None], half, torch.zeros((), dtype=torch.bfloat16))
            bits = (half.view(torch.int16).to(torch.int32) & 0xFFFF) << 16  # [block_t, block_n]
            blocks = bits.view(block_t, nb, 32)
            s = _scale_bytes((blocks & 0x7FFFFFFF).amax(dim=2), floor)  # [block_t, nb]
            codes = _codes(blocks.view(torch.float32), s).view(block_t, block_n)
            ok = tt < t_count
            q[tt[ok], col0 : col0 + block_n] = codes[ok]
            grp = col0 // 32 + torch.arange(nb)
            offs = scale_byte_offsets(tt[:, None], grp[None, :], n_groups=gr // 32, rows_padded=rows_padded,
                                      layout=layout)  # fmt: skip
            keep = (tt < rows_padded)[:, None].expand_as(offs)
            s_bytes[offs[keep]] = s[keep].to(torch.uint8)
            if layout == 2 and t0 == (n_t_tiles - 1) * block_t:
                for c in range(-(-128 // block_t)):
                    ts = torch.arange(t0 + block_t + c * block_t, t0 + 2 * block_t + c * block_t)
                    pad = scale_byte_offsets(ts[:, None], grp[None, :], n_groups=gr // 32,
                                             rows_padded=rows_padded, layout=layout)  # fmt: skip
                    s_bytes[pad[(ts < rows_padded)[:, None].expand_as(pad)]] = 0
