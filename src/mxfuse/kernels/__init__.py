"""Triton kernels, one package per op: the public launcher in each package's ``__init__``, device code
(``@triton.jit``) in modules of its own, tuned configurations as checked-in data beside them.

* ``quantize``: bf16/fp16/fp32 -> MXFP8 (``quantize_mxfp8``, re-exported here);
* ``gemm``: the MXFP8 x MXFP8 GEMM for GPUs without MXFP8 tensor cores (Hopper), its kernels (gemv,
  stream, dq16 / mma8, fold), the decodes and the one K-loop the family shares (``gemm.mainloop``);
* ``grouped_wo_a``: the grouped low-rank projection with an MXFP8 epilogue, on the GEMM's K-loop;
* ``hc``: the hyper-connection boundary, fused and as separate steps;
* ``attention``: split-KV multi-query decode attention whose combine can write an MXFP8 tensor;
* ``norm``: RMSNorm rows, into a KV cache or as an MXFP8 tensor;
* shared pieces: ``mxfp8`` (the MXFP8 encoding every producer writes with), ``bf16`` (bf16 bit
  patterns), ``splitk`` (deterministic split-K), ``l2_prefetch``, ``pdl`` (the launch policy).
"""

from __future__ import annotations

from mxfuse.kernels.quantize import quantize_mxfp8

__all__ = ["quantize_mxfp8"]
