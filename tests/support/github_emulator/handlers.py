"""One handler per REST operation: read the validated request, change the state, answer in GitHub's shape.

Handlers run with the emulator's lock held and only ever see requests that passed validation, so they read
parameters without re-checking their types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from .shapes import Shapes
from .state import ApiError, RepoState

__all__ = ["HANDLERS", "Call", "Reply"]

# The API version in which dispatch always answers 200 with the run's details (x-github-breaking-changes of
# actions/create-workflow-dispatch in the description).
DISPATCH_DETAILS_ALWAYS = "2026-03-10"


@dataclass(frozen=True)
class Call:
    state: RepoState
    shapes: Shapes
    path_params: Mapping[str, str]
    query: Mapping[str, str]
    body: Any
    api_version: str
    accept: str
    request_url: str


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    raw: bytes | None = None


def _int(call: Call, name: str) -> int:
    return int(call.path_params[name])


def _paginate(call: Call, items: Sequence[Any]) -> tuple[list[Any], dict[str, str]]:
    """GitHub's page/per_page slicing (at most 100 per page; 0 falls back to the default 30), Link header."""
    per_page = min(int(call.query.get("per_page", 30)) or 30, 100)
    page = max(int(call.query.get("page", 1)), 1)
    last = max(1, -(-len(items) // per_page))
    pages = {
        "prev": page - 1 if page > 1 else None,
        "next": page + 1 if page < last else None,
        "last": last if last > 1 else None,
        "first": 1 if last > 1 else None,
    }
    links = [
        f'<{call.request_url}?{urlencode({**call.query, "per_page": per_page, "page": number})}>; rel="{rel}"'
        for rel, number in pages.items()
        if number is not None
    ]
    headers = {"Link": ", ".join(links)} if links else {}
    return list(items[(page - 1) * per_page : page * per_page]), headers


# -- issues, comments, reactions, pulls -----------------------------------------------------------------------


def list_comments(call: Call) -> Reply:
    number = _int(call, "issue_number")
    call.state.issue(number)
    since = call.query.get("since")
    comments = [c for c in call.state.comments.values() if c.issue_number == number]
    if since is not None:
        comments = [c for c in comments if c.updated_at >= since]
    page, headers = _paginate(call, sorted(comments, key=lambda c: c.id))
    return Reply(200, [call.shapes.comment(c) for c in page], headers)


def create_comment(call: Call) -> Reply:
    state = call.state
    record = state.create_comment(
        _int(call, "issue_number"), call.body["body"], login=state.actor, user_type=state.actor_type
    )
    body = call.shapes.comment(record)
    return Reply(201, body, {"Location": body["url"]})


def get_comment(call: Call) -> Reply:
    return Reply(200, call.shapes.comment(call.state.comment(_int(call, "comment_id"))))


def update_comment(call: Call) -> Reply:
    return Reply(
        200, call.shapes.comment(call.state.update_comment(_int(call, "comment_id"), call.body["body"]))
    )


def delete_comment(call: Call) -> Reply:
    call.state.delete_comment(_int(call, "comment_id"))
    return Reply(204)


def create_reaction(call: Call) -> Reply:
    record, created = call.state.react(_int(call, "comment_id"), call.body["content"], login=call.state.actor)
    return Reply(201 if created else 200, call.shapes.reaction(record))


def get_pull(call: Call) -> Reply:
    return Reply(200, call.shapes.pull(call.state.pull(_int(call, "pull_number"))))


def list_pull_files(call: Call) -> Reply:
    record = call.state.pull(_int(call, "pull_number"))
    page, headers = _paginate(call, record.files)
    return Reply(200, [call.shapes.pull_file(record, dict(change)) for change in page], headers)


# -- workflows and runs ---------------------------------------------------------------------------------------


def list_workflows(call: Call) -> Reply:
    page, headers = _paginate(call, list(call.state.workflows.values()))
    return Reply(
        200,
        {"total_count": len(call.state.workflows), "workflows": [call.shapes.workflow(w) for w in page]},
        headers,
    )


def get_workflow(call: Call) -> Reply:
    return Reply(200, call.shapes.workflow(call.state.workflow(call.path_params["workflow_id"])))


def dispatch_workflow(call: Call) -> Reply:
    workflow = call.state.workflow(call.path_params["workflow_id"])
    run = call.state.dispatch(workflow, call.body["ref"], call.body.get("inputs") or {})
    if call.body.get("return_run_details") or call.api_version >= DISPATCH_DETAILS_ALWAYS:
        api, html = call.shapes.run_urls(run.id)
        return Reply(200, {"workflow_run_id": run.id, "run_url": api, "html_url": html})
    return Reply(204)


def _runs(call: Call, workflow_id: int | None) -> Reply:
    query = call.query
    runs = [r for r in call.state.runs.values() if workflow_id is None or r.workflow_id == workflow_id]
    for name, attribute in (
        ("actor", "actor"),
        ("branch", "head_branch"),
        ("event", "event"),
        ("head_sha", "head_sha"),
    ):
        if name in query:
            runs = [r for r in runs if getattr(r, attribute) == query[name]]
    if "status" in query:
        # GitHub's `status` filter takes a status or a conclusion.
        runs = [r for r in runs if query["status"] in (r.status, r.conclusion)]
    runs.sort(key=lambda r: r.id, reverse=True)  # newest first, as GitHub lists them
    page, headers = _paginate(call, runs)
    return Reply(
        200, {"total_count": len(runs), "workflow_runs": [call.shapes.run(r) for r in page]}, headers
    )


def list_repo_runs(call: Call) -> Reply:
    return _runs(call, None)


def list_workflow_runs(call: Call) -> Reply:
    return _runs(call, call.state.workflow(call.path_params["workflow_id"]).id)


def get_run(call: Call) -> Reply:
    return Reply(200, call.shapes.run(call.state.run(_int(call, "run_id"))))


def list_jobs(call: Call) -> Reply:
    run = call.state.run(_int(call, "run_id"))
    page, headers = _paginate(call, run.jobs)
    return Reply(
        200, {"total_count": len(run.jobs), "jobs": [call.shapes.job(run, j) for j in page]}, headers
    )


def list_run_artifacts(call: Call) -> Reply:
    run_id = _int(call, "run_id")
    call.state.run(run_id)
    found = [
        a
        for a in call.state.artifacts.values()
        if a.run_id == run_id and call.query.get("name", a.name) == a.name
    ]
    found.sort(key=lambda a: a.id, reverse=call.query.get("direction", "desc") == "desc")
    page, headers = _paginate(call, found)
    return Reply(
        200, {"total_count": len(found), "artifacts": [call.shapes.artifact(a) for a in page]}, headers
    )


def download_artifact(call: Call) -> Reply:
    """302 to a short-lived blob URL, as GitHub answers; the blob itself is not part of the REST API."""
    record = call.state.artifact(_int(call, "artifact_id"))
    if call.path_params["archive_format"] != "zip":
        raise ApiError(404, "Not Found")
    if record.expired:
        raise ApiError(410, "Artifact has expired")
    return Reply(302, headers={"Location": call.shapes.artifact_blob_url(record)})


def cancel_run(call: Call) -> Reply:
    call.state.cancel_run(_int(call, "run_id"))
    return Reply(202, {})


def rerun_failed_jobs(call: Call) -> Reply:
    call.state.rerun_failed_jobs(_int(call, "run_id"))
    return Reply(201, {})


# -- permissions, membership, contents, statuses, checks ------------------------------------------------------


def get_permission(call: Call) -> Reply:
    login = call.path_params["username"]
    permission, role_name = call.state.permission(login)
    return Reply(200, call.shapes.permission(login, permission, role_name))


def check_membership(call: Call) -> Reply:
    if (call.path_params["org"].lower(), call.path_params["username"]) in call.state.org_members:
        return Reply(204)
    raise ApiError(404, "User does not exist or is not a member of the organization")


def get_content(call: Call) -> Reply:
    state, ref = call.state, call.query.get("ref")
    sha = state.resolve_ref(ref)
    tree, path = state.trees[sha], call.path_params["path"].strip("/")
    shown_ref = ref or state.default_branch
    if path in tree:
        if "vnd.github.raw" in call.accept:
            return Reply(200, raw=tree[path].encode(), headers={"Content-Type": "application/vnd.github.raw"})
        return Reply(200, call.shapes.file(path, tree[path], shown_ref))
    prefix = f"{path}/" if path else ""
    entries: dict[str, tuple[str, str]] = {}
    for name, text in tree.items():
        if name.startswith(prefix):
            head, _, rest = name[len(prefix) :].partition("/")
            entries[prefix + head] = ("dir", "") if rest else ("file", text)
    if not entries:
        raise ApiError(404, "Not Found")
    return Reply(
        200,
        [
            call.shapes.directory_entry(p, kind, text, shown_ref)
            for p, (kind, text) in sorted(entries.items())
        ],
    )


def create_status(call: Call) -> Reply:
    return Reply(201, call.shapes.status(call.state.create_status(call.path_params["sha"], call.body)))


def create_check_run(call: Call) -> Reply:
    return Reply(201, call.shapes.check_run(call.state.create_check_run(call.body)))


def list_check_runs_for_ref(call: Call) -> Reply:
    found = call.state.list_check_runs(
        call.path_params["ref"],
        check_name=call.query.get("check_name"),
        status=call.query.get("status"),
        latest=call.query.get("filter", "latest") == "latest",
    )
    page, headers = _paginate(call, found)
    return Reply(
        200, {"total_count": len(found), "check_runs": [call.shapes.check_run(c) for c in page]}, headers
    )


def update_check_run(call: Call) -> Reply:
    record = call.state.update_check_run(_int(call, "check_run_id"), call.body)
    return Reply(200, call.shapes.check_run(record))


HANDLERS: Mapping[str, Callable[[Call], Reply]] = {
    "orgs/check-membership-for-user": check_membership,
    "actions/list-workflow-runs-for-repo": list_repo_runs,
    "actions/get-workflow-run": get_run,
    "actions/cancel-workflow-run": cancel_run,
    "actions/list-jobs-for-workflow-run": list_jobs,
    "actions/list-workflow-run-artifacts": list_run_artifacts,
    "actions/download-artifact": download_artifact,
    "actions/re-run-workflow-failed-jobs": rerun_failed_jobs,
    "actions/list-repo-workflows": list_workflows,
    "actions/get-workflow": get_workflow,
    "actions/create-workflow-dispatch": dispatch_workflow,
    "actions/list-workflow-runs": list_workflow_runs,
    "checks/create": create_check_run,
    "checks/update": update_check_run,
    "checks/list-for-ref": list_check_runs_for_ref,
    "repos/get-collaborator-permission-level": get_permission,
    "repos/get-content": get_content,
    "repos/create-commit-status": create_status,
    "issues/get-comment": get_comment,
    "issues/update-comment": update_comment,
    "issues/delete-comment": delete_comment,
    "reactions/create-for-issue-comment": create_reaction,
    "issues/list-comments": list_comments,
    "issues/create-comment": create_comment,
    "pulls/get": get_pull,
    "pulls/list-files": list_pull_files,
}
