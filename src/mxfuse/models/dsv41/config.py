"""Dimensions of a DeepSeek-V4.1 attention sublayer: the real Flash shapes, its TP4 shard, a tiny one.

V4.1-Flash (``config.json`` of the release): hidden 5120, 64 heads of 512, q_lora_rank 1280, one shared
KV head of 512 (multi-query), o_groups 8 with o_lora_rank 1024, hc_mult 4, 20 Sinkhorn iterations,
hc_eps 1e-6, rms_norm_eps 1e-20. Under attention tensor parallelism each rank holds heads / tp and
o_groups / tp output groups (TP2: 32 and 4, TP4: 16 and 2); wqkv_a stays replicated and wo_b's K
shrinks to 4 * 1024 = 4096 (TP2) or 2 * 1024 = 2048 (TP4).

The checkpoint always holds the whole model (global dims); ``tp_size`` and ``tp_rank`` only say which
shard a rank loads (see ``mxfuse.models.dsv41.checkpoint``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from mxfuse.hc import HcParams

__all__ = ["CONFIGS", "Dsv41Config", "config_by_name"]

# Multiples the pieces need: the boundary and wo_a's epilogue write whole 128-column scale words; MXFP8
# linears and wo_a quantize in 32-wide blocks.
_WORD = 128
_BLOCK = 32


@dataclass(frozen=True)
class Dsv41Config:
    """One attention sublayer's dimensions and scalars (global, before tensor parallelism)."""

    name: str = "flash"
    hidden: int = 5120
    heads: int = 64
    head_dim: int = 512
    q_lora_rank: int = 1280
    o_groups: int = 8
    o_lora_rank: int = 1024
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    rms_norm_eps: float = 1e-20
    tp_size: int = 1
    tp_rank: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name must be a non-empty str; got {self.name!r}")
        for field in (
            "hidden",
            "heads",
            "head_dim",
            "q_lora_rank",
            "o_groups",
            "o_lora_rank",
            "hc_mult",
            "hc_sinkhorn_iters",
            "tp_size",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be an int >= 1; got {value!r}")
        if isinstance(self.tp_rank, bool) or not isinstance(self.tp_rank, int):
            raise ValueError(f"tp_rank must be an int; got {self.tp_rank!r}")
        for field in ("hc_eps", "rms_norm_eps"):
            value = getattr(self, field)
            if (
                isinstance(value, bool)
                or not isinstance(value, numbers.Real)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(f"{field} must be a finite real >= 0; got {value!r}")
        rules = [
            ("hc_mult", self.hc_mult == 4, "must be 4 (the only stream count the boundary takes)"),
            ("hidden", self.hidden % _WORD == 0, f"must be a multiple of {_WORD}"),
            ("head_dim", self.head_dim % _BLOCK == 0, f"must be a multiple of {_BLOCK}"),
            ("q_lora_rank", self.q_lora_rank % _BLOCK == 0, f"must be a multiple of {_BLOCK}"),
            ("o_lora_rank", self.o_lora_rank % _WORD == 0, f"must be a multiple of {_WORD}"),
            ("o_groups", self.heads % self.o_groups == 0, f"must divide heads = {self.heads}"),
            ("tp_size", self.o_groups % self.tp_size == 0, f"must divide o_groups = {self.o_groups}"),
            ("tp_rank", 0 <= self.tp_rank < self.tp_size, f"must be in [0, tp_size = {self.tp_size})"),
        ]
        for field, ok, rule in rules:
            if not ok:
                raise ValueError(f"{field} {rule}; got {getattr(self, field)!r}")

    # ---- derived shapes (what one rank holds) ----------------------------------------------------

    @property
    def local_heads(self) -> int:
        return self.heads // self.tp_size

    @property
    def local_groups(self) -> int:
        return self.o_groups // self.tp_size

    @property
    def group_width(self) -> int:
        """r: the inputs of one wo_a group, heads_per_group * head_dim (4096 for V4.1-Flash)."""
        return self.heads // self.o_groups * self.head_dim

    @property
    def wqkv_a_out(self) -> int:
        """N of the fused [wq_a; wkv] projection: q_lora_rank + one shared KV head."""
        return self.q_lora_rank + self.head_dim

    @property
    def wo_b_in(self) -> int:
        """K of wo_b on this rank: local groups * o_lora_rank."""
        return self.local_groups * self.o_lora_rank

    @property
    def softmax_scale(self) -> float:
        return self.head_dim**-0.5

    @property
    def hc_params(self) -> HcParams:
        """The hyper-connection boundary's scalars, as upstream's ``hc_pre`` passes them: ``hc_eps`` for
        the pre eps and Sinkhorn, ``rms_norm_eps`` for the mixes' norm and the RMSNorm, post scale 2
        (``2 * sigmoid``: every V4/V4.1 config)."""
        return HcParams(
            hc_norm_eps=self.rms_norm_eps,
            hc_pre_eps=self.hc_eps,
            hc_post_scale=2.0,
            sinkhorn_eps=self.hc_eps,
            sinkhorn_iters=self.hc_sinkhorn_iters,
            rms_eps=self.rms_norm_eps,
            rms_scale=1.0,
        )

    # ---- serialization (the checkpoint's config.json) ---------------------------------------------

    def model_dims(self) -> dict[str, Any]:
        """The fields a checkpoint fixes (everything but the name and the rank's shard)."""
        skip = {"name", "tp_size", "tp_rank"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}


CONFIGS: dict[str, Dsv41Config] = {
    "flash": Dsv41Config(),
    "flash-tp2": Dsv41Config(name="flash-tp2", tp_size=2),
    "flash-tp4": Dsv41Config(name="flash-tp4", tp_size=4),
    # Smallest shape every piece accepts (hidden and o_lora_rank whole 128-column words), for CPU tests.
    "tiny": Dsv41Config(
        name="tiny", hidden=256, heads=4, head_dim=64, q_lora_rank=128, o_groups=2, o_lora_rank=128
    ),
}


def config_by_name(name: str) -> Dsv41Config:
    """The config called ``name`` (a key of ``CONFIGS``)."""
    if name not in CONFIGS:
        raise ValueError(f"config must be one of {', '.join(map(repr, CONFIGS))}; got {name!r}")
    return CONFIGS[name]
