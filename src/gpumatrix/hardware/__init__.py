"""The machine: which GPUs are here, of which class, and which of them a process may see.

    detection.py      `Hardware` and `detect()`: class, count, names, compute capability, driver; the
                      pre-flight check that a runner's machine is what it claims
    devices.py        one GPU as a probe sees it, and the probe's interface
    vendor_probes.py  AMD's and Intel's tools (amd-smi, rocm-smi, xpu-smi, sycl-ls) read as text
    known_classes.py  the GPU classes gpumatrix knows by name, for `init` and `register --suggest`
    visibility.py     each vendor's visibility variable (CUDA_VISIBLE_DEVICES, HIP_..., ZE_AFFINITY_MASK)

Nothing is probed at import: detection runs when `detect()` is called, torch only inside it.
"""

from __future__ import annotations

__all__: list[str] = []
