"""Stand-ins for ``deep_gemm`` and ``flashinfer`` that enforce their documented call contracts on CPU.

Each fake checks every argument's dtype, shape, strides, layout and alignment as the library states it
(the source of each rule is cited beside the check), records the call, and then computes the product
itself, in float64, from the operands exactly as the library would read them: its own decoding of the
packed/swizzled scale bytes, not ``mxfuse``'s. So an adapter that passes the wrong tensor, the wrong
layout or a transposed operand fails a contract check or produces a wrong result, and a test that goes
through ``mxfp8_gemm`` checks the whole path end to end.

Sources:
  DG  = deepseek-ai/DeepGEMM@0274ad7b911b99b4eb6f8d796403811cf1e18f3d (DeepGEMM 2.8.0)
  DGL = deepseek-ai/DeepGEMM@057ca5964aae0879ff2e0eb71ee05a3cb0ba3df7:csrc/utils/layout.hpp
  DGM = deepseek-ai/DeepGEMM@4e8c84c88647043f3b6e40428635129451084593:csrc/utils/math.hpp
  DGP = deepseek-ai/DeepGEMM@38939a4c494ce6e904b54da94a1183955a5e9497:deep_gemm/utils/math.py
  FI  = flashinfer-ai/flashinfer@00054844ae1cc5a27a59b714c53a6a6a4b98daf0:flashinfer/gemm/gemm_base.py
  FIT = flashinfer-ai/flashinfer@d432cbef0221dfd3c36a97dedf3094272793c3c8:
        include/flashinfer/gemm/mxfp8_gemm_template_sm100.h
  FID = https://docs.flashinfer.ai/generated/flashinfer.gemm.mm_mxfp8.html
  CUB = https://docs.nvidia.com/cuda/cublas/#d-block-scaling-factors-layout (the 128x4 tile FlashInfer reads)
"""

from __future__ import annotations

import types
from typing import Any

import torch

__all__ = ["ContractError", "FakeDeepGemm", "FakeFlashInfer"]

_TMA_BYTES = 16  # DGM get_tma_aligned_size: kNumTMAAlignmentBytes = 16


class ContractError(AssertionError):
    """An argument the real library would reject (or misread)."""


def _require(condition: bool, rule: str) -> None:
    if not condition:
        raise ContractError(rule)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _align(a: int, b: int) -> int:
    return _ceil_div(a, b) * b


def _e8m0_factor(byte: torch.Tensor) -> torch.Tensor:
    s = byte.to(torch.float64)
    return torch.where(s == 255, torch.nan, torch.exp2(s - 127.0))


def _dequant(q: torch.Tensor, bytes_mk: torch.Tensor) -> torch.Tensor:
    """float64 ``q * 2**(s - 127)`` with ``bytes_mk`` one E8M0 byte per element."""
    return q.to(torch.float64) * _e8m0_factor(bytes_mk)


class FakeDeepGemm(types.ModuleType):
    """``deep_gemm`` with ``fp8_gemm_nt`` (the DeepGEMM 2.x alias of ``fp8_fp4_gemm_nt``)."""

    def __init__(self, *, arch_major: int = 10) -> None:
        super().__init__("deep_gemm")
        self.__version__ = "2.8.0"
        self.arch_major = arch_major  # what the real library reads from the current device (jit->device)
        self.calls: list[dict[str, Any]] = []

    # DG csrc/apis/gemm.hpp register_apis: py::arg("a"), ("b"), ("d"), c=None, recipe=None, recipe_a=None,
    # recipe_b=None, compiled_dims="nk", disable_ue8m0_cast=False, alpha=None
    def fp8_gemm_nt(
        self,
        a,
        b,
        d,
        c=None,
        recipe=None,
        recipe_a=None,
        recipe_b=None,
        compiled_dims="nk",
        disable_ue8m0_cast=False,
        alpha=None,
    ) -> None:
        # pybind converts a Python pair to std::pair<Tensor, Tensor> (DG gemm.hpp fp8_fp4_gemm_nt signature)
        _require(isinstance(a, tuple | list) and len(a) == 2, "a must be a pair (tensor, scale factors)")
        _require(isinstance(b, tuple | list) and len(b) == 2, "b must be a pair (tensor, scale factors)")
        (a_q, sfa), (b_q, sfb) = a, b
        self.calls.append(
            {
                "a": a,
                "b": b,
                "d": d,
                "c": c,
                "recipe": recipe,
                "recipe_a": recipe_a,
                "recipe_b": recipe_b,
                "disable_ue8m0_cast": disable_ue8m0_cast,
                "alpha": alpha,
            }
        )
        for name, t in (("a", a_q), ("b", b_q)):
            # DG csrc/utils/layout.hpp check_ab_fp8_fp4 / get_shape<2>: 2-D, float8_e4m3fn (FP4 is packed int8)
            _require(t.dim() == 2 and t.dtype == torch.float8_e4m3fn, f"{name} must be 2-D float8_e4m3fn")
            # DGL get_major_type_ab: stride(-1) == 1 is K-major; "Shape must be `[M, K] @ [N, K].T`" (gemm.hpp)
            _require(t.stride(-1) == 1, f"{name} must be K-major (stride(-1) == 1) for the nt layout")
            # DG runtime_utils.hpp make_tma_2d_desc: 16-byte base, outer stride bytes % 16 == 0
            _require(t.data_ptr() % _TMA_BYTES == 0, f"{name} must start 16-byte aligned (TMA)")
            _require(
                t.stride(0) * t.element_size() % _TMA_BYTES == 0, f"{name} row pitch must be 16-byte aligned"
            )
        m, k = a_q.shape
        n, k_b = b_q.shape
        # DGL check_major_type_cd: C/D must be N-major (stride(-1) == 1); gemm.hpp: bf16 or fp32 d
        _require(d.dim() == 2 and d.stride(-1) == 1, "d must be 2-D with stride(-1) == 1 (N-major)")
        _require(d.dtype in (torch.bfloat16, torch.float32), "d must be bfloat16 or float32")
        # gemm.hpp: DG_HOST_ASSERT(m == m_ and n == n_ and k == k_)
        _require(k == k_b and tuple(d.shape) == (m, n), "shapes must be [M, K] @ [N, K].T -> [M, N]")
        _require(d.data_ptr() % _TMA_BYTES == 0, "d must start 16-byte aligned (TMA)")
        _require(
            d.stride(0) * d.element_size() % _TMA_BYTES == 0, "d row pitch must be 16-byte aligned (TMA)"
        )
        _require(c is None and alpha is None, "this call does not accumulate or scale")
        # layout.hpp transform_sf_pair_into_required_layout: no recipe at all -> get_default_recipe, which on
        # arch 10 with int32 sfb is (1, 1, 128) (DGL); then either recipe or the recipe_a + recipe_b pair
        if recipe is None and recipe_a is None:
            recipe = (1, 1, 128)
        _require((recipe_a is None) == (recipe_b is None), "recipe_a and recipe_b go together")
        _require((recipe is None) != (recipe_a is None), "give recipe or recipe_a/recipe_b, not both")
        gran_m, gran_n, gran_k = recipe
        # layout.hpp: (INT, 1, gran_k) on SM100/SM120 is taken as is; gran_k 32 or 128
        _require(sfa.dtype == torch.int32 and sfb.dtype == torch.int32, "packed UE8M0 scales are int32")
        _require(gran_m == 1 and gran_n == 1 and gran_k in (32, 128), f"unsupported recipe {recipe}")
        if self.arch_major != 10:
            # gemm.hpp: arch 9 needs float32 scales; "Unsupported architecture or scaling factor types"
            raise RuntimeError("Unsupported architecture or scaling factor types")
        for name, sf, mn in (("sfa", sfa, m), ("sfb", sfb, n)):
            # DGL check_sf_layout: dim 2, size(-2) == ceil(mn / gran_mn), size(-1) == ceil(k / (gran_k * 4))
            _require(sf.dim() == 2, f"{name} must be 2-D")
            _require(tuple(sf.shape) == (mn, _ceil_div(k, gran_k * 4)), f"{name} shape {tuple(sf.shape)}")
            # DGL check_sf_layout(tma_stride_check): MN-major, stride(-1) >= tma-aligned mn and % 4 == 0
            _require(sf.stride(-2) == 1 or mn == 1, f"{name} must be MN-major (stride(-2) == 1)")
            _require(sf.stride(-1) >= _align(mn, _TMA_BYTES // 4), f"{name} stride(-1) below align(mn, 4)")
            _require(sf.stride(-1) % 4 == 0, f"{name} stride(-1) must be a multiple of 4")
            _require(sf.data_ptr() % _TMA_BYTES == 0, f"{name} must start 16-byte aligned (TMA)")
        if m == 0 or n == 0:  # gemm.hpp early_return
            return

        # DGP pack_ue8m0_to_int: four scale bytes viewed as one int32 (little-endian), k-group 4p + j in byte j
        def scale_bytes(sf: torch.Tensor, mn: int) -> torch.Tensor:
            words = sf.to(torch.int64) & 0xFFFFFFFF
            per_group = torch.stack([(words >> (8 * j)) & 0xFF for j in range(4)], dim=-1).reshape(mn, -1)
            return per_group[:, : k // gran_k].repeat_interleave(gran_k, dim=1)

        product = _dequant(a_q, scale_bytes(sfa, m)) @ _dequant(b_q, scale_bytes(sfb, n)).t()
        d.copy_(product.to(d.dtype))


class FakeFlashInfer(types.ModuleType):
    """``flashinfer`` with ``mm_mxfp8``."""

    # FI _cutlass_gemm_mxfp8_requirement: @supported_compute_capability([100, 103, 107, 110, 120, 121])
    CUTLASS_CAPABILITIES = (100, 103, 107, 110, 120, 121)

    def __init__(self, *, capability: int = 100) -> None:
        super().__init__("flashinfer")
        self.__version__ = "0.7.2"
        self.capability = capability  # what the real library reads from a's device
        self.calls: list[dict[str, Any]] = []

    # FI mm_mxfp8(a, b, a_descale, b_descale, out=None, out_dtype=torch.bfloat16, use_8x4_sf_layout=False,
    #             backend="auto") -> out
    def mm_mxfp8(
        self,
        a,
        b,
        a_descale,
        b_descale,
        out=None,
        out_dtype=torch.bfloat16,
        use_8x4_sf_layout=False,
        backend="auto",
    ):
        self.calls.append(
            {
                "a": a,
                "b": b,
                "a_descale": a_descale,
                "b_descale": b_descale,
                "out": out,
                "out_dtype": out_dtype,
                "use_8x4_sf_layout": use_8x4_sf_layout,
                "backend": backend,
            }
        )
        # FI _check_mm_mxfp8_problem_size: 2-D a and b, b passed transposed ([k, n]), K must match
        _require(a.dim() == 2 and b.dim() == 2, "mm_mxfp8 accepts 2-D tensors")
        m, k = a.shape
        k_b, n = b.shape
        _require(k == k_b, "K dimension mismatch: a is [m, k], b is [k, n]")
        # FI: "MXFP8 requires n >= 128 and k >= 128 for CUTLASS MXFP8"
        _require(n >= 128 and k >= 128, "n >= 128 and k >= 128")
        # FI: float8_e4m3fn a and b; uint8 scales
        _require(a.dtype == torch.float8_e4m3fn and b.dtype == torch.float8_e4m3fn, "a, b float8_e4m3fn")
        _require(a_descale.dtype == torch.uint8 and b_descale.dtype == torch.uint8, "uint8 scales")
        # FID: a is row-major [m, k]; b "should be column major" [k, n] (the runner passes b.T, [n, k] row-major)
        _require(a.stride() == (k, 1), f"a must be row-major; strides {a.stride()}")
        _require(b.stride() == (1, k), f"b must be column-major [k, n] (strides (1, k)); got {b.stride()}")
        # FIT: AlignmentA/B = 128 bits of fp8, AlignmentC = 128 bits of bf16 (16-byte accesses)
        for name, t in (("a", a), ("b", b), ("a_descale", a_descale), ("b_descale", b_descale)):
            _require(t.data_ptr() % 16 == 0, f"{name} must start 16-byte aligned")
        _require(k % 16 == 0 and n % 8 == 0, "K % 16 (AlignmentA/B) and N % 8 (AlignmentC)")
        # FI _cutlass_gemm_mxfp8_requirement: 1-D 128x4 swizzled scales only; "use_8x4_sf_layout" is trtllm's
        _require(not use_8x4_sf_layout, "the CUTLASS backend reads 128x4 scales (use_8x4_sf_layout=False)")
        _require(a_descale.dim() == 1 and b_descale.dim() == 1, "CUTLASS needs 1-D swizzled scales")
        k_padded = _align(k // 32, 4)
        # FI / FID: a_descale (M_padded * K_padded,), b_descale (N_padded * K_padded,), padded to 128 and 4
        _require(a_descale.shape[0] == _align(m, 128) * k_padded, f"a_descale length {a_descale.shape[0]}")
        _require(b_descale.shape[0] == _align(n, 128) * k_padded, f"b_descale length {b_descale.shape[0]}")
        _require(a_descale.is_contiguous() and b_descale.is_contiguous(), "contiguous scale buffers")
        # FID: out is (m, n), bf16 or fp16; "If provided, ... supported by the CUTLASS and cuDNN backends"
        _require(out_dtype in (torch.bfloat16, torch.float16), "out_dtype bf16 or fp16")
        if out is not None:
            _require(tuple(out.shape) == (m, n) and out.dtype == out_dtype, "out must be (m, n) of out_dtype")
            _require(out.device == a.device, "out must be on a's device")
            _require(out.is_contiguous() and out.data_ptr() % 16 == 0, "out row-major and 16-byte aligned")
            _require(
                backend in ("cutlass", "cudnn"), f"out is written by cutlass/cudnn only; got {backend!r}"
            )
        _require(
            backend in ("cutlass", "cute-dsl", "trtllm", "cudnn", "auto"), f"unknown backend {backend!r}"
        )
        if backend == "cutlass":
            _require(
                self.capability in self.CUTLASS_CAPABILITIES, f"cutlass needs sm 100..121; {self.capability}"
            )
            if self.capability >= 120:  # FI: on SM120/121 "K and N must be multiples of 32"
                _require(k % 32 == 0 and n % 32 == 0, "sm_12x: K % 32 == 0 and N % 32 == 0")
        if out is None:
            out = torch.empty((m, n), dtype=out_dtype, device=a.device)

        # CUB: byte (r, g) of a [rows, k/32] scale matrix sits at
        #   (r // 128) * (K_padded * 128) + (g // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + g % 4
        def scale_bytes(swizzled: torch.Tensor, rows: int) -> torch.Tensor:
            r = torch.arange(rows).view(-1, 1)
            g = torch.arange(k // 32).view(1, -1)
            offset = (
                (r // 128) * (k_padded * 128) + (g // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + g % 4
            )
            return (
                swizzled.cpu()[offset.reshape(-1)]
                .view(rows, k // 32)
                .repeat_interleave(32, dim=1)
                .to(a.device)
            )

        product = _dequant(a, scale_bytes(a_descale, m)) @ _dequant(b.t(), scale_bytes(b_descale, n)).t()
        out.copy_(product.to(out_dtype))
        return out
