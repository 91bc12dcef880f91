"""The compile caches a GPU run keeps between runs: where they live, and how many kernels each run compiled.

A GPU test run spends most of its time compiling kernels on the CPU (Triton, and torch's inductor where
a test uses torch.compile) unless the compilers find their results from an earlier run. `gpumatrix run`
points both at one directory, `GPUMATRIX_CACHE_DIR` (default `$XDG_CACHE_HOME/gpumatrix`, else
`~/.cache/gpumatrix`): `triton/` for TRITON_CACHE_DIR, `inductor/` for TORCHINDUCTOR_CACHE_DIR and
`torch-kernels/` for PYTORCH_KERNEL_CACHE_PATH (PyTorch's own run-time compiled CUDA kernels). A variable
the environment already sets is kept. The directories are made before the workers start: eight workers
creating PyTorch's `~/.cache/torch/kernels` at once on an H200 left one of them without it ("could not be
created! This disables kernel caching"). The GPU workflow restores and saves the directory with
actions/cache, keyed on the torch and Triton versions and a hash of the kernel sources.

Triton writes one entry (a directory named by the kernel's hash) per compiled kernel, holding a
`__grp__*.json` index of its artifacts; the entries that appear during a run are the kernels it
compiled (launcher and utility builds, which have no index, are not counted).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE_DIR_ENV", "CacheUse", "CompileCache", "compile_cache", "kernel_entries"]

CACHE_DIR_ENV = "GPUMATRIX_CACHE_DIR"
_TRITON_ENV = "TRITON_CACHE_DIR"
_INDUCTOR_ENV = "TORCHINDUCTOR_CACHE_DIR"
_TORCH_KERNELS_ENV = "PYTORCH_KERNEL_CACHE_PATH"
_GROUP_PREFIX = "__grp__"


@dataclass(frozen=True)
class CompileCache:
    """Where a run's compilers keep their results, and the variables that tell them so."""

    root: Path
    source: str  # how the root was chosen: the variable, or the default
    triton_dir: Path
    env: Mapping[str, str]  # set for the tests (variables the environment already set are left as they are)

    def describe(self) -> str:
        return f"{self.root} ({self.source})"

    def prepare(self) -> None:
        """Make the directories the variables name (a run's workers would race to), best effort: a
        compiler that cannot use its directory says so itself."""
        for directory in (*self.env.values(), self.triton_dir):
            try:
                Path(directory).mkdir(parents=True, exist_ok=True)
            except OSError:
                continue


@dataclass(frozen=True)
class CacheUse:
    """What one run found in the Triton cache and what it added."""

    before: int  # kernels in the cache when the run started
    compiled: int  # kernels the run added

    @property
    def warm(self) -> bool:
        return self.before > 0

    def describe(self) -> str:
        state = f"warm, {self.before} kernels" if self.warm else "cold"
        return f"compile cache {state}; {self.compiled} kernel(s) compiled"


def compile_cache(environ: Mapping[str, str] | None = None) -> CompileCache:
    """The run's compile cache from `GPUMATRIX_CACHE_DIR` (or the default), and the variables to set.

    An explicit TRITON_CACHE_DIR or TORCHINDUCTOR_CACHE_DIR in the environment wins over the directory
    under the root; the Triton cache counted is the one Triton will use.
    """
    env = os.environ if environ is None else environ
    if env.get(CACHE_DIR_ENV):
        root, source = Path(env[CACHE_DIR_ENV]).expanduser(), CACHE_DIR_ENV
    else:
        base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
        root, source = base / "gpumatrix", f"the default; set {CACHE_DIR_ENV} to move it"
    root = root.absolute()
    wanted = {
        _TRITON_ENV: str(root / "triton"),
        _INDUCTOR_ENV: str(root / "inductor"),
        _TORCH_KERNELS_ENV: str(root / "torch-kernels"),
    }
    kept = {name: env[name] for name in wanted if env.get(name)}
    return CompileCache(
        root=root,
        source=source,
        triton_dir=Path(kept.get(_TRITON_ENV, wanted[_TRITON_ENV])),
        env={name: value for name, value in wanted.items() if name not in kept},
    )


def kernel_entries(triton_dir: Path) -> frozenset[str]:
    """The names of the entries of a Triton cache that hold a compiled kernel; none when it is missing."""
    found: set[str] = set()
    try:
        entries = list(os.scandir(triton_dir))
    except OSError:
        return frozenset()
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and any(
                name.startswith(_GROUP_PREFIX) for name in os.listdir(entry.path)
            ):
                found.add(entry.name)
        except OSError:  # removed or unreadable while we looked: not a kernel of this run
            continue
    return frozenset(found)
