"""gpumatrix: the hardware-gated GPU test matrix.

Importing this package never imports torch or probes a GPU: the registry, the CLI and the
/rerun-test bot run on plain runners where torch is not installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["GpumatrixError", "UsageError", "register"]

__version__ = "0.1.0"


class GpumatrixError(Exception):
    """Base class of the errors gpumatrix raises about what a person configured, ran or asked for.

    That is ci/matrix.yaml, test registrations, GPUMATRIX_* variables, command-line usage, leases,
    test runs and the bot's GitHub and git calls. Each error carries `exit_code`, the status the
    `gpumatrix` command exits with (the table is in `gpumatrix.cli`): 1, a failure found, unless a
    subclass says otherwise. Bad arguments to the Python API (`gpumatrix.compare`,
    `gpumatrix.running.leases.lease_gpus`, ...) are `ValueError` or `TypeError` naming the argument, as
    Python's own functions raise them.
    """

    exit_code: int = 1


class UsageError(GpumatrixError):
    """Invalid usage or configuration (exit 2): an option, ci/matrix.yaml, a GPUMATRIX_* variable,
    an input file, or a machine that is not the runner it was asked to be."""

    exit_code = 2


def register(
    *,
    on: Sequence[str],
    gpus: int = 1,
    est_time: float | Mapping[str, float],
    suite: str = "pr",
    disabled: str | None = None,
    disabled_on: Mapping[str, str] | None = None,
    flaky: Mapping[str, str] | None = None,
    gpu: str = "shared",
) -> None:
    """Declare where, when and whether this test file runs; a no-op at run time.

    Call once at module top level with literal arguments::

        register(on=("h100", "b200"), gpus=1, est_time=40)   # seconds on one runner
        register(on=("h100", "b200"), est_time={"h100": 40, "b200": 15})   # seconds per class
        register(on=("b200", "gb300"), gpus=4, est_time=1200, suite="nightly")
        register(on=("cpu",), est_time=3, disabled="hangs on the new runner image; ask @alice")
        register(on=("h100", "gb300"), est_time=40, disabled_on={"gb300": "NaN in split-K, #123"})
        register(on=("h100", "b200"), gpus=2, est_time=90, flaky={"h100": "NCCL timeout, #45"})
        register(on=("h100",), est_time=30, gpu="exclusive")   # each test holds its GPU alone

    The registry is built by parsing files with ``ast``, never by importing them (see
    ``gpumatrix.registry``; docs/registry.md has the rules), so the call itself does nothing.
    """
    del on, gpus, est_time, suite, disabled, disabled_on, flaky, gpu
