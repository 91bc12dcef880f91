"""Inputs of the mHC boundary for tests, drawn as the upstream Mega-mHC test draws them.

Recipe from vllm-project/DeepGEMM ``tests/test_mega_mhc.py`` (the Mega-mHC reference test): x and the
residual are standard normal bf16; post and the previous pre are sigmoid(normal); comb is uniform, then
three alternating row/column normalisations; fn is normal * 1e-2; scale and base are normal * 0.1; the
norm weight is 1 + 0.1 * normal in bf16. Its scalars (``UPSTREAM_SCALARS``) are deliberately not the
model's, so a kernel that hard-codes a model constant fails; ``MODEL_SCALARS`` are V4's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["MODEL_SCALARS", "UPSTREAM_SCALARS", "BoundaryInputs", "make_inputs"]

UPSTREAM_SCALARS = {
    "hc_norm_eps": 2e-5,
    "hc_pre_eps": 3e-4,
    "hc_post_scale": 1.25,
    "sinkhorn_eps": 2e-6,
    "sinkhorn_iters": 10,
    "rms_eps": 7e-6,
    "rms_scale": 1.25,
}
MODEL_SCALARS = {
    "hc_norm_eps": 1e-6,
    "hc_pre_eps": 1e-6,
    "hc_post_scale": 2.0,
    "sinkhorn_eps": 1e-6,
    "sinkhorn_iters": 20,
    "rms_eps": 1e-6,
    "rms_scale": 1.0,
}


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
    scalars: dict[str, float] = field(default_factory=lambda: dict(UPSTREAM_SCALARS))

    def args(self) -> tuple[torch.Tensor, ...]:
        """Positional arguments of ``mhc_boundary`` and ``mhc_boundary_reference``."""
        return (self.x, self.residual, self.post, self.comb, self.fn, self.scale, self.base, self.norm_weight)

    def kwargs(self) -> dict[str, object]:
        return {"prev_pre": self.prev_pre, **self.scalars}

    def tensors(self) -> dict[str, torch.Tensor | None]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "scalars"}


def make_inputs(
    tokens: int,
    hidden: int,
    *,
    shifted: bool,
    seed: int = 0,
    device: torch.device | str = "cpu",
    copies_of_row0: tuple[int, ...] = (),
    scalars: dict[str, float] | None = None,
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
        scalars=dict(scalars or UPSTREAM_SCALARS),
    )
    if shifted:  # drawn last, so the two orderings share every other input for a seed
        inputs.prev_pre = torch.sigmoid(normal(tokens, n))
    for row in copies_of_row0:
        for t in (inputs.x, inputs.residual, inputs.post, inputs.comb, inputs.prev_pre):
            if t is not None:
                t[row] = t[0]
    return inputs
