"""Which environment variable tells a process which GPUs it may use, per vendor.

A lease (`gpumatrix.running.leases`), a test's child pytest (`gpumatrix.running.child`) and a run narrowed to a
runner's GPU count (`gpumatrix.running.run`) name the devices through the variable the vendor's runtime reads
when it starts in a process:

- NVIDIA: `CUDA_VISIBLE_DEVICES` (indices or `GPU-` UUIDs).
- AMD: `HIP_VISIBLE_DEVICES`, and `CUDA_VISIBLE_DEVICES` to the same devices (HIP reads it too, so a
  value inherited there could contradict the lease). `ROCR_VISIBLE_DEVICES` is left as the machine
  sets it: ROCr applies it first and renumbers what HIP sees, so a container that narrows its GPUs with
  it keeps doing so, and gpumatrix's indices count within what it leaves.
- Intel: `ZE_AFFINITY_MASK` (Level Zero device indices), which torch's `xpu` backend reads.

Detection reads the first of a vendor's variables that is set, as its runtime would.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager

__all__ = ["VISIBILITY_VARIABLES", "narrowed", "visible_environment", "visible_spec"]

VISIBILITY_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "amd": ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "intel": ("ZE_AFFINITY_MASK",),
}


def _variables(vendor: str) -> tuple[str, ...]:
    if vendor not in VISIBILITY_VARIABLES:
        raise ValueError(f"vendor must be one of {', '.join(VISIBILITY_VARIABLES)}, got {vendor!r}")
    return VISIBILITY_VARIABLES[vendor]


def visible_environment(vendor: str, devices: Sequence[str]) -> dict[str, str]:
    """The variables that make a new process of `vendor`'s runtime see exactly `devices`."""
    value = ",".join(devices)
    return dict.fromkeys(_variables(vendor), value)


def visible_spec(vendor: str, environ: Mapping[str, str]) -> str | None:
    """What `environ` tells `vendor`'s runtime to expose: the first of its variables that is set."""
    for name in _variables(vendor):
        if name in environ:
            return environ[name]
    return None


@contextmanager
def narrowed(
    vendor: str, devices: Sequence[str], environ: MutableMapping[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """Set `vendor`'s variables to `devices` in `environ` (this process's by default) for the block, then
    restore each as it was (unset ones unset)."""
    env = os.environ if environ is None else environ
    changes = visible_environment(vendor, devices)
    saved = {name: env.get(name) for name in changes}
    env.update(changes)
    try:
        yield changes
    finally:
        for name, value in saved.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
