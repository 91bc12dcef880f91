"""gpumatrix: the hardware-gated GPU test matrix.

Importing this package never imports torch or probes a GPU: the registry, the CLI and the
/rerun-test bot run on plain runners where torch is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["GpumatrixError", "register"]

__version__ = "0.1.0"


class GpumatrixError(Exception):
    """Base class of every error gpumatrix raises on bad input or configuration."""


def register(*, on: Sequence[str], gpus: int = 1, est_time: float) -> None:
    """Declare where this test file runs; a no-op at run time.

    Call once at module top level with literal arguments::

        register(on=("h100", "b200"), gpus=1, est_time=40)   # seconds on one runner

    The registry is built by parsing files with ``ast``, never by importing them (see
    ``gpumatrix.registry``), so the call itself does nothing.
    """
    del on, gpus, est_time
