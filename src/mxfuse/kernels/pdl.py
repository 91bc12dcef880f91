"""Programmatic dependent launch (PDL) between the decode step's kernels: the launch policy.

A kernel launched as a programmatic dependent (``launch_pdl=True``) may start while the kernel before it
on the stream still runs, once every program of that kernel has signalled (``gdc_launch_dependents``)
or exited; it waits (``gdc_wait``: the previous grid complete and its writes visible) before it reads or
writes anything. In a CUDA graph the launch attribute becomes a programmatic edge. The launch and the
start of the programs then overlap the previous kernel's end instead of following it.

Every kernel of the step takes part (scope ``"all"``): the norms, the quantize kernel, the attention's two
kernels, the boundary's first launch, the stream GEMMs and the grouped wo_a wait first and then signal, so
a dependent's work before its own wait (the boundary's second launch loads before it waits) never runs
ahead of its predecessor's predecessor. Three kernels do not signal early: the grouped wo_a and the
boundary's second launch, whose dependents (wo_b, wqkv_a: weight streams) measured slower resident beside
them than launched as they exit, and, by default, the attention's combine (below). The Gluon GEMM's two
launches take part as one GEMM: the first waits, then signals, and the second requests its first weight
tiles before it waits for the first (and does not signal). Scope ``"gemm"``: only the GEMMs are
dependents, the rest signal at their start. ``prefetch``: the dependent GEMMs request their weight rows
into L2 before their wait (measured slower: off by default). Only on CUDA devices of sm_90 and later,
never under the Triton interpreter.

``quiet``: the kernels (of ``QUIET_KERNELS``) that do not signal early; ``QUIET_DEFAULT`` unless given.
``"attention.combine"``: its dependent on the fused path is the grouped wo_a, which measured 4.4 us slower
at T = 4 resident beside the combine than launched as it exits (the V4.1 step, one H100, 2026-12-05:
fused 142.2 against 137.6 us, the same within 1 us at T = 1, 16 and 64). ``quiet=()`` lets it signal.

``programmatic_launch(enabled, prefetch=..., scope=..., quiet=...)`` sets the policy for the launches
inside it (a context variable, read at launch time: a CUDA graph keeps what its capture saw); the default
is on, scope ``"all"``, no prefetch, ``QUIET_DEFAULT`` quiet.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

__all__ = [
    "OFF",
    "QUIET_DEFAULT",
    "QUIET_KERNELS",
    "SCOPES",
    "PdlPolicy",
    "pdl_policy",
    "programmatic_launch",
]


@dataclass(frozen=True)
class PdlPolicy:
    """What a launch on a device does: ``signal`` (call ``gdc_launch_dependents`` at the start),
    ``wait`` (launch as a programmatic dependent and wait before reading), ``prefetch`` (a dependent
    requests its weight rows into L2 before it waits)."""

    signal: bool = False
    wait: bool = False
    prefetch: bool = False


OFF = PdlPolicy()
SCOPES = ("all", "gemm")
QUIET_KERNELS = ("attention.combine",)
QUIET_DEFAULT = ("attention.combine",)
_SETTING: ContextVar[tuple[bool, bool, str, frozenset[str]]] = ContextVar(
    "mxfuse_pdl", default=(True, False, "all", frozenset(QUIET_DEFAULT))
)


@contextmanager
def programmatic_launch(
    enabled: bool, *, prefetch: bool = False, scope: str = "all", quiet: tuple[str, ...] = QUIET_DEFAULT
) -> Iterator[None]:
    """Launches inside use PDL (``enabled``), the GEMMs requesting their weight rows before their wait
    (``prefetch``). ``scope``: ``"all"``, every kernel of the step is a dependent; ``"gemm"``, only the
    weight-streaming GEMMs are, the other kernels only signal (at their start). ``quiet``: names from
    ``QUIET_KERNELS`` whose launches do not signal early (their dependents launch as they exit); ``()``: every
    kernel that signals by design does."""
    for name, value in (("enabled", enabled), ("prefetch", prefetch)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool; got {type(value).__name__}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}; got {scope!r}")
    if isinstance(quiet, str) or not all(q in QUIET_KERNELS for q in quiet):
        raise ValueError(f"quiet must be a tuple of names from {QUIET_KERNELS}; got {quiet!r}")
    token = _SETTING.set((enabled, prefetch, scope, frozenset(quiet)))
    try:
        yield
    finally:
        _SETTING.reset(token)


@functools.cache
def _capability_ok(index: int) -> bool:
    return torch.cuda.get_device_capability(index)[0] >= 9


def _supported(device: torch.device) -> bool:
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    return _capability_ok(torch.cuda.current_device() if device.index is None else device.index)


def pdl_policy(device: torch.device, *, gemm: bool = False, kernel: str | None = None) -> PdlPolicy:
    """The policy for a launch on ``device`` under the current setting (``OFF`` where unsupported);
    ``gemm``: the launch is a weight-streaming GEMM's; ``kernel``: its name in ``QUIET_KERNELS``, if
    it has one (a quiet one does not signal)."""
    if kernel is not None and kernel not in QUIET_KERNELS:
        raise ValueError(f"kernel must be None or one of {QUIET_KERNELS}; got {kernel!r}")
    enabled, prefetch, scope, quiet = _SETTING.get()
    if not enabled or not _supported(device):
        return OFF
    signal = kernel not in quiet
    if scope == "gemm" and not gemm:
        return PdlPolicy(signal=signal)
    return PdlPolicy(signal=signal, wait=True, prefetch=prefetch and gemm)
