"""Webhook payloads: GitHub's published examples, adapted in only the fields a test names, then validated.

The examples (tests/fixtures/github/webhook-examples, from @octokit/webhooks-examples) are what GitHub sends;
starting from them keeps every field a test does not mention realistic. Each adapted payload is checked against
@octokit/webhooks-schemas (webhooks.schema.json) before it is returned, so an adaptation that produces something
GitHub never sends fails here, not in the code under test.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from .spec import FIXTURES_DIR

__all__ = [
    "WEBHOOK_EXAMPLES_DIR",
    "event_errors",
    "issue_comment_event",
    "load_example",
    "pull_request_event",
    "validate_event",
    "workflow_run_event",
]

WEBHOOK_EXAMPLES_DIR = FIXTURES_DIR / "webhook-examples"
WEBHOOK_SCHEMA_PATH = FIXTURES_DIR / "webhooks.schema.json"

# The example each (event, action) starts from: the first one of its kind that validates against the schema.
_BASE_EXAMPLES = {
    ("issue_comment", "created"): "issue_comment.created.1",
    ("issue_comment", "edited"): "issue_comment.edited.7",
    ("issue_comment", "deleted"): "issue_comment.deleted.5",
    ("workflow_run", "completed"): "workflow_run.completed.1",
    ("workflow_run", "requested"): "workflow_run.requested.3",
    ("pull_request", "labeled"): "pull_request.labeled.8",
    ("pull_request", "synchronize"): "pull_request.synchronize.22",
    ("pull_request", "opened"): "pull_request.opened.12",
}


def load_example(name: str) -> dict[str, Any]:
    """A fresh copy of one published example, by file stem (e.g. "issue_comment.created.1")."""
    path = WEBHOOK_EXAMPLES_DIR / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in WEBHOOK_EXAMPLES_DIR.glob("*.json"))
        raise ValueError(f"name: no webhook example {name!r}; have {known}")
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache
def _validator(event: str, action: str) -> Any:
    from jsonschema import Draft7Validator

    schema = json.loads(WEBHOOK_SCHEMA_PATH.read_text(encoding="utf-8"))
    key = f"{event}${action}"
    if key not in schema["definitions"]:
        raise ValueError(f"event/action: the webhook schema has no {key!r}")
    schema.pop("oneOf")
    schema["$ref"] = f"#/definitions/{key}"
    return Draft7Validator(schema)


def event_errors(event: str, payload: dict[str, Any]) -> list[str]:
    """Where `payload` departs from the schema of `event` with its `action`; empty when it conforms."""
    found = _validator(event, str(payload.get("action")))
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
        for e in found.iter_errors(payload)
    ]


def validate_event(event: str, payload: dict[str, Any]) -> dict[str, Any]:
    errors = event_errors(event, payload)
    if errors:
        raise ValueError(f"payload: not a valid {event} event: " + "; ".join(errors))
    return payload


def _start(event: str, action: str, *, owner: str, repo: str, api_url: str | None) -> dict[str, Any]:
    name = _BASE_EXAMPLES.get((event, action))
    if name is None:
        have = sorted(a for e, a in _BASE_EXAMPLES if e == event)
        raise ValueError(f"action: no {event} example for {action!r}; have {have}")
    text = json.dumps(load_example(name))
    example_repo = json.loads(text)["repository"]["full_name"]
    text = text.replace(example_repo, f"{owner}/{repo}")
    if api_url is not None:
        text = text.replace("https://api.github.com", api_url.rstrip("/"))
    payload = json.loads(text)
    payload["repository"]["name"] = repo
    payload["repository"]["owner"]["login"] = owner
    return payload


def _user_id(login: str) -> int:
    return int(hashlib.sha1(login.encode()).hexdigest()[:7], 16)


def _set_user(user: dict[str, Any], login: str, user_type: str, user_id: int | None) -> None:
    old = user["login"]
    for key, value in list(user.items()):
        if isinstance(value, str) and key.endswith("url") and f"/{old}" in value:
            user[key] = value.replace(f"/{old}", f"/{login}")
    user.update(login=login, type=user_type, id=user_id if user_id is not None else _user_id(login))


def issue_comment_event(
    *,
    body: str,
    login: str,
    issue_number: int,
    is_pr: bool = True,
    action: str = "created",
    comment_id: int | None = None,
    user_type: str = "User",
    user_id: int | None = None,
    author_association: str = "CONTRIBUTOR",
    previous_body: str = "",
    owner: str = "acme",
    repo: str = "mxfuse",
    api_url: str | None = None,
) -> dict[str, Any]:
    """An `issue_comment` payload: `login` commented `body` on issue or pull request `issue_number`."""
    payload = _start("issue_comment", action, owner=owner, repo=repo, api_url=api_url)
    issue, comment = payload["issue"], payload["comment"]
    issue_api = issue["url"].rsplit("/", 1)[0]
    kind = "pull" if is_pr else "issues"
    issue.update(
        number=issue_number,
        url=f"{issue_api}/{issue_number}",
        html_url=f"https://github.com/{owner}/{repo}/{kind}/{issue_number}",
    )
    if is_pr:
        pulls_api = issue_api.rsplit("/", 1)[0] + "/pulls"
        issue["pull_request"] = {
            "url": f"{pulls_api}/{issue_number}",
            "html_url": issue["html_url"],
            "diff_url": f"{issue['html_url']}.diff",
            "patch_url": f"{issue['html_url']}.patch",
            "merged_at": None,
        }
    else:
        issue.pop("pull_request", None)
    comment_id = comment["id"] if comment_id is None else comment_id
    comment.update(
        id=comment_id,
        body=body,
        author_association=author_association,
        issue_url=issue["url"],
        url=f"{issue_api}/comments/{comment_id}",
        html_url=f"{issue['html_url']}#issuecomment-{comment_id}",
    )
    _set_user(comment["user"], login, user_type, user_id)
    _set_user(payload["sender"], login, user_type, user_id)
    if action == "edited":
        payload["changes"] = {"body": {"from": previous_body}}
    return validate_event("issue_comment", payload)


def workflow_run_event(
    *,
    run_id: int,
    head_sha: str,
    conclusion: str | None = "success",
    action: str = "completed",
    head_branch: str = "main",
    event: str = "workflow_dispatch",
    workflow_id: int = 5_000_001,
    workflow_path: str = ".github/workflows/gpu-tests.yml",
    workflow_name: str = "GPU tests",
    run_number: int = 1,
    owner: str = "acme",
    repo: str = "mxfuse",
    api_url: str | None = None,
) -> dict[str, Any]:
    """A `workflow_run` payload for run `run_id` of `workflow_path`, e.g. the hook that fires when it ends."""
    payload = _start("workflow_run", action, owner=owner, repo=repo, api_url=api_url)
    run, workflow = payload["workflow_run"], payload["workflow"]
    old_id = str(run["id"])
    for key, value in list(run.items()):
        if isinstance(value, str) and key.endswith("url"):
            run[key] = value.replace(f"/runs/{old_id}", f"/runs/{run_id}")
    run.update(
        id=run_id,
        head_sha=head_sha,
        head_branch=head_branch,
        event=event,
        path=workflow_path,
        name=workflow_name,
        display_title=workflow_name,
        run_number=run_number,
        workflow_id=workflow_id,
        status="completed" if action == "completed" else "queued",
        conclusion=conclusion,
        workflow_url=run["workflow_url"].rsplit("/", 1)[0] + f"/{workflow_id}",
    )
    run["head_commit"]["id"] = head_sha
    workflow.update(
        id=workflow_id,
        path=workflow_path,
        name=workflow_name,
        url=workflow["url"].rsplit("/", 1)[0] + f"/{workflow_id}",
    )
    return validate_event("workflow_run", payload)


def pull_request_event(
    *,
    number: int,
    head_sha: str,
    head_ref: str = "feature",
    action: str = "labeled",
    label: str | None = None,
    login: str = "contributor",
    owner: str = "acme",
    repo: str = "mxfuse",
    api_url: str | None = None,
) -> dict[str, Any]:
    """A `pull_request` payload for pull request `number`; `label` names the label of a labeled event."""
    payload = _start("pull_request", action, owner=owner, repo=repo, api_url=api_url)
    pull = payload["pull_request"]
    old = str(pull["number"])
    for key, value in list(pull.items()):
        if isinstance(value, str) and key.endswith("url"):
            pull[key] = value.replace(f"/{old}", f"/{number}")
    payload["number"] = number
    pull["number"] = number
    pull["head"].update(sha=head_sha, ref=head_ref, label=f"{owner}:{head_ref}")
    _set_user(pull["user"], login, "User", None)
    if label is not None:
        if "label" not in payload:
            raise ValueError(f"label: a {action!r} pull_request event carries no label")
        payload["label"]["name"] = label
        pull["labels"] = [dict(payload["label"])]
    return validate_event("pull_request", payload)
