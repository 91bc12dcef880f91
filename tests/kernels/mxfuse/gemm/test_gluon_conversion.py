"""The Gluon mainloop's weight conversion (``gluon_mainloop._CVT_ASM``) as the GPU executes it: every E4M3
code at every scale byte of the window, and 0xFF, against ``bf16(e4m3 * 2**(s - 127))`` bit for bit.

The same instruction text runs here through a Triton kernel (``tl.inline_asm_elementwise``, four bytes per
instance, as the Gluon mainloop calls it), so a wrong byte order, sign placement, rounding or flush of the
bf16 intermediates shows by code and byte, apart from the GEMM around it. The CPU test
``tests/unit/mxfuse/gemm/test_mxfp8_gluon.py`` checks the arithmetic the instructions are meant to do.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from gpumatrix import register
from gpumatrix.compare import assert_same_bits
from mxfuse.kernels.gemm import gluon_launch
from mxfuse.kernels.gemm.gluon_mainloop import _CVT_ASM

register(on=("h100",), gpus=1, est_time=5)

CVT = tl.constexpr(_CVT_ASM.value)


@triton.jit
def _convert_kernel(codes_ptr, factor_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    codes = tl.load(codes_ptr + offs)
    factor = tl.load(factor_ptr + offs)
    out = tl.inline_asm_elementwise(
        CVT, "=r,=r,r,r,r", [codes, factor], dtype=tl.bfloat16, is_pure=True, pack=4
    )
    tl.store(out_ptr + offs, out)


def _require_sm90() -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(
            f"the conversion's mul.rn.bf16x2 is emitted for sm_90a; this GPU is {torch.cuda.get_device_name()}"
        )


def test_every_code_at_every_window_byte_converts_exactly():
    _require_sm90()
    bytes_ = torch.tensor([*range(gluon_launch.W_LO, gluon_launch.W_HI + 1), 255], dtype=torch.int64)
    codes = torch.arange(256, dtype=torch.int64).repeat(len(bytes_)).to(torch.uint8)
    scale = bytes_.repeat_interleave(256)
    # Each group of four codes shares one factor (a 32-group shares its byte in the kernel).
    factor_bits = torch.where(scale == 255, 0x7FC0, scale << 7).to(torch.int16)
    out = torch.full((codes.numel(),), float("nan"), dtype=torch.bfloat16, device="cuda")
    block = 256  # one scale byte per program: the grid covers every code
    _convert_kernel[(codes.numel() // block,)](
        codes.cuda().view(torch.float8_e4m3fn), factor_bits.cuda().view(torch.bfloat16), out, BLOCK=block
    )
    got = out.cpu()
    e4m3 = codes.view(torch.float8_e4m3fn).to(torch.float64)
    # Byte 0xFF: every code NaN (the kernel's NaN factor). E4M3 NaN codes at other bytes are not the
    # conversion's to handle (a prepared weight carries byte 0xFF on their blocks): left out.
    assert torch.isnan(got[scale == 255]).all(), "byte 0xFF: NaN for every code"
    for byte in bytes_[:-1].tolist():
        rows = (scale == byte) & ~torch.isnan(e4m3)
        want = (e4m3[rows] * 2.0 ** (byte - 127)).to(torch.bfloat16)
        assert_same_bits(got[rows].view(torch.int16), want.view(torch.int16), name=f"scale byte {byte}")
