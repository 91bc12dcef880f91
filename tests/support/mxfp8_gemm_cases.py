"""Inputs, oracles and the closeness rule shared by the MXFP8 GEMM tests (CPU, GPU and real-library files).

Inputs are built from explicit E4M3 codes and E8M0 scale bytes, so a test can put any byte where it wants
one (NaN scales, zero blocks, extreme exponents). Two oracles, neither using ``mxfuse``'s dequantizer:

* ``reference_numpy``: float64 numpy, E4M3 decoded by ml_dtypes, scales as ``2.0 ** (s - 127)``. Exact up
  to one float64 rounding per product and sum, so it is the ground truth on CPU.
* ``reference_f64``: the same formulation in float64 torch on the tensors' own device (a GPU computes
  the large shapes in milliseconds); the E4M3 decode is torch's own cast.

The closeness rule (``assert_gemm_close``) is the one stated in the test files: a bf16 result of an fp32
accumulation is the exact value rounded once (half a bf16 step, ``rtol = 2**-8``, against float64) or,
between two such results, at most one bf16 step apart (``rtol = 2**-7``), plus an absolute slack for the
fp32 summation order, ``atol = 2**-10`` of the root mean square of the expected values *of the same
row*. A wrong scale on a single 32-block of K = 2048 moves that row's outputs by ~``rms / 8``: 128 times
the slack, wherever the row sits and however small its values are next to other rows'.

Against float64, ``assert_gemm_matches_float64`` adds a check local to each element: ``|out - exact| <=
2**-8 |exact| + K * 2**-24 * sum_k |a_k w_k|``, the bf16 rounding plus the worst fp32 summation error
of any order (K - 1 roundings of at most 2**-24 of the running magnitude). An output made of small
products (a column of subnormal weight codes, a tiny token) is held to its own size, not to its row's.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from gpumatrix.compare import assert_close
from mxfuse.formats import BLOCK_SIZE, ScaleLayout, scale_to_layout

__all__ = [
    "ATOL_OF_RMS",
    "RTOL_VS_BF16",
    "RTOL_VS_EXACT",
    "activation_pair",
    "assert_gemm_close",
    "assert_gemm_matches_float64",
    "e4m3_codes",
    "gluon_operand_columns",
    "random_codes",
    "random_scales",
    "reference_f64",
    "reference_numpy",
]

RTOL_VS_EXACT = 2.0**-8  # one rounding to bf16 (8 significant bits): half a step
RTOL_VS_BF16 = 2.0**-7  # two correctly rounded bf16 values of nearly the same number: one step
ATOL_OF_RMS = 2.0**-10  # fp32 accumulation-order slack, relative to the output's root mean square


def e4m3_codes(values: torch.Tensor) -> torch.Tensor:
    """float32 values that E4M3 represents exactly -> float8_e4m3fn codes."""
    return values.to(torch.float32).to(torch.float8_e4m3fn)


def random_codes(m: int, k: int, *, seed: int, device: torch.device | str = "cpu", limit: float = 448.0):
    """float8_e4m3fn ``[m, k]`` on ``device``: normal values clamped to +-``limit`` (+-448 and subnormals occur)."""
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, k, generator=g, device=device) * (limit / 3)
    return e4m3_codes(x.clamp(-limit, limit))


def random_scales(
    m: int, k: int, *, seed: int, low: int = 117, high: int = 137, device="cpu"
) -> torch.Tensor:
    """uint8 E8M0 bytes ``[m, k/32]`` on ``device``, drawn from ``[low, high)``."""
    g = torch.Generator(device=device).manual_seed(seed)
    shape = (m, k // BLOCK_SIZE)
    return torch.randint(low, high, shape, generator=g, device=device, dtype=torch.int32).to(torch.uint8)


def activation_pair(
    q: torch.Tensor, scale_e8m0: torch.Tensor, layout: ScaleLayout | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)`` with the E8M0 bytes laid out as ``layout`` (padding zeroed)."""
    return q.contiguous(), scale_to_layout(scale_e8m0.contiguous(), scale_layout=layout)


def _scale_factors_np(scale_e8m0: torch.Tensor) -> np.ndarray:
    s = scale_e8m0.cpu().numpy().astype(np.float64)
    factors = np.exp2(s - 127.0)
    factors[s == 255] = np.nan
    return np.repeat(factors, BLOCK_SIZE, axis=1)


def reference_numpy(
    a_q: torch.Tensor, a_scale_e8m0: torch.Tensor, w_q: torch.Tensor, w_scale_e8m0: torch.Tensor
) -> np.ndarray:
    """float64 ``[M, N]``: ``(a * 2**(sa - 127)) @ (w * 2**(sw - 127)).T``, decoded with ml_dtypes."""
    a = a_q.view(torch.uint8).cpu().numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    w = w_q.view(torch.uint8).cpu().numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return (a * _scale_factors_np(a_scale_e8m0)) @ (w * _scale_factors_np(w_scale_e8m0)).T


def _scale_factors_torch(scale_e8m0: torch.Tensor) -> torch.Tensor:
    s = scale_e8m0.to(torch.float64)
    factors = torch.where(s == 255, torch.nan, torch.exp2(s - 127.0))
    return factors.repeat_interleave(BLOCK_SIZE, dim=1)


def reference_f64(
    a_q: torch.Tensor, a_scale_e8m0: torch.Tensor, w_q: torch.Tensor, w_scale_e8m0: torch.Tensor
) -> torch.Tensor:
    """float64 ``[M, N]`` on the inputs' device, the same formulation as ``reference_numpy``."""
    a = a_q.to(torch.float64) * _scale_factors_torch(a_scale_e8m0)
    w = w_q.to(torch.float64) * _scale_factors_torch(w_scale_e8m0)
    return a @ w.t()


def assert_gemm_close(actual: torch.Tensor, expected, *, name: str, equal_nan: bool = False) -> None:
    """The closeness rule of the module docstring, row by row; ``expected`` float64 (an oracle) or bf16
    (a backend)."""
    exact = not (isinstance(expected, torch.Tensor) and expected.dtype == torch.bfloat16)
    assert_close(
        actual,
        expected,
        rtol=RTOL_VS_EXACT if exact else RTOL_VS_BF16,
        atol_of_row_rms=ATOL_OF_RMS,
        equal_nan=equal_nan,
        name=name,
    )


def _dequantized_f64(q: torch.Tensor, scale_e8m0: torch.Tensor) -> torch.Tensor:
    return q.to(torch.float64) * _scale_factors_torch(scale_e8m0)


def assert_gemm_matches_float64(
    actual: torch.Tensor,
    a_q: torch.Tensor,
    a_scale_e8m0: torch.Tensor,
    w_q: torch.Tensor,
    w_scale_e8m0: torch.Tensor,
    *,
    name: str,
    equal_nan: bool = False,
    rtol: float = RTOL_VS_EXACT,
) -> None:
    """``actual`` against the float64 product: row by row (``assert_gemm_close``) and element by element
    (the module docstring's bound); an output whose products are all zero must be zero. ``rtol`` is one
    bf16 rounding; the Triton interpreter truncates to bf16 instead, a whole step (``RTOL_VS_BF16``)."""
    a = _dequantized_f64(a_q, a_scale_e8m0)
    w = _dequantized_f64(w_q, w_scale_e8m0)
    exact = a @ w.t()
    assert_close(
        actual, exact, rtol=rtol, atol_of_row_rms=ATOL_OF_RMS, equal_nan=equal_nan, name=f"{name} (row-local)"
    )
    magnitude = a.abs() @ w.abs().t()
    # |out - exact| <= 2**-8 |exact| + c * magnitude, as |out/d - exact/d| <= 2**-8 |exact/d| + c with
    # d = magnitude; where the magnitude is 0, d = 2**-1000 leaves no room for anything but 0.
    d = torch.where(magnitude > 0, magnitude, 2.0**-1000)
    bound = a_q.shape[1] * 2.0**-24
    assert_close(
        actual.to(torch.float64) / d,
        exact / d,
        rtol=rtol,
        atol=bound,
        equal_nan=equal_nan,
        name=f"{name} (element-local, in units of sum |products|)",
    )


def gluon_operand_columns(k: int) -> torch.Tensor:
    """Where each physical column of the activation lands in the bf16 row the decode kernel reads: the
    kernel's relabelling of a step (``OPERAND_ORDER``: a reshape of the step's 128 columns to
    [4, 32], then to 7 bits, most significant first, permuted) applied to the column numbers themselves."""
    from mxfuse.kernels.gemm.gluon_mainloop import OPERAND_ORDER

    order = [d - 1 for d in OPERAND_ORDER.value[1:]]  # without the row dimension
    step = torch.arange(128).reshape(4, 32).reshape([2] * 7).permute(order).reshape(128)
    where = torch.empty(128, dtype=torch.long)
    where[step] = torch.arange(128)  # operand column l holds physical column step[l]
    steps = -(-k // 128)
    return (torch.arange(steps)[:, None] * 128 + where[None, :]).reshape(-1)[:k]
