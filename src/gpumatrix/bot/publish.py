"""Publish runner groups' results on the commit they ran: check runs, or commit statuses as the fallback.

`handle` creates one check run per dispatched group right after the dispatches (queued, or action_required
when a dispatch failed). Every sync then moves the check runs it is responsible for to what the runs say:
the run's own sync (`--run-id`) only that run's, a sync without one (a comment handled again) all of them,
creating any that is missing. Check runs are found by `external_id`; every check run carrying it is kept true,
so a duplicate (two writers creating one at once) shows the same as the original. A completed check run is
never moved back to queued or in progress: GitHub refuses that (422), and a writer that wants it has read the
run before another writer saw it finish. When the answer is 422 all the same (another writer completed the
check run between this one's read and write), the check runs are read again and the write retried once.

The run's JSON test reports (artifacts `gpumatrix-report-*`) are downloaded once the group is over, unless
the check run's hidden marker says they were already read after the run completed.

When the token may not write check runs (GitHub answers 403 without a rate limit: a token of an app without
`checks: write`, or not an app at all), each group becomes a commit status with the same context instead,
and `kind` / `note` say so; a status is written on every publish, since a status cannot be read back cheaply
and writing the same state again changes nothing a reader sees.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpumatrix.bot.artifacts import ArtifactClient, run_report_documents
from gpumatrix.bot.checks import check_name, check_spec, external_id, status_spec
from gpumatrix.bot.github import CheckRunInfo, GitHubApiError, RunInfo
from gpumatrix.bot.model import HEAD, TERMINAL_STATES, GroupStatus, ReportMark, StatusComment, partner
from gpumatrix.bot.report import summarize_reports
from gpumatrix.bot.state import read_mark
from gpumatrix.config import Matrix

__all__ = ["CHECK_RUNS", "COMMIT_STATUSES", "ChecksPublisher", "PublishClient", "Publication"]

CHECK_RUNS = "check-runs"
COMMIT_STATUSES = "commit-statuses"


class PublishClient(ArtifactClient, Protocol):
    def list_check_runs(self, sha: str, *, name: str) -> list[CheckRunInfo]: ...

    def create_check_run(self, sha: str, fields: dict) -> CheckRunInfo: ...

    def update_check_run(self, check_run_id: int, fields: dict) -> CheckRunInfo: ...

    def create_status(
        self, sha: str, *, context: str, state: str, target_url: str | None, description: str
    ) -> None: ...


@dataclass
class Publication:
    """What publishing did: the kind used, why (for the fallback), writes made, and calls that failed."""

    kind: str
    note: str | None = None
    writes: int = 0
    failures: list[str] = field(default_factory=list)


class ChecksPublisher:
    """Publishes the groups of one status comment; keeps what it read and wrote between calls."""

    def __init__(
        self,
        client: PublishClient,
        status: StatusComment,
        *,
        comment_id: int,
        comment_url: str | None,
        matrix: Matrix,
        only_run: int | None = None,
        look_up: bool = True,
    ) -> None:
        """`matrix` is the one the runs' reports are read against. `only_run`: publish only that run's
        group. `look_up=False` (a status comment just posted, whose check runs cannot exist yet) creates
        without listing first."""
        if not status.sha:
            raise ValueError("status: a status comment without a pinned SHA has nothing to publish on")
        self.client, self.status, self.comment_id, self.comment_url = client, status, comment_id, comment_url
        self.matrix = matrix
        self.only_run, self.look_up = only_run, look_up
        self.result = Publication(status.checks or CHECK_RUNS, status.checks_note)
        self._known: dict[str, list[CheckRunInfo]] = {}  # label: check runs with its external_id
        self._marks: dict[tuple[int, int], ReportMark] = {}  # (run, attempt): reports read in this sync
        self._posted: dict[str, tuple[str, str]] = {}  # label: (state, description) of the last status

    def publish(self, groups: Sequence[GroupStatus], runs: dict[int, RunInfo] | None = None) -> int:
        """Bring the published result of each targeted group in line with it; returns the writes made.
        `runs` holds what was read of each run (its attempt and completion); missing ones count as attempt 1."""
        runs = runs or {}
        writes = 0
        # A check run shows the whole comment's state (a --repeat head check run, its base run's tally too).
        self.status = self.status.with_groups(groups)
        for group in self._targets(groups):
            run = runs.get(group.run_id) if group.run_id else None
            for _ in range(2):  # a second time only after switching to commit statuses
                try:
                    writes += self._publish_one(group, run)
                except GitHubApiError as exc:
                    if self.result.kind == CHECK_RUNS and _not_allowed(exc):
                        self.result.kind, self.result.note = COMMIT_STATUSES, _short(exc)
                        continue
                    self.result.failures.append(f"{check_name(group.label)}: {exc}")
                break
        self.result.writes += writes
        return writes

    # -- one group ------------------------------------------------------------------------------------------

    def _targets(self, groups: Sequence[GroupStatus]) -> Iterable[GroupStatus]:
        """The groups to publish: every head group, or the one of `only_run`. A `/rerun-test --repeat` base
        run has no check run of its own (its commit is the base branch's); its sync publishes the head's
        check run of the same runner, whose verdicts need both runs."""
        return [
            g
            for g in groups
            if g.commit == HEAD
            and (
                self.only_run is None
                or self.only_run in (g.run_id, getattr(partner(groups, g), "run_id", None))
            )
        ]

    def _publish_one(self, group: GroupStatus, run: RunInfo | None) -> int:
        if self.result.kind == COMMIT_STATUSES:
            return self._post_status(group, run)
        try:
            return self._write_checks(group, run)
        except GitHubApiError as exc:
            if exc.status != 422:
                raise
        # Someone moved the check run between our read and our write (or GitHub refused the change once):
        # read it again and write what is still missing, once.
        self._known.pop(group.label, None)
        return self._write_checks(group, run)

    def _write_checks(self, group: GroupStatus, run: RunInfo | None) -> int:
        existing = self._existing(group)
        mark = self._mark(group, run, existing)
        spec = check_spec(
            group, status=self.status, comment_id=self.comment_id, comment_url=self.comment_url, mark=mark
        )
        if spec is None:
            return 0
        sha = self.status.sha or ""
        if not existing:
            self._known[group.label] = [self.client.create_check_run(sha, spec.fields())]
            return 1
        writes, kept = 0, []
        for check in existing:
            if spec.shown_by(check) or (check.status == "completed" and spec.status != "completed"):
                kept.append(check)  # already true, or a stale wish to move a finished check run back
                continue
            kept.append(self.client.update_check_run(check.id, spec.fields()))
            writes += 1
        self._known[group.label] = kept
        return writes

    def _existing(self, group: GroupStatus) -> list[CheckRunInfo]:
        if group.label not in self._known:
            wanted = external_id(self.status, self.comment_id, group.label)
            found = (
                self.client.list_check_runs(self.status.sha or "", name=check_name(group.label))
                if self.look_up
                else []
            )
            self._known[group.label] = [c for c in found if c.external_id == wanted]
        return self._known[group.label]

    def _mark(
        self, group: GroupStatus, run: RunInfo | None, existing: Sequence[CheckRunInfo]
    ) -> ReportMark | None:
        """The reports of a finished group: from a check run's marker when it covers this run attempt, else
        downloaded now."""
        if group.state not in TERMINAL_STATES or group.run_id is None:
            return None
        attempt = run.run_attempt if run is not None else 1
        complete = run is not None and run.status == "completed"
        if (group.run_id, attempt) in self._marks and (
            self._marks[group.run_id, attempt].complete or not complete
        ):
            return self._marks[group.run_id, attempt]
        for check in existing:
            mark = read_mark(check.summary)
            if mark is not None and mark.covers(group.run_id, attempt):
                self._marks[group.run_id, attempt] = mark
                return mark
        try:
            documents = run_report_documents(self.client, group.run_id)
        except GitHubApiError as exc:  # the result still shows; the next sync reads the reports again
            self.result.failures.append(f"{check_name(group.label)}: test reports not read: {exc}")
            return None
        # Counted only as this runner's reports at the pinned commit: another's never pass for this run's.
        report = (
            summarize_reports(documents, self.matrix, runner=group.label, commit=self.status.sha)
            if documents
            else None
        )
        mark = ReportMark(group.run_id, attempt, complete, report)
        self._marks[group.run_id, attempt] = mark
        return mark

    def _post_status(self, group: GroupStatus, run: RunInfo | None) -> int:
        spec = status_spec(group, comment_url=self.comment_url, mark=self._mark(group, run, ()))
        if spec is None or self._posted.get(group.label) == (spec.state, spec.description):
            return 0
        self.client.create_status(
            self.status.sha or "",
            context=spec.context,
            state=spec.state,
            target_url=spec.target_url,
            description=spec.description,
        )
        self._posted[group.label] = (spec.state, spec.description)
        return 1


def _not_allowed(exc: GitHubApiError) -> bool:
    """GitHub's answer to a token that may not write check runs (not a rate limit, which is retried)."""
    return exc.status == 403 and "rate limit" not in exc.message.lower()


def _short(exc: GitHubApiError) -> str:
    return f"HTTP {exc.status}: {exc.message}" if exc.status is not None else exc.message
