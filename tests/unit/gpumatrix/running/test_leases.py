"""gpumatrix.running.leases: exclusive GPU leases across threads and processes, and the plan for a bound process."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from gpumatrix_trees import most_at_once, overlapping_leases, read_jsonl
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumatrix import register
from gpumatrix.running import leases
from gpumatrix.running.leases import (
    LeaseTimeout,
    ProcessLeases,
    cuda_initialized,
    default_lock_dir,
    lease_gpus,
    plan_lease,
)

register(on=("cpu",), est_time=12)


@pytest.mark.parametrize(
    ("count", "devices", "timeout", "error", "message"),
    [
        ("1", ("0", "1"), None, TypeError, "count must be an int, got str"),
        (True, ("0", "1"), None, TypeError, "count must be an int, got bool"),
        (0, ("0", "1"), None, ValueError, r"count must be between 1 and len\(devices\)=2, got 0"),
        (3, ("0", "1"), None, ValueError, r"count must be between 1 and len\(devices\)=2, got 3"),
        (1, ("0", "0"), None, ValueError, "devices must be a sequence of distinct device ids"),
        (1, "01", None, ValueError, "devices must be a sequence of distinct device ids"),
        (1, ("0",), -1.0, ValueError, "timeout must be None or >= 0 seconds, got -1.0"),
        (1, ("0",), math.nan, ValueError, "timeout must be None or >= 0 seconds, got nan"),
    ],
    ids=[
        "count-str",
        "count-bool",
        "count-zero",
        "count-too-big",
        "repeated-device",
        "devices-str",
        "negative-timeout",
        "nan-timeout",
    ],
)
def test_lease_rejects_bad_arguments(
    count: Any, devices: Any, timeout: Any, error: type[Exception], message: str, tmp_path: Path
) -> None:
    with (
        pytest.raises(error, match=message),
        lease_gpus(count, devices=devices, lock_dir=tmp_path, timeout=timeout),
    ):
        pass


@pytest.mark.parametrize(
    ("count", "share", "message"),
    [
        (1, 0, "share must be an int from 1 to 32, got 0"),
        (1, 33, "share must be an int from 1 to 32, got 33"),
        (1, True, "share must be an int from 1 to 32, got True"),
        (1, 2.0, "share must be an int from 1 to 32, got 2.0"),
        (2, 4, "a lease of 2 GPUs holds them alone: share must be 1, got 4"),
    ],
    ids=["zero", "past-the-slots", "bool", "float", "several-gpus-shared"],
)
def test_lease_rejects_a_bad_share(count: int, share: Any, message: str, tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match=re.escape(message)),
        lease_gpus(count, devices=("0", "1"), lock_dir=tmp_path, timeout=0, share=share),
    ):
        pass


def test_shared_leases_fill_a_gpu_up_to_share_then_wait(tmp_path: Path) -> None:
    with ExitStack() as held:
        got = [
            held.enter_context(
                lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0, share=3, holder=f"t{i}")
            )
            for i in range(3)
        ]
        assert got == [("0",)] * 3
        with (
            pytest.raises(LeaseTimeout, match=r"held: 0 \(shared\) by pid"),
            lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0, share=3),
        ):
            pass
    with lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0):
        pass  # every slot was released: the GPU is whole again


def test_shared_leases_spread_over_the_gpus(tmp_path: Path) -> None:
    with ExitStack() as held:
        got = [
            held.enter_context(lease_gpus(1, devices=("0", "1"), lock_dir=tmp_path, timeout=0, share=2))[0]
            for _ in range(4)
        ]
    assert got == ["0", "1", "0", "1"]


@pytest.mark.parametrize("other_share", [1, 2, 32], ids=["alone", "shared", "shared-by-every-slot"])
def test_a_gpu_held_alone_is_never_shared_whatever_share_others_use(other_share: int, tmp_path: Path) -> None:
    with lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0, holder="exclusive"):
        with (
            pytest.raises(LeaseTimeout, match=r"held: 0 by pid \d+ \(exclusive\)"),
            lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0, share=other_share),
        ):
            pass


def test_a_lease_of_the_whole_gpu_waits_for_its_sharers(tmp_path: Path) -> None:
    with lease_gpus(1, devices=("0", "1"), lock_dir=tmp_path, timeout=0, share=32, holder="sharer") as shared:
        with lease_gpus(1, devices=("0", "1"), lock_dir=tmp_path, timeout=0) as whole:
            assert whole != shared  # the other GPU is whole
            with (
                pytest.raises(LeaseTimeout, match=r"\(shared\) by pid \d+ \(sharer\)"),
                lease_gpus(2, devices=("0", "1"), lock_dir=tmp_path, timeout=0),
            ):
                pass


def test_a_waiting_lease_of_the_whole_gpu_is_not_starved_by_new_sharers(tmp_path: Path) -> None:
    events: list[str] = []
    first = ExitStack()
    first.enter_context(lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0, share=4))

    def take_whole() -> None:
        with lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=30):
            events.append("whole")

    waiter = threading.Thread(target=take_whole)
    waiter.start()
    time.sleep(0.3)  # it now waits for the sharer, holding the turnstile and the free slots
    with (
        pytest.raises(LeaseTimeout),
        lease_gpus(1, devices=("0",), lock_dir=tmp_path, timeout=0.3, share=4),
    ):
        pass  # a new sharer does not slip in ahead of it
    assert events == []
    first.close()
    waiter.join(timeout=30)
    assert events == ["whole"]


def test_a_held_device_times_out_another_lease_naming_its_holder(tmp_path: Path) -> None:
    with lease_gpus(1, devices=("7",), lock_dir=tmp_path, timeout=None, holder="tests/a.py::test_x") as got:
        assert got == ("7",)
        with (
            pytest.raises(
                LeaseTimeout,
                match=rf"waited 0 s for 1 of GPUs 7 in {tmp_path}; held: 7 by pid "
                rf"{os.getpid()} \(tests/a.py::test_x\) since",
            ),
            lease_gpus(1, devices=("7",), lock_dir=tmp_path, timeout=0),
        ):
            pass


def test_leases_split_the_devices_between_them(tmp_path: Path) -> None:
    devices = ("0", "1", "2")
    with (
        lease_gpus(2, devices=devices, lock_dir=tmp_path, timeout=0) as pair,
        lease_gpus(1, devices=devices, lock_dir=tmp_path, timeout=0) as single,
    ):
        assert len(set(pair)) == 2
        assert set(pair) | set(single) == set(devices)
        with pytest.raises(LeaseTimeout), lease_gpus(1, devices=devices, lock_dir=tmp_path, timeout=0):
            pass


def test_a_lease_ends_when_its_block_raises(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="test body failed"),
        lease_gpus(2, devices=("0", "1"), lock_dir=tmp_path, timeout=0),
    ):
        raise RuntimeError("test body failed")
    with lease_gpus(2, devices=("0", "1"), lock_dir=tmp_path, timeout=0) as again:
        assert sorted(again) == ["0", "1"]
    assert not list(tmp_path.glob("*.holder.json"))


def test_the_lease_log_records_each_lease(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    before = time.monotonic()
    with lease_gpus(
        1, devices=("GPU-1a2b",), lock_dir=tmp_path, timeout=None, holder="n::t", worker="gw3", log=log
    ):
        assert read_jsonl(log) == []  # written when the lease ends
    (record,) = read_jsonl(log)
    assert (record["nodeid"], record["pid"], record["worker"], record["devices"]) == (
        "n::t",
        os.getpid(),
        "gw3",
        ["GPU-1a2b"],
    )
    assert before <= record["acquired"] <= record["released"] <= time.monotonic()
    assert record["acquired_wall"] <= record["released_wall"]


@settings(max_examples=15, deadline=None)
@given(
    plans=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=4), min_size=2, max_size=4),
    device_count=st.integers(3, 4),
    share=st.integers(1, 3),
)
def test_threads_never_share_a_device_beyond_its_share(
    plans: list[list[int]], device_count: int, share: int
) -> None:
    devices = tuple(str(i) for i in range(device_count))
    with tempfile.TemporaryDirectory() as scratch:
        log, errors = Path(scratch) / "log.jsonl", []

        def lease_in_turn(thread: int, counts: list[int]) -> None:
            try:
                for turn, count in enumerate(counts):
                    with lease_gpus(
                        count,
                        devices=devices,
                        lock_dir=Path(scratch),
                        timeout=60,
                        holder=f"{thread}/{turn}",
                        log=log,
                        share=share if count == 1 else 1,
                    ) as got:
                        if len(set(got)) != count or not set(got) <= set(devices):
                            errors.append(f"{thread}/{turn} asked for {count}, got {got}")
                        time.sleep(0.002)
            except Exception as exc:  # a deadlock shows up as a LeaseTimeout here
                errors.append(repr(exc))

        threads = [threading.Thread(target=lease_in_turn, args=(i, counts)) for i, counts in enumerate(plans)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        records = read_jsonl(log)
    assert errors == []
    assert len(records) == sum(map(len, plans))
    assert overlapping_leases(records) == []
    assert all(most_at_once(records, device) <= share for device in devices)


_LEASING_PROCESS = """
import random, sys, time
from pathlib import Path
from gpumatrix.running.leases import lease_gpus
lock_dir, log, seed = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
for turn in range(12):
    count, share = rng.choice(((1, 2), (1, 2), (1, 1), (2, 1), (3, 1)))
    with lease_gpus(count, devices=("0", "1", "2"), lock_dir=lock_dir, timeout=60, holder=f"{seed}/{turn}",
                    log=log, share=share) as got:
        assert len(set(got)) == count, got
        time.sleep(rng.uniform(0.001, 0.005))
"""


def test_processes_share_only_what_they_may_and_mixed_leases_do_not_deadlock(tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _LEASING_PROCESS, str(tmp_path / "locks"), str(log), str(seed)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    failures = [child.communicate(timeout=120)[1] for child in children if child.wait(timeout=120)]
    assert failures == []
    records = read_jsonl(log)
    assert len(records) == 4 * 12
    assert len({r["pid"] for r in records}) == 4
    assert overlapping_leases(records) == []
    assert all(most_at_once(records, device) <= 2 for device in ("0", "1", "2"))


# -- planning for a process whose CUDA is bound -----------------------------------------------------


@pytest.mark.parametrize(
    ("need", "devices", "bound", "count", "pool", "in_child"),
    [
        (1, ("0", "1"), None, 1, ("0", "1"), False),
        (2, ("0", "1"), None, 2, ("0", "1"), False),
        (1, ("0", "1"), ("1",), 1, ("1",), False),
        (1, ("0", "1"), ("0", "1"), 2, ("0", "1"), False),
        (2, ("0", "1", "2", "3"), ("3", "1"), 2, ("3", "1"), False),
        (2, ("0", "1"), ("1",), 2, ("0", "1"), True),
        (1, ("0", "1"), (), 1, ("0", "1"), True),
    ],
    ids=[
        "unbound",
        "unbound-pair",
        "bound-one",
        "bound-wider-than-need",
        "bound-pair",
        "bound-too-small",
        "bound-to-nothing",
    ],
)
def test_plan_lease(
    need: int,
    devices: tuple[str, ...],
    bound: tuple[str, ...] | None,
    count: int,
    pool: tuple[str, ...],
    in_child: bool,
) -> None:
    plan = plan_lease(need, devices=devices, bound=bound)
    assert (plan.count, plan.pool, plan.in_child) == (count, pool, in_child)
    assert plan.reason


@pytest.mark.parametrize(
    ("need", "bound", "exclusive", "share"),
    [
        (1, None, False, 4),
        (1, None, True, 1),
        (2, None, False, 1),
        (1, ("1",), False, 4),
        (1, ("0", "1"), False, 1),  # bound to both: it leases both, whole
        (2, ("1",), False, 1),  # in a child, whole
    ],
    ids=["one-shared", "one-exclusive", "two-whole", "bound-one-shared", "bound-two-whole", "child-whole"],
)
def test_plan_lease_shares_only_one_gpu_of_a_test_that_allows_it(
    need: int, bound: tuple[str, ...] | None, exclusive: bool, share: int
) -> None:
    plan = plan_lease(need, devices=("0", "1"), bound=bound, share=4, exclusive=exclusive)
    assert plan.share == share


@pytest.mark.parametrize("need", [0, 3])
def test_plan_lease_rejects_needs_the_machine_cannot_meet(need: int) -> None:
    with pytest.raises(ValueError, match="need must be between 1 and the 2 device"):
        plan_lease(need, devices=("0", "1"), bound=None)


@pytest.fixture
def cuda_state(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    state = {"initialized": False}
    monkeypatch.setattr(leases, "cuda_initialized", lambda **_: state["initialized"])
    return state


@pytest.mark.parametrize("outer", [None, "0,1,2"], ids=["unset-before", "set-before"])
def test_process_leases_set_and_restore_cuda_visible_devices(
    outer: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda_state: dict[str, bool]
) -> None:
    if outer is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", outer)
    process = ProcessLeases(devices=("0", "1", "2"), lock_dir=tmp_path)
    leased = process.start(process.plan(2), holder="t")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ",".join(leased) and len(set(leased)) == 2
    process.finish()
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == outer
    with lease_gpus(3, devices=("0", "1", "2"), lock_dir=tmp_path, timeout=0):
        pass  # everything was released


def test_cuda_initialised_in_a_test_binds_the_process_to_that_tests_lease(
    tmp_path: Path, cuda_state: dict[str, bool]
) -> None:
    process = ProcessLeases(devices=("0", "1"), lock_dir=tmp_path)
    first = process.start(process.plan(1), holder="first")
    cuda_state["initialized"] = True  # the test body touched CUDA
    process.finish()
    assert process.bound == first
    again = process.plan(1)
    assert (again.count, again.pool, again.in_child) == (1, first, False)
    assert process.plan(2).in_child


def test_cuda_initialised_outside_a_test_binds_the_process_to_all_its_devices(
    tmp_path: Path, cuda_state: dict[str, bool]
) -> None:
    cuda_state["initialized"] = True  # e.g. at import, during collection
    process = ProcessLeases(devices=("0", "1"), lock_dir=tmp_path)
    plan = process.plan(1)
    assert (process.bound, plan.count, plan.pool) == (("0", "1"), 2, ("0", "1"))


def test_one_lease_at_a_time_per_process(tmp_path: Path, cuda_state: dict[str, bool]) -> None:
    process = ProcessLeases(devices=("0", "1"), lock_dir=tmp_path)
    process.start(process.plan(1), holder="a")
    with pytest.raises(RuntimeError, match="already active"):
        process.start(process.plan(1), holder="b")
    process.finish()


class _FakeLibcuda:
    def __init__(self, status: int) -> None:
        self.status = status

    def cuDeviceGetCount(self, count: Any) -> int:
        return self.status


@pytest.mark.parametrize(
    ("libcuda", "expected"),
    [
        (None, False),  # the driver library was never loaded
        (_FakeLibcuda(3), False),  # loaded, cuInit not called yet: CUDA_ERROR_NOT_INITIALIZED
        (_FakeLibcuda(0), True),
        (_FakeLibcuda(100), True),  # cuInit ran and found no device: it still read CUDA_VISIBLE_DEVICES
    ],
    ids=["not-loaded", "loaded-not-initialised", "initialised", "initialised-without-devices"],
)
def test_cuda_initialized(libcuda: Any, expected: bool) -> None:
    assert cuda_initialized(find_libcuda=lambda: libcuda) is expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"GPUMATRIX_LEASE_DIR": "/srv/leases"}, Path("/srv/leases")),
        ({}, Path(tempfile.gettempdir()) / f"gpumatrix-leases-{os.getuid()}"),
        ({"GPUMATRIX_LEASE_DIR": ""}, Path(tempfile.gettempdir()) / f"gpumatrix-leases-{os.getuid()}"),
    ],
    ids=["set", "unset", "empty"],
)
def test_default_lock_dir(environ: dict[str, str], expected: Path) -> None:
    assert default_lock_dir(environ) == expected


# (id, environment, (timeout, log) or the UsageError's message)
LEASE_SETTINGS = [
    ("defaults", {}, (None, None)),
    ("empty-timeout", {"GPUMATRIX_LEASE_TIMEOUT": " "}, (None, None)),
    ("zero", {"GPUMATRIX_LEASE_TIMEOUT": "0"}, (0.0, None)),
    (
        "seconds-and-log",
        {"GPUMATRIX_LEASE_TIMEOUT": "2.5", "GPUMATRIX_LEASE_LOG": "/tmp/l.jsonl"},
        (2.5, Path("/tmp/l.jsonl")),
    ),
    ("infinite", {"GPUMATRIX_LEASE_TIMEOUT": "inf"}, (math.inf, None)),
    (
        "negative",
        {"GPUMATRIX_LEASE_TIMEOUT": "-1"},
        "GPUMATRIX_LEASE_TIMEOUT='-1' must be a number of seconds >= 0",
    ),
    (
        "nan",
        {"GPUMATRIX_LEASE_TIMEOUT": "nan"},
        "GPUMATRIX_LEASE_TIMEOUT='nan' must be a number of seconds >= 0",
    ),
    (
        "word",
        {"GPUMATRIX_LEASE_TIMEOUT": "ten"},
        "GPUMATRIX_LEASE_TIMEOUT='ten' must be a number of seconds >= 0",
    ),
]


@pytest.mark.parametrize(
    ("environ", "expected"), [r[1:] for r in LEASE_SETTINGS], ids=[r[0] for r in LEASE_SETTINGS]
)
def test_lease_settings(environ: dict[str, str], expected: tuple[float | None, Path | None] | str) -> None:
    from gpumatrix import UsageError

    if isinstance(expected, str):
        with pytest.raises(UsageError) as info:
            leases.lease_settings(environ)
        assert str(info.value).startswith(expected) and info.value.exit_code == 2
    else:
        settings = leases.lease_settings(environ)
        assert (settings.timeout, settings.log) == expected


def test_lease_settings_prepare_creates_the_directory_or_says_which_cannot_be_used(tmp_path: Path) -> None:
    from gpumatrix import UsageError

    leases.lease_settings({"GPUMATRIX_LEASE_DIR": str(tmp_path / "a" / "b")}).prepare()
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match=r"cannot use GPUMATRIX_LEASE_DIR='.*/file/leases' for GPU leases"):
        leases.lease_settings({"GPUMATRIX_LEASE_DIR": str(tmp_path / "file" / "leases")}).prepare()
    with pytest.raises(UsageError, match=r"cannot write the lease log GPUMATRIX_LEASE_LOG='.*/file/log'"):
        leases.lease_settings(
            {
                "GPUMATRIX_LEASE_DIR": str(tmp_path / "ok"),
                "GPUMATRIX_LEASE_LOG": str(tmp_path / "file" / "log"),
            }
        ).prepare()
