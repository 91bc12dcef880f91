"""mxfuse.witness: records are plain dicts, delivered in order to every subscriber, unknown paths refused."""

from __future__ import annotations

import json

import pytest

from gpumatrix import register
from mxfuse import witness

register(on=("cpu",), est_time=1)


def test_capture_collects_records_in_order_and_stops_after_the_block():
    with witness.capture() as records:
        witness.emit("gemm.torch", "first", backend="torch", rows=3)
        witness.emit("linear.bf16", "second", site="wo_b")
    witness.emit("gemm.torch", "after the block")
    assert [r["reason"] for r in records] == ["first", "second"]
    assert records[0] == {"path": "gemm.torch", "reason": "first", "backend": "torch", "rows": 3}
    assert json.loads(json.dumps(records)) == records  # plain JSON values only


def test_every_subscriber_sees_every_record_until_it_unsubscribes():
    seen_a: list[dict] = []
    seen_b: list[dict] = []
    stop_a = witness.subscribe(seen_a.append)
    stop_b = witness.subscribe(seen_b.append)
    try:
        witness.emit("hc.boundary.reference", "one")
        stop_a()
        witness.emit("hc.boundary.reference", "two")
    finally:
        stop_a()
        stop_b()
    assert [r["reason"] for r in seen_a] == ["one"]
    assert [r["reason"] for r in seen_b] == ["one", "two"]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: witness.emit("gemm.cublas", "no such path"), ValueError, "path must be one of"),
        (lambda: witness.subscribe("not callable"), TypeError, "callback must be callable"),
    ],
    ids=["unknown path", "subscriber not callable"],
)
def test_bad_input_is_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_every_declared_path_has_a_description():
    assert witness.PATHS and all(isinstance(v, str) and v for v in witness.PATHS.values())
    assert all(name.count(".") >= 1 for name in witness.PATHS)
