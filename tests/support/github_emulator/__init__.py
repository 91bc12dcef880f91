"""A local GitHub REST API for contract tests: a real HTTP server that checks every request against GitHub's
published REST description and answers with bodies valid against it.

Usage
-----

    from github_emulator import GitHubEmulator

    with GitHubEmulator(owner="acme", repo="mxfuse") as gh:
        gh.add_tree("a" * 40, {"tests/unit/test_x.py": "..."})          # the PR head's files, read as data
        pr = gh.add_pull(head_sha="a" * 40, head_ref="feature", files=["tests/unit/test_x.py"])
        gh.set_permission("alice", "write")                             # none/read/triage/write/maintain/admin
        gh.add_workflow_file(".github/workflows/gpu-tests.yml")         # or gh.add_workflow("gpu-tests.yml", inputs=...)
        comment = gh.add_comment(pr, "/rerun-test test_x.py", login="alice")
        event = gh.comment_event(comment["id"])                         # the issue_comment webhook payload

        run_the_bot(event, env=gh.env())    # GITHUB_TOKEN, GITHUB_REPOSITORY, GITHUB_API_URL=gh.base_url

        run = gh.runs[-1]                    # WorkflowRunRecord: .id .ref .inputs .status .conclusion .head_sha
        gh.set_run_state(run.id, "completed", "failure")
        hook = gh.workflow_run_event(run.id) # the workflow_run completed payload for the sync hook
        gh.comments(pr)                      # comments as GET returns them; gh.reactions(comment_id) likewise
        gh.check_runs, gh.statuses           # what the bot published on commits
        gh.add_artifact(run.id, "gpumatrix-report-1-gpu-h100", {"report.json": "{...}"})  # served zipped, via 302
        gh.push(pr, "b" * 40)                # a new head for the PR; gh.add_run("ci.yml", head_sha=...) a PR run
        gh.requests                          # RecordedRequest(method, path, query, json, status, time, ...)
        gh.assert_no_violations()            # or use the `github_emulator` fixture, which checks at teardown

Check runs follow GitHub's rules: a conclusion completes one, and a completed one cannot go back to queued or in
progress (422). Artifact downloads answer 302 to a blob URL outside the REST API, served without a token.

Requests need `Authorization: Bearer <gh.token>` (or `token ...`); comments and reactions made through the API
are by `gh.actor` ("github-actions[bot]", a Bot). An unknown route answers 404, a request that breaks its
operation's schema (path, query or body) answers 422 (400 for unparseable JSON), and each of these, like
dispatching undeclared inputs or to a ref that does not exist, is recorded in `gh.violations`. A test that
provokes violations on purpose reads them with `gh.take_violations()`. With `strict=True` (the default), a
response of the emulator's own that departs from its schema is a violation too.

Faults: `gh.inject_fault("POST", r"/dispatches$", 403, retry_after=60)` (secondary rate limit),
`gh.inject_fault("*", r"/comments", 502, times=2)`, `gh.inject_fault("POST", r"/dispatches$", 422)`;
`after_handler=True` lets the request take effect and only replaces the answer.

Dispatch answers 200 with `workflow_run_id`, `run_url`, `html_url` when the body has `return_run_details: true`
or the request says `X-GitHub-Api-Version: 2026-03-10` (where that became the only behaviour), else 204; the new
run is "queued" on the head of the dispatched ref. The collaborator-permission API answers GitHub's legacy
`permission` (maintain reads "write", triage reads "read") beside the exact `role_name`.

Webhook payloads without an emulator: `issue_comment_event`, `workflow_run_event`, `pull_request_event` adapt
GitHub's published examples (tests/fixtures/github/webhook-examples) and validate the result against
webhooks.schema.json. Data comes only from tests/fixtures/github (see SOURCE.md there).
"""

from __future__ import annotations

from .emulator import GitHubEmulator, workflow_inputs
from .faults import SECONDARY_RATE_LIMIT_MESSAGE, Fault
from .fixture import github_emulator
from .server import RecordedRequest, Violation
from .state import PERMISSION_LEVELS, WorkflowRunRecord
from .webhooks import (
    event_errors,
    issue_comment_event,
    load_example,
    pull_request_event,
    validate_event,
    workflow_run_event,
)

__all__ = [
    "PERMISSION_LEVELS",
    "SECONDARY_RATE_LIMIT_MESSAGE",
    "Fault",
    "GitHubEmulator",
    "RecordedRequest",
    "Violation",
    "WorkflowRunRecord",
    "event_errors",
    "github_emulator",
    "issue_comment_event",
    "load_example",
    "pull_request_event",
    "validate_event",
    "workflow_inputs",
    "workflow_run_event",
]
