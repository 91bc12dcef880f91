"""What the emulated repository holds, and the rules GitHub applies when it changes.

Records are frozen: a change replaces the record, so a snapshot handed to a test never moves under it. Every
method expects the caller to hold the emulator's lock. Failures GitHub would answer with are `ApiError`s that
carry the status and GitHub's message.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "PERMISSION_LEVELS",
    "ApiError",
    "ArtifactRecord",
    "CheckRunRecord",
    "CommentRecord",
    "IssueRecord",
    "JobRecord",
    "ReactionRecord",
    "RepoState",
    "StatusRecord",
    "WorkflowRecord",
    "WorkflowRunRecord",
    "check_sha",
]

# GitHub's role ladder, lowest first. The permission API answers the legacy `permission` (admin/write/read/none)
# beside the exact `role_name`: maintain reads as "write" and triage as "read", which a bot comparing
# `permission` against "maintain" must not trip over.
PERMISSION_LEVELS = ("none", "read", "triage", "write", "maintain", "admin")
_LEGACY_PERMISSION = {
    "none": "none",
    "read": "read",
    "triage": "read",
    "write": "write",
    "maintain": "write",
    "admin": "admin",
}
RUN_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
RUN_CONCLUSIONS = ("success", "failure", "neutral", "cancelled", "skipped", "timed_out", "action_required")
CHECK_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
REACTION_CONTENTS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")
# A fixed clock that ticks one second per change: timestamps are distinct and ordered, and tests that compare
# them never depend on how fast the machine is.
_EPOCH = dt.datetime(2025, 6, 2, 9, 0, 0, tzinfo=dt.timezone.utc)


class ApiError(Exception):
    """A failure GitHub answers with `status` and `message`.

    `breach` marks failures that only a client breaking the contract provokes (dispatching inputs the workflow
    does not declare, or a ref that does not exist), which the emulator also records as violations; a 404 for
    a comment deleted meanwhile is GitHub behaving normally and is not one.
    """

    def __init__(self, status: int, message: str, *, breach: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.breach = breach


@dataclass(frozen=True)
class IssueRecord:
    number: int
    title: str
    login: str
    state: str
    is_pull: bool
    head_sha: str = ""
    head_ref: str = ""
    base_ref: str = ""
    fork: bool = False
    draft: bool = False
    files: tuple[Mapping[str, Any], ...] = ()
    created_at: str = ""


@dataclass(frozen=True)
class CommentRecord:
    id: int
    issue_number: int
    body: str
    login: str
    user_type: str
    author_association: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class ReactionRecord:
    id: int
    comment_id: int
    content: str
    login: str
    created_at: str


@dataclass(frozen=True)
class WorkflowRecord:
    """A workflow file; `inputs` maps each declared workflow_dispatch input to whether it is required, or is
    None to accept any inputs."""

    id: int
    path: str
    name: str
    inputs: Mapping[str, bool] | None
    created_at: str


@dataclass(frozen=True)
class JobRecord:
    id: int
    run_id: int
    name: str
    status: str
    conclusion: str | None
    labels: tuple[str, ...]
    created_at: str
    started_at: str
    completed_at: str | None


@dataclass(frozen=True)
class WorkflowRunRecord:
    """A workflow run, with what its dispatch asked for (`ref`, `inputs`), which the REST API never shows."""

    id: int
    workflow_id: int
    workflow_path: str
    name: str
    run_number: int
    event: str
    ref: str
    head_branch: str
    head_sha: str
    inputs: Mapping[str, Any]
    actor: str
    status: str
    conclusion: str | None
    run_attempt: int
    created_at: str
    updated_at: str
    jobs: tuple[JobRecord, ...] = field(default=())


@dataclass(frozen=True)
class StatusRecord:
    id: int
    sha: str
    state: str
    context: str
    description: str | None
    target_url: str | None
    login: str
    created_at: str


@dataclass(frozen=True)
class CheckRunRecord:
    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    details_url: str | None
    external_id: str | None
    output: Mapping[str, Any]
    started_at: str
    completed_at: str | None


@dataclass(frozen=True)
class ArtifactRecord:
    """An artifact a run uploaded: its zip archive as GitHub serves it from blob storage."""

    id: int
    run_id: int
    name: str
    archive: bytes
    created_at: str
    expired: bool = False


def check_sha(sha: object, argument: str) -> str:
    if not isinstance(sha, str) or len(sha) != 40 or any(c not in "0123456789abcdef" for c in sha):
        raise ValueError(f"{argument}: expected 40 lowercase hex digits, got {sha!r}")
    return sha


def _git_sha(kind: str, payload: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(payload)}\0".encode() + payload).hexdigest()


class RepoState:
    """One repository: issues and pull requests, comments, reactions, permissions, workflows and their runs,
    file trees per commit, statuses and check runs."""

    def __init__(self, owner: str, repo: str, *, default_branch: str, actor: str, actor_type: str) -> None:
        self.owner, self.repo = owner, repo
        self.default_branch = default_branch
        self.actor, self.actor_type = actor, actor_type
        self._tick = itertools.count()
        # Distinct id ranges per kind, so a comment id passed where a run id belongs finds nothing.
        self._ids = {
            kind: itertools.count(start)
            for kind, start in (
                ("comment", 1_000_001),
                ("reaction", 3_000_001),
                ("workflow", 5_000_001),
                ("run", 7_000_001),
                ("job", 8_000_001),
                ("status", 9_000_001),
                ("check", 11_000_001),
                ("artifact", 13_000_001),
                ("user", 20_001),
            )
        }
        self._issue_numbers = itertools.count(1)
        self.user_ids: dict[str, int] = {}
        self.user_types: dict[str, str] = {actor: actor_type}
        self.issues: dict[int, IssueRecord] = {}
        self.comments: dict[int, CommentRecord] = {}
        self.reactions: dict[int, ReactionRecord] = {}
        self.permissions: dict[str, str] = {}
        self.org_members: set[tuple[str, str]] = set()
        self.workflows: dict[int, WorkflowRecord] = {}
        self.runs: dict[int, WorkflowRunRecord] = {}
        self.statuses: dict[int, StatusRecord] = {}
        self.check_runs: dict[int, CheckRunRecord] = {}
        self.artifacts: dict[int, ArtifactRecord] = {}
        self.branches: dict[str, str] = {}
        self.trees: dict[str, dict[str, str]] = {}
        self.add_tree(
            _git_sha("commit", f"{owner}/{repo}@{default_branch}".encode()), {}, branch=default_branch
        )

    # -- clock and identities -------------------------------------------------------------------------------

    def now(self) -> str:
        moment = _EPOCH + dt.timedelta(seconds=next(self._tick))
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

    def next_id(self, kind: str) -> int:
        return next(self._ids[kind])

    def user_id(self, login: str) -> int:
        if login not in self.user_ids:
            self.user_ids[login] = self.next_id("user")
        return self.user_ids[login]

    # -- trees and refs -------------------------------------------------------------------------------------

    def add_tree(self, sha: str, files: Mapping[str, str], *, branch: str | None = None) -> None:
        check_sha(sha, "sha")
        for path, text in files.items():
            if not isinstance(path, str) or not path or path.startswith("/") or not isinstance(text, str):
                raise TypeError(
                    f"files: expected relative path -> text, got {path!r} -> {type(text).__name__}"
                )
        self.trees[sha] = dict(files)
        if branch is not None:
            self.branches[branch] = sha

    def resolve_ref(self, ref: str | None) -> str:
        """The commit a ref names: a branch, `refs/heads/...`, a full sha or an unambiguous 7+ digit prefix."""
        if ref is None or ref == "":
            return self.branches[self.default_branch]
        name = ref.removeprefix("refs/heads/")
        if name in self.branches:
            return self.branches[name]
        if len(ref) >= 7:
            found = [sha for sha in self.trees if sha.startswith(ref)]
            if len(found) == 1:
                return found[0]
        raise ApiError(404, f"No commit found for the ref {ref}")

    def blob_sha(self, text: str) -> str:
        return _git_sha("blob", text.encode())

    @staticmethod
    def encode_content(text: str) -> str:
        # GitHub wraps base64 content at 60 characters per line; a client must decode across the newlines.
        raw = base64.b64encode(text.encode()).decode()
        return "".join(raw[i : i + 60] + "\n" for i in range(0, len(raw), 60))

    # -- issues, pull requests, comments, reactions ---------------------------------------------------------

    def add_issue(self, record: IssueRecord) -> IssueRecord:
        if record.number in self.issues:
            raise ValueError(f"number: issue or pull request #{record.number} already exists")
        self.issues[record.number] = record
        if record.is_pull and record.head_ref and not record.fork:
            self.branches.setdefault(record.head_ref, record.head_sha)
        if record.is_pull and record.head_sha not in self.trees:
            self.trees[record.head_sha] = {}
        return record

    def next_issue_number(self) -> int:
        number = next(self._issue_numbers)
        while number in self.issues:
            number = next(self._issue_numbers)
        return number

    def issue(self, number: int) -> IssueRecord:
        try:
            return self.issues[number]
        except KeyError:
            raise ApiError(404, "Not Found") from None

    def pull(self, number: int) -> IssueRecord:
        record = self.issue(number)
        if not record.is_pull:
            raise ApiError(404, "Not Found")
        return record

    def author_association(self, login: str) -> str:
        if login == self.owner:
            return "OWNER"
        if self.permissions.get(login, "none") in ("write", "maintain", "admin"):
            return "COLLABORATOR"
        if any(i.login == login for i in self.issues.values() if i.is_pull):
            return "CONTRIBUTOR"
        return "NONE"

    def create_comment(
        self,
        issue_number: int,
        body: str,
        *,
        login: str,
        user_type: str,
        author_association: str | None = None,
    ) -> CommentRecord:
        self.issue(issue_number)
        now = self.now()
        self.user_types[login] = user_type
        record = CommentRecord(
            id=self.next_id("comment"),
            issue_number=issue_number,
            body=body,
            login=login,
            user_type=user_type,
            author_association=author_association or self.author_association(login),
            created_at=now,
            updated_at=now,
        )
        self.comments[record.id] = record
        return record

    def comment(self, comment_id: int) -> CommentRecord:
        try:
            return self.comments[comment_id]
        except KeyError:
            raise ApiError(404, "Not Found") from None

    def update_comment(self, comment_id: int, body: str) -> CommentRecord:
        record = replace(self.comment(comment_id), body=body, updated_at=self.now())
        self.comments[comment_id] = record
        return record

    def delete_comment(self, comment_id: int) -> None:
        self.comment(comment_id)
        del self.comments[comment_id]
        for reaction_id in [r.id for r in self.reactions.values() if r.comment_id == comment_id]:
            del self.reactions[reaction_id]

    def push(self, number: int, head_sha: str) -> IssueRecord:
        """A new head for pull request `number`, as a push to its branch makes."""
        record = replace(self.pull(number), head_sha=head_sha)
        self.issues[number] = record
        if not record.fork and record.head_ref:
            self.branches[record.head_ref] = head_sha
        self.trees.setdefault(head_sha, {})
        return record

    def react(self, comment_id: int, content: str, *, login: str) -> tuple[ReactionRecord, bool]:
        """The reaction and whether it is new: GitHub answers 201 for a new one, 200 for the same again."""
        self.comment(comment_id)
        for existing in self.reactions.values():
            if (existing.comment_id, existing.content, existing.login) == (comment_id, content, login):
                return existing, False
        record = ReactionRecord(self.next_id("reaction"), comment_id, content, login, self.now())
        self.reactions[record.id] = record
        return record, True

    # -- workflows and runs ---------------------------------------------------------------------------------

    def add_workflow(self, path: str, *, name: str, inputs: Mapping[str, bool] | None) -> WorkflowRecord:
        if any(w.path == path for w in self.workflows.values()):
            raise ValueError(f"path: workflow {path!r} already exists")
        record = WorkflowRecord(self.next_id("workflow"), path, name, inputs, self.now())
        self.workflows[record.id] = record
        return record

    def workflow(self, workflow_id: str) -> WorkflowRecord:
        """By numeric id or by file name, as GitHub accepts both."""
        for record in self.workflows.values():
            if workflow_id in (str(record.id), record.path.rsplit("/", 1)[-1]):
                return record
        raise ApiError(404, "Not Found")

    def dispatch(self, workflow: WorkflowRecord, ref: str, inputs: Mapping[str, Any]) -> WorkflowRunRecord:
        branch = ref.removeprefix("refs/heads/")
        if branch not in self.branches:
            raise ApiError(422, f"No ref found for: {ref}", breach=True)
        if workflow.inputs is not None:
            unexpected = sorted(set(inputs) - set(workflow.inputs))
            if unexpected:
                quoted = ", ".join(f'"{name}"' for name in unexpected)
                raise ApiError(422, f"Unexpected inputs provided: [{quoted}]", breach=True)
            missing = [name for name, required in workflow.inputs.items() if required and name not in inputs]
            if missing:
                raise ApiError(422, f"Required input '{missing[0]}' not provided", breach=True)
        now = self.now()
        run_number = 1 + sum(1 for r in self.runs.values() if r.workflow_id == workflow.id)
        run_id = self.next_id("run")
        job = JobRecord(self.next_id("job"), run_id, "test", "queued", None, (), now, now, None)
        record = WorkflowRunRecord(
            id=run_id,
            workflow_id=workflow.id,
            workflow_path=workflow.path,
            name=workflow.name,
            run_number=run_number,
            event="workflow_dispatch",
            ref=ref,
            head_branch=branch,
            head_sha=self.branches[branch],
            inputs=dict(inputs),
            actor=self.actor,
            status="queued",
            conclusion=None,
            run_attempt=1,
            created_at=now,
            updated_at=now,
            jobs=(job,),
        )
        self.runs[run_id] = record
        return record

    def add_run(
        self, workflow: WorkflowRecord, *, event: str, head_sha: str, head_branch: str, actor: str
    ) -> WorkflowRunRecord:
        """A run GitHub starts itself (a push or a pull request event), queued on `head_sha`."""
        now = self.now()
        run_number = 1 + sum(1 for r in self.runs.values() if r.workflow_id == workflow.id)
        run_id = self.next_id("run")
        job = JobRecord(self.next_id("job"), run_id, "test", "queued", None, (), now, now, None)
        record = WorkflowRunRecord(
            id=run_id,
            workflow_id=workflow.id,
            workflow_path=workflow.path,
            name=workflow.name,
            run_number=run_number,
            event=event,
            ref=head_branch,
            head_branch=head_branch,
            head_sha=head_sha,
            inputs={},
            actor=actor,
            status="queued",
            conclusion=None,
            run_attempt=1,
            created_at=now,
            updated_at=now,
            jobs=(job,),
        )
        self.runs[run_id] = record
        return record

    def add_artifact(
        self, run_id: int, name: str, archive: bytes, *, expired: bool = False
    ) -> ArtifactRecord:
        self.run(run_id)
        record = ArtifactRecord(self.next_id("artifact"), run_id, name, archive, self.now(), expired)
        self.artifacts[record.id] = record
        return record

    def artifact(self, artifact_id: int) -> ArtifactRecord:
        try:
            return self.artifacts[artifact_id]
        except KeyError:
            raise ApiError(404, "Not Found") from None

    def run(self, run_id: int) -> WorkflowRunRecord:
        try:
            return self.runs[run_id]
        except KeyError:
            raise ApiError(404, "Not Found") from None

    def set_run_state(self, run_id: int, status: str, conclusion: str | None) -> WorkflowRunRecord:
        if status not in RUN_STATUSES:
            raise ValueError(f"status: expected one of {RUN_STATUSES}, got {status!r}")
        if (status == "completed") != (conclusion is not None):
            raise ValueError("conclusion: required exactly when status is 'completed'")
        if conclusion is not None and conclusion not in RUN_CONCLUSIONS:
            raise ValueError(f"conclusion: expected one of {RUN_CONCLUSIONS}, got {conclusion!r}")
        run = self.run(run_id)
        now = self.now()
        # The run's jobs follow it, so a client reading jobs sees what it sees on the run.
        jobs = tuple(
            replace(j, status=status, conclusion=conclusion, completed_at=now if conclusion else None)
            for j in run.jobs
        )
        record = replace(run, status=status, conclusion=conclusion, updated_at=now, jobs=jobs)
        self.runs[run_id] = record
        return record

    def set_jobs(self, run_id: int, jobs: Iterable[Mapping[str, Any]]) -> WorkflowRunRecord:
        run = self.run(run_id)
        now = self.now()
        records = []
        for spec in jobs:
            status, conclusion = spec.get("status", "queued"), spec.get("conclusion")
            if status not in RUN_STATUSES or (conclusion is not None and conclusion not in RUN_CONCLUSIONS):
                raise ValueError(f"jobs: bad status/conclusion in {spec!r}")
            records.append(
                JobRecord(
                    self.next_id("job"),
                    run_id,
                    str(spec["name"]),
                    status,
                    conclusion,
                    tuple(spec.get("labels", ())),
                    now,
                    now,
                    now if conclusion else None,
                )
            )
        record = replace(run, jobs=tuple(records), updated_at=now)
        self.runs[run_id] = record
        return record

    def cancel_run(self, run_id: int) -> WorkflowRunRecord:
        if self.run(run_id).status == "completed":
            raise ApiError(409, "Cannot cancel a workflow run that is completed.")
        return self.set_run_state(run_id, "completed", "cancelled")

    def rerun_failed_jobs(self, run_id: int) -> WorkflowRunRecord:
        run = self.run(run_id)
        if run.status != "completed":
            raise ApiError(403, "This workflow is already running")
        record = replace(run, run_attempt=run.run_attempt + 1)
        self.runs[run_id] = record
        return self.set_run_state(run_id, "queued", None)

    # -- permissions ----------------------------------------------------------------------------------------

    def set_permission(self, login: str, level: str) -> None:
        if level not in PERMISSION_LEVELS:
            raise ValueError(f"level: expected one of {PERMISSION_LEVELS}, got {level!r}")
        self.permissions[login] = level
        self.user_id(login)

    def permission(self, login: str) -> tuple[str, str]:
        """(legacy permission, role name) of a known user; 404 for a login the repository never saw."""
        if login not in self.permissions:
            raise ApiError(404, "Not Found")
        level = self.permissions[login]
        return _LEGACY_PERMISSION[level], level

    # -- commit statuses and check runs ---------------------------------------------------------------------

    def create_status(self, sha: str, body: Mapping[str, Any]) -> StatusRecord:
        record = StatusRecord(
            id=self.next_id("status"),
            sha=sha,
            state=body["state"],
            context=body.get("context", "default"),
            description=body.get("description"),
            target_url=body.get("target_url"),
            login=self.actor,
            created_at=self.now(),
        )
        self.statuses[record.id] = record
        return record

    def create_check_run(self, body: Mapping[str, Any]) -> CheckRunRecord:
        now = self.now()
        conclusion = body.get("conclusion")
        if body.get("status") == "completed" and not conclusion:
            raise ApiError(
                422, "Invalid request.\n\nconclusion is required when status is completed.", breach=True
            )
        record = CheckRunRecord(
            id=self.next_id("check"),
            name=body["name"],
            head_sha=body["head_sha"],
            status="completed" if conclusion else body.get("status", "queued"),
            conclusion=conclusion,
            details_url=body.get("details_url"),
            external_id=body.get("external_id"),
            output=dict(body.get("output", {})),
            started_at=body.get("started_at", now),
            completed_at=now if conclusion else None,
        )
        self.check_runs[record.id] = record
        return record

    def update_check_run(self, check_run_id: int, body: Mapping[str, Any]) -> CheckRunRecord:
        """GitHub's rules: a conclusion completes the check run; a completed one never goes back to queued or
        in progress (422, what a writer that read before another completed it gets)."""
        try:
            record = self.check_runs[check_run_id]
        except KeyError:
            raise ApiError(404, "Not Found") from None
        status, conclusion = body.get("status"), body.get("conclusion")
        if status == "completed" and not conclusion and record.conclusion is None:
            raise ApiError(
                422, "Invalid request.\n\nconclusion is required when status is completed.", breach=True
            )
        if (
            record.status == "completed"
            and status in CHECK_STATUSES
            and status != "completed"
            and not conclusion
        ):
            raise ApiError(
                422, f"Validation Failed: check run {check_run_id} is completed and cannot become {status}"
            )
        changes = {k: body[k] for k in ("name", "status", "details_url", "external_id") if k in body}
        if "output" in body:
            changes["output"] = dict(body["output"])
        if conclusion:
            changes.update(status="completed", conclusion=conclusion, completed_at=self.now())
        record = replace(record, **changes)
        self.check_runs[check_run_id] = record
        return record

    def list_check_runs(
        self, ref: str, *, check_name: str | None, status: str | None, latest: bool
    ) -> list[CheckRunRecord]:
        """Newest first; `latest` keeps the newest check run of each name, as GitHub's default filter does."""
        sha = (
            ref
            if len(ref) == 40 and all(c in "0123456789abcdef" for c in ref)
            else self.resolve_ref(ref.removeprefix("heads/"))
        )
        found = sorted(
            (c for c in self.check_runs.values() if c.head_sha == sha), key=lambda c: c.id, reverse=True
        )
        if check_name is not None:
            found = [c for c in found if c.name == check_name]
        if status is not None:
            found = [c for c in found if c.status == status]
        if latest:
            seen: set[str] = set()
            found = [c for c in found if not (c.name in seen or seen.add(c.name))]
        return found
