"""The ``deepgemm`` backend: DeepGEMM's ``fp8_gemm_nt`` on packed UE8M0 scales, gran_k 32 (sm_100 / sm_103).

The call is ``deep_gemm.fp8_gemm_nt((a, sfa), (b, sfb), d, recipe=(1, 1, 32))``:

* ``a`` float8_e4m3fn ``[M, K]`` and ``b`` float8_e4m3fn ``[N, K]``, both K-major (the "nt" layout);
* ``sfa`` / ``sfb`` int32 ``[M, ceil(K/128)]`` / ``[N, ceil(K/128)]``: four UE8M0 bytes per word, byte j of
  word p the scale of k-group 4p+j, MN-major with strides ``(1, align(MN, 4))`` (this package's
  ``deepgemm`` scale layout);
* ``d`` bf16 ``[M, N]`` row-major, written in place;
* ``recipe=(1, 1, 32)``: one scale per row of ``a``, per row of ``b``, per 32 K.

Checked against DeepGEMM 2.8.0 (deepseek-ai/DeepGEMM@0274ad7b):
  * ``csrc/apis/gemm.hpp``: ``fp8_gemm_nt`` is ``fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None,
    recipe_b=None, compiled_dims="nk", disable_ue8m0_cast=False, alpha=None)``; arch 10 with int scales
    runs ``sm100_fp8_fp4_gemm_1d1d``; arch 9 needs float32 scales (the 128-granularity sm90 kernels) and
    any other pairing is "Unsupported architecture or scaling factor types". Hence sm_100 / sm_103 only:
    routing Hopper here fails at warm-up.
  * ``csrc/apis/layout.hpp``: int32 scales with gran_mn 1 and gran_k 32 on arch 10 are taken as they are,
    after ``check_sf_layout(..., tma_stride_check=True)``; ``disable_ue8m0_cast`` only matters for float32
    scales, so it is left at its default.
  * ``csrc/utils/layout.hpp`` (@057ca596): ``check_sf_layout`` wants ``sf.size(-1) == ceil(K / (32 * 4))``,
    ``sf.stride(-2) == 1`` and ``sf.stride(-1) >= align(MN, 4)``, a multiple of 4; ``check_major_type_cd``
    wants ``d.stride(-1) == 1``.
  * ``csrc/jit_kernels/impls/runtime_utils.hpp``: every TMA descriptor asserts a 16-byte aligned base
    address and a row pitch that is a multiple of 16 bytes, so N % 8 == 0 for the bf16 ``d``.
  * ``csrc/utils/math.hpp`` (@4e8c84c8): TMA alignment is 16 bytes, so ``align(MN, 16 / 4)`` for int32.
  * ``deep_gemm/utils/math.py`` (@38939a4c) ``pack_ue8m0_to_int``: the bytes of four consecutive scales viewed
    as one int32, i.e. little-endian k-group order.
"""

from __future__ import annotations

import torch

from mxfuse.formats import BLOCK_SIZE, MxTensor, ScaleLayout, pack_ue8m0_deepgemm
from mxfuse.gemm import backend as gemm_backend
from mxfuse.gemm.backend import Availability, check_operands_aligned, import_optional, require_optional, sm
from mxfuse.gemm.weights import MxWeight

__all__ = ["DEEPGEMM", "RECIPE", "SUPPORTED_CAPABILITIES"]

# DeepGEMM's MXFP8 1D1D kernel (packed UE8M0, gran_k 32) exists for arch 10 only (gemm.hpp dispatch).
SUPPORTED_CAPABILITIES = ((10, 0), (10, 3))
# (gran_mn of a, gran_mn of b, gran_k): per-row scales on both operands, one per 32 K.
RECIPE = (1, 1, BLOCK_SIZE)
# TMA: 16-byte base addresses and row pitches (runtime_utils.hpp make_tma_2d_desc).
_TMA_BYTES = 16
_OUT_N_MULTIPLE = _TMA_BYTES // 2  # bf16 d rows
_INSTALL = "build DeepGEMM >= 2 from source (its PyPI release, deep-gemm 1.0.0, predates this API)"


class _DeepGemmBackend:
    name = "deepgemm"
    activation_layouts = (ScaleLayout.DEEPGEMM,)

    def available(self, device: torch.device) -> Availability:
        capability = gemm_backend.cuda_capability(device)
        if capability is None:
            return Availability(False, f"needs a CUDA device of sm_100 or sm_103; got {device.type}")
        if capability not in SUPPORTED_CAPABILITIES:
            return Availability(
                False,
                f"DeepGEMM's MXFP8 path (packed UE8M0 scales, gran_k 32) runs on sm_100 and sm_103 only; "
                f"this device is {sm(capability)}",
            )
        module, why = import_optional("deep_gemm", "fp8_gemm_nt", install=_INSTALL)
        if module is None:
            return Availability(False, why)
        return Availability(True, f"deep_gemm.fp8_gemm_nt on {sm(capability)}")

    def supports_shape(self, n: int, k: int) -> Availability:
        if k <= 0 or k % BLOCK_SIZE:
            return Availability(False, f"K must be a positive multiple of {BLOCK_SIZE} (gran_k); got {k}")
        if n % _OUT_N_MULTIPLE:
            return Availability(
                False,
                f"N must be a multiple of {_OUT_N_MULTIPLE}: the bf16 output's rows are a TMA pitch, "
                f"{_TMA_BYTES}-byte aligned; got N = {n}",
            )
        return Availability(True, f"N % {_OUT_N_MULTIPLE} == 0 and K % {BLOCK_SIZE} == 0")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        # The weight is operand b: its scales are N-major, packed exactly like an activation's.
        return pack_ue8m0_deepgemm(scale_e8m0)

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None:
        why = "DeepGEMM reads it through a TMA descriptor"
        check_operands_aligned(a, w, out, alignment=_TMA_BYTES, why=why)
        module = require_optional("deep_gemm", "fp8_gemm_nt", install=_INSTALL, backend="deepgemm")
        module.fp8_gemm_nt((a.data, a.scale), (w.qweight, w.scale), out, recipe=RECIPE)


DEEPGEMM = _DeepGemmBackend()
