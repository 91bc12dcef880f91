"""The MXFP8 GEMM's launch configurations as data: GemmConfig's checks, the table's format and errors,
the checked-in table, and how choose_config picks an entry or falls back to default_config.

Also the GPU sweep's pure parts (benchmarks/mxfp8_gemm_sweep.py): its candidates are valid
configurations whose fold tiles are whole, the defaults are screened first, and the table it writes
is one the launcher reads.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from gpumatrix import register
from mxfuse.kernels.gemm import configs as mc
from mxfuse.kernels.gemm.configs import GemmConfig, choose_config, default_config, parse_table

register(on=("cpu",), est_time=5)

SHAPES = ((1792, 5120), (5120, 2048), (5120, 8192), (2048, 7168), (7168, 16384))

BAD_CONFIGS = [  # (id, fields, message fragment)
    ("kind", {"kind": "tiled"}, "GemmConfig.kind must be one of"),
    ("block_n not a power of two", {"block_n": 48}, "GemmConfig.block_n must be a power of two"),
    ("split 0", {"split_k": 0}, "GemmConfig.split_k must be an int >= 1"),
    ("bool warps", {"num_warps": True}, "GemmConfig.num_warps must be an int >= 1"),
    ("operand", {"operand": "fp8"}, "GemmConfig.operand must be 'f16' or 'bf16'"),
    ("asm to bf16", {"operand": "bf16", "cvt": "asm"}, "GemmConfig.cvt must be"),
    ("bits to bf16", {"operand": "bf16", "cvt": "bits"}, "GemmConfig.cvt must be"),
    ("wscale", {"wscale": "row"}, "GemmConfig.wscale must be 'operand' or 'acc'"),
    ("acc with 8 groups", {"wscale": "acc", "block_g": 8}, "GemmConfig.block_g must be 1, 2 or 4"),
    ("prefold with acc", {"act": "prefold", "wscale": "acc"}, "GemmConfig.act must be"),
    ("w_bias", {"w_bias": 250}, r"GemmConfig.w_bias must be an int in \[14, 247\]"),
]


def _fold(**fields) -> dict:
    base = {
        "kind": "fold",
        "block_m": 16,
        "block_n": 64,
        "block_g": 4,
        "split_k": 2,
        "num_warps": 4,
        "num_stages": 3,
    }
    return {**base, **fields}


@pytest.mark.parametrize(("fields", "message"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_configs_are_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        GemmConfig(**_fold(**fields))


def test_a_config_round_trips_through_json():
    config = GemmConfig(**_fold(act="prefold", pdl=True, operand="f16", cvt="asm"))
    assert GemmConfig(**json.loads(json.dumps(config.to_json()))) == config


def _table(shapes: dict) -> dict:
    return {"format": 1, "devices": {"NVIDIA H200": {"source": "test", "shapes": shapes}}}


BAD_TABLES = [  # (id, data, message fragment)
    ("not a table", [], "expected an object with 'format': 1"),
    ("format", {"format": 2, "devices": {}}, "expected an object with 'format': 1"),
    ("no shapes", {"format": 1, "devices": {"X": {}}}, r"devices\['X'\] needs a 'shapes' object"),
    ("key", _table({"7168-16384": [{"m_max": 1, "config": _fold()}]}), "the key must be 'NxK'"),
    ("empty", _table({"7168x16384": []}), "expected a non-empty list"),
    (
        "unknown field",
        _table({"7168x16384": [{"m_max": 1, "config": _fold(tile=3)}]}),
        r"\[0\]: needs an int",
    ),
    ("bad config", _table({"7168x16384": [{"m_max": 1, "config": _fold(block_n=48)}]}), r"\[0\]: GemmConfig"),
    (
        "m_max order",
        _table({"7168x16384": [{"m_max": 16, "config": _fold()}, {"m_max": 4, "config": _fold()}]}),
        "m_max must increase strictly",
    ),
]


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES])
def test_bad_tables_are_refused_naming_the_entry(data, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_table(data, source="table.json")
    assert str(info.value).startswith("table.json")


def test_the_checked_in_table_parses():
    mc.config_table.cache_clear()
    table = mc.config_table()
    for shapes in table.values():
        for (n, k), buckets in shapes.items():
            assert n > 0 and k % 32 == 0 and buckets


@pytest.fixture
def h200_table(monkeypatch):
    entries = {
        "7168x16384": [
            {"m_max": 4, "config": _fold(act="prefold", split_k=8)},
            {"m_max": 64, "config": _fold(block_m=64, split_k=2)},
        ],
        "1792x5120": [{"m_max": 1, "config": {**_fold(), "kind": "gemv", "block_m": 1, "block_n": 2}}],
    }
    parsed = parse_table(_table(entries), source="test")
    monkeypatch.setattr(mc, "config_table", lambda: parsed)
    return parsed


CHOICES = [  # (id, m, n, k, device, expected: "table i" or "default")
    ("first bucket", 1, 7168, 16384, "NVIDIA H200", "table 0"),
    ("bucket edge", 4, 7168, 16384, "NVIDIA H200", "table 0"),
    ("second bucket", 5, 7168, 16384, "NVIDIA H200", "table 1"),
    ("above the last bucket", 2048, 7168, 16384, "NVIDIA H200", "table 1"),
    ("another device", 1, 7168, 16384, "NVIDIA H100", "default"),
    ("the H200's stand-in", 5, 7168, 16384, "NVIDIA H100 80GB HBM3", "table 1"),
    ("no device (CPU)", 1, 7168, 16384, None, "default"),
    ("shape missing", 1, 5120, 8192, "NVIDIA H200", "default"),
    ("gemv narrower than M", 3, 1792, 5120, "NVIDIA H200", "default"),
]


@pytest.mark.parametrize(
    ("m", "n", "k", "device", "expected"), [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES]
)
def test_choose_config_reads_the_table_else_the_default(h200_table, m, n, k, device, expected):
    got = choose_config(m, n, k, device_name=device)
    if expected == "default":
        assert got == default_config(m, n, k)
    else:
        assert got == h200_table["NVIDIA H200"][(n, k)][int(expected.split()[1])][1]


def test_stand_ins_can_be_turned_off(h200_table, monkeypatch):
    monkeypatch.setenv("MXFUSE_TABLE_STANDINS", "0")
    assert choose_config(5, 7168, 16384, device_name="NVIDIA H100 80GB HBM3") == default_config(
        5, 7168, 16384
    )
    assert (
        choose_config(5, 7168, 16384, device_name="NVIDIA H200")
        == h200_table["NVIDIA H200"][(7168, 16384)][1][1]
    )


def test_a_device_s_own_entries_come_before_its_stand_in_s():
    own = {"shapes": "own"}
    table = {"NVIDIA H200": {"shapes": "h200"}, "NVIDIA H100 80GB HBM3": own}
    assert mc.device_entries(table, "NVIDIA H100 80GB HBM3") is own
    assert mc.device_entries({"NVIDIA H200": own}, "NVIDIA H100 80GB HBM3") is own
    assert mc.device_entries({"NVIDIA H200": own}, "NVIDIA H100 PCIe") == {}
    assert mc.device_entries({"NVIDIA H200": own}, None) == {}
    assert mc.entries_owner(table, "NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert mc.entries_owner({"NVIDIA H200": own}, "NVIDIA H100 80GB HBM3") == "NVIDIA H200"
    assert mc.entries_owner({"NVIDIA B200": own}, "NVIDIA H100 80GB HBM3") is None  # stand-in not listed
    assert mc.entries_owner({"": own}, None) == ""  # the CPU's entry, as tests write one


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", (1, 2, 3, 4, 16, 33, 64, 65, 256, 2048))
def test_the_default_rule_gives_valid_configs(m, n, k):
    config = default_config(m, n, k)
    assert config.kind in ("stream", "mma8", "dq16")
    assert (config.kind == "stream") == (m <= 4)
    assert config.kind != "stream" or m <= config.block_m


def _sweep():
    return importlib.import_module("benchmarks.mxfp8_gemm_sweep")


@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("m", (1, 4, 16, 64, 256, 2048))
def test_sweep_candidates_are_valid_and_fold_tiles_whole(m, n, k):
    sweep = _sweep()
    found = sweep.candidates(m, n, k, num_sms=132)
    assert found and found[0][0] == 0 and [t for t, _ in found] == sorted(t for t, _ in found)
    for _, config in found:
        assert isinstance(config, GemmConfig)
        if config.kind == "fold":
            assert config.swap_ab and m <= config.block_m or m > 64
            assert n % config.block_n == 0 and (k // 32) % (config.block_g * config.split_k) == 0, config
            assert (k // 32) // (config.block_g * config.split_k) >= 2, config


def test_sweep_plan_screens_defaults_first_and_its_table_is_readable():
    sweep = _sweep()
    shapes = {"pro wo_b": (7168, 16384), "v41 wqkv_a": (1792, 5120)}
    items = sweep.plan(shapes, (1, 64), 132, 3)
    tiers = [tier for *_, tier in items]
    assert tiers[:4] == [-1] * 4 and tiers[4:] == sorted(tiers[4:])
    fold = next(c for _, _, c, t in items if c.kind == "fold")
    other_split = GemmConfig(**{**fold.to_json(), "split_k": 1})
    assert sweep.compile_key(fold, 7168, 16384).split(" split at")[0] == repr(other_split)
    env = {"date": "2026-12-01", "gpu": "NVIDIA H200", "torch": "t", "triton": "3.6.0"}
    table = sweep.winners_table(
        [("pro wo_b", 1, 7168, 16384, fold), ("pro wo_b", 64, 7168, 16384, fold)], env
    )
    parsed = parse_table(json.loads(json.dumps(table)), source="sweep output")
    assert parsed["NVIDIA H200"][(7168, 16384)] == [(1, fold), (64, fold)]


def test_a_sweeps_table_merges_shape_by_shape():
    module = importlib.import_module("benchmarks.merge_gemm_table")
    old = _table(
        {"7168x16384": [{"m_max": 4, "config": _fold()}], "1792x5120": [{"m_max": 1, "config": _fold()}]}
    )
    new = _table(
        {
            "1792x5120": [{"m_max": 64, "config": _fold(block_m=64)}],
            "8192x1280": [{"m_max": 1, "config": _fold()}],
        }
    )
    merged = parse_table(module.merge(old, new), source="test")["NVIDIA H200"]
    assert sorted(merged) == [(1792, 5120), (7168, 16384), (8192, 1280)]
    assert [m for m, _ in merged[(1792, 5120)]] == [64]  # the sweep's shape replaces the table's
    with pytest.raises(ValueError, match="sweep"):
        module.merge(old, {"format": 2})
