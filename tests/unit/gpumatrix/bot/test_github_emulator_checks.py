"""The emulator's check runs, run artifacts, comment deletion, pushes and event-started runs, over real HTTP:
every answer checked against GitHub's schema, and the rules GitHub applies to them. Also the REST slice itself:
closed under its references, and holding every operation the emulator serves."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from github_emulator import GitHubEmulator
from github_emulator.handlers import HANDLERS
from github_emulator.rest_slice import OPERATIONS, cut_description, dump_slice, recorded_version
from github_emulator.spec import REST_DESCRIPTION_PATH, normalize_description

from gpumatrix import register

register(on=("cpu",), est_time=5)

HEAD = "c0ffee" + "0" * 34
NEW_HEAD = "decade" + "0" * 34
REPO = "/repos/acme/mxfuse"


@pytest.fixture(scope="module")
def schema_api() -> Any:
    from openapi_core import OpenAPI

    document = json.loads(REST_DESCRIPTION_PATH.read_text(encoding="utf-8"))
    return OpenAPI.from_dict(normalize_description(document))


def schema_errors(api: Any, method: str, path: str, response: httpx.Response) -> list[str]:
    from openapi_core.testing import MockRequest, MockResponse

    request = MockRequest("https://api.github.com", method.lower(), path)
    mock = MockResponse(response.content, status_code=response.status_code, content_type="application/json")
    return [str(e) for e in api.iter_response_errors(request, mock)]


@pytest.fixture
def gh() -> Iterator[GitHubEmulator]:
    with GitHubEmulator(owner="acme", repo="mxfuse") as emulator:
        emulator.add_pull(7, head_sha=HEAD, head_ref="feature")
        emulator.add_workflow("gpu-tests.yml", name="GPU tests")
        emulator.add_workflow("ci.yml", name="CI")
        yield emulator
    emulator.assert_no_violations()


@pytest.fixture
def api(gh: GitHubEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=gh.base_url, headers={"Authorization": f"Bearer {gh.token}"}, follow_redirects=True
    ) as client:
        yield client


def _check(api: httpx.Client, **body: Any) -> dict[str, Any]:
    response = api.post(f"{REPO}/check-runs", json={"head_sha": HEAD, **body})
    assert response.status_code == 201, response.text
    return response.json()


# -- check runs ---------------------------------------------------------------------------------------------------


def test_check_runs_listed_for_a_ref_newest_first_and_filtered(
    gh: GitHubEmulator, api: httpx.Client, schema_api: Any
) -> None:
    first = _check(api, name="rerun / cpu", external_id="a")
    second = _check(api, name="rerun / cpu", external_id="b", status="in_progress")
    other = _check(api, name="rerun / 1-gpu-h100", external_id="c")
    path = f"{REPO}/commits/{HEAD}/check-runs"

    every = api.get(path, params={"filter": "all"})
    assert schema_errors(schema_api, "GET", path, every) == []
    assert [c["id"] for c in every.json()["check_runs"]] == [other["id"], second["id"], first["id"]]
    latest = api.get(path).json()  # the default filter keeps the newest of each name
    assert [c["external_id"] for c in latest["check_runs"]] == ["c", "b"]
    named = api.get(path, params={"check_name": "rerun / cpu", "filter": "all"}).json()
    assert (named["total_count"], [c["external_id"] for c in named["check_runs"]]) == (2, ["b", "a"])
    running = api.get(path, params={"status": "in_progress", "filter": "all"}).json()
    assert [c["id"] for c in running["check_runs"]] == [second["id"]]
    assert api.get(f"{REPO}/commits/{NEW_HEAD}/check-runs").json() == {"total_count": 0, "check_runs": []}
    assert api.get(f"{REPO}/commits/heads/feature/check-runs").json()["total_count"] == 2


def test_check_run_output_and_completion(gh: GitHubEmulator, api: httpx.Client, schema_api: Any) -> None:
    created = _check(api, name="rerun / cpu", details_url="https://example.com/run")
    assert created["output"]["title"] is None and created["output"]["summary"] is None
    path = f"{REPO}/check-runs/{created['id']}"
    updated = api.patch(
        path, json={"conclusion": "failure", "output": {"title": "1 failed", "summary": "**x**"}}
    )
    assert updated.status_code == 200 and schema_errors(schema_api, "PATCH", path, updated) == []
    assert (updated.json()["status"], updated.json()["conclusion"]) == ("completed", "failure")
    assert updated.json()["output"]["title"] == "1 failed" and updated.json()["completed_at"] is not None
    assert gh.check_runs[0].output == {"title": "1 failed", "summary": "**x**"}


def test_a_completed_check_run_cannot_go_back_and_says_so(gh: GitHubEmulator, api: httpx.Client) -> None:
    created = _check(api, name="rerun / cpu", conclusion="success")
    for status in ("in_progress", "queued"):
        stale = api.patch(f"{REPO}/check-runs/{created['id']}", json={"status": status})
        assert stale.status_code == 422 and "cannot become" in stale.json()["message"]
    assert (gh.check_runs[0].status, gh.check_runs[0].conclusion) == ("completed", "success")
    again = api.patch(
        f"{REPO}/check-runs/{created['id']}", json={"conclusion": "failure"}
    )  # a new conclusion is fine
    assert again.status_code == 200 and gh.check_runs[0].conclusion == "failure"


def test_completed_without_conclusion_is_a_contract_violation(gh: GitHubEmulator, api: httpx.Client) -> None:
    response = api.post(f"{REPO}/check-runs", json={"head_sha": HEAD, "name": "x", "status": "completed"})
    assert response.status_code == 422
    assert [v.kind for v in gh.take_violations()] == ["dispatch"]


# -- artifacts --------------------------------------------------------------------------------------------------


def test_artifacts_listed_and_downloaded_through_a_redirect(
    gh: GitHubEmulator, api: httpx.Client, schema_api: Any
) -> None:
    run = gh.add_run("ci.yml", head_sha=HEAD)
    report = gh.add_artifact(run.id, "gpumatrix-report-cpu", {"report.json": '{"totals": {}}'})
    gh.add_artifact(run.id, "junit-cpu", {"junit.xml": "<testsuites/>"})
    path = f"{REPO}/actions/runs/{run.id}/artifacts"
    listed = api.get(path)
    assert listed.status_code == 200 and schema_errors(schema_api, "GET", path, listed) == []
    assert [a["name"] for a in listed.json()["artifacts"]] == ["junit-cpu", "gpumatrix-report-cpu"]
    assert [a["id"] for a in api.get(path, params={"name": "junit-cpu"}).json()["artifacts"]] == [
        report.id + 1
    ]

    download = f"{REPO}/actions/artifacts/{report.id}/zip"
    redirect = api.get(download, follow_redirects=False)
    assert redirect.status_code == 302 and "/_blobs/" in redirect.headers["Location"]
    blob = httpx.get(redirect.headers["Location"])  # no token: the URL is signed
    with zipfile.ZipFile(io.BytesIO(blob.content)) as archive:
        assert archive.read("report.json") == b'{"totals": {}}'
    assert api.get(download).content == blob.content  # a client that follows redirects gets the archive


def test_expired_and_missing_artifacts(gh: GitHubEmulator, api: httpx.Client) -> None:
    run = gh.add_run("ci.yml", head_sha=HEAD)
    old = gh.add_artifact(run.id, "old", {"a": "b"}, expired=True)
    assert api.get(f"{REPO}/actions/artifacts/{old.id}/zip").status_code == 410
    assert api.get(f"{REPO}/actions/artifacts/999/zip").status_code == 404
    assert api.get(f"{REPO}/actions/artifacts/{old.id}/tar").status_code == 404
    assert api.get(f"{REPO}/actions/runs/999/artifacts").status_code == 404


# -- comments, pushes, event-started runs ------------------------------------------------------------------------


def test_deleting_a_comment(gh: GitHubEmulator, api: httpx.Client) -> None:
    comment = api.post(f"{REPO}/issues/7/comments", json={"body": "mine"}).json()
    api.post(f"{REPO}/issues/comments/{comment['id']}/reactions", json={"content": "eyes"})
    assert api.delete(f"{REPO}/issues/comments/{comment['id']}").status_code == 204
    assert gh.comments(7) == [] and gh.reactions(comment["id"]) == []
    assert api.delete(f"{REPO}/issues/comments/{comment['id']}").status_code == 404


def test_a_push_moves_the_pull_request_head(gh: GitHubEmulator, api: httpx.Client) -> None:
    gh.push(7, NEW_HEAD, tree={"tests/test_a.py": "x"})
    assert api.get(f"{REPO}/pulls/7").json()["head"]["sha"] == NEW_HEAD == gh.pull_head(7)
    assert gh.default_branch_sha != NEW_HEAD


def test_event_started_runs_are_listed_by_head_sha(gh: GitHubEmulator, api: httpx.Client) -> None:
    ci = gh.add_run("ci.yml", head_sha=HEAD)
    gh.add_run("ci.yml", head_sha=NEW_HEAD, event="push", head_branch="feature")
    listed = api.get(f"{REPO}/actions/runs", params={"head_sha": HEAD}).json()
    assert [(r["id"], r["event"], r["name"], r["run_number"]) for r in listed["workflow_runs"]] == [
        (ci.id, "pull_request", "CI", 1)
    ]
    with pytest.raises(ValueError, match="file_name"):
        gh.add_run("nope.yml", head_sha=HEAD)
    with pytest.raises(ValueError, match="head_sha"):
        gh.add_run("ci.yml", head_sha="HEAD")


# -- the REST slice ---------------------------------------------------------------------------------------------


def test_the_slice_is_a_closed_cut_of_exactly_the_listed_operations() -> None:
    """Cutting the committed slice again changes nothing: every reference resolves inside it, and it holds the
    operations rest_slice.py lists and no other. (A fresh cut from the npm package: `rest_slice.py --check`.)"""
    text = REST_DESCRIPTION_PATH.read_text(encoding="utf-8")
    document = json.loads(text)
    assert dump_slice(cut_description(document, OPERATIONS, title=document["info"]["title"])) == text
    assert document["info"]["version"] == recorded_version()


def test_every_operation_the_emulator_serves_is_in_the_slice() -> None:
    assert set(HANDLERS) == set(OPERATIONS)


def test_cutting_names_a_missing_operation() -> None:
    document = json.loads(REST_DESCRIPTION_PATH.read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="pulls/merge"):
        cut_description(document, [*OPERATIONS, "pulls/merge"])
