"""The boundary's output contracts as assertions, shared by the interpreter (CPU) and GPU kernel tests.

Metrics and tolerances (docs/hc.md, "What the kernels promise"):
  * R': bit for bit the reference's (the kernels run the reference's fp32 order without FMA contraction;
    the interpreter and both GPU rounding paths alike);
  * pre, post', comb': ``assert_close`` with the float32 defaults (rtol 1.3e-6, atol 1e-5), and every
    column of comb' sums to 1 within 1e-5 (it ends on a column normalisation);
  * y: a bound, token by token: ``assert_close`` with rtol 1.6e-2 (four bf16 steps: a collapse weight off
    in its last fp32 bit moves v, hence y, by a step) and an atol of 1e-5 times the rms of the token's
    reference y (a normalised token's rms is about 1, so 1e-5 as before; a tiny token is held to its own
    size and a zero token to exactly 0), and each token's ``calc_diff`` <= 1e-6;
  * the MXFP8 pair: bit for bit ``quantize_mxfp8`` of the y the kernel wrote (of the reference's y when
    it wrote none), over the whole scale storage, padding included.
"""

from __future__ import annotations

import torch

from gpumatrix.compare import assert_close, assert_diff, assert_same_bits
from mxfuse.formats import MxTensor
from mxfuse.hc import HcBoundaryOutputs
from mxfuse.kernels import quantize_mxfp8

__all__ = ["assert_boundary_matches", "assert_pair_is_quantized_y", "poison_outputs", "written_buffers"]


def written_buffers(out: HcBoundaryOutputs, layout: str) -> list[torch.Tensor]:
    """Byte views of everything a boundary writes into ``out``, scale padding included."""
    tokens, _, hidden = out.residual.shape
    buffers = [out.residual, out.pre, out.post, out.comb]
    if out.y is not None:
        buffers.append(out.y)
    if out.pair is not None:
        assert out.pair.scale_layout.value == layout and out.pair.shape == (tokens, hidden)
        buffers += [out.pair.data, out.pair.scale_storage()]
    return [b.view(torch.uint8) for b in buffers]


def poison_outputs(out: HcBoundaryOutputs, layout: str, byte: int = 0xA5) -> HcBoundaryOutputs:
    for b in written_buffers(out, layout):
        b.fill_(byte)
    return out


def assert_pair_is_quantized_y(
    pair: MxTensor, y: torch.Tensor, *, layout: str, rounding: str = "rceil"
) -> None:
    """``pair`` is the MxTensor ``quantize_mxfp8(y)`` writes, every byte, and says so."""
    assert isinstance(pair, MxTensor), type(pair)
    assert (pair.scale_layout.value, pair.rounding.value) == (layout, rounding), pair
    want = quantize_mxfp8(y, rounding=rounding, scale_layout=layout)
    assert_same_bits(pair.data.view(torch.uint8), want.data.view(torch.uint8), name="pair elements")
    assert_same_bits(pair.scale_bytes(), want.scale_bytes(), name="pair scales (padding included)")


def assert_boundary_matches(
    got: HcBoundaryOutputs,
    ref: HcBoundaryOutputs,
    *,
    layout: str,
    rounding: str = "rceil",
) -> None:
    """``got`` (a kernel's outputs) against ``ref`` (the reference's) under the contracts above."""
    assert_same_bits(got.residual, ref.residual, name="R'")
    assert_close(got.pre, ref.pre, name="pre")
    assert_close(got.post, ref.post, name="post'")
    assert_close(got.comb, ref.comb, name="comb'")
    tokens = got.comb.shape[0]
    if tokens:
        ones = torch.ones(tokens, 4, device=got.comb.device)
        assert_close(got.comb.sum(-2), ones, rtol=0.0, atol=1e-5, name="comb' column sums")
    if got.y is not None:
        assert_close(got.y, ref.y, rtol=1.6e-2, atol_of_row_rms=1e-5, name="y")
        assert_diff(got.y, ref.y, max_diff=1e-6, per_row=True, name="y")
    if got.pair is not None:
        y = got.y if got.y is not None else ref.y
        assert_pair_is_quantized_y(got.pair, y, layout=layout, rounding=rounding)
