"""`GitHubEmulator`: a local GitHub REST server for one repository, and the methods a test drives it with."""

from __future__ import annotations

import io
import threading
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .faults import Fault
from .server import RecordedRequest, RequestPipeline, Violation, serve
from .shapes import Shapes
from .spec import rest_description
from .state import (
    ApiError,
    ArtifactRecord,
    CheckRunRecord,
    IssueRecord,
    RepoState,
    StatusRecord,
    WorkflowRunRecord,
    check_sha,
)
from .webhooks import issue_comment_event, pull_request_event, workflow_run_event

__all__ = ["GitHubEmulator", "workflow_inputs"]


def workflow_inputs(workflow_file: str | Path) -> tuple[str, dict[str, bool]]:
    """(name, {input: required}) of a workflow file's `workflow_dispatch` trigger."""
    import yaml

    document = yaml.safe_load(Path(workflow_file).read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"workflow_file: {workflow_file} is not a workflow")
    # YAML 1.1 reads the bare key `on` as the boolean True.
    triggers = document.get("on", document.get(True))
    if not isinstance(triggers, dict) or "workflow_dispatch" not in triggers:
        raise ValueError(f"workflow_file: {workflow_file} has no workflow_dispatch trigger")
    inputs = (triggers["workflow_dispatch"] or {}).get("inputs") or {}
    name = str(document.get("name") or Path(workflow_file).name)
    return name, {key: bool((spec or {}).get("required", False)) for key, spec in inputs.items()}


class GitHubEmulator:
    """GitHub's REST API for one repository, served on 127.0.0.1 (see the package docstring for usage).

    Every method is thread-safe; the server answers on its own threads while a test calls these.
    """

    def __init__(
        self,
        owner: str = "acme",
        repo: str = "mxfuse",
        *,
        default_branch: str = "main",
        token: str = "ghs_emulator_token",
        actor: str = "github-actions[bot]",
        actor_type: str = "Bot",
        strict: bool = True,
    ) -> None:
        for name, value in (("owner", owner), ("repo", repo), ("token", token), ("actor", actor)):
            if not isinstance(value, str) or not value or "/" in value:
                raise ValueError(f"{name}: expected a non-empty name without '/', got {value!r}")
        if not isinstance(default_branch, str) or not default_branch:
            raise ValueError(f"default_branch: expected a branch name, got {default_branch!r}")
        if actor_type not in ("User", "Bot"):
            raise ValueError(f"actor_type: expected 'User' or 'Bot', got {actor_type!r}")
        self.owner, self.repo, self.token, self.actor = owner, repo, token, actor
        self._lock = threading.RLock()
        self._state = RepoState(
            owner, repo, default_branch=default_branch, actor=actor, actor_type=actor_type
        )
        self._pipeline = RequestPipeline(
            state=self._state, description=rest_description(), token=token, lock=self._lock, strict=strict
        )
        self._stop: Callable[[], None] | None = None
        self._base_url: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> GitHubEmulator:
        if self._stop is not None:
            raise RuntimeError("the emulator is already serving")
        self._base_url, self._stop = serve(self._pipeline)
        return self

    def close(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def __enter__(self) -> GitHubEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def base_url(self) -> str:
        """The API root, e.g. "http://127.0.0.1:43127" (what GITHUB_API_URL is set to)."""
        if self._base_url is None:
            raise RuntimeError("the emulator is not serving: use `with GitHubEmulator(...) as gh` or start()")
        return self._base_url

    def _shapes(self) -> Shapes:
        # Bodies carry the emulator's own URLs, which exist only once it listens.
        if self._base_url is None:
            raise RuntimeError("the emulator is not serving: use `with GitHubEmulator(...) as gh` or start()")
        return self._pipeline.shapes

    @property
    def repository(self) -> str:
        return f"{self.owner}/{self.repo}"

    def env(self) -> dict[str, str]:
        """GITHUB_TOKEN, GITHUB_REPOSITORY and GITHUB_API_URL as a workflow step would see them."""
        return {
            "GITHUB_TOKEN": self.token,
            "GITHUB_REPOSITORY": self.repository,
            "GITHUB_API_URL": self.base_url,
        }

    # -- repository content ---------------------------------------------------------------------------------

    @property
    def default_branch_sha(self) -> str:
        with self._lock:
            return self._state.branches[self._state.default_branch]

    def add_tree(self, sha: str, files: Mapping[str, str], *, branch: str | None = None) -> None:
        """Make `files` ({path: text}) the tree of commit `sha`; `branch` then points at it."""
        with self._lock:
            self._state.add_tree(sha, files, branch=branch)

    def add_pull(
        self,
        number: int | None = None,
        *,
        head_sha: str,
        head_ref: str = "feature",
        base_ref: str | None = None,
        title: str = "A change",
        login: str = "contributor",
        state: str = "open",
        files: Iterable[str | Mapping[str, Any]] = (),
        tree: Mapping[str, str] | None = None,
        fork: bool = False,
        draft: bool = False,
    ) -> int:
        """Open a pull request and return its number; `files` are changed paths (or diff-entry fields with
        at least "filename"); `tree` ({path: text}) becomes the head commit's tree."""
        check_sha(head_sha, "head_sha")
        if state not in ("open", "closed"):
            raise ValueError(f"state: expected 'open' or 'closed', got {state!r}")
        changes = tuple({"filename": f} if isinstance(f, str) else dict(f) for f in files)
        if any("filename" not in c for c in changes):
            raise ValueError("files: each entry needs a 'filename'")
        with self._lock:
            if tree is not None:
                self._state.add_tree(head_sha, tree)
            record = IssueRecord(
                number=number if number is not None else self._state.next_issue_number(),
                title=title,
                login=login,
                state=state,
                is_pull=True,
                head_sha=head_sha,
                head_ref=head_ref,
                base_ref=base_ref or self._state.default_branch,
                fork=fork,
                draft=draft,
                files=changes,
                created_at=self._state.now(),
            )
            self._state.user_id(login)
            return self._state.add_issue(record).number

    def push(self, number: int, head_sha: str, *, tree: Mapping[str, str] | None = None) -> None:
        """Move pull request `number` to a new head commit, as a push to its branch does."""
        check_sha(head_sha, "head_sha")
        with self._lock:
            if tree is not None:
                self._state.add_tree(head_sha, tree)
            self._state.push(number, head_sha)

    def pull_head(self, number: int) -> str:
        with self._lock:
            return self._state.pull(number).head_sha

    def add_issue(
        self,
        number: int | None = None,
        *,
        title: str = "An issue",
        login: str = "reporter",
        state: str = "open",
    ) -> int:
        """Open an issue that is not a pull request and return its number."""
        with self._lock:
            record = IssueRecord(
                number=number if number is not None else self._state.next_issue_number(),
                title=title,
                login=login,
                state=state,
                is_pull=False,
                created_at=self._state.now(),
            )
            return self._state.add_issue(record).number

    # -- people ---------------------------------------------------------------------------------------------

    def set_permission(self, login: str, level: str) -> None:
        """`level`: none, read, triage, write, maintain or admin. Users never set here are unknown (404)."""
        with self._lock:
            self._state.set_permission(login, level)

    def add_org_member(self, org: str, login: str) -> None:
        with self._lock:
            self._state.org_members.add((org.lower(), login))

    # -- comments and reactions -----------------------------------------------------------------------------

    def add_comment(
        self,
        issue_number: int,
        body: str,
        *,
        login: str = "octocat",
        user_type: str = "User",
        author_association: str | None = None,
    ) -> dict[str, Any]:
        """Post a comment as `login` (as a person would, not through the API) and return it as GET shows it."""
        if user_type not in ("User", "Bot", "Organization"):
            raise ValueError(f"user_type: expected 'User', 'Bot' or 'Organization', got {user_type!r}")
        with self._lock:
            shapes = self._shapes()
            record = self._state.create_comment(
                issue_number, body, login=login, user_type=user_type, author_association=author_association
            )
            return shapes.comment(record)

    def edit_comment(self, comment_id: int, body: str) -> dict[str, Any]:
        with self._lock:
            shapes = self._shapes()
            return shapes.comment(self._state.update_comment(comment_id, body))

    def comment(self, comment_id: int) -> dict[str, Any]:
        with self._lock:
            if comment_id not in self._state.comments:
                raise ValueError(f"comment_id: no comment {comment_id}")
            return self._shapes().comment(self._state.comments[comment_id])

    def comments(self, issue_number: int) -> list[dict[str, Any]]:
        with self._lock:
            found = sorted(
                (c for c in self._state.comments.values() if c.issue_number == issue_number),
                key=lambda c: c.id,
            )
            return [self._shapes().comment(c) for c in found]

    def reactions(self, comment_id: int) -> list[dict[str, Any]]:
        with self._lock:
            found = [r for r in self._state.reactions.values() if r.comment_id == comment_id]
            return [self._shapes().reaction(r) for r in found]

    # -- workflows and runs ---------------------------------------------------------------------------------

    def add_workflow(
        self,
        file_name: str,
        *,
        name: str | None = None,
        inputs: Mapping[str, bool] | Iterable[str] | None = None,
    ) -> int:
        """Declare `.github/workflows/<file_name>`; `inputs` are its dispatch inputs ({name: required} or
        names, all optional), and dispatching any other input is answered 422 as GitHub does. None accepts
        any inputs. Returns the workflow id."""
        if not isinstance(file_name, str) or "/" in file_name or not file_name.endswith((".yml", ".yaml")):
            raise ValueError(
                f"file_name: expected a workflow file name such as 'gpu-tests.yml', got {file_name!r}"
            )
        declared = (
            None
            if inputs is None
            else (dict(inputs) if isinstance(inputs, Mapping) else {key: False for key in inputs})
        )
        with self._lock:
            return self._state.add_workflow(
                f".github/workflows/{file_name}", name=name or file_name, inputs=declared
            ).id

    def add_workflow_file(self, path: str | Path) -> int:
        """Declare a workflow from its YAML file, with the name and dispatch inputs the file declares."""
        name, inputs = workflow_inputs(path)
        return self.add_workflow(Path(path).name, name=name, inputs=inputs)

    @property
    def runs(self) -> list[WorkflowRunRecord]:
        """Every workflow run, oldest first, with the `ref` and `inputs` its dispatch asked for."""
        with self._lock:
            return sorted(self._state.runs.values(), key=lambda r: r.id)

    def run(self, run_id: int) -> WorkflowRunRecord:
        with self._lock:
            try:
                return self._state.runs[run_id]
            except KeyError:
                raise ValueError(f"run_id: no run {run_id}") from None

    def add_run(
        self, file_name: str, *, head_sha: str, event: str = "pull_request", head_branch: str = "feature"
    ) -> WorkflowRunRecord:
        """A run of a declared workflow that an event started (not a dispatch), queued on `head_sha`."""
        check_sha(head_sha, "head_sha")
        if event == "workflow_dispatch":
            raise ValueError("event: dispatch through the API, not add_run")
        with self._lock:
            try:
                workflow = self._state.workflow(file_name)
            except ApiError:
                raise ValueError(f"file_name: no workflow {file_name!r} (add_workflow first)") from None
            return self._state.add_run(
                workflow, event=event, head_sha=head_sha, head_branch=head_branch, actor="contributor"
            )

    def add_artifact(
        self, run_id: int, name: str, files: Mapping[str, str | bytes], *, expired: bool = False
    ) -> ArtifactRecord:
        """Upload `files` ({name in the archive: content}) as artifact `name` of run `run_id`, zipped as
        actions/upload-artifact stores them."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, content in files.items():
                archive.writestr(member, content)
        with self._lock:
            if run_id not in self._state.runs:
                raise ValueError(f"run_id: no run {run_id}")
            return self._state.add_artifact(run_id, name, buffer.getvalue(), expired=expired)

    def set_run_state(self, run_id: int, status: str, conclusion: str | None = None) -> WorkflowRunRecord:
        """Move a run (and its jobs) on: e.g. ("in_progress") then ("completed", "failure")."""
        with self._lock:
            if run_id not in self._state.runs:
                raise ValueError(f"run_id: no run {run_id}")
            return self._state.set_run_state(run_id, status, conclusion)

    def set_jobs(self, run_id: int, jobs: Iterable[Mapping[str, Any]]) -> WorkflowRunRecord:
        """Replace a run's jobs with [{"name", "status", "conclusion"?, "labels"?}, ...]."""
        with self._lock:
            if run_id not in self._state.runs:
                raise ValueError(f"run_id: no run {run_id}")
            return self._state.set_jobs(run_id, jobs)

    @property
    def statuses(self) -> list[StatusRecord]:
        with self._lock:
            return list(self._state.statuses.values())

    @property
    def check_runs(self) -> list[CheckRunRecord]:
        with self._lock:
            return list(self._state.check_runs.values())

    # -- webhook payloads consistent with the state ---------------------------------------------------------

    def comment_event(
        self, comment_id: int, *, action: str = "created", previous_body: str = ""
    ) -> dict[str, Any]:
        """The `issue_comment` payload GitHub would deliver for a comment in this repository."""
        with self._lock:
            if comment_id not in self._state.comments:
                raise ValueError(f"comment_id: no comment {comment_id}")
            c = self._state.comments[comment_id]
            is_pr = self._state.issue(c.issue_number).is_pull
            user_id = self._state.user_id(c.login)
        return issue_comment_event(
            body=c.body,
            login=c.login,
            issue_number=c.issue_number,
            is_pr=is_pr,
            action=action,
            comment_id=c.id,
            user_type=c.user_type,
            user_id=user_id,
            author_association=c.author_association,
            previous_body=previous_body,
            owner=self.owner,
            repo=self.repo,
            api_url=self.base_url,
        )

    def workflow_run_event(self, run_id: int, *, action: str = "completed") -> dict[str, Any]:
        """The `workflow_run` payload GitHub would deliver for a run (completed: set its conclusion first)."""
        run = self.run(run_id)
        return workflow_run_event(
            run_id=run.id,
            head_sha=run.head_sha,
            conclusion=run.conclusion,
            action=action,
            head_branch=run.head_branch,
            event=run.event,
            workflow_id=run.workflow_id,
            workflow_path=run.workflow_path,
            workflow_name=run.name,
            run_number=run.run_number,
            owner=self.owner,
            repo=self.repo,
            api_url=self.base_url,
        )

    def pull_request_event(
        self, number: int, *, action: str = "labeled", label: str | None = None
    ) -> dict[str, Any]:
        with self._lock:
            pull = self._state.pull(number)
        return pull_request_event(
            number=number,
            head_sha=pull.head_sha,
            head_ref=pull.head_ref,
            action=action,
            label=label,
            login=pull.login,
            owner=self.owner,
            repo=self.repo,
            api_url=self.base_url,
        )

    # -- faults, request log, violations --------------------------------------------------------------------

    def inject_fault(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        retry_after: int | None = None,
        message: str | None = None,
        after_handler: bool = False,
    ) -> Fault:
        """Answer the next `times` requests whose method is `method` ('*' for any) and whose path matches
        `path_regex` (re.search) with `status`: 500/502/503, 403 or 429 (a secondary rate limit, GitHub's
        message, `Retry-After: retry_after`), 422 ("Unexpected inputs provided" unless `message`).
        `after_handler`: the request takes effect and only the answer is replaced."""
        with self._lock:
            return self._pipeline.faults.add(
                method,
                path_regex,
                status,
                times=times,
                retry_after=retry_after,
                message=message,
                after_handler=after_handler,
            )

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._pipeline.requests)

    @property
    def violations(self) -> list[Violation]:
        with self._lock:
            return list(self._pipeline.violations)

    def take_violations(self) -> list[Violation]:
        """The violations so far, forgetting them: for tests that provoke violations on purpose."""
        with self._lock:
            found, self._pipeline.violations[:] = list(self._pipeline.violations), []
            return found

    def assert_no_violations(self) -> None:
        found = self.violations
        if found:
            raise AssertionError(f"{len(found)} GitHub contract violation(s):\n" + "\n".join(map(str, found)))
