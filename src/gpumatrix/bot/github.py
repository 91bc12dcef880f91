"""The bot's GitHub REST client: githubkit underneath, retries with backoff, and a token nobody sees.

githubkit (and its HTTP stack) is imported only when a client is built, so `import gpumatrix.bot` stays
light. Requests go through githubkit's core `request` (auth, base URL, connection pool, GitHub's error
and rate-limit types) rather than its typed REST methods: a typed method builds the pydantic models of
its whole response graph on first use (400 ms for `pulls.get` alone, measured), and the bot reads a
handful of JSON fields. Every request names API version 2022-11-28, the description the project's
contract tests check against (tests/fixtures/github), where dispatch takes `return_run_details`.

Retries: 5xx and transport errors wait `backoff_base * 2**attempt`; a secondary rate limit waits what
Retry-After says; a wait longer than `max_wait` is not waited for, the call fails instead. Every HTTP
attempt counts in `calls`. githubkit's own retry and HTTP cache are off: the cache would serve a run's
state up to a minute old to `sync`.
"""

from __future__ import annotations

import io
import os
import time
import urllib.parse
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpumatrix import GpumatrixError

__all__ = [
    "DEFAULT_API_URL",
    "ArtifactInfo",
    "CheckRunInfo",
    "CommentData",
    "DispatchedRun",
    "GitHubApiError",
    "GitHubClient",
    "JobInfo",
    "MissingEnvironment",
    "PullHead",
    "RetryPolicy",
    "RunInfo",
]

DEFAULT_API_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
_PAGE = 100
# An artifact archive larger than this is not downloaded: a JSON test report is a few kB per hundred tests,
# and the archive comes from a run of the code under test.
MAX_ARCHIVE_BYTES = 8 * 1024 * 1024


class GitHubApiError(GpumatrixError):
    """A GitHub call failed for good (after the retries its status allows); never holds the token."""

    def __init__(self, method: str, path: str, status: int | None, message: str) -> None:
        self.method, self.path, self.status, self.message = method, path, status, message
        where = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"{method} {path}: {where}: {message}")


class MissingEnvironment(GpumatrixError):
    """GITHUB_TOKEN or GITHUB_REPOSITORY is not set."""


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4
    backoff_base: float = 1.0  # seconds; tests set it near 0 to stay fast
    max_wait: float = 60.0  # a single wait above this fails the call instead

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")
        if not self.backoff_base >= 0:
            raise ValueError(f"backoff_base must be >= 0 seconds, got {self.backoff_base!r}")
        if not self.max_wait >= 0:
            raise ValueError(f"max_wait must be >= 0 seconds, got {self.max_wait!r}")


@dataclass(frozen=True)
class PullHead:
    number: int
    sha: str
    state: str
    html_url: str = ""
    base_ref: str = ""  # the branch the PR would merge into


@dataclass(frozen=True)
class CommentData:
    id: int
    body: str
    author: str
    author_type: str
    html_url: str = ""


@dataclass(frozen=True)
class DispatchedRun:
    run_id: int
    html_url: str


@dataclass(frozen=True)
class RunInfo:
    id: int
    status: str | None
    conclusion: str | None
    html_url: str
    name: str = ""  # the workflow's name
    workflow_id: int = 0
    run_number: int = 0
    run_attempt: int = 1
    event: str = ""
    head_sha: str = ""


@dataclass(frozen=True)
class CheckRunInfo:
    id: int
    name: str
    head_sha: str
    status: str | None
    conclusion: str | None
    external_id: str | None
    details_url: str | None
    title: str | None
    summary: str | None


@dataclass(frozen=True)
class ArtifactInfo:
    id: int
    name: str
    size_in_bytes: int
    expired: bool


@dataclass(frozen=True)
class JobInfo:
    name: str
    status: str | None
    conclusion: str | None


class GitHubClient:
    """Everything the bot asks GitHub, for one repository."""

    def __init__(
        self,
        *,
        token: str,
        repository: str,
        base_url: str = DEFAULT_API_URL,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timeout: float = 30.0,
    ) -> None:
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty string (GITHUB_TOKEN)")
        owner, _, repo = repository.partition("/") if isinstance(repository, str) else ("", "", "")
        if not owner or not repo or "/" in repo:
            raise ValueError(f"repository must be 'owner/name' (GITHUB_REPOSITORY), got {repository!r}")
        from githubkit import GitHub  # lazily: githubkit, httpx and pydantic cost ~150 ms to import

        self.owner, self.repo, self.base_url = owner, repo, base_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self.calls = 0
        self._sleep = sleep
        self._github = GitHub(
            token, base_url=self.base_url, auto_retry=False, http_cache=False, timeout=timeout
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> GitHubClient:
        """A client from GITHUB_TOKEN, GITHUB_REPOSITORY and GITHUB_API_URL, read now (not at import)."""
        env = os.environ if environ is None else environ
        missing = [name for name in ("GITHUB_TOKEN", "GITHUB_REPOSITORY") if not env.get(name)]
        if missing:
            raise MissingEnvironment(f"{' and '.join(missing)} must be set in the environment")
        return cls(
            token=env["GITHUB_TOKEN"],
            repository=env["GITHUB_REPOSITORY"],
            base_url=env.get("GITHUB_API_URL") or DEFAULT_API_URL,
            **options,
        )

    @property
    def repository(self) -> str:
        """`owner/name` of the repository this client serves (GITHUB_REPOSITORY)."""
        return f"{self.owner}/{self.repo}"

    def __repr__(self) -> str:  # never the token
        return f"GitHubClient(repository='{self.owner}/{self.repo}', base_url='{self.base_url}')"

    def __enter__(self) -> GitHubClient:
        self._github.__enter__()  # one HTTP connection pool for every call, until __exit__
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._github.__exit__(*exc_info)

    # -- the calls ----------------------------------------------------------------------------------------

    def permission(self, login: str) -> tuple[str, str | None]:
        """(`permission`, `role_name`) of `login`; a 404 (not a collaborator) raises like any failure."""
        data = self._json("GET", f"collaborators/{_quote(login)}/permission")
        return str(data.get("permission") or "none"), data.get("role_name")

    def pull_head(self, number: int) -> PullHead:
        data = self._json("GET", f"pulls/{int(number)}")
        return PullHead(
            number,
            str(data["head"]["sha"]),
            str(data.get("state") or ""),
            str(data.get("html_url") or ""),
            str((data.get("base") or {}).get("ref") or ""),
        )

    def add_reaction(self, comment_id: int, content: str) -> bool:
        """React to an issue comment; True when created, False when this token had already reacted so."""
        response = self._call(
            "POST", f"issues/comments/{int(comment_id)}/reactions", json={"content": content}
        )
        return response.status_code == 201

    def list_comments(self, issue_number: int) -> list[CommentData]:
        comments: list[CommentData] = []
        page = 1
        while True:
            data = self._json(
                "GET", f"issues/{int(issue_number)}/comments", params={"per_page": _PAGE, "page": page}
            )
            comments += [_comment(item) for item in data]
            if len(data) < _PAGE:
                return comments
            page += 1

    def get_comment(self, comment_id: int) -> CommentData:
        return _comment(self._json("GET", f"issues/comments/{int(comment_id)}"))

    def create_comment(self, issue_number: int, body: str) -> int:
        return self.post_comment(issue_number, body).id

    def post_comment(self, issue_number: int, body: str) -> CommentData:
        """Like `create_comment`, with the whole comment (its `html_url` links it from a check run)."""
        return _comment(self._json("POST", f"issues/{int(issue_number)}/comments", json={"body": body}))

    def update_comment(self, comment_id: int, body: str) -> None:
        self._call("PATCH", f"issues/comments/{int(comment_id)}", json={"body": body})

    def delete_comment(self, comment_id: int) -> None:
        self._call("DELETE", f"issues/comments/{int(comment_id)}")

    def dispatch(self, workflow: str, *, ref: str, inputs: Mapping[str, str]) -> DispatchedRun:
        data = self._json(
            "POST",
            f"actions/workflows/{_quote(workflow)}/dispatches",
            json={"ref": ref, "inputs": dict(inputs), "return_run_details": True},
        )
        return DispatchedRun(int(data["workflow_run_id"]), str(data["html_url"]))

    def get_run(self, run_id: int) -> RunInfo:
        return _run(self._json("GET", f"actions/runs/{int(run_id)}"))

    def runs_for_head(self, sha: str) -> list[RunInfo]:
        """The workflow runs GitHub lists for commit `sha` (its first 100, newest first: one page covers the
        few workflows a pull request triggers, re-runs included)."""
        data = self._json("GET", "actions/runs", params={"head_sha": sha, "per_page": _PAGE})
        return [_run(item) for item in data.get("workflow_runs", ())]

    def run_jobs(self, run_id: int) -> list[JobInfo]:
        """The jobs of a run's latest attempt (the first 100: a gpu-tests run has a handful)."""
        data = self._json("GET", f"actions/runs/{int(run_id)}/jobs", params={"per_page": _PAGE})
        return [
            JobInfo(str(job.get("name") or ""), job.get("status"), job.get("conclusion"))
            for job in data.get("jobs", ())
        ]

    def run_artifacts(self, run_id: int) -> list[ArtifactInfo]:
        data = self._json("GET", f"actions/runs/{int(run_id)}/artifacts", params={"per_page": _PAGE})
        return [
            ArtifactInfo(
                int(item["id"]),
                str(item.get("name") or ""),
                int(item.get("size_in_bytes") or 0),
                bool(item.get("expired")),
            )
            for item in data.get("artifacts", ())
        ]

    def download_artifact(self, artifact_id: int) -> dict[str, bytes]:
        """{member name: bytes} of an artifact's zip archive (GitHub answers 302 to blob storage; the HTTP
        client follows it and sends the token only to the same origin)."""
        response = self._call("GET", f"actions/artifacts/{int(artifact_id)}/zip")
        data = response.content
        if len(data) > MAX_ARCHIVE_BYTES:
            raise GitHubApiError(
                "GET",
                self._path(f"actions/artifacts/{int(artifact_id)}/zip"),
                response.status_code,
                f"the archive is {len(data)} bytes, over {MAX_ARCHIVE_BYTES}",
            )
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                members = [m for m in archive.infolist() if not m.is_dir()]
                if sum(m.file_size for m in members) > MAX_ARCHIVE_BYTES:
                    raise GitHubApiError(
                        "GET",
                        self._path(f"actions/artifacts/{int(artifact_id)}/zip"),
                        response.status_code,
                        "the archive unpacks to too many bytes",
                    )
                return {m.filename: archive.read(m) for m in members}
        except (zipfile.BadZipFile, OSError) as exc:
            raise GitHubApiError(
                "GET",
                self._path(f"actions/artifacts/{int(artifact_id)}/zip"),
                response.status_code,
                f"not a zip archive: {exc}",
            ) from None

    def list_check_runs(self, sha: str, *, name: str) -> list[CheckRunInfo]:
        """Every check run named `name` on commit `sha` (not only the newest: duplicates are found too)."""
        found: list[CheckRunInfo] = []
        page = 1
        while True:
            data = self._json(
                "GET",
                f"commits/{_quote(sha)}/check-runs",
                params={"check_name": name, "filter": "all", "per_page": _PAGE, "page": page},
            )
            items = data.get("check_runs", ())
            found += [_check_run(item) for item in items]
            if len(items) < _PAGE:
                return found
            page += 1

    def create_check_run(self, sha: str, fields: Mapping[str, Any]) -> CheckRunInfo:
        return _check_run(self._json("POST", "check-runs", json={**fields, "head_sha": sha}))

    def update_check_run(self, check_run_id: int, fields: Mapping[str, Any]) -> CheckRunInfo:
        return _check_run(self._json("PATCH", f"check-runs/{int(check_run_id)}", json=dict(fields)))

    def create_status(
        self, sha: str, *, context: str, state: str, target_url: str | None, description: str
    ) -> None:
        body = {"state": state, "context": context, "description": description}
        if target_url:
            body["target_url"] = target_url
        self._call("POST", f"statuses/{_quote(sha)}", json=body)

    # -- retries ------------------------------------------------------------------------------------------

    def _json(self, method: str, path: str, **request: Any) -> Any:
        response = self._call(method, path, **request)
        try:
            return response.json()
        except ValueError as exc:
            raise GitHubApiError(
                method, self._path(path), response.status_code, "the answer is not JSON"
            ) from exc

    def _call(self, method: str, path: str, **request: Any) -> Any:
        from githubkit.exception import RequestError, RequestFailed

        attempt = 0
        while True:
            self.calls += 1
            try:
                return self._github.request(
                    method, self._path(path), headers={"X-GitHub-Api-Version": API_VERSION}, **request
                )
            except RequestFailed as exc:
                status = exc.response.status_code
                wait = self._wait_after(exc, status, attempt)
                if wait is None:
                    raise GitHubApiError(method, self._path(path), status, _message(exc.response)) from None
            except RequestError as exc:  # transport: refused, reset, timed out
                wait = self._backoff(attempt)
                if wait is None:
                    raise GitHubApiError(method, self._path(path), None, type(exc.exc).__name__) from None
            self._sleep(wait)
            attempt += 1

    def _wait_after(self, exc: Any, status: int, attempt: int) -> float | None:
        from githubkit.exception import RateLimitExceeded

        if isinstance(exc, RateLimitExceeded):  # githubkit read Retry-After (or the reset time) for us
            wait = exc.retry_after.total_seconds()
            return wait if attempt < self.retry.max_retries and wait <= self.retry.max_wait else None
        if status >= 500:
            return self._backoff(attempt)
        if status in (403, 429) and "secondary rate limit" in _message(exc.response).lower():
            # No Retry-After: GitHub asks for at least a minute.
            wait = max(60.0, self._backoff(attempt) or 0.0)
            return wait if attempt < self.retry.max_retries and wait <= self.retry.max_wait else None
        return None

    def _backoff(self, attempt: int) -> float | None:
        if attempt >= self.retry.max_retries:
            return None
        return min(self.retry.backoff_base * 2**attempt, self.retry.max_wait)

    def _path(self, path: str) -> str:
        return f"/repos/{self.owner}/{self.repo}/{path}"


def _comment(item: Mapping[str, Any]) -> CommentData:
    from gpumatrix.bot.event import without_lone_surrogates

    user = item.get("user") or {}
    return CommentData(
        int(item["id"]),
        without_lone_surrogates(str(item.get("body") or "")),  # JSON may hold "\ud800"; UTF-8 cannot
        str(user.get("login") or ""),
        str(user.get("type") or "User"),
        str(item.get("html_url") or ""),
    )


def _run(item: Mapping[str, Any]) -> RunInfo:
    return RunInfo(
        int(item["id"]),
        item.get("status"),
        item.get("conclusion"),
        str(item.get("html_url") or ""),
        name=str(item.get("name") or ""),
        workflow_id=int(item.get("workflow_id") or 0),
        run_number=int(item.get("run_number") or 0),
        run_attempt=int(item.get("run_attempt") or 1),
        event=str(item.get("event") or ""),
        head_sha=str(item.get("head_sha") or ""),
    )


def _check_run(item: Mapping[str, Any]) -> CheckRunInfo:
    output = item.get("output") or {}
    return CheckRunInfo(
        int(item["id"]),
        str(item.get("name") or ""),
        str(item.get("head_sha") or ""),
        item.get("status"),
        item.get("conclusion"),
        item.get("external_id"),
        item.get("details_url"),
        output.get("title"),
        output.get("summary"),
    )


def _quote(segment: str) -> str:
    return urllib.parse.quote(str(segment), safe="")


def _message(response: Any) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.raw_response.reason_phrase or "error"
    message = data.get("message") if isinstance(data, Mapping) else None
    return " ".join(str(message or "error").split())[:300]
