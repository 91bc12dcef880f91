"""One DeepSeek-V4.1-style attention sublayer between two hyper-connection boundaries, loaded from a
safetensors checkpoint in the native format, computed fused, unfused or in bf16.

* ``config``: ``Dsv41Config`` and ``CONFIGS`` (``flash``: the real V4.1-Flash dims; ``flash-tp2`` /
  ``flash-tp4``: one rank of attention TP2 / TP4; ``tiny``: for CPU tests).
* ``checkpoint``: the format, ``make_checkpoint`` (random, realistic magnitudes) and ``read_checkpoint``.
* ``model``: ``AttentionSublayer`` (``path``: fused | unfused | bf16) and ``load_sublayer``.
* ``state``: ``HcState``, ``KvCache``, ``StepOutputs`` and random inputs.
* ``parallel``: tensor parallelism over a torch.distributed group (``process_group=``), ``rank_config``.

``python -m mxfuse.models.dsv41 make-checkpoint DIR --seed N [--config flash|flash-tp2|flash-tp4|tiny]`` writes a
checkpoint.
"""

from __future__ import annotations

from mxfuse.models.dsv41.checkpoint import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    expected_tensors,
    local_shapes,
    make_checkpoint,
    quantize_blocks_32x32,
    read_checkpoint,
)
from mxfuse.models.dsv41.config import CONFIGS, Dsv41Config, config_by_name
from mxfuse.models.dsv41.model import AttentionSublayer, LoadResult, SublayerPath, load_sublayer
from mxfuse.models.dsv41.parallel import all_reduce_partial_sums, check_process_group, rank_config
from mxfuse.models.dsv41.state import HcState, KvCache, StepOutputs, random_kv_cache, random_state

__all__ = [
    "CHECKPOINT_FILE",
    "CONFIGS",
    "CONFIG_FILE",
    "AttentionSublayer",
    "Dsv41Config",
    "HcState",
    "KvCache",
    "LoadResult",
    "StepOutputs",
    "SublayerPath",
    "all_reduce_partial_sums",
    "check_process_group",
    "config_by_name",
    "expected_tensors",
    "load_sublayer",
    "local_shapes",
    "make_checkpoint",
    "quantize_blocks_32x32",
    "random_kv_cache",
    "random_state",
    "rank_config",
    "read_checkpoint",
]
