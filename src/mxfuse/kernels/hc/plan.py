"""What a boundary launch needs decided on the host: item counts, the ticket layout of the phases (see
``mxfuse.kernels.hc.kernel``) and workspace sizes."""

from __future__ import annotations

from dataclasses import dataclass

from mxfuse.kernels.hc.config import HcConfig

__all__ = ["RECORD", "Plan", "split_chunks", "split_words"]

RECORD = 32  # floats per phase-A record and per row of logits: the 24 partial logits, sum(R'^2) at 24


@dataclass(frozen=True)
class Plan:
    """Item counts, ticket layout and workspace sizes of one launch of phases (A, F, S)."""

    blocks: int
    splits_a: int
    items_f: int
    items_s: int
    round_size: int
    offsets: tuple[int, int]
    lag: int
    total: int
    n_counters: int
    n_scratch: int
    mix_offset: int

    @staticmethod
    def make(
        tokens: int, hidden: int, config: HcConfig, *, phases: tuple[int, int, int], split: bool = False
    ) -> Plan:
        """``split``: the finish split over ``split_chunks`` items a row (the shifted ordering)."""
        has_a, has_f, has_s = phases
        bt = config.block_t
        blocks = -(-tokens // bt)
        splits_a = hidden // (config.block_h * config.steps_a)
        rows_f = min(bt, tokens)
        items_f = rows_f * (split_chunks(hidden, config) if split else 1)
        items_s = -(-rows_f // config.rows_s)
        sizes = (splits_a * has_a, items_f * has_f, items_s * has_s)
        lag = config.lag if has_a and (has_f or has_s) else 0
        rounds = blocks + lag
        part_a = blocks * splits_a * bt * RECORD
        return Plan(
            blocks=blocks,
            splits_a=splits_a,
            items_f=items_f,
            items_s=items_s,
            round_size=sum(sizes),
            offsets=(sizes[0], sizes[0] + sizes[1]),
            lag=lag,
            total=rounds * sum(sizes),
            n_counters=2 + 3 * blocks,
            n_scratch=part_a + blocks * bt * RECORD,
            mix_offset=part_a,
        )


def split_words(config: HcConfig) -> int:
    """128-column words per item of the split finish (the shifted ordering)."""
    return config.words_n or config.words_f


def split_chunks(hidden: int, config: HcConfig) -> int:
    """Items of the split finish per row."""
    return -(-(hidden // 128) // split_words(config))
