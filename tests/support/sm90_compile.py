"""Compile the project's Triton kernels for sm_90 on a machine without a GPU.

Triton lowers a kernel for a target it is told about (``GPUTarget("cuda", 90, 32)``) with no device
present: parsing, type checking, the MLIR passes, LLVM and ptxas all run on the CPU. Failures that the
interpreter cannot see (a non-constexpr global read inside a kernel, a string passed to a nested jit
function, a layout the sm_90 lowering refuses) then show in CPU CI instead of on the first GPU run.

``compile_launches(run)`` replaces ``JITFunction.__getitem__`` while ``run()`` executes the launchers with
CPU tensors: each ``kernel[grid](...)`` call is compiled for sm_90 from its actual argument types and
constexpr values instead of being launched. Run it in a child process (``run_in_child``): the replacement
is global.

Gluon kernels (``@gluon.jit``, a ``JITFunction`` too) go through the same path with Gluon's AST source;
a TMA tensor descriptor argument (``triton.experimental.gluon.nvidia.hopper.TensorDescriptor``, built on a
CPU tensor) is typed as the launcher would type it, ``tensordesc<dtype[block], NVMMASharedLayout(...)>``
(``mangle_type``), so a kernel reading through TMA compiles to cubin here too.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon._runtime import GluonASTSource
from triton.runtime.jit import JITFunction, mangle_type

__all__ = ["SM90", "compile_launches", "run_in_child"]

SM90 = GPUTarget("cuda", 90, 32)
_POINTER_TYPES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "fp8e4nv",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
}
_LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl", "enable_fp_fusion")


def _argument_type(name: str, value: object) -> str:
    if type(value).__name__ == "TensorDescriptor":  # a TMA descriptor: its block, dtype and smem layout
        return mangle_type(value)
    if isinstance(value, torch.Tensor):
        return "*" + _POINTER_TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"argument {name}: cannot type a {type(value).__name__} for compilation")


def _divisible_by_16(value: object) -> bool:
    """What a launch on a GPU specializes an argument on: a tensor whose address is 16-byte aligned, an
    int divisible by 16 (vectorized and pipelined loads depend on it)."""
    if isinstance(value, torch.Tensor):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


def _compile(fn: JITFunction, args: tuple, kwargs: dict, done: list[str], keep: list | None = None) -> None:
    options = {key: kwargs.pop(key) for key in list(kwargs) if key in _LAUNCH_OPTIONS}
    bound = dict(zip(fn.arg_names, args, strict=False)) | kwargs
    signature: dict[str, str] = {}
    constexprs: dict[tuple[int, ...], object] = {}
    attrs: dict[tuple[int, ...], list] = {}
    for index, param in enumerate(fn.params):
        if param.name in bound:
            value = bound[param.name]
        elif param.default is not inspect.Parameter.empty:
            value = param.default
        else:
            raise TypeError(f"{fn.__name__}: no value for argument {param.name}")
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[(index,)] = value
        else:
            signature[param.name] = _argument_type(param.name, value)
            if _divisible_by_16(value) and not param.do_not_specialize:
                attrs[(index,)] = [["tt.divisibility", 16]]
    source = GluonASTSource if fn.is_gluon() else ASTSource
    compiled = triton.compile(source(fn, signature, constexprs, attrs), target=SM90, options=options)
    done.append(fn.__name__)
    if keep is not None:
        keep.append((fn.__name__, compiled))


def compile_launches(run: Callable[[], None], *, keep: list | None = None) -> list[str]:
    """Run ``run()`` with every Triton launch compiled for sm_90 instead; the kernel names compiled.
    ``keep``, when given, receives ``(name, compiled kernel)`` pairs (its ``asm`` holds ttgir, ptx, cubin)."""
    done: list[str] = []
    original = JITFunction.__getitem__

    def intercept(self: JITFunction, grid: object) -> Callable[..., None]:
        return lambda *args, **kwargs: _compile(self, args, dict(kwargs), done, keep)

    JITFunction.__getitem__ = intercept
    try:
        run()
    finally:
        JITFunction.__getitem__ = original
    return done


_ATOMIC = re.compile(r"^\s*(@!?%p\d+\s+)?(atom|red)\.")


def ptx_report(keep: list) -> list[dict]:
    """Per kernel ``compile_launches`` kept: its name, whether its PTX targets sm_90a and a cubin was
    built, its first ``wgmma.mma_async`` line (if any) and every atomic or reduction instruction."""
    report = []
    for name, kernel in keep:
        ptx = kernel.asm["ptx"]
        report.append(
            {
                "name": name,
                "target": ".target sm_90a" in ptx,
                "cubin": len(kernel.asm.get("cubin", b"")) > 0,
                "wgmma": [line.strip() for line in ptx.splitlines() if "wgmma.mma_async" in line][:1],
                "atomics": [line.strip() for line in ptx.splitlines() if _ATOMIC.match(line)],
            }
        )
    return report


def run_in_child(code: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (with ``args`` as its ``sys.argv[1:]``) in a fresh Python, output captured, where
    ``mxfuse`` and this folder import and the Triton interpreter is off, so that ``compile_launches``
    compiles for sm_90."""
    import mxfuse

    paths = [str(Path(mxfuse.__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def child_ptx_report(code: str) -> list[dict]:
    """Run ``code`` (which ends by printing ``json.dumps(ptx_report(keep))``) with ``run_in_child``; the
    report, or an AssertionError with the child's output."""
    done = run_in_child(code)
    assert done.returncode == 0, f"sm_90 compilation failed:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_register_a_bf16_wgmma(report: list[dict], name: str) -> None:
    """Every ``name`` kernel of ``report`` multiplies with a bf16 wgmma whose A operand is in registers."""
    kernels = [kernel for kernel in report if kernel["name"] == name]
    assert kernels, f"no {name} compiled"
    for kernel in kernels:
        (line,) = kernel["wgmma"]
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n(8|16|32|64)k16\.f32\.bf16\.bf16", line), line
        assert re.search(r"\{(%r\d+,){3}%r\d+\}, %rd", line), f"A operand not from registers: {line}"


def assert_no_float_atomics(report: list[dict]) -> None:
    """No kernel of ``report`` has a floating-point atomic or reduction."""
    for kernel in report:
        for line in kernel["atomics"]:
            assert not re.search(r"\.(f16|bf16|f32|f64)\b", line), f"{kernel['name']}: {line}"
