"""Every MXFP8 GEMM backend that runs on this GPU against the torch backend (and the torch backend against
float64), at the DeepSeek-V4 shapes and at N that no tile divides.

Closeness (``mxfp8_gemm_cases``): two backends that accumulate in fp32 and round once to bf16 differ only
by summation order, so ``|out - torch| <= 2**-7 |torch| + 2**-10 rms(torch row)`` (one bf16 step, plus
fp32 order slack from the rms of the same row: one wrong row or block scale fails wherever it sits);
against float64, ``2**-8`` (half a step) row by row, and element by element ``2**-8 |exact| + K * 2**-24
sum |products|`` (``assert_gemm_matches_float64``), so an output made of small products is held to its
own size. NaN must sit exactly where the oracle has it. Outputs are poisoned before each call, so an
unwritten element cannot pass. ``mxfp8_operands`` adds a 32x32-block checkpoint weight whose small rows
are E4M3 subnormal codes, and subnormal, zero and tiny tokens: a kernel that flushes subnormals fails.

On an H200 the backends here are ``gluon`` (named: ``auto`` does not take it until its measured table
names a shape), ``triton`` and ``torch``; ``deepgemm`` and ``flashinfer`` cases report
why they cannot run (they run on b200/gb300/5090 when those libraries are installed; the files
test_mxfp8_gemm_deepgemm.py and test_mxfp8_gemm_flashinfer.py require them there and run the vendor
backends' tests, written once in tests/support/vendor_gemm.py).
"""

from __future__ import annotations

import functools

import pytest
import torch
from mxfp8_gemm_cases import (
    activation_pair,
    assert_gemm_close,
    assert_gemm_matches_float64,
    random_codes,
    random_scales,
)
from mxfp8_operands import activation_rows, checkpoint_weight, is_subnormal

from gpumatrix import register
from gpumatrix.compare import assert_close, assert_same_bits
from mxfuse import witness
from mxfuse.formats import MxTensor
from mxfuse.gemm import BACKENDS, backend_status, mxfp8_gemm, prepare_mxfp8_weight, select_backend
from mxfuse.gemm.backend import cuda_capability
from mxfuse.kernels.gemm import launch_mxfp8_gemm, weight_scale_kgroup_major
from mxfuse.kernels.gemm.configs import GemmConfig
from mxfuse.kernels.gemm.gluon_launch import measured_gluon_win

register(
    on=("h100", "b200", "gb300", "5090"),
    gpus=1,
    est_time={"h100": 60, "b200": 150, "gb300": 150, "5090": 150},
)

FAST = tuple(name for name in BACKENDS if name != "torch")  # names only: nothing is probed at import
MS = (1, 2, 15, 16, 64, 129, 2048)
# DeepSeek-V4.1-Flash wqkv_a, wo_b (TP4), wo_b (DP4); V4-Pro wqkv_a, wo_b; then N that no tile divides.
SHAPES = ((1792, 5120), (5120, 2048), (5120, 8192), (2048, 7168), (7168, 16384), (1000, 2048), (4099, 7168))
POISON = 0xA5


def _ids(shapes) -> list[str]:
    return [f"N{n}-K{k}" for n, k in shapes]


def _require(name: str) -> None:
    status = backend_status("cuda")[name]
    if not status.ok:
        pytest.skip(f"{name} cannot run on this GPU: {status.reason}")


@functools.cache
def _codes(n: int, k: int):
    """The weight of a shape, once per session: E4M3 codes and E8M0 scales on the GPU."""
    return random_codes(n, k, seed=n * 31 + k, device="cuda"), random_scales(n, k, seed=n + k, device="cuda")


@functools.cache
def _weight(name: str, n: int, k: int):
    return prepare_mxfp8_weight(*_codes(n, k), backend=name)


def _activation(m: int, k: int, *, seed: int):
    return random_codes(m, k, seed=seed, device="cuda"), random_scales(m, k, seed=seed + 1, device="cuda")


def _poisoned(m: int, n: int) -> torch.Tensor:
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    out.view(torch.uint8).fill_(POISON)
    return out


def _run(name: str, aq, as_, n: int, k: int, *, out=None) -> torch.Tensor:
    w = _weight(name, n, k)
    pair = activation_pair(aq, as_, BACKENDS[name].activation_layouts[0])
    out = _poisoned(aq.shape[0], n) if out is None else out
    got = mxfp8_gemm(pair, w, out=out, backend=name)
    torch.cuda.synchronize()
    return got


def _oracle(aq, as_, n: int, k: int) -> torch.Tensor:
    return _run("torch", aq, as_, n, k)


def _shape_supported(name: str, n: int, k: int) -> bool:
    """True when ``name`` takes [n, k]; otherwise checks that preparing for it is refused with the rule."""
    shape = BACKENDS[name].supports_shape(n, k)
    if not shape.ok:
        with pytest.raises(ValueError, match=rf"cannot be used by backend '{name}'"):
            prepare_mxfp8_weight(*_codes(n, k), backend=name)
    return shape.ok


@pytest.mark.parametrize(("n", "k"), SHAPES, ids=_ids(SHAPES))
@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("name", FAST)
def test_backend_matches_the_torch_backend(name, m, n, k):
    _require(name)
    if not _shape_supported(name, n, k):
        return
    aq, as_ = _activation(m, k, seed=m * 7 + n)
    assert_gemm_close(_run(name, aq, as_, n, k), _oracle(aq, as_, n, k), name=f"{name} m={m} [{n}, {k}]")


@pytest.mark.parametrize(("m", "n", "k"), [(129, 7168, 16384), (15, 4099, 7168), (2048, 1792, 5120)])
def test_the_torch_backend_matches_float64(m, n, k):
    aq, as_ = _activation(m, k, seed=m + n)
    assert_gemm_matches_float64(_oracle(aq, as_, n, k), aq, as_, *_codes(n, k), name="torch vs float64")


@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_nan_scale_blocks_make_exactly_their_rows_nan(name):
    _require(name)
    n, k = 2048, 7168
    aq, as_ = _activation(64, k, seed=3)
    as_[0, 0] = 0xFF
    as_[17, 100] = 0xFF
    as_[63, k // 32 - 1] = 0xFF
    out = _run(name, aq, as_, n, k)
    expected_rows = [i in (0, 17, 63) for i in range(64)]
    assert torch.isnan(out).any(dim=1).tolist() == expected_rows
    assert torch.isnan(out[[0, 17, 63]]).all()
    assert_gemm_matches_float64(out, aq, as_, *_codes(n, k), name=f"{name} out", equal_nan=True)


@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_zero_blocks_contribute_nothing(name):
    _require(name)
    n, k = 5120, 2048
    aq, as_ = _activation(16, k, seed=4)
    codes = aq.view(torch.uint8)
    codes[5] = 0
    as_[5] = 0
    codes[9, 64:320] = 0
    out = _run(name, aq, as_, n, k)
    assert_close(out[5], torch.zeros(n, device="cuda"), rtol=0, atol=0, name=f"{name} zero row")
    assert_gemm_matches_float64(out, aq, as_, *_codes(n, k), name=f"{name} out")


@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_extreme_scale_bytes_whose_products_stay_finite(name):
    """a's scale bytes cycle 0, 1, 253, 254 and the weight's 254, 253, 1, 0: every block product is 2**0."""
    _require(name)
    n, k, m = 2048, 7168, 15
    aq = random_codes(m, k, seed=5, device="cuda", limit=1.75)
    wq = random_codes(n, k, seed=6, device="cuda", limit=1.75)
    a_bytes = torch.tensor([0, 1, 253, 254], dtype=torch.int32, device="cuda").repeat(k // 128)
    as_ = a_bytes.to(torch.uint8).repeat(m, 1)
    ws = (254 - a_bytes).to(torch.uint8).repeat(n, 1)
    if name == "gluon":
        # Its bf16 weight conversion is exact for scale bytes in [10, 246]: such a weight is refused by
        # name (auto passes over it). The activation's extreme bytes take its exact fallback rows: here
        # every row of a in-window weight (bytes 127) meets bytes 0, 1, 20 and 30.
        with pytest.raises(ValueError, match=r"cannot be used by backend 'gluon': .*outside \[10, 246\]"):
            prepare_mxfp8_weight(wq, ws, backend=name)
        a_bytes = torch.tensor([0, 1, 20, 30], dtype=torch.int32, device="cuda").repeat(k // 128)
        as_ = a_bytes.to(torch.uint8).repeat(m, 1)
        as_[3] = 127  # one row inside the window: the Gluon kernel's, beside fallback rows
        ws = torch.full_like(ws, 127)
    w = prepare_mxfp8_weight(wq, ws, backend=name)
    pair = activation_pair(aq, as_, BACKENDS[name].activation_layouts[0])
    out = mxfp8_gemm(pair, w, out=_poisoned(m, n), backend=name)
    assert torch.isfinite(out).all()
    assert_gemm_matches_float64(out, aq, as_, wq, ws, name=f"{name} out")


# Rows of the activation by kind: one and two rows (the GEMV kernels, whose E4M3 decode runs through fp32
# subnormals) and 16 rows, 4 of each kind, interleaved so that they share tiles.
OPERAND_ROWS = {
    "m1": ["subnormal"],
    "m2": ["subnormal", "tiny"],
    "m16": ["gaussian", "subnormal", "zero", "tiny"] * 4,
}


@pytest.mark.parametrize("rows", OPERAND_ROWS)
@pytest.mark.parametrize(("n", "k"), [(2048, 7168), (1792, 5120)], ids=_ids([(2048, 7168), (1792, 5120)]))
@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_subnormal_codes_zero_and_tiny_tokens(name, n, k, rows):
    """A 32x32-block checkpoint weight whose small rows are E4M3 subnormal codes (about one in eight) and
    subnormal, zero and tiny (2**-60) tokens: a kernel that flushes subnormals, or misapplies the scale of
    a small row or token, fails the element- and row-local checks (shown on CPU in
    tests/unit/mxfuse/gemm/test_mxfp8_gemm_operands.py)."""
    _require(name)
    if not _shape_supported(name, n, k):
        return
    kinds = OPERAND_ROWS[rows]
    wq, ws32 = checkpoint_weight(n, k, seed=n + 1, device="cuda")
    aq, as_ = activation_rows(kinds, k, seed=k + len(kinds), device="cuda")
    assert float(is_subnormal(wq).float().mean()) > 0.05
    w = prepare_mxfp8_weight(wq, ws32, backend=name)
    pair = activation_pair(aq, as_, BACKENDS[name].activation_layouts[0])
    out = mxfp8_gemm(pair, w, out=_poisoned(len(kinds), n), backend=name)
    torch.cuda.synchronize()
    per_row = ws32.repeat_interleave(32, dim=0)[:n]
    assert_gemm_matches_float64(out, aq, as_, wq, per_row, name=f"{name} {rows} [{n}, {k}]")
    zero_rows = [i for i, kind in enumerate(kinds) if kind == "zero"]
    assert not (out[zero_rows].view(torch.int16) & 0x7FFF).any(), "a zero token's outputs are 0"


@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_cuda_graph_capture_and_replay(name):
    _require(name)
    n, k, m = 5120, 2048, 16
    w = _weight(name, n, k)
    aq, as_ = _activation(m, k, seed=7)
    q_buf, s_buf = activation_pair(aq, as_, BACKENDS[name].activation_layouts[0])
    out = _poisoned(m, n)
    mxfp8_gemm((q_buf, s_buf), w, out=out, backend=name)  # compile and allocate outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with witness.capture() as records, torch.cuda.graph(graph):
        got = mxfp8_gemm((q_buf, s_buf), w, out=out, backend=name)
    assert got is out and [r["path"] for r in records] == [f"gemm.{name}"]
    for seed in (8, 9):
        aq, as_ = _activation(m, k, seed=seed)
        new_q, new_s = activation_pair(aq, as_, BACKENDS[name].activation_layouts[0])
        q_buf.copy_(new_q)
        s_buf.copy_(new_s)  # same shape and strides; the padding stays zero in both
        out.view(torch.uint8).fill_(POISON)
        with witness.capture() as replayed:
            graph.replay()
        torch.cuda.synchronize()
        assert replayed == []  # the path was decided at capture
        assert_gemm_matches_float64(out, aq, as_, *_codes(n, k), name=f"{name} replay {seed}")


@pytest.mark.parametrize("name", (*FAST, "torch"))
def test_out_is_written_without_allocating(name):
    _require(name)
    n, k = 1792, 5120
    aq, as_ = _activation(64, k, seed=10)
    out = _poisoned(64, n)
    _run(name, aq, as_, n, k, out=out)  # warm-up: compiles, caches workspaces
    out.view(torch.uint8).fill_(POISON)
    before = torch.cuda.memory_allocated()
    got = _run(name, aq, as_, n, k, out=out)
    assert got is out and torch.cuda.memory_allocated() == before
    assert_gemm_close(out, _oracle(aq, as_, n, k), name=f"{name} out")


@pytest.mark.parametrize("name", FAST)
def test_repeatable_and_independent_of_where_a_row_sits(name):
    """The same call gives the same bytes, and rows copied from row 0 give row 0's bytes (DeepGEMM's tests)."""
    _require(name)
    n, k = 7168, 16384
    aq, as_ = _activation(64, k, seed=11)
    aq.view(torch.uint8)[1:] = aq.view(torch.uint8)[0]
    as_[1:] = as_[0]
    first = _run(name, aq, as_, n, k).clone()
    for _ in range(5):
        assert_same_bits(_run(name, aq, as_, n, k).view(torch.int16), first.view(torch.int16), name="repeat")
    assert_same_bits(
        first[1:].view(torch.int16), first[:1].expand(63, n).view(torch.int16), name="copied rows"
    )


# Stream-kernel launches (CUDA cores, M <= 4) that the launch table may pick, run directly: the backend
# tests above reach only the configuration the table chooses today.
STREAM = {
    "m1 bn64 w4": GemmConfig("stream", 1, 64, 8, 4, 4, 1),
    "m2 bn128 w8 s3": GemmConfig("stream", 2, 128, 8, 2, 8, 3),
    "m4 bn256 w8": GemmConfig("stream", 4, 256, 8, 8, 8, 1),
    "m1 one row per thread group, 2 stages": GemmConfig("stream", 1, 8, 128, 2, 4, 2),
    "m4 one row per thread group": GemmConfig("stream", 4, 4, 128, 2, 4, 1),
    "m2 2 stages": GemmConfig("stream", 2, 64, 8, 4, 4, 2),
    "m1 bn4 no split": GemmConfig("stream", 1, 4, 128, 1, 4, 1),
    "m4 bn4 no split": GemmConfig("stream", 4, 4, 128, 1, 4, 1),
}


def _launch(config: GemmConfig, aq, as_, wq, ws) -> torch.Tensor:
    m, k = aq.shape
    a = MxTensor(*activation_pair(aq, as_, "deepgemm"), "deepgemm")
    out = _poisoned(m, wq.shape[0])
    rows = None if config.num_warps == 8 else ws  # the 8-warp configs read the K-group-major copy
    launch_mxfp8_gemm(a, wq, weight_scale_kgroup_major(ws), out, config=config, w_scale_rows=rows)
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize(
    ("n", "k"),
    [(5120, 8192), (4099, 7168), (1000, 2048)],
    ids=_ids([(5120, 8192), (4099, 7168), (1000, 2048)]),
)
@pytest.mark.parametrize("label", STREAM)
def test_stream_kernel_matches_float64_and_repeats(label, n, k):
    """Every M up to the config's rows, NaN blocks in the last row (M > 1) reaching exactly that row, the
    same bits on a second run."""
    config = STREAM[label]
    for m in range(1, config.block_m + 1):
        aq, as_ = _activation(m, k, seed=m * 13 + n)
        if m > 1:
            as_[m - 1, k // 64] = 0xFF
        out = _launch(config, aq, as_, *_codes(n, k))
        assert torch.isnan(out).any(dim=1).tolist() == [m > 1 and i == m - 1 for i in range(m)]
        assert_gemm_matches_float64(out, aq, as_, *_codes(n, k), name=f"stream {label} m={m}", equal_nan=True)
        again = _launch(config, aq, as_, *_codes(n, k))
        assert_same_bits(again.view(torch.int16), out.view(torch.int16), name="repeat")


@pytest.mark.parametrize("label", STREAM)
def test_stream_kernel_on_subnormal_codes_and_extreme_scales(label):
    config = STREAM[label]
    n, k = 2048, 7168
    kinds = ["subnormal", "tiny", "zero", "gaussian"][: config.block_m]
    wq, ws32 = checkpoint_weight(n, k, seed=n + 3, device="cuda")
    aq, as_ = activation_rows(kinds, k, seed=k + 5, device="cuda")
    per_row = ws32.repeat_interleave(32, dim=0)[:n]
    out = _launch(config, aq, as_, wq, per_row)
    assert_gemm_matches_float64(out, aq, as_, wq, per_row, name=f"stream {label} operands")
    m = config.block_m
    aq = random_codes(m, k, seed=5, device="cuda", limit=1.75)
    wq = random_codes(n, k, seed=6, device="cuda", limit=1.75)
    a_bytes = torch.tensor([0, 1, 253, 254], dtype=torch.int32, device="cuda").repeat(k // 128)
    as_ = a_bytes.to(torch.uint8).repeat(m, 1)
    ws = (254 - a_bytes).to(torch.uint8).repeat(n, 1)
    out = _launch(config, aq, as_, wq, ws)
    assert torch.isfinite(out).all()
    assert_gemm_matches_float64(out, aq, as_, wq, ws, name=f"stream {label} extreme scales")


def test_auto_takes_a_fast_backend_on_this_gpu_and_says_so():
    capability = cuda_capability(torch.device("cuda"))
    name, passed_over = select_backend("cuda", n=7168, k=16384)
    if capability >= (8, 9):
        assert name != "torch", f"no fast backend on sm_{capability[0]}{capability[1]}: {passed_over}"
    if capability[0] == 9:  # Hopper: never DeepGEMM (its MXFP8 path is sm_100 only); gluon only by table
        measured = measured_gluon_win(torch.cuda.get_device_name(), 7168, 16384) is not None
        assert name == ("gluon" if measured else "triton") and "sm_90" in passed_over["deepgemm"]
        if not measured:
            assert "not chosen automatically" in passed_over["gluon"]
    w = prepare_mxfp8_weight(*_codes(7168, 16384))
    aq, as_ = _activation(4, 16384, seed=12)
    with witness.capture() as records:
        mxfp8_gemm(activation_pair(aq, as_, BACKENDS[w.backend].activation_layouts[0]), w, site="wo_b")
    assert records[-1]["path"] == f"gemm.{name}" and records[-1]["passed_over"] == passed_over


def test_bad_inputs_are_refused_naming_the_argument():
    n, k = 2048, 7168
    w = _weight("torch", n, k)
    aq, as_ = _activation(4, k, seed=13)
    pair = activation_pair(aq, as_, "e8m0")
    out = _poisoned(4, n)
    before = out.clone()
    cases = [
        (lambda: mxfp8_gemm((aq.cpu(), as_.cpu()), w, out=out), r"a\[0\] must be on cuda:0; got cpu"),
        (lambda: mxfp8_gemm((aq, as_.cpu()), w, out=out), r"a\[1\] must be on cuda:0"),
        (lambda: mxfp8_gemm(pair, w, out=out.cpu()), r"out must be on cuda:0"),
        (
            lambda: mxfp8_gemm((aq[:, :4096].contiguous(), as_[:, :128].contiguous()), w, out=out),
            r"a\.shape\[1\] \(K\) must equal",
        ),
        (
            lambda: mxfp8_gemm(pair, w, out=out[:, :100]),
            r"out must be a bfloat16 tensor of shape \(4, 2048\)",
        ),
        (lambda: prepare_mxfp8_weight(*_codes(n, k)[:1], _codes(n, k)[1].cpu()), r"scale must be on cuda:0"),
    ]
    for name in FAST:
        if backend_status("cuda")[name].ok:
            fast = _weight(name, n, k)
            wrong = "e8m0" if "e8m0" not in [v.value for v in BACKENDS[name].activation_layouts] else None
            if wrong is not None:
                cases.append(
                    (
                        lambda fast=fast, name=name: mxfp8_gemm(pair, fast, out=out, backend=name),
                        rf"a holds e8m0 scales; backend '{name}' reads",
                    )
                )
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()
    torch.cuda.synchronize()
    assert_same_bits(out.view(torch.uint8), before.view(torch.uint8), name="out after refused calls")
