"""benchmarks.lease_log (`python -m benchmarks lease_log`): the check gpu_session.sh runs on real lease logs, on made-up logs."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

from gpumatrix import register

register(on=("cpu",), est_time=1)

A, B = "GPU-aaaa", "GPU-bbbb"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    return importlib.import_module("benchmarks.lease_log")


def _log(path: Path, leases: list[tuple[str, list[str], float, float]]) -> Path:
    lines = [
        json.dumps(
            {"nodeid": node, "pid": 1, "worker": "gw0", "devices": devices, "acquired": a, "released": r}
        )
        for node, devices, a, r in leases
    ]
    path.write_text("".join(line + "\n" for line in lines))
    return path


TP2 = "tests/e2e/mxfuse/models/test_dsv41_tp2.py::test_the_tp2_decode_step_on_two_gpus"
ONE = "tests/kernels/gpumatrix/running/test_gpu_leases.py::test_x"


@pytest.mark.parametrize(
    ("leases", "need", "code", "says"),
    [
        ([(ONE, [A], 0, 1), (ONE, [B], 0.5, 1.5), (TP2, [A, B], 1.5, 9)], ["test_dsv41_tp2.py=2"], 0, "ok:"),
        ([(ONE, [A], 0, 2), (TP2, [A, B], 1.5, 9)], [], 1, f"{A} held by {ONE} and {TP2} at once"),
        ([(TP2, [A], 0, 9)], ["test_dsv41_tp2.py=2"], 1, "its leases held [1] GPUs"),
        ([(ONE, [A], 0, 1)], ["test_dsv41_tp2.py=2"], 1, "no lease of a test matching it"),
        ([], [], 1, "no lease was logged"),
    ],
    ids=["clean", "overlap", "tp2-on-one-gpu", "tp2-never-ran", "empty"],
)
def test_lease_logs_are_checked(script, tmp_path, capsys, leases, need, code, says):
    log = _log(tmp_path / "leases.jsonl", leases)
    argv = [str(log)] + [arg for n in need for arg in ("--need", n)]
    assert script.main(argv) == code
    assert says in capsys.readouterr().out


def test_a_missing_log_fails_and_a_bad_need_is_a_usage_error(script, tmp_path, capsys):
    assert script.main([str(tmp_path / "absent.jsonl")]) == 1
    assert "no such lease log" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        script.main([str(tmp_path / "absent.jsonl"), "--need", "test_x.py"])
    assert exc.value.code == 2
