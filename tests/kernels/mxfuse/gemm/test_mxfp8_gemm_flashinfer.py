"""The flashinfer backend with the real FlashInfer (sm_100 / sm_103 / sm_120), against float64 and torch.

The tests are ``vendor_gemm.VendorGemmTests``, written once for the vendor backends; this file runs them
on ``vendor_gemm.FLASHINFER``. It imports ``flashinfer`` at module top, so on a b200/gb300/5090 runner
without it the file fails instead of skipping.
"""

from __future__ import annotations

import flashinfer  # noqa: F401  (the library under test; a missing install must fail this file)
from vendor_gemm import FLASHINFER, VendorGemmTests

from gpumatrix import register

register(on=("b200", "gb300", "5090"), gpus=1, est_time=60)


class TestFlashInfer(VendorGemmTests):
    case = FLASHINFER
