"""The ``gluon`` backend: the Gluon decode MXFP8 GEMM (``mxfuse.kernels.gemm.gluon_decode``) on Hopper, sm_90.

Swap-AB, the weight converted to bf16 in registers as wgmma's A operand, the activation dequantized to
bf16 once per call, one fp32 accumulator, split-K summed in split order (the kernel's docstring has the
numerics). It reads ``a``'s scales in any of the three layouts and keeps the weight's scales
K-group-major, uint8 ``[K/32, N]``, as the ``triton`` backend does.

Rules:

* ``available``: a CUDA device of compute capability 9.0 (wgmma and TMA as Gluon's Hopper module emits
  them, ``sm_90a``) and ``triton.experimental.gluon`` importable with its Hopper module.
* ``supports_shape``: K a positive multiple of 32; N with a 16-byte TMA row pitch is any N (E4M3 rows of
  K bytes, K % 32 == 0), so any N.
* ``supports_weight``: every 32-block with nonzero codes has a scale byte in ``[W_LO, W_HI]`` or 0xFF,
  so that its bf16 conversion is exact (``gluon_launch.weight_in_window``, checked once when the weight
  is prepared; ``mxfp8_gemm`` refuses it once written in place since: ``MxWeight.checked``). Activations
  outside the window are handled per call, exactly (``gluon_prep``).
* The automatic route takes it only where the measured table (``gluon_configs.json``) names the device
  and ``[N, K]`` (``measured_win``); the table is empty until a GPU sweep fills it.
"""

from __future__ import annotations

import torch

from mxfuse.formats import BLOCK_SIZE, MxTensor, ScaleLayout
from mxfuse.gemm import backend as gemm_backend
from mxfuse.gemm.backend import Availability, import_optional, sm
from mxfuse.gemm.weights import MxWeight

__all__ = ["GLUON", "GLUON_CAPABILITY"]

GLUON_CAPABILITY = (9, 0)  # sm_90a: wgmma, TMA; other archs lack one or the other as the kernel uses them
_INSTALL = "it ships in triton >= 3.6 (triton.experimental.gluon)"


class _GluonBackend:
    name = "gluon"
    activation_layouts = (ScaleLayout.DEEPGEMM, ScaleLayout.E8M0, ScaleLayout.SWIZZLED_128X4)

    def available(self, device: torch.device) -> Availability:
        if device.type != "cuda":
            return Availability(
                False, f"the Gluon MXFP8 GEMM runs on CUDA sm_90 devices; this is {device.type}"
            )
        capability = gemm_backend.cuda_capability(device)
        if capability is None:
            return Availability(False, "CUDA is not available in this process")
        if capability != GLUON_CAPABILITY:
            return Availability(
                False, f"the Gluon kernel uses sm_90a's wgmma and TMA; this device is {sm(capability)}"
            )
        module, why = import_optional(
            "triton.experimental.gluon.language.nvidia.hopper", "warpgroup_mma", install=_INSTALL
        )
        if module is None:
            return Availability(False, why)
        return Availability(True, f"Gluon wgmma and TMA on {sm(capability)}")

    def supports_shape(self, n: int, k: int) -> Availability:
        if k <= 0 or k % BLOCK_SIZE:
            return Availability(False, f"K must be a positive multiple of {BLOCK_SIZE}; got {k}")
        return Availability(True, f"any N; K % {BLOCK_SIZE} == 0 (16-byte TMA row pitches)")

    def supports_weight(self, qweight: torch.Tensor, scale_e8m0: torch.Tensor) -> Availability:
        from mxfuse.kernels.gemm.gluon_launch import weight_in_window

        ok, why = weight_in_window(qweight, scale_e8m0)
        return Availability(ok, why)

    def measured_win(self, device: torch.device, n: int, k: int) -> Availability:
        """Whether the checked-in table says this kernel beats the Triton kernels on ``device`` for an
        ``[n, k]`` weight: the one condition under which ``auto`` may choose it."""
        from mxfuse.kernels.gemm.configs import entries_owner
        from mxfuse.kernels.gemm.gluon_launch import GLUON_TABLE_FILE, gluon_table, measured_gluon_win
        from mxfuse.kernels.gemm.launch import device_facts

        # The device's name is read only when some device has an entry for the shape.
        listed = any((n, k) in shapes for shapes in gluon_table().values())
        name = device_facts(device)[0] if listed else None
        if not listed or measured_gluon_win(name, n, k) is None:
            return Availability(
                False,
                f"not chosen automatically: {GLUON_TABLE_FILE} has no measured win for [N, K] = [{n}, {k}] "
                f"on {name or device} (name backend='gluon' to use it)",
            )
        owner = entries_owner(gluon_table(), name)
        measured_on = name if owner == (name or "") else f"{owner}, {name}'s stand-in"
        return Availability(True, f"{GLUON_TABLE_FILE} measured it faster for [{n}, {k}] on {measured_on}")

    def weight_scale(self, scale_e8m0: torch.Tensor, *, n: int, k: int) -> torch.Tensor:
        """K-group-major ``[K/32, N]`` of the bytes given: ``prepare_mxfp8_weight`` gives this backend
        its bytes with every block that holds an E4M3 NaN code at 0xFF (``FOLDS_NAN_CODES``), which the
        kernel's conversion relies on."""
        from mxfuse.kernels.gemm import weight_scale_kgroup_major

        return weight_scale_kgroup_major(scale_e8m0)

    def run(self, a: MxTensor, w: MxWeight, out: torch.Tensor) -> None:
        from mxfuse.kernels.gemm.gluon_launch import GluonOperands, launch_gluon_decode

        with torch.cuda.device(a.device):
            launch_gluon_decode(GluonOperands(a, w.qweight, w.scale, out))


GLUON = _GluonBackend()
