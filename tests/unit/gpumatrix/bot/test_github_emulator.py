"""The GitHub REST emulator, exercised over real HTTP: every route's answer checked against GitHub's schema,
the contract checks (404, 401, 422 and the violations they record), faults, and the webhook helpers."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from github_emulator import (
    SECONDARY_RATE_LIMIT_MESSAGE,
    GitHubEmulator,
    event_errors,
    issue_comment_event,
    load_example,
    pull_request_event,
    workflow_inputs,
    workflow_run_event,
)
from github_emulator.spec import REST_DESCRIPTION_PATH, normalize_description

from gpumatrix import register

register(on=("cpu",), est_time=10)

HEAD = "c0ffee" + "0" * 34
REPO = "/repos/acme/mxfuse"
TREE = {
    "tests/unit/test_x.py": "from gpumatrix import register\nregister(on=('cpu',), est_time=1)\n",
    "tests/kernels/test_k.py": "x = 1\n",
    "README.md": "# mxfuse\n",
}


@pytest.fixture(scope="module")
def schema_api() -> Any:
    """openapi-core over the fixture document, independent of the emulator's own validation path."""
    from openapi_core import OpenAPI

    document = json.loads(REST_DESCRIPTION_PATH.read_text(encoding="utf-8"))
    return OpenAPI.from_dict(normalize_description(document))


def schema_errors(api: Any, method: str, path: str, response: httpx.Response) -> list[str]:
    from openapi_core.testing import MockRequest, MockResponse

    request = MockRequest("https://api.github.com", method.lower(), path)
    mock = MockResponse(response.content, status_code=response.status_code, content_type="application/json")
    return [
        f"{e}: {getattr(e.__cause__, 'schema_errors', e.__cause__)}"
        for e in api.iter_response_errors(request, mock)
    ]


@pytest.fixture
def gh() -> Iterator[GitHubEmulator]:
    with GitHubEmulator(owner="acme", repo="mxfuse") as emulator:
        emulator.add_tree(HEAD, TREE)
        emulator.add_pull(7, head_sha=HEAD, head_ref="feature", files=["tests/unit/test_x.py"], login="bob")
        emulator.add_issue(8)
        emulator.set_permission("alice", "maintain")
        emulator.add_org_member("acme", "alice")
        emulator.add_comment(7, "/rerun-test test_x.py", login="alice")  # comment 1000001
        emulator.add_workflow("gpu-tests.yml", name="GPU tests", inputs={"runner": True, "tests": False})
        yield emulator


@pytest.fixture
def api(gh: GitHubEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gh.base_url, headers={"Authorization": f"Bearer {gh.token}"}) as client:
        yield client


def _dispatch(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post(f"{REPO}/actions/workflows/gpu-tests.yml/dispatches", json=body)


# -- every route answers GitHub's shape ------------------------------------------------------------------------

# (id, method, path, body, status, a field path in the answer, its expected value)
ROUTES = [
    ("get-pull", "GET", f"{REPO}/pulls/7", None, 200, ("head", "sha"), HEAD),
    ("pull-files", "GET", f"{REPO}/pulls/7/files", None, 200, (0, "filename"), "tests/unit/test_x.py"),
    ("list-comments", "GET", f"{REPO}/issues/7/comments", None, 200, (0, "user", "login"), "alice"),
    ("comments-of-issue", "GET", f"{REPO}/issues/8/comments", None, 200, (), []),
    ("create-comment", "POST", f"{REPO}/issues/7/comments", {"body": "status"}, 201, ("user", "type"), "Bot"),
    (
        "get-comment",
        "GET",
        f"{REPO}/issues/comments/1000001",
        None,
        200,
        ("author_association",),
        "COLLABORATOR",
    ),
    (
        "update-comment",
        "PATCH",
        f"{REPO}/issues/comments/1000001",
        {"body": "edited"},
        200,
        ("body",),
        "edited",
    ),
    (
        "react",
        "POST",
        f"{REPO}/issues/comments/1000001/reactions",
        {"content": "eyes"},
        201,
        ("content",),
        "eyes",
    ),
    ("permission", "GET", f"{REPO}/collaborators/alice/permission", None, 200, ("role_name",), "maintain"),
    ("membership", "GET", "/orgs/acme/members/alice", None, 204, None, None),
    ("content-file", "GET", f"{REPO}/contents/README.md?ref={HEAD}", None, 200, ("encoding",), "base64"),
    ("content-dir", "GET", f"{REPO}/contents/tests?ref={HEAD}", None, 200, (0, "type"), "dir"),
    ("workflows", "GET", f"{REPO}/actions/workflows", None, 200, ("total_count",), 1),
    (
        "workflow",
        "GET",
        f"{REPO}/actions/workflows/gpu-tests.yml",
        None,
        200,
        ("path",),
        ".github/workflows/gpu-tests.yml",
    ),
    (
        "dispatch-details",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "main", "inputs": {"runner": "cpu"}, "return_run_details": True},
        200,
        ("workflow_run_id",),
        7000001,
    ),
    (
        "dispatch-plain",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "main", "inputs": {"runner": "cpu"}},
        204,
        None,
        None,
    ),
    (
        "status",
        "POST",
        f"{REPO}/statuses/{HEAD}",
        {"state": "pending", "context": "gpu"},
        201,
        ("state",),
        "pending",
    ),
    (
        "check-run",
        "POST",
        f"{REPO}/check-runs",
        {"name": "gpu", "head_sha": HEAD},
        201,
        ("status",),
        "queued",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field", "expected"),
    [r[1:] for r in ROUTES],
    ids=[r[0] for r in ROUTES],
)
def test_route_answers_schema_valid_body(
    gh: GitHubEmulator,
    api: httpx.Client,
    schema_api: Any,
    method: str,
    path: str,
    body: Any,
    status: int,
    field: Any,
    expected: Any,
) -> None:
    response = api.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert schema_errors(schema_api, method, path.split("?")[0], response) == []
    if field is not None:
        value = response.json()
        for key in field:
            value = value[key]
        assert value == expected
    assert gh.violations == []


# Routes that need a run to exist: (id, method, path suffix after /actions/runs/<id>, status, field, value).
RUN_ROUTES = [
    ("get-run", "GET", "", 200, ("status",), "queued"),
    ("jobs", "GET", "/jobs", 200, ("jobs", 0, "status"), "queued"),
    ("cancel", "POST", "/cancel", 202, (), {}),
    ("repo-runs", "GET", "?", 200, ("total_count",), 1),
]


@pytest.mark.parametrize(
    ("method", "suffix", "status", "field", "expected"),
    [r[1:] for r in RUN_ROUTES],
    ids=[r[0] for r in RUN_ROUTES],
)
def test_run_route_answers_schema_valid_body(
    gh: GitHubEmulator,
    api: httpx.Client,
    schema_api: Any,
    method: str,
    suffix: str,
    status: int,
    field: Any,
    expected: Any,
) -> None:
    run_id = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True).json()[
        "workflow_run_id"
    ]
    path = f"{REPO}/actions/runs" if suffix == "?" else f"{REPO}/actions/runs/{run_id}{suffix}"
    response = api.request(method, path)
    assert response.status_code == status, response.text
    assert schema_errors(schema_api, method, path, response) == []
    value = response.json()
    for key in field:
        value = value[key]
    assert value == expected
    assert gh.violations == []


def test_rerun_failed_jobs_and_workflow_runs_answer_schema_valid_bodies(
    gh: GitHubEmulator, api: httpx.Client, schema_api: Any
) -> None:
    run_id = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True).json()[
        "workflow_run_id"
    ]
    gh.set_run_state(run_id, "completed", "failure")
    rerun = api.post(f"{REPO}/actions/runs/{run_id}/rerun-failed-jobs")
    listed = api.get(f"{REPO}/actions/workflows/gpu-tests.yml/runs")
    assert (rerun.status_code, listed.status_code) == (201, 200)
    assert schema_errors(schema_api, "POST", f"{REPO}/actions/runs/{run_id}/rerun-failed-jobs", rerun) == []
    assert schema_errors(schema_api, "GET", f"{REPO}/actions/workflows/gpu-tests.yml/runs", listed) == []
    assert [(r["id"], r["status"], r["run_attempt"]) for r in listed.json()["workflow_runs"]] == [
        (run_id, "queued", 2)
    ]
    assert gh.violations == []


# -- requests that break the contract --------------------------------------------------------------------------

# (id, method, path, body or raw bytes, status, violation kind, text the error message contains)
INVALID = [
    (
        "dispatch-without-ref",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"inputs": {"runner": "cpu"}},
        422,
        "request",
        "'ref' is a required property",
    ),
    (
        "dispatch-26-inputs",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "main", "inputs": {f"i{n}": "x" for n in range(26)}},
        422,
        "request",
        "too many properties",
    ),
    (
        "dispatch-ref-not-string",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": 3},
        422,
        "request",
        "is not of type 'string'",
    ),
    (
        "reaction-unknown-content",
        "POST",
        f"{REPO}/issues/comments/1000001/reactions",
        {"content": "party"},
        422,
        "request",
        "is not one of",
    ),
    (
        "comment-without-body",
        "POST",
        f"{REPO}/issues/7/comments",
        {"text": "hi"},
        422,
        "request",
        "'body' is a required property",
    ),
    ("comment-id-not-integer", "GET", f"{REPO}/issues/comments/abc", None, 422, "request", "comment_id"),
    (
        "per-page-not-integer",
        "GET",
        f"{REPO}/issues/7/comments?per_page=all",
        None,
        422,
        "request",
        "per_page",
    ),
    (
        "unknown-query-parameter",
        "GET",
        f"{REPO}/issues/7/comments?sort=created",
        None,
        422,
        "request",
        "'sort' is not a parameter",
    ),
    (
        "status-filter-unknown",
        "GET",
        f"{REPO}/actions/runs?status=done",
        None,
        422,
        "request",
        "is not one of",
    ),
    (
        "unparseable-json",
        "PATCH",
        f"{REPO}/issues/comments/1000001",
        b"{body: ",
        400,
        "request",
        "Problems parsing JSON",
    ),
    ("unknown-route", "GET", f"{REPO}/branches", None, 404, "route", "Not Found"),
    ("unknown-method", "DELETE", f"{REPO}/pulls/7", None, 404, "route", "Not Found"),
    ("other-repository", "GET", "/repos/acme/other/pulls/7", None, 404, "repository", "Not Found"),
    (
        "unexpected-input",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "main", "inputs": {"runner": "cpu", "shell": "rm -rf /"}},
        422,
        "dispatch",
        'Unexpected inputs provided: ["shell"]',
    ),
    (
        "missing-required-input",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "main", "inputs": {"tests": "a.py"}},
        422,
        "dispatch",
        "Required input 'runner' not provided",
    ),
    (
        "unknown-ref",
        "POST",
        f"{REPO}/actions/workflows/gpu-tests.yml/dispatches",
        {"ref": "nope", "inputs": {"runner": "cpu"}},
        422,
        "dispatch",
        "No ref found for: nope",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "kind", "message"),
    [r[1:] for r in INVALID],
    ids=[r[0] for r in INVALID],
)
def test_invalid_request_is_refused_and_recorded(
    gh: GitHubEmulator,
    api: httpx.Client,
    method: str,
    path: str,
    body: Any,
    status: int,
    kind: str,
    message: str,
) -> None:
    comments_before = gh.comments(7)
    if isinstance(body, bytes):
        response = api.request(method, path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = api.request(method, path, json=body)
    assert response.status_code == status
    assert message in response.json()["message"]
    assert response.json()["documentation_url"].startswith("https://docs.github.com/")
    violations = gh.take_violations()
    assert [v.kind for v in violations] == [kind]
    assert violations[0].method == method
    assert gh.runs == [] and gh.reactions(1000001) == [] and gh.comments(7) == comments_before


# (id, headers, status, message)
AUTH = [
    ("no-header", {}, 401, "Requires authentication"),
    ("bearer-without-token", {"Authorization": "Bearer"}, 401, "Requires authentication"),
    ("basic-scheme", {"Authorization": "Basic dXNlcjpwYXNz"}, 401, "Requires authentication"),
    ("wrong-token", {"Authorization": "Bearer ghs_other"}, 401, "Bad credentials"),
    ("unsupported-api-version", {"X-GitHub-Api-Version": "2021-01-01"}, 400, "is not supported"),
]


@pytest.mark.parametrize(("headers", "status", "message"), [r[1:] for r in AUTH], ids=[r[0] for r in AUTH])
def test_authentication_and_api_version_are_required(
    gh: GitHubEmulator, headers: dict[str, str], status: int, message: str
) -> None:
    if "X-GitHub-Api-Version" in headers:
        headers = {**headers, "Authorization": f"token {gh.token}"}
    response = httpx.get(f"{gh.base_url}{REPO}/pulls/7", headers=headers)
    assert response.status_code == status
    assert message in response.json()["message"]
    assert [v.kind for v in gh.take_violations()] == ["api-version" if status == 400 else "auth"]


@pytest.mark.parametrize("scheme", ["Bearer", "token"])
def test_both_token_schemes_are_accepted(gh: GitHubEmulator, scheme: str) -> None:
    response = httpx.get(f"{gh.base_url}{REPO}/pulls/7", headers={"Authorization": f"{scheme} {gh.token}"})
    assert response.status_code == 200
    assert gh.violations == []


# -- workflow dispatch and runs ---------------------------------------------------------------------------------

# (id, api version header, return_run_details, status)
DISPATCH_VERSIONS = [
    ("2022-details", "2022-11-28", True, 200),
    ("2022-plain", "2022-11-28", False, 204),
    ("no-header-plain", None, None, 204),
    ("2026-always-details", "2026-03-10", None, 200),
]


@pytest.mark.parametrize(
    ("version", "details", "status"),
    [r[1:] for r in DISPATCH_VERSIONS],
    ids=[r[0] for r in DISPATCH_VERSIONS],
)
def test_dispatch_answer_follows_api_version(
    gh: GitHubEmulator, api: httpx.Client, version: str | None, details: bool | None, status: int
) -> None:
    body: dict[str, Any] = {"ref": "main", "inputs": {"runner": "cpu"}}
    if details is not None:
        body["return_run_details"] = details
    headers = {} if version is None else {"X-GitHub-Api-Version": version}
    response = api.post(f"{REPO}/actions/workflows/gpu-tests.yml/dispatches", json=body, headers=headers)
    assert response.status_code == status
    assert len(gh.runs) == 1
    if status == 200:
        assert response.json() == {
            "workflow_run_id": gh.runs[0].id,
            "run_url": f"{gh.base_url}{REPO}/actions/runs/{gh.runs[0].id}",
            "html_url": f"https://github.com/acme/mxfuse/actions/runs/{gh.runs[0].id}",
        }
    else:
        assert response.content == b""


def test_dispatch_creates_a_queued_run_whose_state_changes_are_visible(
    gh: GitHubEmulator, api: httpx.Client
) -> None:
    inputs = {"runner": "4-gpu-gb300", "tests": "tests/e2e/test_x.py"}
    run_id = _dispatch(api, ref="main", inputs=inputs, return_run_details=True).json()["workflow_run_id"]
    (run,) = gh.runs
    assert (run.id, run.status, run.conclusion, run.ref, dict(run.inputs)) == (
        run_id,
        "queued",
        None,
        "main",
        inputs,
    )
    assert run.head_sha == gh.default_branch_sha and run.event == "workflow_dispatch"

    seen = []
    for status, conclusion in (("in_progress", None), ("completed", "failure")):
        gh.set_run_state(run_id, status, conclusion)
        got = api.get(f"{REPO}/actions/runs/{run_id}").json()
        jobs = api.get(f"{REPO}/actions/runs/{run_id}/jobs").json()["jobs"]
        seen.append((got["status"], got["conclusion"], jobs[0]["status"], jobs[0]["conclusion"]))
    assert seen == [
        ("in_progress", None, "in_progress", None),
        ("completed", "failure", "completed", "failure"),
    ]
    by_conclusion = api.get(f"{REPO}/actions/runs", params={"status": "failure"}).json()
    by_other = api.get(f"{REPO}/actions/runs", params={"status": "success"}).json()
    assert ([r["id"] for r in by_conclusion["workflow_runs"]], by_other["total_count"]) == ([run_id], 0)
    assert api.post(f"{REPO}/actions/runs/{run_id}/cancel").status_code == 409
    assert gh.violations == []


@pytest.mark.parametrize(
    ("status", "conclusion"),
    [("completed", None), ("queued", "success"), ("done", None), ("completed", "great")],
)
def test_set_run_state_refuses_impossible_states(
    gh: GitHubEmulator, api: httpx.Client, status: str, conclusion: str | None
) -> None:
    run_id = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True).json()[
        "workflow_run_id"
    ]
    with pytest.raises(ValueError, match="status|conclusion"):
        gh.set_run_state(run_id, status, conclusion)
    assert gh.run(run_id).status == "queued"


def test_workflow_inputs_come_from_the_workflow_file(tmp_path: Any) -> None:
    path = tmp_path / "gpu-tests.yml"
    path.write_text(
        "name: GPU tests\non:\n  workflow_dispatch:\n    inputs:\n      runner:\n        required: true\n"
        "      tests:\n        required: false\n      sha: {}\njobs: {}\n"
    )
    assert workflow_inputs(path) == ("GPU tests", {"runner": True, "tests": False, "sha": False})
    path.write_text("on: [push]\njobs: {}\n")
    with pytest.raises(ValueError, match="workflow_dispatch"):
        workflow_inputs(path)


# githubkit (what gpumatrix.bot calls GitHub with) must parse every answer into its models: (id, call, expected).
GITHUBKIT_CALLS = [
    ("pull", lambda g: g.rest.pulls.get("acme", "mxfuse", 7).parsed_data.head.sha, HEAD),
    (
        "files",
        lambda g: [f.filename for f in g.rest.pulls.list_files("acme", "mxfuse", 7).parsed_data],
        ["tests/unit/test_x.py"],
    ),
    (
        "comments",
        lambda g: [c.body for c in g.rest.issues.list_comments("acme", "mxfuse", 7).parsed_data],
        ["/rerun-test test_x.py"],
    ),
    (
        "comment",
        lambda g: g.rest.issues.get_comment("acme", "mxfuse", 1000001).parsed_data.user.login,
        "alice",
    ),
    (
        "create-comment",
        lambda g: g.rest.issues.create_comment("acme", "mxfuse", 7, body="s").parsed_data.body,
        "s",
    ),
    (
        "update-comment",
        lambda g: g.rest.issues.update_comment("acme", "mxfuse", 1000001, body="u").parsed_data.body,
        "u",
    ),
    (
        "reaction",
        lambda g: (
            g.rest.reactions.create_for_issue_comment(
                "acme", "mxfuse", 1000001, content="eyes"
            ).parsed_data.content
        ),
        "eyes",
    ),
    (
        "permission",
        lambda g: (
            g.rest.repos.get_collaborator_permission_level("acme", "mxfuse", "alice").parsed_data.role_name
        ),
        "maintain",
    ),
    (
        "content",
        lambda g: base64.b64decode(
            g.rest.repos.get_content("acme", "mxfuse", "README.md", ref=HEAD).parsed_data.content
        ).decode(),
        "# mxfuse\n",
    ),
    (
        "dispatch-run-jobs",
        lambda g: [
            g.rest.actions.list_jobs_for_workflow_run(
                "acme",
                "mxfuse",
                g.rest.actions.create_workflow_dispatch(
                    "acme", "mxfuse", "gpu-tests.yml", ref="main", inputs={"runner": "cpu"}
                ).parsed_data.workflow_run_id,
            )
            .parsed_data.jobs[0]
            .status,
            g.rest.actions.get_workflow_run("acme", "mxfuse", 7000001).parsed_data.status,
            g.rest.actions.list_workflow_runs("acme", "mxfuse", "gpu-tests.yml").parsed_data.total_count,
            g.rest.actions.list_workflow_runs_for_repo("acme", "mxfuse").parsed_data.workflow_runs[0].id,
        ],
        ["queued", "queued", 1, 7000001],
    ),
]


@pytest.mark.parametrize(
    ("call", "expected"), [r[1:] for r in GITHUBKIT_CALLS], ids=[r[0] for r in GITHUBKIT_CALLS]
)
def test_githubkit_parses_every_answer(gh: GitHubEmulator, call: Any, expected: Any) -> None:
    from githubkit import GitHub

    with GitHub(gh.token, base_url=gh.base_url, auto_retry=False) as client:
        assert call(client) == expected
    assert {r.headers.get("x-github-api-version") for r in gh.requests} == {"2026-03-10"}
    assert gh.violations == []


# -- reactions, permissions, comments, contents -----------------------------------------------------------------


def test_reaction_is_created_once_per_content_and_user(gh: GitHubEmulator, api: httpx.Client) -> None:
    path = f"{REPO}/issues/comments/1000001/reactions"
    answers = [api.post(path, json={"content": c}) for c in ("eyes", "eyes", "rocket", "eyes")]
    assert [a.status_code for a in answers] == [201, 200, 201, 200]
    assert (
        answers[0].json()["id"]
        == answers[1].json()["id"]
        == answers[3].json()["id"]
        != answers[2].json()["id"]
    )
    assert sorted(r["content"] for r in gh.reactions(1000001)) == ["eyes", "rocket"]
    assert api.get(f"{REPO}/issues/comments/1000001").json()["reactions"]["total_count"] == 2


# (level, legacy permission, role name): GitHub folds maintain into "write" and triage into "read".
PERMISSIONS = [
    ("none", "none", "none"),
    ("read", "read", "read"),
    ("triage", "read", "triage"),
    ("write", "write", "write"),
    ("maintain", "write", "maintain"),
    ("admin", "admin", "admin"),
]


@pytest.mark.parametrize(("level", "permission", "role_name"), PERMISSIONS)
def test_permission_answers_legacy_permission_and_role(
    gh: GitHubEmulator, api: httpx.Client, level: str, permission: str, role_name: str
) -> None:
    gh.set_permission("carol", level)
    body = api.get(f"{REPO}/collaborators/carol/permission").json()
    assert (body["permission"], body["role_name"], body["user"]["login"]) == (permission, role_name, "carol")


def test_unknown_user_permission_is_404_and_no_violation(gh: GitHubEmulator, api: httpx.Client) -> None:
    assert api.get(f"{REPO}/collaborators/mallory/permission").status_code == 404
    assert api.get("/orgs/acme/members/mallory").status_code == 404
    assert api.get(f"{REPO}/issues/comments/999").status_code == 404
    assert gh.violations == []


def test_comments_are_paginated_with_link_header(gh: GitHubEmulator, api: httpx.Client) -> None:
    for n in range(34):
        gh.add_comment(8, f"note {n}", login="dave")
    first = api.get(f"{REPO}/issues/8/comments")
    second = api.get(f"{REPO}/issues/8/comments", params={"page": 2})
    assert (len(first.json()), len(second.json())) == (30, 4)
    assert 'rel="next"' in first.headers["Link"] and "page=2" in first.headers["Link"]
    assert 'rel="next"' not in second.headers["Link"] and 'rel="prev"' in second.headers["Link"]
    bodies = [c["body"] for c in first.json() + second.json()]
    assert bodies == [f"note {n}" for n in range(34)]
    zero = api.get(f"{REPO}/issues/8/comments", params={"per_page": 0})
    assert (zero.status_code, len(zero.json())) == (200, 30)  # falls back to the default page size


def test_comment_update_changes_body_and_time_but_not_identity(gh: GitHubEmulator, api: httpx.Client) -> None:
    before = gh.comment(1000001)
    after = api.patch(f"{REPO}/issues/comments/1000001", json={"body": "new"}).json()
    assert (after["id"], after["created_at"], after["body"]) == (before["id"], before["created_at"], "new")
    assert after["updated_at"] > before["updated_at"]
    assert after["html_url"] == "https://github.com/acme/mxfuse/pull/7#issuecomment-1000001"


def test_api_comments_are_by_the_token_actor(gh: GitHubEmulator, api: httpx.Client) -> None:
    created = api.post(f"{REPO}/issues/8/comments", json={"body": "hello"}).json()
    assert (created["user"]["login"], created["user"]["type"]) == ("github-actions[bot]", "Bot")
    assert created["html_url"].startswith("https://github.com/acme/mxfuse/issues/8#issuecomment-")
    assert [c["body"] for c in gh.comments(8)] == ["hello"]


def test_concurrent_writers_lose_nothing(gh: GitHubEmulator, api: httpx.Client) -> None:
    def post(n: int) -> int:
        return api.post(f"{REPO}/issues/8/comments", json={"body": f"c{n}"}).json()["id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(post, range(40)))
    assert len(set(ids)) == 40
    assert sorted(c["body"] for c in gh.comments(8)) == sorted(f"c{n}" for n in range(40))
    assert gh.violations == []


# (id, path, ref, accept, status, expected text or directory names)
CONTENTS = [
    ("nested-file-by-sha", "tests/unit/test_x.py", HEAD, None, 200, TREE["tests/unit/test_x.py"]),
    ("by-short-sha", "README.md", HEAD[:7], None, 200, "# mxfuse\n"),
    ("by-branch", "README.md", "feature", None, 200, "# mxfuse\n"),
    ("raw", "tests/kernels/test_k.py", HEAD, "application/vnd.github.raw", 200, "x = 1\n"),
    ("directory", "tests", HEAD, None, 200, ["kernels", "unit"]),
    ("missing-path", "tests/nope.py", HEAD, None, 404, None),
    ("unknown-ref", "README.md", "f" * 40, None, 404, None),
    ("default-branch-is-empty", "README.md", None, None, 404, None),
]


@pytest.mark.parametrize(
    ("path", "ref", "accept", "status", "expected"), [r[1:] for r in CONTENTS], ids=[r[0] for r in CONTENTS]
)
def test_contents_of_a_commit(
    gh: GitHubEmulator,
    api: httpx.Client,
    path: str,
    ref: str | None,
    accept: str | None,
    status: int,
    expected: Any,
) -> None:
    response = api.get(
        f"{REPO}/contents/{path}",
        params={} if ref is None else {"ref": ref},
        headers={} if accept is None else {"Accept": accept},
    )
    assert response.status_code == status
    if accept is not None:
        assert response.text == expected
    elif isinstance(expected, list):
        assert [entry["name"] for entry in response.json()] == expected
    elif expected is not None:
        body = response.json()
        assert "\n" in body["content"]  # wrapped like GitHub's, so clients must decode across lines
        assert base64.b64decode(body["content"]).decode() == expected
    assert gh.violations == []


# -- faults ----------------------------------------------------------------------------------------------------

# (id, status, retry_after, message, expected message)
FAULTS = [
    ("server-error", 500, None, None, "Server Error"),
    ("bad-gateway", 502, None, None, "Server Error"),
    ("secondary-rate-limit", 403, 60, None, SECONDARY_RATE_LIMIT_MESSAGE),
    ("rate-limit-429", 429, 7, None, SECONDARY_RATE_LIMIT_MESSAGE),
    ("dispatch-422", 422, None, 'Unexpected inputs provided: ["x"]', 'Unexpected inputs provided: ["x"]'),
]


@pytest.mark.parametrize(
    ("status", "retry_after", "message", "expected"), [r[1:] for r in FAULTS], ids=[r[0] for r in FAULTS]
)
def test_injected_fault_answers_once_then_clears(
    gh: GitHubEmulator,
    api: httpx.Client,
    status: int,
    retry_after: int | None,
    message: str | None,
    expected: str,
) -> None:
    gh.inject_fault("POST", r"/dispatches$", status, retry_after=retry_after, message=message)
    faulted = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True)
    assert (faulted.status_code, faulted.json()["message"]) == (status, expected)
    assert faulted.headers.get("Retry-After") == (None if retry_after is None else str(retry_after))
    assert gh.runs == []  # the fault answered before anything happened
    retried = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True)
    assert retried.status_code == 200 and len(gh.runs) == 1
    assert gh.violations == []


def test_fault_after_handler_takes_effect_but_hides_the_answer(gh: GitHubEmulator, api: httpx.Client) -> None:
    gh.inject_fault("POST", r"/issues/\d+/comments$", 502, after_handler=True)
    response = api.post(f"{REPO}/issues/8/comments", json={"body": "lost answer"})
    assert response.status_code == 502
    assert [c["body"] for c in gh.comments(8)] == ["lost answer"]


def test_fault_counts_only_matching_requests(gh: GitHubEmulator, api: httpx.Client) -> None:
    fault = gh.inject_fault("GET", r"/actions/runs/\d+$", 500, times=2)
    assert api.get(f"{REPO}/pulls/7").status_code == 200
    assert api.post(f"{REPO}/issues/8/comments", json={"body": "x"}).status_code == 201
    run_id = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True).json()[
        "workflow_run_id"
    ]
    codes = [api.get(f"{REPO}/actions/runs/{run_id}").status_code for _ in range(3)]
    assert codes == [500, 500, 200] and fault.hits == 2


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        (("GET", "x", 200), {}, ValueError),
        (("GET", "x", 500), {"times": 0}, ValueError),
        (("GET", "(", 500), {}, ValueError),
        (("GET", "x", 403), {"retry_after": -1}, ValueError),
        ((None, "x", 500), {}, TypeError),
    ],
)
def test_inject_fault_refuses_bad_arguments(
    gh: GitHubEmulator, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        gh.inject_fault(*args, **kwargs)


# -- request log, violations, lifecycle ------------------------------------------------------------------------


def test_request_log_records_each_request(gh: GitHubEmulator, api: httpx.Client) -> None:
    api.post(f"{REPO}/issues/8/comments", json={"body": "logged"})
    api.get(f"{REPO}/issues/8/comments", params={"per_page": 5})
    api.get(f"{REPO}/nowhere")
    log = [(r.method, r.path, dict(r.query), r.json, r.status, r.operation_id) for r in gh.requests]
    assert log == [
        ("POST", f"{REPO}/issues/8/comments", {}, {"body": "logged"}, 201, "issues/create-comment"),
        ("GET", f"{REPO}/issues/8/comments", {"per_page": "5"}, None, 200, "issues/list-comments"),
        ("GET", f"{REPO}/nowhere", {}, None, 404, None),
    ]
    assert gh.requests[0].time <= gh.requests[1].time <= gh.requests[2].time
    with pytest.raises(AssertionError, match="1 GitHub contract violation"):
        gh.assert_no_violations()
    assert len(gh.take_violations()) == 1 and gh.violations == []


def test_base_url_needs_a_serving_emulator() -> None:
    emulator = GitHubEmulator()
    emulator.add_issue(1)
    with pytest.raises(RuntimeError, match="not serving"):
        _ = emulator.base_url
    with pytest.raises(RuntimeError, match="not serving"):
        emulator.add_comment(1, "before serving")
    with emulator as served:
        assert served.comments(1) == []  # the refused comment changed nothing
        assert served.base_url.startswith("http://127.0.0.1:")
        assert served.env() == {
            "GITHUB_TOKEN": served.token,
            "GITHUB_REPOSITORY": "acme/mxfuse",
            "GITHUB_API_URL": served.base_url,
        }


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"owner": "a/b"}, ValueError),
        ({"repo": ""}, ValueError),
        ({"actor_type": "Robot"}, ValueError),
    ],
)
def test_constructor_refuses_bad_arguments(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        GitHubEmulator(**kwargs)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda gh: gh.add_pull(head_sha="xyz"), ValueError),
        (lambda gh: gh.add_pull(7, head_sha="1" * 40), ValueError),
        (lambda gh: gh.add_tree("A" * 40, {}), ValueError),
        (lambda gh: gh.add_tree("1" * 40, {"/abs": "x"}), TypeError),
        (lambda gh: gh.set_permission("x", "owner"), ValueError),
        (lambda gh: gh.add_workflow("gpu-tests"), ValueError),
        (lambda gh: gh.add_comment(7, "x", user_type="Robot"), ValueError),
    ],
)
def test_control_api_refuses_bad_arguments(gh: GitHubEmulator, call: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        call(gh)


# -- webhook payloads -------------------------------------------------------------------------------------------

# (id, action, is_pr)
COMMENT_EVENTS = [
    ("created-on-pr", "created", True),
    ("created-on-issue", "created", False),
    ("edited-on-pr", "edited", True),
    ("deleted-on-pr", "deleted", True),
]


@pytest.mark.parametrize(
    ("action", "is_pr"), [r[1:] for r in COMMENT_EVENTS], ids=[r[0] for r in COMMENT_EVENTS]
)
def test_issue_comment_event_changes_only_named_fields(action: str, is_pr: bool) -> None:
    event = issue_comment_event(
        body="/rerun-test test_x.py",
        login="alice",
        issue_number=42,
        is_pr=is_pr,
        action=action,
        comment_id=555,
        previous_body="old",
    )
    assert event_errors("issue_comment", event) == []
    assert (event["action"], event["comment"]["body"], event["comment"]["id"]) == (
        action,
        "/rerun-test test_x.py",
        555,
    )
    assert (event["comment"]["user"]["login"], event["sender"]["login"], event["issue"]["number"]) == (
        "alice",
        "alice",
        42,
    )
    assert ("pull_request" in event["issue"]) is is_pr
    assert event["repository"]["full_name"] == "acme/mxfuse"
    assert ("changes" in event) is (action == "edited")
    published = load_example("issue_comment.created.1")
    assert event["issue"]["title"] == published["issue"]["title"]  # untouched fields stay as published


def test_event_helpers_refuse_payloads_github_never_sends() -> None:
    with pytest.raises(ValueError, match="conclusion"):
        workflow_run_event(run_id=1, head_sha=HEAD, conclusion=None, action="completed")
    with pytest.raises(ValueError, match="action"):
        issue_comment_event(body="x", login="a", issue_number=1, action="pinned")
    with pytest.raises(ValueError, match="name"):
        load_example("issue_comment.created.99")


def test_events_from_the_emulator_match_its_state(gh: GitHubEmulator, api: httpx.Client) -> None:
    event = gh.comment_event(1000001)
    assert (event["comment"]["id"], event["issue"]["number"], event["comment"]["user"]["login"]) == (
        1000001,
        7,
        "alice",
    )
    assert event["comment"]["url"] == f"{gh.base_url}{REPO}/issues/comments/1000001"
    run_id = _dispatch(api, ref="main", inputs={"runner": "cpu"}, return_run_details=True).json()[
        "workflow_run_id"
    ]
    gh.set_run_state(run_id, "completed", "success")
    hook = gh.workflow_run_event(run_id)
    assert (hook["workflow_run"]["id"], hook["workflow_run"]["conclusion"], hook["workflow"]["path"]) == (
        run_id,
        "success",
        ".github/workflows/gpu-tests.yml",
    )
    labeled = gh.pull_request_event(7, label="run-gpu-ci")
    assert (labeled["label"]["name"], labeled["pull_request"]["head"]["sha"]) == ("run-gpu-ci", HEAD)
    assert pull_request_event(number=3, head_sha=HEAD, action="synchronize")["number"] == 3
