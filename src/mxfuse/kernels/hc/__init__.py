"""The mHC boundary's kernels: the fused boundary (``launch_boundary``), the unfused chain's steps
(``launch_post``, ``launch_mixes``, ``launch_norm``) and what they are configured with.

Device code: ``kernel`` (the entry and its counters), ``phase_a`` / ``phase_f`` / ``phase_s`` (the
three kinds of item), ``post`` (the unfused post step), ``tile`` (the arithmetic they share). Host code:
``launch`` and ``steps`` (launchers), ``side`` (the Sinkhorn items' side stream), ``tensors`` (how the boundary's tensors travel), ``config`` (``HcConfig``, the default rule, the measured table
``configs.json``), ``plan`` (ticket layout), ``workspace``, ``params`` (``HcParams``, ``HcProjection``).
Launchers assume validated arguments: ``mxfuse.hc.mhc_boundary`` validates and dispatches.
"""

from __future__ import annotations

from mxfuse.kernels.hc.config import HcConfig, choose_config, default_config
from mxfuse.kernels.hc.launch import (
    FinishTensors,
    HcItems,
    HcLaunchTensors,
    MixTensors,
    launch_boundary,
    launch_phases,
)
from mxfuse.kernels.hc.params import HcParams, HcProjection
from mxfuse.kernels.hc.side import HcSideStream
from mxfuse.kernels.hc.steps import launch_mixes, launch_norm, launch_post
from mxfuse.kernels.hc.tensors import HcBoundaryOutputs, HcInputs, HcWeights
from mxfuse.kernels.hc.workspace import HcWorkspace, sm_count, workspace_for

__all__ = [
    "FinishTensors",
    "HcBoundaryOutputs",
    "HcConfig",
    "HcInputs",
    "HcItems",
    "HcLaunchTensors",
    "HcParams",
    "HcProjection",
    "HcSideStream",
    "HcWeights",
    "HcWorkspace",
    "MixTensors",
    "choose_config",
    "default_config",
    "launch_boundary",
    "launch_mixes",
    "launch_norm",
    "launch_phases",
    "launch_post",
    "sm_count",
    "workspace_for",
]
