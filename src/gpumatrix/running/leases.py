"""GPU leases: each test holds what it uses of the GPUs, across pytest-xdist workers and separate runs.

A GPU has `MAX_WORKERS_PER_GPU` slots, each one `filelock` (flock: the kernel drops it when its
holder dies, so a crashed run leaves no stale lease). A test that may share a GPU (`share` > 1: the
runner's `workers_per_gpu`) holds one slot among the first `share` of one GPU; a test that holds GPUs
alone (registered `gpu="exclusive"`, marked `exclusive_gpu`, or needing several GPUs) holds every slot
of each of its GPUs, so it never overlaps any other lease of them, whatever `share` another run on the
machine uses. A process takes slots only while it holds a turnstile lock, and releases the turnstile
once it has all it asked for. That keeps leases from deadlocking (no one waits for a slot while another
acquirer holds some of what it needs, because acquirers are one at a time) and from starving (a waiting
whole-GPU lease stops shared leases from taking each slot it frees).

CUDA reads CUDA_VISIBLE_DEVICES once, when the driver initialises in a process; after that the
process's devices are fixed ("bound"). `ProcessLeases` follows that: once bound, a test needing at
most the bound set leases exactly it (sometimes idle GPUs), and a test needing more
is planned for a fresh child process (`LeasePlan.in_child`), which the pytest plugin runs.
"""

from __future__ import annotations

import ctypes
import glob
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from gpumatrix import GpumatrixError, UsageError
from gpumatrix.config import MAX_WORKERS_PER_GPU
from gpumatrix.hardware.visibility import narrowed

__all__ = [
    "LEASE_DIR_ENV",
    "LEASE_LOG_ENV",
    "LEASE_TIMEOUT_ENV",
    "LeasePlan",
    "LeaseSettings",
    "LeaseTimeout",
    "ProcessLeases",
    "cuda_initialized",
    "default_lock_dir",
    "lease_gpus",
    "lease_settings",
    "plan_lease",
]

LEASE_DIR_ENV = "GPUMATRIX_LEASE_DIR"
LEASE_LOG_ENV = "GPUMATRIX_LEASE_LOG"
LEASE_TIMEOUT_ENV = "GPUMATRIX_LEASE_TIMEOUT"
# 10 ms: a free device is noticed well within a test's own noise, and a poll (open + flock + close
# per device) costs microseconds.
_POLL_SECONDS = 0.01
_CUDA_ERROR_NOT_INITIALIZED = 3


class LeaseTimeout(GpumatrixError):
    """The GPUs a test needs stayed held by others past the lease timeout."""


def default_lock_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`GPUMATRIX_LEASE_DIR`, else one directory per user under the system temp dir.

    Every run of one user on one machine must share it: that is what makes leases exclusive.
    """
    env = os.environ if environ is None else environ
    if env.get(LEASE_DIR_ENV):
        return Path(env[LEASE_DIR_ENV])
    user = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    return Path(tempfile.gettempdir()) / f"gpumatrix-leases-{user}"


@dataclass(frozen=True)
class LeaseSettings:
    """Where leases are kept, how long a test waits for its GPUs, and where leases are logged."""

    lock_dir: Path
    timeout: float | None  # seconds; None waits as long as it takes
    log: Path | None = None
    lock_dir_named: bool = False  # set through GPUMATRIX_LEASE_DIR rather than the default

    def prepare(self) -> None:
        """Create the lease directory (and open the log) now, so a run that cannot lease stops
        once, with a `UsageError`, instead of failing every GPU test."""
        where = (
            f"{LEASE_DIR_ENV}={str(self.lock_dir)!r}"
            if self.lock_dir_named
            else f"the lease directory {self.lock_dir} (set {LEASE_DIR_ENV} to use another)"
        )
        try:
            self.lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            with tempfile.NamedTemporaryFile(dir=self.lock_dir, prefix=".probe-"):
                pass  # lock files are created here: it must be writable, not only present
        except OSError as exc:
            raise UsageError(f"cannot use {where} for GPU leases: {exc.strerror or exc}") from None
        if self.log is not None:
            try:
                with open(self.log, "a", encoding="utf-8"):
                    pass
            except OSError as exc:
                raise UsageError(
                    f"cannot write the lease log {LEASE_LOG_ENV}={str(self.log)!r}: {exc.strerror or exc}"
                ) from None


def lease_settings(environ: Mapping[str, str] | None = None) -> LeaseSettings:
    """The GPUMATRIX_LEASE_* variables, checked: a `UsageError` naming the one that is wrong.

    GPUMATRIX_LEASE_TIMEOUT is seconds >= 0 (unset or empty: wait as long as it takes).
    """
    env = os.environ if environ is None else environ
    text = env.get(LEASE_TIMEOUT_ENV, "").strip()
    timeout: float | None = None
    if text:
        try:
            timeout = float(text)
        except ValueError:
            timeout = math.nan
        if not timeout >= 0:  # also refuses nan
            raise UsageError(
                f"{LEASE_TIMEOUT_ENV}={text!r} must be a number of seconds >= 0 "
                f"(unset: wait as long as it takes)"
            )
    log = env.get(LEASE_LOG_ENV)
    return LeaseSettings(
        lock_dir=default_lock_dir(env),
        timeout=timeout,
        log=Path(log) if log else None,
        lock_dir_named=bool(env.get(LEASE_DIR_ENV)),
    )


@contextmanager
def lease_gpus(
    count: int,
    *,
    devices: Sequence[str],
    lock_dir: Path,
    timeout: float | None,
    holder: str = "",
    worker: str = "",
    log: Path | None = None,
    share: int = 1,
) -> Iterator[tuple[str, ...]]:
    """Hold `count` of `devices` for the `with` block; yields the leased ids.

    `share` is how many tests may use one GPU at once, this one included: 1 (the default) holds the
    GPUs alone; more holds one of a GPU's first `share` slots, beside at most `share - 1` other such
    leases and never beside a lease that holds the GPU alone. A lease of several GPUs holds them alone.
    Blocks until they are free; `timeout` seconds (None: forever) bounds the wait, after which
    `LeaseTimeout` names who holds what. `holder` labels the lease (a test's node id) in that message
    and in `log`, a JSON-lines file that gets one line per lease when it ends.
    """
    if not isinstance(count, int) or isinstance(count, bool):
        raise TypeError(f"count must be an int, got {type(count).__name__}")
    if isinstance(devices, str) or len(set(devices)) != len(devices):
        raise ValueError(f"devices must be a sequence of distinct device ids, got {devices!r}")
    if not 1 <= count <= len(devices):
        raise ValueError(f"count must be between 1 and len(devices)={len(devices)}, got {count}")
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    if not isinstance(share, int) or isinstance(share, bool) or not 1 <= share <= MAX_WORKERS_PER_GPU:
        raise ValueError(f"share must be an int from 1 to {MAX_WORKERS_PER_GPU}, got {share!r}")
    if count > 1 and share > 1:
        raise ValueError(f"a lease of {count} GPUs holds them alone: share must be 1, got {share}")
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    deadline = None if timeout is None else time.monotonic() + timeout
    with ExitStack() as held:
        turnstile = FileLock(lock_dir / "turnstile.lock")
        try:
            turnstile.acquire(
                timeout=-1 if deadline is None else max(0.0, deadline - time.monotonic()),
                poll_interval=_POLL_SECONDS,
            )
        except Timeout:
            raise LeaseTimeout(_timeout_message(count, devices, lock_dir, timeout)) from None
        try:
            if share > 1:
                taken = _take_slot(devices, share, lock_dir, deadline, held)
            else:
                taken = _take_whole(count, devices, lock_dir, deadline, held)
        finally:
            turnstile.release()
        if taken is None:
            raise LeaseTimeout(_timeout_message(count, devices, lock_dir, timeout))
        leased, slot = taken
        acquired, acquired_wall = time.monotonic(), time.time()
        holder_files = [_holder_file(lock_dir, device, slot) for device in leased]
        for path in holder_files:
            path.write_text(
                json.dumps({"pid": os.getpid(), "holder": holder, "since": acquired_wall, "share": share}),
                encoding="utf-8",
            )
        try:
            yield leased
        finally:
            for path in holder_files:
                path.unlink(missing_ok=True)
            if log is not None:
                # Written before the locks go: a reader never sees a later lease of these devices
                # logged ahead of this one ending.
                record = {
                    "nodeid": holder,
                    "pid": os.getpid(),
                    "worker": worker,
                    "devices": list(leased),
                    "share": share,  # 1: the devices were held alone
                    "slot": slot,  # the slot of a shared lease; None for a lease of whole GPUs
                    "acquired": acquired,
                    "released": time.monotonic(),
                    "acquired_wall": acquired_wall,
                    "released_wall": time.time(),
                }
                with open(log, "a", encoding="utf-8") as stream:  # one short O_APPEND write per line
                    stream.write(json.dumps(record) + "\n")


def _lock_name(device: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9._-]", "_", device)


def _slot_lock(lock_dir: Path, device: str, slot: int) -> FileLock:
    return FileLock(lock_dir / f"{_lock_name(device)}.slot{slot}.lock")


def _holder_file(lock_dir: Path, device: str, slot: int | None) -> Path:
    """Who holds `device`: one file per shared slot, or one for the whole GPU (`slot` None)."""
    return lock_dir / f"{_lock_name(device)}.{'all' if slot is None else f'slot{slot}'}.holder.json"


def _try(lock: FileLock, held: ExitStack) -> bool:
    """Take `lock` if it is free, to be released with `held`."""
    try:
        lock.acquire(blocking=False)
    except Timeout:
        return False
    held.callback(lock.release)
    return True


def _take_slot(
    devices: Sequence[str], share: int, lock_dir: Path, deadline: float | None, held: ExitStack
) -> tuple[tuple[str, ...], int] | None:
    """Under the turnstile: one free slot of the first `share` of any device, ((device,), slot); None
    on timeout. Slots are tried in slot order across the devices, so sharers spread over the GPUs."""
    while True:
        for slot in range(share):
            for device in devices:
                if _try(_slot_lock(lock_dir, device, slot), held):
                    return (device,), slot
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(_POLL_SECONDS)


def _take_whole(
    count: int, devices: Sequence[str], lock_dir: Path, deadline: float | None, held: ExitStack
) -> tuple[tuple[str, ...], None] | None:
    """Under the turnstile: every slot of `count` devices, ((devices...), None); None on timeout.

    Slots are taken as they come free and kept, so a device drains while its sharers finish; once
    `count` devices are whole, the slots taken of the others are given back.
    """
    partial: dict[str, ExitStack] = {device: ExitStack() for device in devices}
    missing: dict[str, list[int]] = {device: list(range(MAX_WORKERS_PER_GPU)) for device in devices}
    whole: list[str] = []
    try:
        while True:
            for device in devices:
                if device in whole:
                    continue
                missing[device] = [
                    slot
                    for slot in missing[device]
                    if not _try(_slot_lock(lock_dir, device, slot), partial[device])
                ]
                if not missing[device]:
                    whole.append(device)
                    if len(whole) == count:
                        for device_ in whole:
                            held.enter_context(partial.pop(device_))
                        return tuple(whole), None
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(_POLL_SECONDS)
    finally:
        for stack in partial.values():  # what was taken of devices not leased
            stack.close()


def _timeout_message(count: int, devices: Sequence[str], lock_dir: Path, timeout: float | None) -> str:
    holders = []
    for device in devices:
        for path in sorted(lock_dir.glob(f"{glob.escape(_lock_name(device))}.*.holder.json")):
            try:
                info = json.loads(path.read_text(encoding="utf-8"))
                since = time.strftime("%H:%M:%S", time.localtime(info["since"]))
            except (OSError, ValueError, KeyError, TypeError, OverflowError):
                continue
            how = "" if info.get("share", 1) == 1 else " (shared)"
            holders.append(
                f"{device}{how} by pid {info['pid']} ({info['holder'] or 'unnamed'}) since {since}"
            )
    held = "; held: " + ", ".join(holders) if holders else " (another run was acquiring)"
    return (
        f"waited {timeout:g} s for {count} of GPUs {', '.join(devices)} in {lock_dir}{held}; "
        f"raise {LEASE_TIMEOUT_ENV} or find what holds them"
    )


# -- CUDA's binding of a process to its devices -----------------------------------------------------


def _resident_libcuda() -> Any | None:
    """The CUDA driver library if this process has already loaded it; never loads it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None


def cuda_initialized(*, find_libcuda: Callable[[], Any | None] = _resident_libcuda) -> bool:
    """Whether the CUDA driver is initialised in this process, i.e. CUDA_VISIBLE_DEVICES was read.

    `torch.cuda.is_initialized()` is not enough: `torch.cuda.is_available()` or a Triton launch
    initialises the driver (and fixes the visible devices) without it. cuDeviceGetCount answers
    CUDA_ERROR_NOT_INITIALIZED before cuInit and initialises nothing, so asking it is free.
    """
    libcuda = find_libcuda()
    if libcuda is None:
        return False
    count = ctypes.c_int(0)
    return libcuda.cuDeviceGetCount(ctypes.byref(count)) != _CUDA_ERROR_NOT_INITIALIZED


@dataclass(frozen=True)
class LeasePlan:
    """How one test gets its GPUs in this process, and why."""

    count: int  # devices to lease
    pool: tuple[str, ...]  # devices to lease them from
    in_child: bool  # run the test in a fresh process holding the lease
    reason: str
    share: int = 1  # tests one GPU may hold at once, this one included (`lease_gpus`); 1: held alone


def plan_lease(
    need: int,
    *,
    devices: Sequence[str],
    bound: Sequence[str] | None,
    share: int = 1,
    exclusive: bool = False,
) -> LeasePlan:
    """Plan a lease of `need` GPUs among `devices`, for a process whose CUDA is `bound` (or None).

    `share` is how many tests one GPU runs at a time on this machine; a lease of one GPU shares it
    unless the test is `exclusive`, and a lease of several GPUs (a test's need, or a bound set wider
    than it) always holds them alone.
    """
    if not 1 <= need <= len(devices):
        raise ValueError(
            f"need must be between 1 and the {len(devices)} device(s) of this machine, got {need}"
        )
    if not isinstance(share, int) or isinstance(share, bool) or not 1 <= share <= MAX_WORKERS_PER_GPU:
        raise ValueError(f"share must be an int from 1 to {MAX_WORKERS_PER_GPU}, got {share!r}")

    def shared(count: int) -> int:
        return share if count == 1 and not exclusive else 1

    if bound is None:
        return LeasePlan(need, tuple(devices), False, f"any {need} free", shared(need))
    if need <= len(bound):
        return LeasePlan(
            len(bound),
            tuple(bound),
            False,
            f"CUDA in this process already uses {', '.join(bound) or 'no device'}: lease exactly those",
            shared(len(bound)),
        )
    return LeasePlan(
        need,
        tuple(devices),
        True,
        f"needs {need} GPU(s) but CUDA in this process is bound to {', '.join(bound) or 'none'}",
        shared(need),
    )


@dataclass
class ProcessLeases:
    """The leases of one test process, one test at a time, and what CUDA in it is bound to."""

    devices: tuple[str, ...]  # this process's visible devices before any lease narrows them
    lock_dir: Path
    timeout: float | None = None
    log: Path | None = None
    worker: str = ""
    share: int = 1  # tests one GPU runs at a time (the runner's workers_per_gpu)
    vendor: str = "nvidia"  # whose visibility variables a lease sets (`gpumatrix.hardware.visibility`)
    bound: tuple[str, ...] | None = None
    _stack: ExitStack | None = field(default=None, init=False, repr=False)
    _visible: tuple[str, ...] = field(default=(), init=False, repr=False)

    def plan(self, need: int, *, exclusive: bool = False) -> LeasePlan:
        self._note_binding(self.devices)  # initialised outside any lease: bound to the process's own set
        return plan_lease(need, devices=self.devices, bound=self.bound, share=self.share, exclusive=exclusive)

    def start(self, plan: LeasePlan, *, holder: str) -> tuple[str, ...]:
        """Lease for one test and point the vendor's visibility variables (CUDA_VISIBLE_DEVICES,
        HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK) at the leased devices."""
        if self._stack is not None:
            raise RuntimeError("a lease is already active in this process; finish() it first")
        stack = ExitStack()
        leased = stack.enter_context(
            lease_gpus(
                plan.count,
                devices=plan.pool,
                lock_dir=self.lock_dir,
                timeout=self.timeout,
                holder=holder,
                worker=self.worker,
                log=self.log,
                share=plan.share,
            )
        )
        stack.enter_context(narrowed(self.vendor, leased))  # restored before the lease ends
        self._stack, self._visible = stack, leased
        return leased

    def finish(self) -> None:
        """Restore the visibility variables and release; a no-op when no lease is active."""
        if self._stack is None:
            return
        self._note_binding(self._visible)
        stack, self._stack = self._stack, None
        stack.close()

    def _note_binding(self, visible: tuple[str, ...]) -> None:
        if self.bound is None and cuda_initialized():
            self.bound = visible
