"""The bounds on what gpumatrix reads: sizes, counts and integers, each with the reason for its value.

Every input gpumatrix reads comes from a person's file, a run of the code under test or a webhook, and
any of them can be absurd. Each number below caps one kind of input so that reading it ends, quickly,
in a value or in a problem that names it; docs/registry.md lists them for users. `gpumatrix.config`
keeps the bounds that are settings of the matrix itself (`MAX_SECONDS`, `MAX_REPEAT`,
`MAX_FLAKY_RERUNS`).
"""

from __future__ import annotations

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_COUNT",
    "MAX_EVENT_BYTES",
    "MAX_EVENT_ID",
    "MAX_GPUS",
    "MAX_INT_DIGITS",
    "MAX_PLAN_BYTES",
    "MAX_SHARDS",
    "MAX_TESTS_FILE_BYTES",
    "int_literal_problem",
]

# An integer written in ci/matrix.yaml or a registration has at most this many digits (after a sign,
# a 0x/0o/0b prefix and underscores). Python refuses to turn an int of more than 4,300 decimal digits
# into text (sys.set_int_max_str_digits, which any imported library may change), and a hexadecimal
# literal is not held to that limit at all: a longer literal is refused before it is converted.
MAX_INT_DIGITS = 18
# The most GPUs a runner, a registration, a refined test or a report's machine may have: far above any
# machine's count (an NVL72 rack is 72), and what the report reader has always accepted.
MAX_GPUS = 1024
# The most shards a runner may be split into (`max_shards:`), and so the largest N of `--shard I/N`:
# GitHub Actions generates at most 256 jobs from one matrix.
MAX_SHARDS = 256
# Any other count in ci/matrix.yaml (timeout minutes, max_shards before its own bound): a week of
# minutes is 10,080, so a million is a mistake, and small enough to add up without overflow.
MAX_COUNT = 1_000_000
# ci/matrix.yaml and ci/paths.yaml: the project's own is 3 kB.
MAX_CONFIG_BYTES = 1 << 20
# A webhook payload: GitHub caps deliveries at 25 MB.
MAX_EVENT_BYTES = 25 << 20
# GitHub's ids (comments, issues, runs) are 64-bit signed integers: 1 to 2**63 - 1.
MAX_EVENT_ID = 2**63 - 1
# `gpumatrix run --tests-file`: one node id per line; a workflow input is at most 65,535 characters.
MAX_TESTS_FILE_BYTES = 1 << 20
# The session plan `gpumatrix run` hands pytest (a registry of 5,000 files is about 2 MB).
MAX_PLAN_BYTES = 64 << 20


def int_literal_problem(text: str) -> str | None:
    """Why the integer literal `text` (as written, in any base) is refused before it is converted, or
    None. Counting characters never converts: it is safe whatever the value."""
    digits = text.strip().lstrip("+-").replace("_", "")
    if digits[:2].lower() in ("0x", "0o", "0b"):
        digits = digits[2:]
    if len(digits) > MAX_INT_DIGITS:
        return f"an integer literal of {len(digits)} digits (at most {MAX_INT_DIGITS})"
    return None
