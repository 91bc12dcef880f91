"""The attention sweep's candidates (``benchmarks/attention.py --sweep``): what the table can choose from."""

from __future__ import annotations

import pytest

from benchmarks.attention import SHAPES_512, candidate_configs
from gpumatrix import register

register(on=("cpu",), est_time=2)


@pytest.mark.parametrize("sequences", [1, 4, 16, 64])
def test_the_most_splits_come_with_a_fewest_tiles_floor_too(sequences):
    """One table entry serves every length: with a floor on each split's key tiles a short sequence uses
    fewer splits (and writes fewer partials) under the split count a long one needs."""
    found = candidate_configs(sequences, 64)
    assert len(found) == len(set(found))
    for block_n, d_parts, warps, stages in SHAPES_512:
        same = [
            c
            for c in found
            if (c.block_n, c.block_m, c.d_parts, c.num_warps, c.num_stages)
            == (block_n, 64, d_parts, warps, stages)
        ]
        most = max(c.splits for c in same)
        assert sorted(c.min_tiles for c in same if c.splits == most) == [1, 4, 8]
        assert all(c.min_tiles == 1 for c in same if c.splits < most)
