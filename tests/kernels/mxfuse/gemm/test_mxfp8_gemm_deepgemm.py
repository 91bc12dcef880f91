"""The deepgemm backend with the real DeepGEMM on Blackwell (sm_100 / sm_103), against float64 and torch.

The tests are ``vendor_gemm.VendorGemmTests``, written once for the vendor backends; this file runs them
on ``vendor_gemm.DEEPGEMM``. It imports ``deep_gemm`` at module top, so on a b200/gb300 runner without it
the file fails instead of skipping.
"""

from __future__ import annotations

import deep_gemm  # noqa: F401  (the library under test; a missing install must fail this file)
from vendor_gemm import DEEPGEMM, VendorGemmTests

from gpumatrix import register

register(on=("b200", "gb300"), gpus=1, est_time=60)


class TestDeepGemm(VendorGemmTests):
    case = DEEPGEMM
