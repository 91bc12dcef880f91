"""Graph-safe weight updates: copy into the tensor a captured CUDA graph reads, rebind only when impossible.

A captured CUDA graph holds raw device addresses. A reload that assigns a new tensor to a module
attribute leaves every captured graph reading the old storage: the outputs silently stay those of the old
weights. ``copy_or_rebind_param`` copies in place whenever it can (same shape, dtype and device) and,
when it cannot, rebinds and says so: in its return value and in a ``linear.rebind`` witness record,
since graphs captured before must be captured again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from mxfuse.witness import emit

__all__ = ["ParamUpdate", "can_copy_into", "copy_or_rebind_param"]

Action = Literal["new", "copied", "rebound", "removed"]


@dataclass(frozen=True)
class ParamUpdate:
    """What ``copy_or_rebind_param`` did to ``name``.

    ``action``: ``"new"`` (there was no tensor: registered), ``"copied"`` (same storage, new values: graphs
    stay valid), ``"rebound"`` (a new tensor replaced the old one: re-capture graphs) or ``"removed"`` (a
    layer dropped a tensor its new weights do not use: re-capture graphs). ``reason`` says why.
    """

    name: str
    action: Action
    reason: str

    @property
    def graph_safe(self) -> bool:
        """True when a graph captured before the update reads the new values (nothing was rebound)."""
        return self.action in ("new", "copied")


def can_copy_into(old: torch.Tensor, value: torch.Tensor) -> bool:
    """The rule: ``value`` can be copied into ``old`` in place when shape, dtype and device all match."""
    return old.shape == value.shape and old.dtype == value.dtype and old.device == value.device


def _describe(t: torch.Tensor) -> str:
    return f"{t.dtype} {tuple(t.shape)} on {t.device}"


def copy_or_rebind_param(
    module: nn.Module, name: str, value: torch.Tensor, *, site: str | None = None
) -> ParamUpdate:
    """Put ``value`` into ``module.<name>`` (a parameter or a buffer), keeping its storage when possible.

    * no tensor there (absent or None): register ``value`` as a parameter (``requires_grad=False``): "new";
    * same shape, dtype and device: ``copy_`` in place (data pointer, strides and padding kept): "copied";
    * otherwise: replace it (a parameter stays a parameter, a buffer a buffer): "rebound", and a
      ``linear.rebind`` witness record (``site``, ``param``, ``old``, ``new``) is emitted.

    ``value`` is used as given for "new" and "rebound" (not copied): pass a tensor the module may own.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module; got {type(module).__name__}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an attribute name; got {name!r}")
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"value must be a torch.Tensor; got {type(value).__name__}")
    if name not in module._parameters and name not in module._buffers and hasattr(module, name):
        raise ValueError(
            f"name {name!r} is an attribute of {type(module).__name__} that is not a tensor slot"
        )

    is_buffer = name in module._buffers
    old = module._buffers.get(name) if is_buffer else module._parameters.get(name)
    if old is None:
        _bind(module, name, value, is_buffer=is_buffer)
        return ParamUpdate(name, "new", f"{name}: registered {_describe(value)}")
    if can_copy_into(old, value):
        with torch.no_grad():
            old.copy_(value)
        return ParamUpdate(name, "copied", f"{name}: copied in place ({_describe(value)})")

    changed = [
        what
        for what, differs in (
            ("shape", old.shape != value.shape),
            ("dtype", old.dtype != value.dtype),
            ("device", old.device != value.device),
        )
        if differs
    ]
    reason = (
        f"{name}: {' and '.join(changed)} changed ({_describe(old)} -> {_describe(value)}); the tensor was "
        "replaced, so CUDA graphs captured before this reload must be captured again"
    )
    _bind(module, name, value, is_buffer=is_buffer)
    emit("linear.rebind", reason, site=site, param=name, old=_describe(old), new=_describe(value))
    return ParamUpdate(name, "rebound", reason)


def _bind(module: nn.Module, name: str, value: torch.Tensor, *, is_buffer: bool) -> None:
    if is_buffer:
        module.register_buffer(name, value)
    else:
        # detach() shares the storage; inference weights never need a gradient (and fp8 ones cannot have one).
        module.register_parameter(name, nn.Parameter(value.detach(), requires_grad=False))
