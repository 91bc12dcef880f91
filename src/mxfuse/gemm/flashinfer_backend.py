"""The ``flashinfer`` backend: FlashInfer's ``mm_mxfp8`` on 128x4-swizzled scales (sm_100+, sm_120).

The call is ``flashinfer.mm_mxfp8(a, b, a_descale, b_descale, out=d, out_dtype=torch.bfloat16,
use_8x4_sf_layout=False, backend="cutlass")``:

* ``a`` float8_e4m3fn ``[M, K]`` row-major; ``b`` float8_e4m3fn ``[K, N]`` column-major, i.e. the ``[N, K]``
  weight transposed as a view (``w.qweight.t()``);
* ``a_descale`` / ``b_descale``: 1-D uint8 in the 128x4 swizzled layout (this package's ``swizzled_128x4``),
  ``align(M, 128) * align(K/32, 4)`` and ``align(N, 128) * align(K/32, 4)`` bytes;
* ``out`` bf16 ``[M, N]``, written in place.

Checked against flashinfer-ai/flashinfer@00054844 ``flashinfer/gemm/gemm_base.py`` and
https://docs.flashinfer.ai/generated/flashinfer.gemm.mm_mxfp8.html:
  * ``_check_mm_mxfp8_problem_size``: 2-D operands, ``a.shape[1] == b.shape[0]``, N >= 128 and K >= 128
    ("the output may contain NaN/Inf if the dimensions are too small"), float8_e4m3fn operands, uint8
    scales of exactly the swizzled lengths above, ``out`` of shape ``(M, N)``, ``out_dtype``, on a's device.
  * ``_cutlass_gemm_mxfp8_requirement``: compute capability 100, 103, 107, 110, 120 or 121; 1-D 128x4 scales
    only (``use_8x4_sf_layout=False``); on sm_12x also K % 32 == 0 and N % 32 == 0.
  * ``mm_mxfp8`` docstring: ``out``, when given, is written by the CUTLASS and cuDNN backends; ``auto``
    picks CUTLASS when it qualifies. The CUTLASS backend is named here so the choice does not move.
  * ``include/flashinfer/gemm/mxfp8_gemm_template_sm100.h`` (@d432cbef): ``AlignmentA/B`` = 16 fp8 elements
    and ``AlignmentC`` = 8 bf16 elements (128-bit accesses), so K % 16, N % 8 and 16-byte base addresses.
"""

from __future__ import annotations

import torch

from mxfuse.formats import BLOCK_SIZE, MxTensor, ScaleLayout, swizzle_128x4
from mxfuse.gemm import backend as gemm_backend
from mxfuse.gemm.backend import Availability, check_operands_aligned, import_optional, require_optional, sm
from mxfuse.gemm.weights import MxWeight

__all__ = ["FLASHINFER", "MIN_N_K", "SUPPORTED_CAPABILITIES"]

# The capabilities of _cutlass_gemm_mxfp8_requirement's @supported_compute_capability.
SUPPORTED_CAPABILITIES = ((10, 0), (10, 3), (10, 7), (11, 0), (12, 0), (12, 1))
# _check_mm_mxfp8_problem_size: smaller N or K may leave NaN/Inf in the output.
MIN_N_K = 128
# sm_12x CUTLASS needs N % 32 (sm_100's AlignmentC needs N % 8). supports_shape has no device, so it
# states the rule that holds on every supported device.
_N_MULTIPLE = 32
_ALIGN_BYTES = 16  # 128-bit global accesses (AlignmentA/B/C)
_INSTALL = "pip install 'mxfuse[blackwell]' (flashinfer-python)"


class _FlashInferBackend:
    name = "flashinfer"
    activation_layouts = (ScaleLayout.SWIZZLED_128X4,)

    def available(self, device: torch.device) -> Availability:
        capability = gemm_backend.cuda_capability(device)
        if capability is None:
            return Availability(False, f"needs a CUDA device of sm_100+ or sm_120; got {device.type}")
        if capability not in SUPPORTED_CAPABILITIES:
            supported = ", ".join(sm(c) for c in SUPPORTED_CAPABILITIES)
            return Availability(
                False, f"FlashInfer's CUTLASS MXFP8 GEMM runs on {supported}; this device is {sm(capability)}"
            )
        module, why = import_optional("flashinfer", "mm_mxfp8", install=_INSTALL)
        if module is None:
            return Availability(False, why)
        return Availability(True, f"flashinfer.mm_mxfp8 (CUTLASS) on {sm(capability)}")

    def supports_shape(self, n: int, k: int) -> Availability:
        if k < MIN_N_K or k % BLOCK_SIZE:
            return Availability(
                False, f"K must be a multiple of {BLOCK_SIZE} and at least {MIN_N_K}; got K = {k}"
            )
        if n < MIN_N_K or n % _N_MULTIPLE:
            return Availability(
                False,
                f"N must be a multiple of {_N_MULTIPLE} (CUTLASS MXFP8 on sm_12x; sm_100 needs 8) and at "
                f"least {MIN_N_K}; got N = {n}",
            )
        return Availability(True, f"N, K >= {MIN_N_K}, N % {_N_MULTIPLE} == 0, K % {BLOCK_SIZE} == 0")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        return swizzle_128x4(scale_e8m0)

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None:
        why = "the CUTLASS kernel makes 128-bit accesses"
        check_operands_aligned(a, w, out, alignment=_ALIGN_BYTES, why=why)
        module = require_optional("flashinfer", "mm_mxfp8", install=_INSTALL, backend="flashinfer")
        module.mm_mxfp8(
            a.data,
            w.qweight.t(),
            a.scale,
            w.scale,
            out=out,
            out_dtype=torch.bfloat16,
            use_8x4_sf_layout=False,
            backend="cutlass",
        )


FLASHINFER = _FlashInferBackend()
