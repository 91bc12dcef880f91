"""The grouped low-rank output projection wo_a of DeepSeek-V4-family attention, with an MXFP8 epilogue.

The heads' outputs ``o`` ``[T, G*r]`` (G groups of r features) are projected per group by ``wo_a[g]``
``[R, r]``::

    z[t, g, d] = sum_k dequant(a)[t, g*r + k] * dequant(w)[g, d, k]        (fp32 accumulation)

and ``z`` viewed ``[T, G*R]`` is wo_b's input. ``grouped_wo_a`` writes either bf16 ``z`` or, fused into
its epilogue, the MXFP8 pair of ``z`` that wo_b's GEMM reads, quantized from the bf16-rounded ``z`` with
``mxfuse.formats`` rules: bit for bit ``quantize_mxfp8(z.view(T, G*R))``. R must be a multiple of 128
so that no packed scale word straddles two groups.

CUDA tensors run a kernel (``kernel=``): ``"triton"``, the Triton kernel (``mxfuse.kernels.grouped_wo_a``,
sm_89+), or ``"gluon"``, the Gluon kernel on the Gluon decode GEMM's mainloop
(``mxfuse.kernels.grouped_wo_a.gluon_device``, sm_90 only, weights whose blocks convert to bf16 exactly);
``"auto"`` (the default) takes Gluon only where its measured table (``grouped_wo_a/gluon_configs.json``,
empty until a GPU run fills it) names the device, ``[G*R, r]`` and T, else Triton (``choose_wo_a_kernel``).
Both write the same outputs under the same contract. CPU tensors run ``grouped_wo_a_reference`` and
quantize its ``z`` with ``quantize_mxfp8``. Each call emits a witness record: ``einsum.wo_a.kernel.pair``
or ``einsum.wo_a.kernel.bf16`` (its ``backend`` names the kernel, ``reason`` why), or
``einsum.wo_a.reference``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mxfuse import MxfuseUnavailableError
from mxfuse.formats import (
    BLOCK_SIZE,
    INPUT_DTYPES,
    MxTensor,
    ScaleLayout,
    ScaleRounding,
    as_mxtensor,
    e8m0_to_float,
    mxtensor_out,
    parse_scale_layout,
    parse_scale_rounding,
)
from mxfuse.gemm.backend import import_optional
from mxfuse.gemm.weights import quantize_weight
from mxfuse.kernels import quantize_mxfp8
from mxfuse.kernels.gemm.gluon_launch import GluonConfig, fold_nan_codes, weight_in_window
from mxfuse.kernels.gemm.launch import device_facts
from mxfuse.kernels.grouped_wo_a import (
    TICKETS,
    WORD_COLUMNS,
    WoAConfig,
    WoAWeight,
    default_config,
    launch_grouped_wo_a,
)
from mxfuse.kernels.grouped_wo_a.gluon_launch import (
    WO_A_GLUON_TABLE_FILE,
    default_wo_a_gluon_config,
    launch_grouped_wo_a_gluon,
    measured_wo_a_gluon_win,
)
from mxfuse.witness import emit

__all__ = [
    "WO_A_KERNELS",
    "WoAKernelChoice",
    "WoAWeight",
    "choose_wo_a_kernel",
    "grouped_wo_a",
    "grouped_wo_a_reference",
    "prepare_wo_a_weight",
]

_MIN_CAPABILITY = (8, 9)  # cvt.rn.satfinite.e4m3x2.f32 in the epilogue
_GLUON_CAPABILITY = (9, 0)  # wgmma and TMA as Gluon's Hopper module emits them (sm_90a)
_GLUON_INSTALL = "it ships in triton >= 3.6 (triton.experimental.gluon)"
WO_A_KERNELS = ("auto", "triton", "gluon")


@dataclass(frozen=True)
class WoAKernelChoice:
    """Which kernel a CUDA call runs (``"triton"`` or ``"gluon"``), why, and the Gluon configuration the
    measured table gave (None: the Triton kernel, or Gluon by name without a table entry)."""

    kernel: str
    reason: str
    gluon_config: GluonConfig | None = None


def choose_wo_a_kernel(
    requested: str,
    *,
    capability: tuple[int, int],
    gluon_import: tuple[bool, str],
    device_name: str | None,
    t: int,
    w: WoAWeight,
) -> WoAKernelChoice:
    """The kernel for a CUDA call: ``requested`` (``WO_A_KERNELS``) against the device's compute
    ``capability``, whether Gluon's Hopper module imports (``(ok, why not)``), the device's name (for the
    measured table), ``t`` tokens and the weight. Pure: no device is touched.

    ``"triton"`` is Triton. ``"gluon"`` is Gluon, or raises: ``MxfuseUnavailableError`` where it cannot
    run (not sm_90, no Gluon), ValueError for a weight it cannot take (naming ``w`` and why). ``"auto"``
    is Gluon only where it can run, takes the weight and the table measured it faster at this T; else
    Triton, saying why Gluon was passed over.
    """
    if requested not in WO_A_KERNELS:
        raise ValueError(f"kernel must be one of {WO_A_KERNELS}; got {requested!r}")
    if requested == "triton":
        return WoAKernelChoice("triton", "named: kernel='triton'")
    cannot = None
    if capability != _GLUON_CAPABILITY:
        cannot = (
            f"the Gluon kernel uses sm_90a's wgmma and TMA; this device is sm_{capability[0]}{capability[1]}"
        )
    elif not gluon_import[0]:
        cannot = gluon_import[1]
    unfit = None
    if not w.in_window:
        unfit = f"w (its scale bytes) cannot be used by the Gluon kernel: {w.window_reason}"
    elif w.k % 64:
        unfit = f"w: the Gluon kernel needs r (columns per group) a multiple of 64; got r = {w.k}"
    if requested == "gluon":
        if cannot:
            raise MxfuseUnavailableError(f"kernel 'gluon' cannot run here: {cannot}")
        if unfit:
            raise ValueError(unfit)
        config = measured_wo_a_gluon_win(device_name, w.groups, w.n, w.k, t)
        return WoAKernelChoice("gluon", "named: kernel='gluon'", config)
    if cannot or unfit:
        return WoAKernelChoice("triton", f"auto: Gluon passed over: {cannot or unfit}")
    config = measured_wo_a_gluon_win(device_name, w.groups, w.n, w.k, t)
    if config is None:
        return WoAKernelChoice(
            "triton",
            f"auto: {WO_A_GLUON_TABLE_FILE} has no measured Gluon win for G*R x r = {w.groups * w.n} x {w.k} "
            f"at T = {t} on {device_name} (name kernel='gluon' to use it)",
        )
    return WoAKernelChoice(
        "gluon", f"auto: {WO_A_GLUON_TABLE_FILE} measured Gluon faster on {device_name}", config
    )


def prepare_wo_a_weight(
    weight: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    groups: int | None = None,
    rounding: ScaleRounding | str = ScaleRounding.RCEIL,
) -> WoAWeight:
    """A ``WoAWeight`` from a float wo_a weight or a native MXFP8 checkpoint one.

    ``weight`` is ``[G, R, r]``, or the checkpoint's flat ``[G*R, r]`` with ``groups=G``:
    bf16/fp16/fp32 (quantized per 1x32 block with ``rounding``), or float8_e4m3fn with ``scale`` holding
    E8M0 bytes (uint8 or float8_e8m0fnu) per 1x32 block (``[G, R, r/32]`` / ``[G*R, r/32]``) or 32x32
    block (``[G, R/32, r/32]`` / ``[G*R/32, r/32]``, expanded per row). R must be a multiple of 128.
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor; got {type(weight).__name__}")
    if weight.dim() == 3:
        g, n, k = weight.shape
        if groups is not None and groups != g:
            raise ValueError(
                f"groups must be None or {g} for a weight [G, R, r] of shape {tuple(weight.shape)}"
            )
    elif weight.dim() == 2:
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"groups must be an int >= 1 with a flat weight [G*R, r]; got {groups!r}")
        if weight.shape[0] % groups:
            raise ValueError(
                f"weight.shape[0] (G*R) must be a multiple of groups = {groups}; got {weight.shape[0]}"
            )
        g, n, k = groups, weight.shape[0] // groups, weight.shape[1]
    else:
        raise ValueError(f"weight must be [G, R, r] or [G*R, r]; got shape {tuple(weight.shape)}")
    if n == 0 or n % WORD_COLUMNS:
        raise ValueError(
            f"weight: R (rows per group) must be a positive multiple of {WORD_COLUMNS} so that no output "
            f"scale word straddles two groups; got R = {n}"
        )
    flat_scale = scale
    if isinstance(scale, torch.Tensor) and scale.dim() == 3:
        if scale.shape[0] != g:
            raise ValueError(f"scale.shape[0] must be the group count {g}; got shape {tuple(scale.shape)}")
        # Blocks of 32 rows never straddle groups (R % 128 == 0), so group-major flattening keeps them.
        flat_scale = scale.reshape(g * scale.shape[1], scale.shape[2])
    q, s = quantize_weight(weight.reshape(g * n, k), flat_scale, rounding=rounding)
    # Blocks holding an E4M3 NaN code carry byte 0xFF (the same outputs: NaN in that row's z for every
    # token): the Gluon kernel's conversion relies on it (gemm.gluon_launch.fold_nan_codes).
    storage = fold_nan_codes(q, s).view(g, n, k // BLOCK_SIZE).transpose(1, 2).contiguous()
    tickets = torch.zeros(TICKETS, dtype=torch.int32, device=q.device)
    in_window, why = weight_in_window(q, s)  # read once, here: the Gluon kernel needs exact bf16 weights
    return WoAWeight(q.view(g, n, k), storage, tickets, in_window, why)


def _check_a(a: object, w: WoAWeight, scale_layout: ScaleLayout | str | None) -> MxTensor:
    if isinstance(a, tuple | list) and len(a) == 2 and isinstance(a[0], torch.Tensor):
        if a[0].dtype != torch.float8_e4m3fn or a[0].dim() != 2:
            raise ValueError(
                f"a[0] must be a 2-D float8_e4m3fn tensor [T, G*r]; got {a[0].dtype} {tuple(a[0].shape)}"
            )
        if a[0].device != w.device:
            raise ValueError(f"a must be on the weight's device {w.device}; got {a[0].device}")
    mx = as_mxtensor(a, scale_layout=scale_layout, argument="a")
    _check_columns(mx.data, w)
    return mx


def _check_columns(a: torch.Tensor, w: WoAWeight) -> None:
    if a.shape[1] != w.groups * w.k:
        raise ValueError(
            f"a must have G * r = {w.groups} * {w.k} = {w.groups * w.k} columns for this weight (one slice "
            f"of r per group); got {a.shape[1]}: group count or group width mismatch"
        )
    if a.device != w.device:
        raise ValueError(f"a must be on the weight's device {w.device}; got {a.device}")


def grouped_wo_a_reference(
    a: MxTensor | tuple[torch.Tensor, torch.Tensor],
    w: WoAWeight,
    *,
    scale_layout: ScaleLayout | str | None = None,
) -> torch.Tensor:
    """bf16 ``z`` ``[T, G, R]``: both operands dequantized to fp32, one fp32 einsum (no TF32), rounded.

    Plain torch on any device. ``a`` is an ``MxTensor`` ``[T, G*r]`` or a ``(q, scale)`` tuple (its layout
    ``scale_layout``, or told from the scale). NaN blocks dequantize to NaN and spread to every output
    they touch.
    """
    if not isinstance(w, WoAWeight):
        raise TypeError(f"w must be a WoAWeight (see prepare_wo_a_weight); got {type(w).__name__}")
    mx = _check_a(a, w, scale_layout)
    t = mx.shape[0]
    a32 = mx.dequantize().view(t, w.groups, w.k)
    w32 = w.qweight.to(torch.float32) * e8m0_to_float(w.scale_e8m0).repeat_interleave(BLOCK_SIZE, dim=-1)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # TF32 would round the operands to 10 mantissa bits
    try:
        z = torch.einsum("tgk,gdk->tgd", a32, w32)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    return z.to(torch.bfloat16).contiguous()


def grouped_wo_a(
    a: torch.Tensor | MxTensor | tuple[torch.Tensor, torch.Tensor],
    w: WoAWeight,
    *,
    out: torch.Tensor | None = None,
    out_pair: MxTensor | tuple[torch.Tensor, torch.Tensor] | None = None,
    scale_layout: ScaleLayout | str | None = None,
    out_scale_layout: ScaleLayout | str | None = None,
    rounding: ScaleRounding | str | None = None,
    kernel: str = "auto",
) -> torch.Tensor | MxTensor:
    """The grouped wo_a projection of ``a`` by ``w``: bf16 ``z`` ``[T, G, R]`` or wo_b's input, an MxTensor.

    ``a``: an ``MxTensor`` ``[T, G*r]`` (the attention's output), a ``(q, scale)`` tuple (converted once;
    its layout ``scale_layout``, or told from the scale), or a bf16/fp16/fp32 ``[T, G*r]`` tensor,
    quantized first with ``quantize_mxfp8`` (``rounding``, deepgemm scales). ``w``: a ``WoAWeight`` on
    ``a``'s device.

    Output, written without allocating when a buffer is given (CUDA-graph capturable):

    * ``out``: bf16 ``[T, G, R]``, contiguous; returned.
    * ``out_pair``: an ``MxTensor`` ``[T, G*R]`` (``MxTensor.empty``) or a ``(q, scale)`` tuple (its layout
      ``out_scale_layout``, or told from the scale), every byte written, padding included; returned as
      an MxTensor. Bit for bit ``quantize_mxfp8(z.view(T, G*R), rounding=rounding)`` of the bf16 ``z``
      ``out`` gets; ``rounding`` None takes ``out_pair``'s own, else RCEIL.
    * neither: a new MxTensor in ``out_scale_layout`` when it is given, else a new bf16 ``z``.

    ``kernel``: ``"auto"``, ``"triton"`` or ``"gluon"`` on CUDA tensors (module docstring,
    ``choose_wo_a_kernel``); CPU tensors run the reference whatever is asked, except ``"gluon"``, which
    raises ``MxfuseUnavailableError`` there as anywhere it cannot run.

    Bad arguments raise ValueError or TypeError naming the argument, before anything is written.
    CUDA tensors need sm_89+ (else ``MxfuseUnavailableError``); CPU tensors run the reference.
    """
    rounding = None if rounding is None else parse_scale_rounding(rounding)
    if out_scale_layout is not None:
        out_scale_layout = parse_scale_layout(out_scale_layout, argument="out_scale_layout")
    if not isinstance(w, WoAWeight):
        raise TypeError(f"w must be a WoAWeight (see prepare_wo_a_weight); got {type(w).__name__}")
    if isinstance(a, torch.Tensor):
        if scale_layout is not None:
            raise ValueError(
                "scale_layout describes an MXFP8 pair a; a is a plain tensor, so it must be None"
            )
        if a.dtype not in INPUT_DTYPES or a.dim() != 2:
            raise ValueError(
                "a must be an MxTensor, an MXFP8 pair or a 2-D bf16/fp16/fp32 tensor [T, G*r]; "
                f"got {a.dtype} {tuple(a.shape)}"
            )
        _check_columns(a, w)
        if a.shape[1] > 1 and a.stride(1) != 1 or a.shape[0] > 1 and a.stride(0) < a.shape[1]:
            raise ValueError(f"a must have contiguous, non-overlapping rows; got strides {tuple(a.stride())}")
        # Quantized with deepgemm scales: the layout the stream mainloop reads fastest (H200, T = 4, G = 8:
        # 24.3 us with the quantize, against 31.7 with E8M0 scales; the same at T = 1 and 16).
        a_mx, a_layout = None, ScaleLayout.DEEPGEMM
        t = a.shape[0]
    else:
        a_mx = _check_a(a, w, scale_layout)
        a_layout = a_mx.scale_layout
        t = a_mx.shape[0]
    device = w.device
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"w must be on a CUDA device or the CPU; got {device}")
    gr = w.groups * w.n
    if out is not None and out_pair is not None:
        raise ValueError("give out (bf16 z) or out_pair (the MXFP8 pair of z), not both")
    pair = None
    if out is not None:
        if out_scale_layout is not None:
            raise ValueError("out_scale_layout describes out_pair; with out (bf16 z) it must be None")
        _check_out(out, t=t, w=w)
    elif out_pair is not None or out_scale_layout is not None:
        pair = mxtensor_out(
            out_pair,
            m=t,
            k=gr,
            device=device,
            scale_layout=out_scale_layout,
            rounding=rounding,
            argument="out_pair",
        )
        rounding = pair.rounding
    else:
        out = torch.empty((t, w.groups, w.n), dtype=torch.bfloat16, device=device)
    rounding = rounding or ScaleRounding.RCEIL
    choice, config = _kernel_config(device, t, w, kernel)
    _emit(
        device,
        t,
        w,
        None if pair is None else pair.scale_layout,
        a_layout,
        choice,
        config,
        given_pair=a_mx is not None,
    )
    if t == 0:
        return pair if pair is not None else out
    if a_mx is None:
        a_mx = quantize_mxfp8(a, rounding=rounding, scale_layout=a_layout)
    if config is None:
        z = grouped_wo_a_reference(a_mx, w)
        if pair is not None:
            return quantize_mxfp8(z.view(t, gr), out=pair)
        out.copy_(z)
        return out
    with torch.cuda.device(device):
        if isinstance(config, GluonConfig):
            launch_grouped_wo_a_gluon(a_mx, w, z=out, pair=pair, config=config)
        else:
            launch_grouped_wo_a(a_mx, w, z=out, pair=pair, config=config)
    return pair if pair is not None else out


def _check_out(out: object, *, t: int, w: WoAWeight) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor; got {type(out).__name__}")
    shape = (t, w.groups, w.n)
    if out.dtype != torch.bfloat16 or tuple(out.shape) != shape:
        raise ValueError(
            f"out must be a bfloat16 tensor of shape {shape}; got {out.dtype} {tuple(out.shape)}"
        )
    if out.device != w.device:
        raise ValueError(f"out must be on {w.device}; got {out.device}")
    if out.numel() and not out.is_contiguous():
        raise ValueError(f"out must be contiguous; got strides {tuple(out.stride())}")


def _kernel_config(
    device: torch.device, t: int, w: WoAWeight, kernel: str
) -> tuple[WoAKernelChoice | None, WoAConfig | GluonConfig | None]:
    """The kernel and its configuration on a CUDA device (``choose_wo_a_kernel``); (None, None) on the
    CPU (the reference runs), where naming ``"gluon"`` raises."""
    if kernel not in WO_A_KERNELS:
        raise ValueError(f"kernel must be one of {WO_A_KERNELS}; got {kernel!r}")
    if device.type == "cpu":
        if kernel == "gluon":
            raise MxfuseUnavailableError(
                "kernel 'gluon' cannot run here: the Gluon grouped wo_a runs on CUDA sm_90 devices; this is cpu"
            )
        return None, None
    capability = torch.cuda.get_device_capability(device)
    if capability < _MIN_CAPABILITY:
        sm = f"sm_{capability[0]}{capability[1]}"
        raise MxfuseUnavailableError(
            f"grouped_wo_a needs FP8 conversion (cvt.e4m3x2, sm_89+) on CUDA; {device} is {sm}"
        )
    device_name, sm_count = device_facts(device)
    gluon_import: tuple[bool, str] = (True, "")
    if capability == _GLUON_CAPABILITY:  # imported only where it could run
        module, why = import_optional(
            "triton.experimental.gluon.language.nvidia.hopper", "warpgroup_mma", install=_GLUON_INSTALL
        )
        gluon_import = (module is not None, why)
    choice = choose_wo_a_kernel(
        kernel, capability=capability, gluon_import=gluon_import, device_name=device_name, t=t, w=w
    )
    if choice.kernel == "gluon":
        return choice, choice.gluon_config or default_wo_a_gluon_config(
            t, w.groups, w.n, w.k, num_sms=sm_count
        )
    return choice, default_config(t, w.groups, w.n, w.k, sm_count=sm_count)


def _emit(
    device: torch.device,
    t: int,
    w: WoAWeight,
    out_layout: ScaleLayout | None,
    a_layout: ScaleLayout,
    choice: WoAKernelChoice | None,
    config: WoAConfig | GluonConfig | None,
    *,
    given_pair: bool,
) -> None:
    fields = {
        "input": "pair" if given_pair else "quantized here",
        "rows": t,
        "groups": w.groups,
        "n": w.n,
        "k": w.k,
        "scale_layout": a_layout.value,
        "out_scale_layout": None if out_layout is None else out_layout.value,
    }
    if choice is None or config is None:
        what = "and quantize_mxfp8 the pair" if out_layout is not None else "bf16 z"
        emit(
            "einsum.wo_a.reference",
            f"CPU tensors: the torch reference ran (dequantize + fp32 einsum, {what})",
            backend="torch",
            **fields,
        )
        return
    if isinstance(config, GluonConfig):
        name = "Gluon"
        config_fields = {"split": config.split_k, "block": (config.block_t, config.block_n, config.block_k)}
    else:
        name = "Triton"
        config_fields = {"split": config.split, "block": (config.block_m, config.block_n, config.block_k)}
    config_fields["kernel_reason"] = choice.reason
    if out_layout is not None:
        emit(
            "einsum.wo_a.kernel.pair",
            f"CUDA tensors on {device}: the {name} grouped kernel's epilogue wrote the {out_layout.value} pair",
            backend=choice.kernel,
            **fields,
            **config_fields,
        )
    else:
        emit(
            "einsum.wo_a.kernel.bf16",
            f"CUDA tensors on {device}: the {name} grouped kernel wrote bf16 z",
            backend=choice.kernel,
            **fields,
            **config_fields,
        )
