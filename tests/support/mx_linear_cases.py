"""Weights and expected values for the MxLinear tests (CPU and GPU), built without the code under test.

A native MXFP8 checkpoint is made from random E4M3 codes and random E8M0 block scales, and its value is
computed here by plain arithmetic (code * 2**(scale - 127)), so a layer that misreads either shows up.
"""

from __future__ import annotations

import torch

from mxfuse.formats import ScaleLayout, dequantize_mxfp8
from mxfuse.gemm import Availability

SOURCES = ("bf16", "native_1x32", "native_32x32")


def bf16_weight(n: int, k: int, *, seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """Gaussian values whose 32-wide blocks sit at magnitudes 2**-8 .. 2**4, so block scales differ."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    blocks = -(-k // 32)
    magnitude = torch.exp2(torch.randint(-8, 5, (n, blocks), generator=g).float())
    w = torch.randn(n, k, generator=g) * magnitude.repeat_interleave(32, dim=1)[:, :k]
    return w.to(torch.bfloat16).to(device)


def native_weight(
    n: int, k: int, *, block_rows: int, seed: int, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn [n, k], uint8 scales per block_rows x 32 block): finite codes, scales 2**-4 .. 2**3."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    codes = torch.randint(0, 256, (n, k), generator=g, dtype=torch.int32)
    codes = torch.where((codes & 0x7F) == 0x7F, codes - 1, codes)  # 0x7F / 0xFF are E4M3 NaN
    q = codes.to(torch.uint8).view(torch.float8_e4m3fn)
    scale = torch.randint(123, 131, (-(-n // block_rows), k // 32), generator=g, dtype=torch.int32)
    return q.to(device), scale.to(torch.uint8).to(device)


def native_value(q: torch.Tensor, scale: torch.Tensor, *, block_rows: int) -> torch.Tensor:
    """float64 value of a native weight: each element's code times 2**(its block's scale - 127)."""
    n, k = q.shape
    per_row = scale.to(torch.float64).repeat_interleave(block_rows, dim=0)[:n]
    per_element = per_row.repeat_interleave(32, dim=1)
    return q.to(torch.float64) * torch.exp2(per_element - 127)


def load(layer, source: str, *, seed: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Load a ``source`` weight into ``layer``; returns its exact float64 value (before any quantization)."""
    n, k = layer.out_features, layer.in_features
    device = layer.device if layer.device is not None else "cpu"
    if source == "bf16":
        w = bf16_weight(n, k, seed=seed, device=device)
        layer.load_weights(w, bias=bias)
        return w.to(torch.float64)
    block_rows = {"native_1x32": 1, "native_32x32": 32}[source]
    q, s = native_weight(n, k, block_rows=block_rows, seed=seed, device=device)
    layer.load_weights(q, s, bias=bias)
    return native_value(q, s, block_rows=block_rows)


def activations(m: int, k: int, *, seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(m, k, generator=g) * 2.0).to(torch.bfloat16).to(device)


def data_ptrs(module: torch.nn.Module) -> dict[str, int]:
    """Every parameter's and buffer's data pointer, by name."""
    tensors = dict(module.named_parameters())
    tensors.update(dict(module.named_buffers()))
    return {name: t.data_ptr() for name, t in tensors.items()}


class PackedScalesBackend:
    """A CPU stand-in for a GPU GEMM backend, as a layer sees one (register it in ``mxfuse.gemm.BACKENDS``).

    Like the GPU backends it reads the weight scales in a layout of its own (int16 here: ``run`` refuses
    the E8M0 bytes), its shape rule reads N (N % 8, DeepGEMM's rule; its refusal has a "; " in it) and
    pairs for it are written in the deepgemm layout first. ``run`` computes what the torch backend does,
    from its own scales, so a layer wired to it must give the torch backend's answer bit for bit.
    """

    name = "packed"
    activation_layouts = (ScaleLayout.DEEPGEMM, ScaleLayout.E8M0)

    def available(self, device: torch.device) -> Availability:
        return Availability(True, "a CPU stand-in for a GPU backend")

    def supports_shape(self, n: int, k: int) -> Availability:
        if k <= 0 or k % 32:
            return Availability(False, f"K must be a positive multiple of 32; got K = {k}")
        if n % 8:
            return Availability(False, f"N must be a multiple of 8; got N = {n}")
        return Availability(True, "N % 8 == 0 and K % 32 == 0")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        return scale_e8m0.to(torch.int16)

    def run(self, a, w, out) -> None:
        if w.scale.dtype != torch.int16:
            raise ValueError(f"w.scale must be the packed backend's int16 scales; got {w.scale.dtype}")
        a = a.dequantize()
        b = dequantize_mxfp8(w.qweight, w.scale.to(torch.uint8), scale_layout=ScaleLayout.E8M0)
        out.copy_(torch.mm(a, b.t()))


PACKED = PackedScalesBackend()
