"""Inputs of the mHC boundary for tests, drawn as the upstream Mega-mHC test draws them.

Recipe from vllm-project/DeepGEMM ``tests/test_mega_mhc.py`` (the Mega-mHC reference test): x and the
residual are standard normal bf16; post and the previous pre are sigmoid(normal); comb is uniform, then
three alternating row/column normalisations; fn is normal * 1e-2; scale and base are normal * 0.1; the
norm weight is 1 + 0.1 * normal in bf16. Its scalars (``UPSTREAM_PARAMS``) are deliberately not the
model's, so a kernel that hard-codes a model constant fails; ``MODEL_PARAMS`` are V4's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mxfuse.hc import HcInputs, HcParams, HcWeights

__all__ = [
    "MODEL_PARAMS",
    "REVEALING_ROWS",
    "UPSTREAM_PARAMS",
    "BoundaryInputs",
    "make_inputs",
    "revealing_inputs",
]

UPSTREAM_PARAMS = HcParams(
    hc_norm_eps=2e-5,
    hc_pre_eps=3e-4,
    hc_post_scale=1.25,
    sinkhorn_eps=2e-6,
    sinkhorn_iters=10,
    rms_eps=7e-6,
    rms_scale=1.25,
)
MODEL_PARAMS = HcParams(
    hc_norm_eps=1e-6,
    hc_pre_eps=1e-6,
    hc_post_scale=2.0,
    sinkhorn_eps=1e-6,
    sinkhorn_iters=20,
    rms_eps=1e-6,
    rms_scale=1.0,
)  # spelt out, not HcParams(): a test of the defaults compares against these values


@dataclass
class BoundaryInputs:
    x: torch.Tensor
    residual: torch.Tensor
    post: torch.Tensor
    comb: torch.Tensor
    prev_pre: torch.Tensor | None
    fn: torch.Tensor
    scale: torch.Tensor
    base: torch.Tensor
    norm_weight: torch.Tensor
    params: HcParams = UPSTREAM_PARAMS

    def args(self) -> tuple[HcInputs, HcWeights]:
        """Positional arguments of ``mhc_boundary`` and ``mhc_boundary_reference``: the inputs and the
        weights, grouped (made on each call, so a test may change a tensor in place first)."""
        return (
            HcInputs(self.x, self.residual, self.post, self.comb, self.prev_pre),
            HcWeights(self.fn, self.scale, self.base, self.norm_weight),
        )

    def kwargs(self) -> dict[str, object]:
        return {"params": self.params}

    def tensors(self) -> dict[str, torch.Tensor | None]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "params"}


def make_inputs(
    tokens: int,
    hidden: int,
    *,
    shifted: bool,
    seed: int = 0,
    device: torch.device | str = "cpu",
    copies_of_row0: tuple[int, ...] = (),
    params: HcParams = UPSTREAM_PARAMS,
) -> BoundaryInputs:
    """Inputs of one boundary; rows listed in ``copies_of_row0`` repeat row 0 in every per-token input."""
    g = torch.Generator(device=device).manual_seed(seed)
    n = 4

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device)

    comb = torch.rand(tokens, n, n, generator=g, device=device)
    for _ in range(3):
        comb = comb / comb.sum(-1, keepdim=True)
        comb = comb / comb.sum(-2, keepdim=True)
    inputs = BoundaryInputs(
        x=normal(tokens, hidden).to(torch.bfloat16),
        residual=normal(tokens, n, hidden).to(torch.bfloat16),
        post=torch.sigmoid(normal(tokens, n)),
        comb=comb,
        prev_pre=None,
        fn=normal(n * (n + 2), n * hidden) * 1e-2,
        scale=normal(3) * 0.1,
        base=normal(n * (n + 2)) * 0.1,
        norm_weight=(1 + 0.1 * normal(hidden)).to(torch.bfloat16),
        params=params,
    )
    if shifted:  # drawn last, so the two orderings share every other input for a seed
        inputs.prev_pre = torch.sigmoid(normal(tokens, n))
    for row in copies_of_row0:
        for t in (inputs.x, inputs.residual, inputs.post, inputs.comb, inputs.prev_pre):
            if t is not None:
                t[row] = t[0]
    return inputs


# ---------------------------------------------------------------------------------------------
# Inputs on which the fp32 summation order and the eps placement show in bf16 (see
# tests/unit/mxfuse/hc/test_hc_reference_math.py): rows of the batch by kind.

_KINDS = (("post_order", 4), ("collapse_order", 4), ("zero", 1), ("tiny", 1), ("eps_scale", 2), ("plain", 2))
REVEALING_ROWS: dict[str, list[int]] = {}
_start = 0
for _kind, _count in _KINDS:
    REVEALING_ROWS[_kind] = list(range(_start, _start + _count))
    _start += _count
REVEALING_TOKENS = _start


def _round_bf16(v: np.ndarray) -> np.ndarray:
    """float64 -> the nearest bf16 value (ties to even), as float64 (normal range only)."""
    mant, exp = np.frexp(v)
    return np.ldexp(np.round(np.ldexp(mant, 8)), exp - 8)


def _bf16_tensor(values: np.ndarray) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(torch.bfloat16)
    if not (t.double().numpy() == values).all():
        raise ValueError("a value is not representable in bf16")
    return t


def revealing_inputs(
    params: HcParams, *, seed: int, shifted: bool, hidden: int = 256, device: str = "cpu"
) -> BoundaryInputs:
    """A batch of ``REVEALING_TOKENS`` tokens, rows by kind (``REVEALING_ROWS``):

    * ``post_order``: in every element two streams carry +-2**e (e in 8..20) and comb[t, j, k] = c_k, so
      the large terms cancel and an fp32 order other than R's documented one loses the small terms' bits;
    * ``collapse_order``: the same streams with x = 0 and comb = I (R' = R) and equal collapse weights
      (``prev_pre``), so the collapse order shows the same way in v;
    * ``zero``, ``tiny`` (2**-100) and ``eps_scale`` (mean squares about eps): eps placement decides y and
      the mixes; ``plain``: standard normal tokens.
    """
    n = 4
    rng = np.random.default_rng(seed)
    f32 = np.float32
    r = _round_bf16(rng.standard_normal((REVEALING_TOKENS, n, hidden)))
    x = _round_bf16(rng.standard_normal((REVEALING_TOKENS, hidden)))
    post = rng.uniform(0.5, 1.5, (REVEALING_TOKENS, n)).astype(f32)
    comb = rng.dirichlet(np.ones(n), (REVEALING_TOKENS, n)).astype(f32)
    prev_pre = rng.uniform(0.2, 1.0, (REVEALING_TOKENS, n)).astype(f32)

    def cancelling(t: int) -> None:
        for h in range(hidden):
            j1, j2 = rng.choice(n, 2, replace=False)
            big = 2.0 ** rng.integers(8, 21)
            r[t, j1, h], r[t, j2, h] = big, -big

    for t in REVEALING_ROWS["post_order"]:
        cancelling(t)
        comb[t] = rng.uniform(0.1, 0.5, n).astype(f32)[None, :]
    for t in REVEALING_ROWS["collapse_order"]:
        cancelling(t)
        x[t], comb[t] = 0.0, np.eye(n, dtype=f32)
        prev_pre[t] = f32(rng.uniform(0.5, 1.0))
    for t in REVEALING_ROWS["zero"]:
        r[t], x[t] = 0.0, 0.0
    for t in REVEALING_ROWS["tiny"]:
        r[t] = _round_bf16(rng.standard_normal((n, hidden)) * 2.0**-100)
        x[t], comb[t] = 0.0, np.eye(n, dtype=f32)
    for t in REVEALING_ROWS["eps_scale"]:
        eps = min(params.rms_eps, params.hc_norm_eps)
        r[t] = _round_bf16(rng.standard_normal((n, hidden)) * np.sqrt(eps) / 2)
        x[t], comb[t] = 0.0, np.eye(n, dtype=f32)
    fn = (rng.standard_normal((n * (n + 2), n * hidden)) * 1e-2).astype(f32)
    inputs = BoundaryInputs(
        x=_bf16_tensor(x),
        residual=_bf16_tensor(r),
        post=torch.from_numpy(post),
        comb=torch.from_numpy(comb),
        prev_pre=torch.from_numpy(prev_pre) if shifted else None,
        fn=torch.from_numpy(fn),
        scale=torch.from_numpy((rng.standard_normal(3) * 0.1).astype(f32)),
        base=torch.from_numpy((rng.standard_normal(n * (n + 2)) * 0.1).astype(f32)),
        norm_weight=_bf16_tensor(_round_bf16(1 + 0.1 * rng.standard_normal(hidden))),
        params=params,
    )
    tensors = {k: (None if v is None else v.to(device)) for k, v in inputs.tensors().items()}
    return BoundaryInputs(**tensors, params=params)
