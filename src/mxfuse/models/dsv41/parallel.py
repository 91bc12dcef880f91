"""Attention tensor parallelism for the sublayer: which rank holds what, and the one collective.

Under attention TP (as SGLang and vLLM run DeepSeek-V4.1): the boundaries, wqkv_a, the norms and the
single shared KV head are replicated (every rank computes them on the same inputs); wq_b is split by
heads and wo_a by groups (each rank holds ``o_groups / tp_size`` of them, the heads feeding them with
them); wo_b is row-parallel, each rank holding the columns of its groups' outputs, so each rank's wo_b
computes a partial sum over its K slice. ``all_reduce_partial_sums`` adds those partials on every rank;
the second boundary runs after it, on the whole ``attn_out``.

The process group is torch.distributed's (NCCL on GPUs, gloo on CPU); ``None`` means no tensor
parallelism in this process. A rank's shard is fixed by ``Dsv41Config.tp_size`` / ``tp_rank``
(``rank_config`` derives them from a group), so the checkpoint reader reads only that shard.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist

from mxfuse import witness
from mxfuse.models.dsv41.config import Dsv41Config

__all__ = ["all_reduce_partial_sums", "check_process_group", "rank_config"]


def _require_group(process_group: object) -> dist.ProcessGroup:
    if not dist.is_available():
        raise TypeError("process_group needs torch.distributed, which this torch build does not have")
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(
            "process_group must be a torch.distributed.ProcessGroup (or None for no tensor "
            f"parallelism); got {type(process_group).__name__}"
        )
    return process_group


def rank_config(config: Dsv41Config, process_group: dist.ProcessGroup) -> Dsv41Config:
    """``config`` with ``tp_size`` and ``tp_rank`` of this process in ``process_group``."""
    if not isinstance(config, Dsv41Config):
        raise TypeError(f"config must be a Dsv41Config; got {type(config).__name__}")
    group = _require_group(process_group)
    return dataclasses.replace(config, tp_size=group.size(), tp_rank=group.rank())


def check_process_group(
    process_group: object, config: Dsv41Config, device: torch.device
) -> dist.ProcessGroup | None:
    """``process_group`` when it can carry ``config``'s shard on ``device``; None stays None.

    The group's size and this process's rank in it must be the config's ``tp_size`` and ``tp_rank``
    (the shard the weights are read for); an NCCL group needs a CUDA device.
    """
    if process_group is None:
        return None
    group = _require_group(process_group)
    size, rank = group.size(), group.rank()
    if (size, rank) != (config.tp_size, config.tp_rank):
        raise ValueError(
            f"process_group must match the config's shard (tp_size = {config.tp_size}, tp_rank = "
            f"{config.tp_rank}); got a group of size {size} in which this process is rank {rank} "
            "(rank_config(config, process_group) gives the matching config)"
        )
    backend = dist.get_backend(group)
    if backend == "nccl" and device.type != "cuda":
        raise ValueError(f"process_group is an NCCL group, which needs a CUDA device; got device {device}")
    return group


def all_reduce_partial_sums(
    partial: torch.Tensor, process_group: dist.ProcessGroup, *, site: str, rank: int
) -> torch.Tensor:
    """Sum ``partial`` (this rank's wo_b output) over ``process_group`` in place; returns it.

    bf16 in, bf16 out, as serving engines reduce: each partial was rounded to bf16 by its GEMM, and
    the sum is rounded once more. For two ranks the sum is one addition, and addition commutes, so
    both ranks hold the same bits whatever order the backend adds in. No host synchronisation: the collective
    is captured into a CUDA graph with the rest of the step (NCCL), and the witness record is emitted
    on the host when the step is run or captured.
    """
    size = process_group.size()
    witness.emit(
        "tp.all_reduce",
        f"wo_b is row-parallel over {size} ranks: this rank's partial sums over its K slice are "
        "summed before the next boundary",
        site=site,
        tp_size=size,
        tp_rank=rank,
        backend=str(dist.get_backend(process_group)),
        rows=partial.shape[0],
    )
    dist.all_reduce(partial, op=dist.ReduceOp.SUM, group=process_group)
    return partial
