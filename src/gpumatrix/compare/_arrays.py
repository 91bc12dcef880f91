"""Operands of ``gpumatrix.compare``: tensors, arrays and scalars, read in bounded chunks.

Every comparison walks its inputs CHUNK_ELEMENTS at a time, so the float64 temporaries stay bounded
(one float64 copy of a 2**30-element bf16 tensor would need 8 GiB next to the 2 GiB input). torch
is never imported here: a tensor can only exist once its caller imported torch, so tensors are
recognised through ``sys.modules``. numpy and ml_dtypes are imported when an input is read, never
at import, so ``import gpumatrix.compare`` loads neither.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

__all__ = [
    "CHUNK_ELEMENTS",
    "CPU_TENSORS_VIA_NUMPY",
    "Operand",
    "as_caller_array",
    "chunk_bounds",
    "format_index",
    "read_pair",
]

# Elements per chunk: 2**20, 8 MiB per float64 temporary. Swept over 2**18..2**24 for assert_close
# on 16M float32 elements (`python -m benchmarks compare --sweep-chunks`): on a 2-core CPU numpy took 0.03 s
# at 2**18..2**20 and 0.06 s from 2**22 up (temporaries fall out of cache); on an H200 2**20 took
# 2 ms against 7 ms at 2**18 (kernel launches per chunk). On the GPU a 2**28-element tensor needed
# 58 MiB beside its inputs. Tests shrink it to cross chunk boundaries.
CHUNK_ELEMENTS = 1 << 20

# torch runs each CPU op on all cores in lockstep, so on a shared 2-core machine (pytest -n auto on
# a CI runner) one descheduled thread stalls every op: with two busy processes beside it,
# assert_close on 16M float32 CPU tensors took a median 1.3-2.6 s through torch's kernels and
# 0.07-0.17 s through numpy's single thread (benchmarks/RESULTS.md). So CPU tensors are read
# through numpy, sharing memory, whenever numpy (with ml_dtypes for bfloat16 and float8) can hold
# them. Tests switch this off to run the torch code path that GPU tensors take.
CPU_TENSORS_VIA_NUMPY = True

# torch dtypes numpy holds natively; bfloat16 and float8 need ml_dtypes.
_NUMPY_NATIVE = frozenset(
    {
        "bool",
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
    }
)

# The bit views used for ULP and bitwise comparisons, by element size. 1-byte types go through
# uint8 (torch fp8 exposes its codes as `.view(torch.uint8)`); wider ones through the signed
# integer of their width, which every torch build supports, then masked to the unsigned value.
_BIT_VIEWS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def dtype_kind(name: str) -> str:
    """'float', 'int', 'bool' or 'unsupported' for a canonical dtype name."""
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint")):
        return "int"
    # Packed sub-byte floats (torch's float4_e2m1fn_x2) hold two values per element: no
    # elementwise meaning, so they are rejected rather than compared as garbage.
    if name.startswith(("float", "bfloat")) and not name.endswith("_x2"):
        return "float"
    return "unsupported"


@dataclass(frozen=True)
class Operand:
    """One side of a comparison, flattened to 1-D in its own library and dtype."""

    flat: Any  # 1-D contiguous numpy.ndarray or torch.Tensor in the original dtype
    shape: tuple[int, ...]
    dtype: str  # canonical name shared by numpy/ml_dtypes and torch: "float32", "float8_e4m3fn"
    lib: str  # "numpy" or "torch": the library that computes
    device: str  # where chunks are computed; "cpu" for numpy
    source: str  # what the caller passed, for messages: "torch.bfloat16 on cuda:0", "numpy float32"
    tensor_input: bool  # a tensor was among the inputs, so array results go back as tensors

    @property
    def numel(self) -> int:
        return int(self.flat.shape[0])

    @property
    def kind(self) -> str:
        return dtype_kind(self.dtype)

    @property
    def itemsize(self) -> int:
        return int(self.flat.itemsize) if self.lib == "numpy" else int(self.flat.element_size())

    @property
    def xp(self) -> ModuleType:
        """The array module (numpy or torch) whose elementwise functions apply to this operand."""
        return sys.modules[self.lib]

    def describe(self) -> str:
        return self.source

    def float64(self, start: int, stop: int) -> Any:
        """A fresh float64 copy of elements [start, stop) on the compute device (safe to modify)."""
        chunk = self.flat[start:stop]
        if self.lib == "torch":
            torch = sys.modules["torch"]
            return chunk.to(device=self.device, dtype=torch.float64, copy=True)
        return chunk.astype(sys.modules["numpy"].float64)

    def native(self, start: int, stop: int) -> Any:
        """Elements [start, stop) in their own dtype on the compute device (read only)."""
        chunk = self.flat[start:stop]
        return chunk.to(self.device) if self.lib == "torch" else chunk

    def bits(self, start: int, stop: int) -> Any:
        """The bit patterns of elements [start, stop) as same-width integers (read only)."""
        view = _BIT_VIEWS.get(self.itemsize)
        if view is None:
            raise TypeError(f"cannot read the bits of {self.dtype}: element size {self.itemsize} bytes")
        chunk = self.native(start, stop)
        return chunk.view(getattr(self.xp, view))


def as_caller_array(operand: Operand, array: Any) -> Any:
    """A result array in the caller's library: a tensor when a tensor came in, else numpy."""
    if operand.lib == "numpy" and operand.tensor_input:
        return sys.modules["torch"].from_numpy(array)
    return array


def chunk_bounds(numel: int) -> Iterator[tuple[int, int]]:
    """[start, stop) pairs covering range(numel) in CHUNK_ELEMENTS steps (read at call time)."""
    step = CHUNK_ELEMENTS
    for start in range(0, numel, step):
        yield start, min(start + step, numel)


def format_index(flat_index: int, shape: tuple[int, ...]) -> str:
    """The flat index as the multi-dimensional index a person would type: ``(1, 3)``."""
    index: list[int] = []
    for size in reversed(shape):
        flat_index, position = divmod(flat_index, size)
        index.append(position)
    return "(" + ", ".join(str(i) for i in reversed(index)) + ("," if len(index) == 1 else "") + ")"


def quiet(operand: Operand) -> contextlib.AbstractContextManager[Any]:
    """Silences numpy's floating-point warnings (inf - inf, 0 / 0): they are expected here."""
    if operand.lib == "numpy":
        return sys.modules["numpy"].errstate(all="ignore")
    return contextlib.nullcontext()


def _torch_tensor_type() -> type | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None)


def _is_tensor(value: object) -> bool:
    tensor_type = _torch_tensor_type()
    return tensor_type is not None and isinstance(value, tensor_type)


def _is_numpy(value: object) -> bool:
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic))


def _is_scalar(value: object) -> bool:
    return isinstance(value, (bool, int, float))


def _check_kind(name: str, arg: str) -> None:
    if dtype_kind(name) == "unsupported":
        raise TypeError(f"{arg} must have a float, integer or bool dtype, got {name}")


def _source(value: Any) -> str:
    if _is_tensor(value):
        return f"{value.dtype} on {value.device}"
    if _is_numpy(value):
        return f"numpy {value.dtype.name}"
    return f"Python {type(value).__name__}"


def _check_tensor_has_data(tensor: Any, arg: str) -> None:
    """Meta tensors have a shape and no values; nested tensors no single shape: torch raises
    RuntimeError or NotImplementedError deep inside a read of either, so they are refused here."""
    if tensor.is_meta:
        raise TypeError(
            f"{arg} is a meta tensor, which holds no data to compare; compare tensors with values"
        )
    if tensor.is_nested:
        raise TypeError(f"{arg} is a nested tensor; compare its components (tensor.unbind()) one by one")


def _from_torch(tensor: Any, *, arg: str, device: str, source: str) -> Operand:
    name = str(tensor.dtype).removeprefix("torch.")
    _check_kind(name, arg)
    if tensor.layout != sys.modules["torch"].strided:
        raise TypeError(f"{arg} must be a dense (strided) tensor, got layout {tensor.layout}")
    flat = tensor.detach().reshape(-1).contiguous()
    return Operand(flat, tuple(tensor.shape), name, "torch", device, source, tensor_input=True)


def _numpy_array(value: Any, *, arg: str) -> Any:
    import numpy

    if _is_scalar(value):
        try:
            return numpy.asarray(value, dtype=_scalar_dtype(value))
        except OverflowError as exc:
            raise ValueError(f"{arg} must fit in int64, got {value}") from exc
    array = numpy.asarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    _check_kind(array.dtype.name, arg)
    return array


def _from_numpy(array: Any, *, source: str, tensor_input: bool) -> Operand:
    import numpy

    flat = numpy.ascontiguousarray(array.reshape(-1))
    return Operand(flat, tuple(array.shape), array.dtype.name, "numpy", "cpu", source, tensor_input)


def _numpy_to_torch(array: Any, *, arg: str, device: str, source: str) -> Operand:
    """A numpy operand moved into torch (on the CPU) so it can meet a tensor chunk by chunk."""
    import numpy
    import torch

    name = array.dtype.name
    torch_dtype = getattr(torch, name, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise TypeError(f"{arg} has dtype {name}, which torch has no equivalent of; compare it as numpy")
    flat = numpy.ascontiguousarray(array.reshape(-1))
    if flat.dtype.kind == "V":
        # ml_dtypes types (bfloat16, float8_*) are opaque to torch.from_numpy: hand over the bits.
        flat = flat.view(getattr(numpy, _BIT_VIEWS[flat.itemsize]))
        tensor = torch.from_numpy(flat).view(torch_dtype)
    else:
        tensor = torch.from_numpy(flat)
    return Operand(tensor, tuple(array.shape), name, "torch", device, source, tensor_input=True)


def _scalar_dtype(value: bool | int | float) -> str:
    """The dtype a Python scalar is read as; its tolerances follow from it (float: float64's)."""
    if isinstance(value, bool):
        return "bool"
    return "int64" if isinstance(value, int) else "float64"


def _tensor_as_numpy(tensor: Any) -> Any | None:
    """A CPU tensor as a numpy array sharing its memory, or None where numpy cannot hold it."""
    name = str(tensor.dtype).removeprefix("torch.")
    torch = sys.modules["torch"]
    if tensor.layout != torch.strided:
        return None
    try:
        if name in _NUMPY_NATIVE:
            return tensor.detach().numpy()
        import ml_dtypes  # bfloat16 and the float8 types, as numpy dtypes

        ml_type, view = getattr(ml_dtypes, name, None), _BIT_VIEWS.get(tensor.element_size())
        if ml_type is None or view is None:
            return None
        return tensor.detach().view(getattr(torch, view)).numpy().view(ml_type)
    except (ImportError, RuntimeError, TypeError):  # no numpy/ml_dtypes, or a torch without numpy
        return None


def read_pair(actual: object, expected: object) -> tuple[Operand, Operand]:
    """Both inputs as operands of one library, on one compute device.

    numpy computes when no tensor is given (torch is then never imported), and when every tensor
    is on the CPU in a dtype numpy (with ml_dtypes) can hold: see CPU_TENSORS_VIA_NUMPY. Otherwise
    torch computes on the tensor's device (``actual``'s when both are tensors), and numpy arrays
    and scalars travel there chunk by chunk.
    """
    for arg, value in (("actual", actual), ("expected", expected)):
        if not (_is_tensor(value) or _is_numpy(value) or _is_scalar(value)):
            raise TypeError(
                f"{arg} must be a torch.Tensor, a numpy array or a Python bool/int/float, "
                f"got {type(value).__name__}"
            )
        if _is_tensor(value):
            _check_tensor_has_data(value, arg)
    values = {"actual": actual, "expected": expected}
    sources = {arg: _source(value) for arg, value in values.items()}
    tensors = [value for value in values.values() if _is_tensor(value)]
    if tensors and CPU_TENSORS_VIA_NUMPY and all(t.device.type == "cpu" for t in tensors):
        arrays = {arg: _tensor_as_numpy(v) if _is_tensor(v) else v for arg, v in values.items()}
        if all(array is not None for array in arrays.values()):
            values = arrays
    if not any(_is_tensor(value) for value in values.values()):
        a, e = (
            _from_numpy(_numpy_array(v, arg=arg), source=sources[arg], tensor_input=bool(tensors))
            for arg, v in values.items()
        )
        return a, e
    device = str(tensors[0].device)
    a, e = (_torch_operand(v, arg, device, sources[arg]) for arg, v in values.items())
    return a, e


def _torch_operand(value: object, arg: str, device: str, source: str) -> Operand:
    if _is_tensor(value):
        return _from_torch(value, arg=arg, device=device, source=source)
    if _is_scalar(value):
        # Made by torch itself, so a scalar next to a tensor needs no numpy.
        import torch

        try:
            tensor = torch.tensor(value, dtype=getattr(torch, _scalar_dtype(value)))
        except (RuntimeError, ValueError) as exc:  # torch 2.13 raises ValueError here
            raise ValueError(f"{arg} must fit in int64, got {value}") from exc
        return _from_torch(tensor, arg=arg, device=device, source=source)
    return _numpy_to_torch(_numpy_array(value, arg=arg), arg=arg, device=device, source=source)
