"""Split a runner's files into shards for a GitHub Actions `strategy.matrix`.

Files are packed longest-first by their estimate on the runner's class (`Registration.estimate_for`:
the file's seconds for that class, else its `est_time`) (LPT: each file goes to the least-loaded
shard), into the fewest shards whose longest shard fits the runner's time budget, up to the runner's
`max_shards`. A file disabled on the runner's class costs nothing: it is skipped before it is imported,
but it stays in a shard so its run reports it. A plan is for one suite (`pr` unless asked).
For a fixed shard count LPT's longest shard is within 4/3 of the optimum (Graham, 1969); the unit
tests check that bound against brute force. Given measured `durations` (seconds by class and file,
from `gpumatrix.estimate.proposals`), a file is packed by its measured seconds on the runner's class where
there are some; `gpumatrix matrix` and `gpumatrix run --shard` must be given the same ones to agree.

Estimates are worker-seconds (what one pytest worker spends on the file), but a GPU runner runs its GPUs
times `workers_per_gpu` tests at once, so a shard's wall time is its files' share of those slots: a file
whose tests share a GPU takes one slot for its seconds, a `gpu="exclusive"` file a whole GPU's slots, and
an N-GPU file N whole GPUs (`Parallelism.wall_seconds`). Files are packed by that share and the budget
is compared with its sum. The parallelism comes from `ci/matrix.yaml` alone (not from the environment
override `gpumatrix run` also honours), so a matrix job and its `--shard` run pack alike.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpumatrix.bounds import MAX_SHARDS
from gpumatrix.config import CPU_CLASS, DEFAULT_SUITE, Matrix, Runner
from gpumatrix.registry.model import Registration, Registry

__all__ = [
    "BUDGET_FRACTION",
    "Durations",
    "Parallelism",
    "Shard",
    "ShardPlan",
    "budget_seconds",
    "file_seconds",
    "lpt_pack",
    "parallelism_of",
    "parse_shard_spec",
    "split_shards",
    "plan_runner",
    "plan_matrix",
]

# Tests get this share of the job timeout; the rest covers checkout, environment set-up and the
# spread between an estimate and a slow day.
BUDGET_FRACTION = 0.8
# I and N of `--shard I/N`: plain ASCII digits, no more than MAX_SHARDS has.
_DIGITS_RE = re.compile(rf"[0-9]{{1,{len(str(MAX_SHARDS))}}}")


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as `--shard I/N` spells it
    files: tuple[str, ...]
    est_time: float  # estimated wall seconds on the runner (`Parallelism.wall_seconds` of its files)


@dataclass(frozen=True)
class Parallelism:
    """The tests a runner runs at once: `gpus` GPUs, each shared by `per_gpu` tests (1, 1: one at a time)."""

    gpus: int = 1
    per_gpu: int = 1

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.per_gpu < 1:
            raise ValueError(
                f"Parallelism needs gpus >= 1 and per_gpu >= 1, got {self.gpus} and {self.per_gpu}"
            )

    @property
    def slots(self) -> int:
        return self.gpus * self.per_gpu

    def wall_seconds(self, registration: Registration, seconds: float) -> float:
        """The wall time that `seconds` of the file's worker time take: their share of the runner's slots. A test
        of one shared GPU holds one slot; an exclusive test a whole GPU (`per_gpu` slots); an N-GPU test N
        whole GPUs. A test wanting more than the runner has is counted as taking all of it."""
        if registration.gpus > 1 or registration.exclusive:
            held = max(registration.gpus, 1) * self.per_gpu
        else:
            held = 1
        return seconds * min(held, self.slots) / self.slots


def parallelism_of(matrix: Matrix, runner: Runner) -> Parallelism:
    """The runner's parallelism as `ci/matrix.yaml` sets it: its GPUs times `workers_per_gpu` (a CPU
    runner's worker count is its CPUs, unknown when planning: counted as one)."""
    if runner.gpu_class == CPU_CLASS or runner.gpus < 1:
        return Parallelism()
    return Parallelism(runner.gpus, matrix.workers_per_gpu(runner.gpu_class, runner).count)


@dataclass(frozen=True)
class ShardPlan:
    runner: Runner
    shards: tuple[Shard, ...]
    over_budget: bool  # even max_shards shards cannot fit the runner's budget
    suite: str | None = DEFAULT_SUITE  # the suite planned (None: every suite)

    @property
    def count(self) -> int:
        return len(self.shards)


def budget_seconds(runner: Runner) -> float:
    return runner.timeout_minutes * 60 * BUDGET_FRACTION


def lpt_pack(items: Iterable[tuple[str, float]], shards: int) -> list[list[tuple[str, float]]]:
    """Longest-processing-time-first packing of (name, seconds) into `shards` bins.

    Deterministic: ties in time break by name, ties in load by shard index.
    """
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    ordered = sorted(items, key=lambda item: (-item[1], item[0]))
    bins: list[list[tuple[str, float]]] = [[] for _ in range(shards)]
    heap = [(0.0, index) for index in range(shards)]
    for name, seconds in ordered:
        load, index = heapq.heappop(heap)
        bins[index].append((name, seconds))
        heapq.heappush(heap, (load + seconds, index))
    return bins


#: Measured seconds by GPU class, then by file (`gpumatrix.estimate.proposals.measured_durations`).
Durations = Mapping[str, Mapping[str, float]]


def file_seconds(
    registration: Registration, gpu_class: str | None, durations: Durations | None = None
) -> float:
    """What a file costs a runner of `gpu_class` (None: its `est_time`): 0 when it is disabled there;
    else its measured seconds on that class where `durations` has them, else its estimate."""
    if registration.why_disabled(gpu_class) is not None:
        return 0.0
    measured = (durations or {}).get(gpu_class or "", {}).get(registration.path)
    return measured if measured is not None else registration.estimate_for(gpu_class)


def split_shards(
    files: Sequence[Registration],
    count: int,
    *,
    gpu_class: str | None = None,
    durations: Durations | None = None,
    parallelism: Parallelism = Parallelism(),
) -> tuple[Shard, ...]:
    """`files` packed into `count` shards (LPT); shard I is what `gpumatrix run --shard I/count` runs.

    The one split behind both `gpumatrix matrix` and `gpumatrix run --shard`, so a matrix job and
    the run it starts agree on its files; `gpu_class` is the runner's, whose estimates (or measured
    `durations`) it packs by, each as its wall share under `parallelism` (`parallelism_of` the runner).
    A shard may be empty when there are fewer files than shards.
    """
    bins = lpt_pack(
        [(f.path, parallelism.wall_seconds(f, file_seconds(f, gpu_class, durations))) for f in files], count
    )
    return tuple(
        Shard(index=i + 1, files=tuple(sorted(name for name, _ in b)), est_time=sum(t for _, t in b))
        for i, b in enumerate(bins)
    )


def plan_runner(
    runner: Runner,
    files: Sequence[Registration],
    *,
    suite: str | None = DEFAULT_SUITE,
    durations: Durations | None = None,
    parallelism: Parallelism = Parallelism(),
) -> ShardPlan:
    """The fewest shards (<= max_shards) whose longest shard fits the runner's budget, by the
    estimates of the runner's class as wall time under `parallelism`; `suite` only labels the plan."""
    budget = budget_seconds(runner)
    # More shards than files cannot shorten the longest shard (and would leave some empty).
    most = max(1, min(runner.max_shards, len(files)))
    for count in range(1, most + 1):
        shards = split_shards(
            files, count, gpu_class=runner.gpu_class, durations=durations, parallelism=parallelism
        )
        longest = max(shard.est_time for shard in shards)
        if longest <= budget or count == most:
            return ShardPlan(runner=runner, shards=shards, over_budget=longest > budget, suite=suite)
    raise AssertionError("unreachable: the loop returns when count == most")  # pragma: no cover


def plan_matrix(
    matrix: Matrix,
    registry: Registry,
    *,
    suite: str | None = DEFAULT_SUITE,
    durations: Durations | None = None,
) -> list[ShardPlan]:
    """One plan per runner that has files in `suite` (None: every suite); the others get no job."""
    plans = []
    for runner in matrix.runners:
        files = registry.for_runner(runner.label, suite=suite)
        if files:
            plans.append(
                plan_runner(
                    runner,
                    files,
                    suite=suite,
                    durations=durations,
                    parallelism=parallelism_of(matrix, runner),
                )
            )
    return plans


def parse_shard_spec(spec: str, *, max_shards: int = MAX_SHARDS) -> tuple[int, int]:
    """`"2/4"` -> (2, 4); raises ValueError naming the expected form. N is at most `max_shards` (the
    runner's), and digits beyond what that allows are refused before any is converted: a plan of
    10**30 shards would never end."""
    index_text, sep, count_text = spec.partition("/")
    example = "1/2" if max_shards > 1 else "1/1"
    usage = f"--shard must be I/N with 1 <= I <= N <= {max_shards} (for example {example}), got {spec[:40]!r}"
    if not (_DIGITS_RE.fullmatch(index_text) and _DIGITS_RE.fullmatch(count_text)):
        raise ValueError(usage)
    index, count = int(index_text), int(count_text)
    if not sep or count < 1 or not 1 <= index <= count:
        raise ValueError(usage)
    if count > max_shards:
        raise ValueError(f"{usage}: the runner is split into at most {max_shards} shards (max_shards)")
    return index, count
