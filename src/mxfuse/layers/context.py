"""What kind of forward pass is running: the part of the gate's input a layer cannot see in its tensors.

A layer sees its rows (``x.shape[0]``) but not whether the batch is a decode step, a speculative
target-verify step or a prefill. The caller says so in one of two ways, both explicit:

* per call: ``layer(x, context="decode")`` (a ``ForwardMode``, its string value or a ``ForwardContext``);
* for a whole model step: ``with forward_context("decode"): model(x)`` sets it for every layer called
  inside the block (a ``contextvars.ContextVar``, so threads and asyncio tasks do not see each other's).

A per-call ``context`` wins over the ambient one. With neither, a layer assumes ``DEFAULT_CONTEXT``
(decode: a bare ``layer(x)`` takes the path its request asked for) and its witness record says so
(``mode_from: "default"``). Serving engines set the mode for every step; a prefill that forgets to is
still computed correctly (by the MXFP8 path, up to 2048 rows), and the record shows the mode was assumed.
The pure gate itself (``gating.fused_mxfp8_rows``) assumes nothing: ``context=None`` is a no there.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "DEFAULT_CONTEXT",
    "ForwardContext",
    "ForwardMode",
    "current_forward_context",
    "forward_context",
    "parse_forward_context",
    "resolve_forward_context",
]


class ForwardMode(str, Enum):
    """The kind of batch a forward pass computes (the names serving engines use)."""

    DECODE = "decode"  # one new token per sequence
    TARGET_VERIFY = "target_verify"  # the target model checks a few drafted tokens per sequence
    PREFILL = "prefill"  # a whole prompt
    EXTEND = "extend"  # a prompt continued from a cached prefix (chunked prefill)


@dataclass(frozen=True)
class ForwardContext:
    """``mode`` of this forward pass, and whether the rows are split across ranks (sequence parallel)."""

    mode: ForwardMode
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.mode, ForwardMode):
            object.__setattr__(self, "mode", _parse_mode(self.mode, "mode"))
        if not isinstance(self.sequence_parallel, bool):
            raise TypeError(f"sequence_parallel must be a bool; got {type(self.sequence_parallel).__name__}")


def _parse_mode(value: object, argument: str) -> ForwardMode:
    if isinstance(value, ForwardMode):
        return value
    try:
        return ForwardMode(value)
    except ValueError:
        choices = ", ".join(repr(m.value) for m in ForwardMode)
        raise ValueError(f"{argument} must be one of {choices}; got {value!r}") from None


def parse_forward_context(value: object, *, argument: str = "context") -> ForwardContext | None:
    """``value`` (a ``ForwardContext``, a ``ForwardMode``, its string value or None) as a ``ForwardContext``."""
    if value is None or isinstance(value, ForwardContext):
        return value
    if isinstance(value, ForwardMode | str):
        return ForwardContext(_parse_mode(value, argument))
    raise TypeError(
        f"{argument} must be a ForwardContext, a ForwardMode, one of its string values or None; "
        f"got {type(value).__name__}"
    )


DEFAULT_CONTEXT = ForwardContext(ForwardMode.DECODE)

_current: ContextVar[ForwardContext | None] = ContextVar("mxfuse_forward_context", default=None)


def current_forward_context() -> ForwardContext | None:
    """The context set by the innermost ``forward_context`` block around this call, or None."""
    return _current.get()


def resolve_forward_context(context: object, *, argument: str = "context") -> tuple[ForwardContext, str]:
    """The context a layer call runs with, and where it came from: ``"argument"`` (the call's
    ``context``), ``"forward_context"`` (the innermost ``forward_context`` block) or ``"default"``."""
    given = parse_forward_context(context, argument=argument)
    if given is not None:
        return given, "argument"
    ambient = _current.get()
    if ambient is not None:
        return ambient, "forward_context"
    return DEFAULT_CONTEXT, "default"


@contextmanager
def forward_context(mode: ForwardMode | str, *, sequence_parallel: bool = False) -> Iterator[ForwardContext]:
    """Every layer called inside the block runs with this ``ForwardContext`` unless a call passes its own."""
    context = ForwardContext(_parse_mode(mode, "mode"), sequence_parallel)
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
