"""The one-launch RMSNorm kernel (``mxfuse.kernels.norm``) on the GPU against a float64 reference.

Metric: every bf16 output within one bf16 ulp of ``bf16(x * rsqrt(mean(x^2) + eps) * w)`` computed in
float64 (the kernel's fp32 sum may round the last bit either way); outputs land in fresh tensors, and a
row the kernel skipped would hold whatever ``torch.empty`` gave, which the ulp check catches (NaN fails).
"""

from __future__ import annotations

import pytest
import torch

from gpumatrix import register
from gpumatrix.compare import assert_same_bits, assert_ulp_close
from mxfuse.kernels.norm import rms_norm_into_cache, rms_norm_rows, rms_norm_rows_and_cache

register(
    on=("h100", "b200", "gb300", "5090"), gpus=1, est_time={"h100": 2, "b200": 20, "gb300": 20, "5090": 20}
)


def _reference(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    xd = x.double()
    y = xd * torch.rsqrt(xd.square().mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.double()
    return y.to(torch.bfloat16)


@pytest.mark.parametrize(
    ("shape", "weighted"),
    [((1, 1024), True), ((16, 64, 512), False), ((7, 512), True), ((3, 5, 300), True), ((2048, 1024), True)],
)
def test_rows_match_float64(shape, weighted):
    g = torch.Generator(device="cuda").manual_seed(sum(shape))
    x = (torch.randn(shape, device="cuda", generator=g) * 3).to(torch.bfloat16)
    x[..., 0, :] *= 1e-3  # one tiny row
    w = (torch.rand(shape[-1], device="cuda", generator=g) + 0.5).to(torch.bfloat16) if weighted else None
    got = rms_norm_rows(x, w, eps=1e-6)
    assert got.shape == x.shape and got.dtype == torch.bfloat16
    assert_ulp_close(got, _reference(x, w, 1e-6), max_ulp=1, name=f"rms_norm {shape}")


def test_a_column_slice_is_read_in_place():
    """q_lora and the KV head are column slices of wqkv_a's output: rows strided by its width."""
    g = torch.Generator(device="cuda").manual_seed(5)
    qkv = torch.randn(16, 1536, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.rand(512, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    kv = qkv[:, 1024:]
    got = rms_norm_rows(kv, w, eps=1e-20)
    assert_ulp_close(got, _reference(kv, w, 1e-20), max_ulp=1, name="kv slice")
    assert_ulp_close(rms_norm_rows(kv.contiguous(), w, eps=1e-20), got, max_ulp=0, name="contiguous copy")


@pytest.mark.parametrize("layout", ["deepgemm", "e8m0", "swizzled_128x4"])
@pytest.mark.parametrize("rounding", ["rceil", "floor"])
@pytest.mark.parametrize("rows", [1, 5, 16])
def test_the_pair_is_quantize_mxfp8_of_its_y(layout, rounding, rows):
    """``mxfuse.norm.rms_norm`` writing the pair (and y in the same launch): every byte of the pair,
    padding rows included, is what ``quantize_mxfp8`` writes for that y; y alone (another launch) has
    the same bits. Buffers are poisoned first."""
    from mxfuse import witness
    from mxfuse.formats import empty_mxfp8_pair, scale_spec, scale_storage_view
    from mxfuse.kernels import quantize_mxfp8
    from mxfuse.norm import rms_norm

    g = torch.Generator(device="cuda").manual_seed(rows)
    wide = (torch.randn(rows, 1536, device="cuda", generator=g) * 4).to(torch.bfloat16)
    x = wide[:, :1024]  # q_lora: a column slice of wqkv_a's output
    x[0, :4] = torch.tensor([1e-38, 448.0, -0.0, 3e4])
    w = (torch.rand(1024, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    q, s = empty_mxfp8_pair(rows, 1024, scale_layout=layout, device="cuda")
    spec = scale_spec(rows, 1024, scale_layout=layout)
    q.view(torch.uint8).fill_(0xA5)
    scale_storage_view(s, spec).view(torch.uint8).fill_(0xA5)
    with witness.capture() as records:
        out = rms_norm(x, w, eps=1e-6, want_y=True, want_pair=True, scale_layout=layout, rounding=rounding,
                       out_pair=(q, s))  # fmt: skip
        y_only = rms_norm(x, w, eps=1e-6)
    torch.cuda.synchronize()
    assert [r["path"] for r in records] == ["norm.kernel.pair", "norm.kernel.bf16"]
    assert out.pair.data is q and out.pair.scale is s
    assert (out.pair.scale_layout.value, out.pair.rounding.value) == (layout, rounding)
    assert_same_bits(y_only.y, out.y, name="y alone")
    assert_ulp_close(out.y, _reference(x, w, 1e-6), max_ulp=1, name="y")
    want = quantize_mxfp8(out.y, rounding=rounding, scale_layout=layout)
    assert_same_bits(q.view(torch.uint8), want.data.view(torch.uint8), name="codes")
    assert_same_bits(
        scale_storage_view(s, spec).view(torch.uint8),
        want.scale_bytes(),
        name="scale storage, padding included",
    )


def test_rows_into_a_kv_cache_in_a_graph_with_new_lengths():
    """``rms_norm_into_cache``: token b * S + s lands at ``lens[b] + s``, bit for bit ``rms_norm_rows``'s
    row; other rows and positions past the capacity stay untouched; a captured call follows new lengths."""
    g = torch.Generator(device="cuda").manual_seed(11)
    b, s, cap, d = 4, 3, 64, 512
    qkv = torch.randn(b * s, 1792, device="cuda", generator=g).to(torch.bfloat16)
    x = qkv[:, 1280:]  # the KV head: a column slice, read in place
    w = (torch.rand(d, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    kv = torch.full((b, cap, d), -7.0, dtype=torch.bfloat16, device="cuda")
    lens = torch.tensor([0, 10, 61, 63], dtype=torch.int32, device="cuda")  # the last two spill past cap
    graph = torch.cuda.CUDAGraph()
    rms_norm_into_cache(x, w, eps=1e-6, kv=kv, lens=lens)  # warm-up compile outside the capture
    kv.fill_(-7.0)
    with torch.cuda.graph(graph):
        rms_norm_into_cache(x, w, eps=1e-6, kv=kv, lens=lens)
    y = rms_norm_rows(x, w, eps=1e-6)
    for step_lens in ([0, 10, 61, 63], [5, 0, 30, 1]):
        kv.fill_(-7.0)
        lens.copy_(torch.tensor(step_lens, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want = torch.full_like(kv, -7.0)
        for row in range(b * s):
            seq, pos = divmod(row, s)
            pos += step_lens[seq]
            if pos < cap:
                want[seq, pos] = y[row]
        assert_same_bits(kv, want, name=f"cache, lens {step_lens}")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"kv": torch.float32}, "kv must be a bfloat16 tensor"),
        ({"lens": (3,)}, "lens must be an int32 or int64 tensor"),
        ({"rows": 5}, "must be a positive multiple of the cache's sequences"),
    ],
)
def test_bad_cache_arguments_are_refused(change, match):
    rows = change.get("rows", 4)
    x = torch.randn(rows, 128, device="cuda").to(torch.bfloat16)
    kv = torch.zeros(2, 8, 128, dtype=change.get("kv", torch.bfloat16), device="cuda")
    lens = torch.zeros(change.get("lens", (2,)), dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=match):
        rms_norm_into_cache(x, None, eps=1e-6, kv=kv, lens=lens)


@pytest.mark.parametrize(("b", "s", "heads"), [(1, 1, 64), (4, 4, 16), (2, 32, 64)])
def test_the_head_rows_and_the_cache_rows_in_one_launch_are_the_bytes_of_two(b, s, heads):
    """``rms_norm_rows_and_cache``: q's heads (no weight) and the KV rows into the cache (weighted) in one
    launch write the bytes ``rms_norm_rows`` and ``rms_norm_into_cache`` write in two, on a NaN-free
    cache whose other rows stay as they were."""
    g = torch.Generator(device="cuda").manual_seed(b * 100 + s)
    d, cap = 512, 96
    q = torch.randn(b * s, heads, d, device="cuda", generator=g).to(torch.bfloat16)
    qkv = torch.randn(b * s, 1280 + d, device="cuda", generator=g).to(torch.bfloat16)
    kv_x = qkv[:, 1280:]
    w = (torch.rand(d, device="cuda", generator=g) + 0.5).to(torch.bfloat16)
    lens = torch.randint(0, cap - s + 1, (b,), device="cuda", generator=g).to(torch.int32)
    one = torch.full((b, cap, d), -7.0, dtype=torch.bfloat16, device="cuda")
    two = one.clone()
    got = rms_norm_rows_and_cache(q, None, eps=1e-6, kv_x=kv_x, kv_weight=w, kv=one, lens=lens)
    want = rms_norm_rows(q, None, eps=1e-6)
    rms_norm_into_cache(kv_x, w, eps=1e-6, kv=two, lens=lens)
    assert got.shape == q.shape
    assert_same_bits(got, want, name="q heads")
    assert_same_bits(one, two, name="cache")
    assert_ulp_close(got, _reference(q, None, 1e-6), max_ulp=1, name="q heads vs float64")


def test_rows_and_cache_of_different_widths_are_refused():
    x = torch.randn(2, 4, 512, device="cuda").to(torch.bfloat16)
    kv = torch.zeros(2, 8, 256, dtype=torch.bfloat16, device="cuda")
    lens = torch.zeros(2, dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="kv_x's last dim must be x's"):
        rms_norm_rows_and_cache(x, None, eps=1e-6, kv_x=torch.randn(2, 256, device="cuda"), kv_weight=None, kv=kv,
                                lens=lens)  # fmt: skip
    with pytest.raises(ValueError, match="kv_x's rows"):
        rms_norm_rows_and_cache(x, None, eps=1e-6, kv_x=torch.randn(3, 512, device="cuda"), kv_weight=None,
                                kv=torch.zeros(2, 8, 512, dtype=torch.bfloat16, device="cuda"), lens=lens)  # fmt: skip
