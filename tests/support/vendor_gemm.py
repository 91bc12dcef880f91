"""The vendor GEMM backends (deepgemm, flashinfer) with the real libraries, against float64 and torch.

The tests are written once, here, and parametrized over the backends: ``VendorGemmTests`` holds them, a
``VendorCase`` says what differs from one backend to the other (the activation scale layout it reads, the
shapes it takes, where a second scale tile or word starts). Each backend keeps its own test file
(tests/kernels/mxfuse/gemm/test_mxfp8_gemm_deepgemm.py, test_mxfp8_gemm_flashinfer.py), which imports its library at
module top, so that a runner without it fails instead of skipping, registers for the runners that have
it, and subclasses ``VendorGemmTests`` with its case. Closeness as in ``mxfp8_gemm_cases``: against
float64, ``|out - ref| <= 2**-8 |ref| + 2**-10 rms(ref)``; against the torch backend, ``2**-7`` instead
of ``2**-8``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from mxfp8_gemm_cases import activation_pair, assert_gemm_close, random_codes, random_scales, reference_f64

from gpumatrix.compare import assert_same_bits
from mxfuse import witness
from mxfuse.formats import as_mxtensor
from mxfuse.gemm import AUTO_ORDER, MxWeight, backend_status, mxfp8_gemm, prepare_mxfp8_weight, select_backend

__all__ = ["DEEPGEMM", "FLASHINFER", "VENDOR_CASES", "VendorCase", "VendorGemmTests"]

POISON = 0xA5
MS = (1, 2, 15, 64, 129, 2048)


@dataclass(frozen=True)
class VendorCase:
    """One vendor backend under test.

    ``backend``: its name in ``mxfuse.gemm``. ``layout``: the activation scale layout it reads.
    ``shapes``: the weights ``[N, K]`` held to float64 at every M in ``MS``. ``nan_m``: the M of the NaN
    test, whose rows 5 and ``nan_m - 1`` get a NaN scale byte, the last row in another scale tile or word.
    """

    backend: str
    layout: str
    shapes: tuple[tuple[int, int], ...]
    nan_m: int

    @property
    def auto_before(self) -> tuple[str, ...]:
        """The backends ``auto`` tries before this one."""
        return AUTO_ORDER[: AUTO_ORDER.index(self.backend)]


DEEPGEMM = VendorCase(
    "deepgemm",
    "deepgemm",
    # DeepSeek-V4 shapes, N = 1000 (N % 8 == 0 but no tile divides it), K = 2080 (not a multiple of 128:
    # the last packed scale word holds one k-group and three zero pads).
    ((1792, 5120), (5120, 2048), (7168, 16384), (1000, 2048), (2048, 2080)),
    nan_m=33,  # row 32 in the second packed word of its column
)
FLASHINFER = VendorCase(
    "flashinfer",
    "swizzled_128x4",
    # DeepSeek-V4 shapes; N = 1056 (a multiple of 32 that no 128- or 256-wide tile divides); K = 2080
    # (K/32 = 65 groups: the last 128x4 scale tile is padded); the smallest N and K FlashInfer accepts (128).
    ((1792, 5120), (5120, 2048), (7168, 16384), (1056, 2048), (2048, 2080), (128, 128)),
    nan_m=130,  # rows in two 128-row scale tiles
)
VENDOR_CASES = (DEEPGEMM, FLASHINFER)


def _operands(m: int, n: int, k: int, *, seed: int, limit: float = 448.0):
    aq = random_codes(m, k, seed=seed, device="cuda", limit=limit)
    wq = random_codes(n, k, seed=seed + 1, device="cuda", limit=limit)
    return (
        aq,
        random_scales(m, k, seed=seed + 2, device="cuda"),
        wq,
        random_scales(n, k, seed=seed + 3, device="cuda"),
    )


class VendorGemmTests:
    """The tests of one vendor backend; a subclass named ``Test...`` sets ``case``."""

    case: VendorCase

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "shape" in metafunc.fixturenames:
            shapes = metafunc.cls.case.shapes
            metafunc.parametrize("shape", shapes, ids=[f"N{n}-K{k}" for n, k in shapes])

    def _gemm(self, aq, as_, w: MxWeight, *, m: int) -> torch.Tensor:
        """``w``'s backend on the activation in the scale layout that backend reads (e8m0 for torch)."""
        out = torch.empty((m, w.n), dtype=torch.bfloat16, device="cuda")
        out.view(torch.uint8).fill_(POISON)
        layout = self.case.layout if w.backend == self.case.backend else "e8m0"
        a = as_mxtensor(activation_pair(aq, as_, layout), scale_layout=layout)
        got = mxfp8_gemm(a, w, out=out, backend=w.backend)
        torch.cuda.synchronize()
        return got

    def _weight(self, wq, ws) -> MxWeight:
        return prepare_mxfp8_weight(wq, ws, backend=self.case.backend)

    def test_runs_here_and_auto_takes_it_unless_an_earlier_backend_runs(self):
        status = backend_status("cuda")[self.case.backend]
        assert status.ok, status.reason
        name, passed_over = select_backend("cuda", n=7168, k=16384)
        before = self.case.auto_before
        assert name in (*before, self.case.backend), (name, passed_over)
        if name == self.case.backend:
            assert list(passed_over) == list(before), passed_over

    @pytest.mark.parametrize("m", MS)
    def test_matches_float64(self, m, shape):
        n, k = shape
        aq, as_, wq, ws = _operands(m, n, k, seed=m + n + k)
        w = self._weight(wq, ws)
        with witness.capture() as records:
            out = self._gemm(aq, as_, w, m=m)
        assert records[-1]["path"] == f"gemm.{self.case.backend}"
        assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name=f"{self.case.backend} m={m} [{n}, {k}]")

    def test_matches_the_torch_backend(self):
        aq, as_, wq, ws = _operands(64, 2048, 7168, seed=1)
        got = self._gemm(aq, as_, self._weight(wq, ws), m=64)
        want = self._gemm(aq, as_, prepare_mxfp8_weight(wq, ws, backend="torch"), m=64)
        assert_gemm_close(got, want, name=f"{self.case.backend} vs torch")

    def test_nan_scale_byte_makes_exactly_its_rows_nan(self):
        m = self.case.nan_m
        aq, as_, wq, ws = _operands(m, 2048, 7168, seed=2)
        as_[5, 7] = 0xFF
        as_[m - 1, 0] = 0xFF
        out = self._gemm(aq, as_, self._weight(wq, ws), m=m)
        assert torch.isnan(out).any(dim=1).tolist() == [i in (5, m - 1) for i in range(m)]
        assert torch.isnan(out[[5, m - 1]]).all()
        assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name="out", equal_nan=True)

    def test_extreme_scale_bytes_whose_products_stay_finite(self):
        m, n, k = 16, 2048, 7168
        aq, _, wq, _ = _operands(m, n, k, seed=3, limit=1.75)
        a_bytes = torch.tensor([0, 1, 253, 254], dtype=torch.int32, device="cuda").repeat(k // 128)
        as_, ws = a_bytes.to(torch.uint8).repeat(m, 1), (254 - a_bytes).to(torch.uint8).repeat(n, 1)
        out = self._gemm(aq, as_, self._weight(wq, ws), m=m)
        assert torch.isfinite(out).all()
        assert_gemm_close(out, reference_f64(aq, as_, wq, ws), name="out")

    def test_cuda_graph_capture_and_replay(self):
        """The activation given as a plain ``(q, scale)`` tuple, converted on every call, in the graph too."""
        m, n, k = 16, 5120, 2048
        aq, as_, wq, ws = _operands(m, n, k, seed=4)
        w = self._weight(wq, ws)
        q_buf, s_buf = activation_pair(aq, as_, self.case.layout)
        out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        mxfp8_gemm((q_buf, s_buf), w, out=out)  # compile (and size any workspace) outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            mxfp8_gemm((q_buf, s_buf), w, out=out)
        new_q, new_s, _, _ = _operands(m, n, k, seed=5)
        q_buf.copy_(new_q)
        s_buf.copy_(activation_pair(new_q, new_s, self.case.layout)[1])
        out.view(torch.uint8).fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        assert_gemm_close(out, reference_f64(new_q, new_s, wq, ws), name="replay")

    def test_repeatable(self):
        aq, as_, wq, ws = _operands(64, 7168, 16384, seed=6)
        w = self._weight(wq, ws)
        first = self._gemm(aq, as_, w, m=64).clone()
        for _ in range(5):
            assert_same_bits(
                self._gemm(aq, as_, w, m=64).view(torch.int16), first.view(torch.int16), name="repeat"
            )
