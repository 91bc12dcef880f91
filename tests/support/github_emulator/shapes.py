"""JSON bodies in GitHub's shapes, built from the REST description's own published examples.

Each body starts from the operation's example in the description (so fields nobody here models still look like
GitHub's), with the example's repository and API host replaced by the emulated ones, and every field the
emulator tracks overwritten from its state. The emulator's tests validate every shape against the response
schema of its operation.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

from .spec import rest_description
from .state import (
    REACTION_CONTENTS,
    ArtifactRecord,
    CheckRunRecord,
    CommentRecord,
    IssueRecord,
    JobRecord,
    ReactionRecord,
    RepoState,
    StatusRecord,
    WorkflowRecord,
    WorkflowRunRecord,
)

__all__ = ["Shapes"]

# The repositories GitHub's examples are written against; they become the emulated repository.
_EXAMPLE_REPOS = ("octocat/Hello-World", "octo-org/octo-repo")
_GITHUB = "https://github.com"


def _node_id(kind: str, number: int) -> str:
    return base64.b64encode(f"0{len(kind)}:{kind}{number}".encode()).decode()


class Shapes:
    """Renders the records of one `RepoState` for an emulator listening on `base_url`."""

    def __init__(self, state: RepoState, base_url: str) -> None:
        self.state = state
        self.base_url = base_url
        self.full_name = f"{state.owner}/{state.repo}"
        self.api_repo = f"{base_url}/repos/{self.full_name}"
        self.html_repo = f"{_GITHUB}/{self.full_name}"
        self._examples: dict[str, str] = {}

    def _example(self, name: str) -> Any:
        text = self._examples.get(name)
        if text is None:
            value = rest_description().document["components"]["examples"][name]["value"]
            text = json.dumps(value).replace("https://api.github.com", self.base_url)
            for example_repo in _EXAMPLE_REPOS:
                text = text.replace(example_repo, self.full_name)
            self._examples[name] = text
        return json.loads(text)

    # -- people and repository ------------------------------------------------------------------------------

    def user(self, login: str) -> dict[str, Any]:
        uid = self.state.user_id(login)
        user_type = self.state.user_types.get(login, "Bot" if login.endswith("[bot]") else "User")
        api = f"{self.base_url}/users/{quote(login, safe='')}"
        html = f"{_GITHUB}/apps/{login.removesuffix('[bot]')}" if user_type == "Bot" else f"{_GITHUB}/{login}"
        return {
            "login": login,
            "id": uid,
            "node_id": _node_id("User", uid),
            "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": html,
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": user_type,
            "site_admin": False,
            "user_view_type": "public",
        }

    def _repository(self, repository: dict[str, Any], *, full_name: str | None = None) -> dict[str, Any]:
        owner, name = (full_name or self.full_name).split("/", 1)
        repository.update(
            name=name,
            full_name=f"{owner}/{name}",
            html_url=f"{_GITHUB}/{owner}/{name}",
            url=f"{self.base_url}/repos/{owner}/{name}",
        )
        repository["owner"] = self.user(owner)
        if "default_branch" in repository:
            repository["default_branch"] = self.state.default_branch
        return repository

    # -- issues, pull requests, comments, reactions ---------------------------------------------------------

    def comment(self, record: CommentRecord) -> dict[str, Any]:
        body = self._example("issue-comment")
        kind = "pull" if self.state.issue(record.issue_number).is_pull else "issues"
        counts = {c: 0 for c in REACTION_CONTENTS}
        for reaction in self.state.reactions.values():
            if reaction.comment_id == record.id:
                counts[reaction.content] += 1
        body.update(
            id=record.id,
            node_id=_node_id("IssueComment", record.id),
            body=record.body,
            url=f"{self.api_repo}/issues/comments/{record.id}",
            html_url=f"{self.html_repo}/{kind}/{record.issue_number}#issuecomment-{record.id}",
            issue_url=f"{self.api_repo}/issues/{record.issue_number}",
            user=self.user(record.login),
            author_association=record.author_association,
            created_at=record.created_at,
            updated_at=record.updated_at,
            reactions={
                "url": f"{self.api_repo}/issues/comments/{record.id}/reactions",
                "total_count": sum(counts.values()),
                **counts,
            },
        )
        return body

    def reaction(self, record: ReactionRecord) -> dict[str, Any]:
        return {
            "id": record.id,
            "node_id": _node_id("Reaction", record.id),
            "user": self.user(record.login),
            "content": record.content,
            "created_at": record.created_at,
        }

    def pull(self, record: IssueRecord) -> dict[str, Any]:
        body = self._example("pull-request")
        number, api = record.number, f"{self.api_repo}/pulls/{record.number}"
        head_repo = f"{record.login}/{self.state.repo}" if record.fork else self.full_name
        base_sha = self.state.branches.get(record.base_ref, self.state.branches[self.state.default_branch])
        body.update(
            id=900_000 + number,
            node_id=_node_id("PullRequest", number),
            number=number,
            title=record.title,
            state=record.state,
            draft=record.draft,
            user=self.user(record.login),
            url=api,
            html_url=f"{self.html_repo}/pull/{number}",
            diff_url=f"{self.html_repo}/pull/{number}.diff",
            patch_url=f"{self.html_repo}/pull/{number}.patch",
            issue_url=f"{self.api_repo}/issues/{number}",
            commits_url=f"{api}/commits",
            review_comments_url=f"{api}/comments",
            comments_url=f"{self.api_repo}/issues/{number}/comments",
            statuses_url=f"{self.api_repo}/statuses/{record.head_sha}",
            created_at=record.created_at,
            updated_at=record.created_at,
            closed_at=None,
            merged_at=None,
            merged=False,
            merged_by=None,
            merge_commit_sha=None,
            changed_files=len(record.files),
            author_association="CONTRIBUTOR",
            # The example lists a team without the `type` field its own schema requires, and labels without
            # the `archived_by` that githubkit's newer models require; no pull request here carries either.
            requested_teams=[],
            labels=[],
            review_comment_url=f"{self.api_repo}/pulls/comments{{/number}}",
        )
        body["_links"] = {
            "self": {"href": api},
            "html": {"href": body["html_url"]},
            "issue": {"href": body["issue_url"]},
            "comments": {"href": body["comments_url"]},
            "review_comments": {"href": body["review_comments_url"]},
            "review_comment": {"href": body["review_comment_url"]},
            "commits": {"href": body["commits_url"]},
            "statuses": {"href": body["statuses_url"]},
        }
        body["head"].update(
            ref=record.head_ref,
            sha=record.head_sha,
            label=f"{head_repo.split('/')[0]}:{record.head_ref}",
            user=self.user(record.login),
        )
        self._repository(body["head"]["repo"], full_name=head_repo)
        body["base"].update(
            ref=record.base_ref,
            sha=base_sha,
            label=f"{self.state.owner}:{record.base_ref}",
            user=self.user(self.state.owner),
        )
        self._repository(body["base"]["repo"])
        return body

    def pull_file(self, record: IssueRecord, change: dict[str, Any]) -> dict[str, Any]:
        body = self._example("diff-entry-items")[0]
        name, sha = change["filename"], record.head_sha
        body.update(
            filename=name,
            status=change.get("status", "modified"),
            additions=change.get("additions", 1),
            deletions=change.get("deletions", 0),
            sha=change.get("sha", self.state.blob_sha(name)),
            blob_url=f"{self.html_repo}/blob/{sha}/{name}",
            raw_url=f"{self.html_repo}/raw/{sha}/{name}",
            contents_url=f"{self.api_repo}/contents/{name}?ref={sha}",
            patch=change.get("patch", "@@ -0,0 +1 @@"),
        )
        body["changes"] = body["additions"] + body["deletions"]
        if "previous_filename" in change:
            body["previous_filename"] = change["previous_filename"]
        return body

    # -- workflows, runs, jobs ------------------------------------------------------------------------------

    def workflow(self, record: WorkflowRecord) -> dict[str, Any]:
        body = self._example("workflow")
        branch = self.state.default_branch
        body.update(
            id=record.id,
            node_id=_node_id("Workflow", record.id),
            name=record.name,
            path=record.path,
            state="active",
            created_at=record.created_at,
            updated_at=record.created_at,
            url=f"{self.api_repo}/actions/workflows/{record.id}",
            html_url=f"{self.html_repo}/blob/{branch}/{record.path}",
            badge_url=f"{self.html_repo}/workflows/{quote(record.name)}/badge.svg",
        )
        return body

    def run_urls(self, run_id: int) -> tuple[str, str]:
        """(API url, web url) of a run."""
        return f"{self.api_repo}/actions/runs/{run_id}", f"{self.html_repo}/actions/runs/{run_id}"

    def run(self, record: WorkflowRunRecord) -> dict[str, Any]:
        body = self._example("workflow-run")
        api, html = self.run_urls(record.id)
        body.update(
            id=record.id,
            node_id=_node_id("WorkflowRun", record.id),
            name=record.name,
            display_title=record.name,
            run_number=record.run_number,
            run_attempt=record.run_attempt,
            event=record.event,
            status=record.status,
            conclusion=record.conclusion,
            head_branch=record.head_branch,
            head_sha=record.head_sha,
            path=record.workflow_path,
            workflow_id=record.workflow_id,
            url=api,
            html_url=html,
            jobs_url=f"{api}/jobs",
            logs_url=f"{api}/logs",
            artifacts_url=f"{api}/artifacts",
            cancel_url=f"{api}/cancel",
            rerun_url=f"{api}/rerun",
            previous_attempt_url=None,
            workflow_url=f"{self.api_repo}/actions/workflows/{record.workflow_id}",
            pull_requests=[],
            created_at=record.created_at,
            updated_at=record.updated_at,
            run_started_at=record.created_at,
            actor=self.user(record.actor),
            triggering_actor=self.user(record.actor),
        )
        body["head_commit"].update(id=record.head_sha)
        self._repository(body["repository"])
        self._repository(body["head_repository"])
        return body

    def job(self, run: WorkflowRunRecord, record: JobRecord) -> dict[str, Any]:
        body = self._example("job-paginated")["jobs"][0]
        api, html = self.run_urls(run.id)
        body.update(
            id=record.id,
            node_id=_node_id("Job", record.id),
            run_id=run.id,
            run_url=api,
            run_attempt=run.run_attempt,
            head_sha=run.head_sha,
            head_branch=run.head_branch,
            workflow_name=run.name,
            name=record.name,
            status=record.status,
            conclusion=record.conclusion,
            url=f"{self.api_repo}/actions/jobs/{record.id}",
            html_url=f"{html}/job/{record.id}",
            check_run_url=f"{self.api_repo}/check-runs/{record.id}",
            labels=list(record.labels),
            # The example job lacks `created_at`, which the schema requires.
            created_at=record.created_at,
            started_at=record.started_at,
            completed_at=record.completed_at,
            steps=[],
        )
        if record.status == "queued":
            body.update(runner_id=None, runner_name=None, runner_group_id=None, runner_group_name=None)
        return body

    # -- permissions, contents, statuses, checks ------------------------------------------------------------

    def permission(self, login: str, permission: str, role_name: str) -> dict[str, Any]:
        # The example's user lacks `role_name`, which nullable-collaborator requires.
        user = {
            **self.user(login),
            "role_name": role_name,
            "permissions": {
                "pull": permission != "none",
                "triage": role_name in ("triage", "write", "maintain", "admin"),
                "push": permission in ("write", "admin"),
                "maintain": role_name in ("maintain", "admin"),
                "admin": permission == "admin",
            },
        }
        return {"permission": permission, "role_name": role_name, "user": user}

    def _content_links(self, path: str, sha: str, kind: str, ref: str) -> dict[str, Any]:
        tree_or_blob = "trees" if kind == "dir" else "blobs"
        return {
            "url": f"{self.api_repo}/contents/{quote(path)}?ref={ref}",
            "git_url": f"{self.api_repo}/git/{tree_or_blob}/{sha}",
            "html_url": f"{self.html_repo}/{'tree' if kind == 'dir' else 'blob'}/{ref}/{quote(path)}",
            "download_url": None
            if kind == "dir"
            else f"https://raw.githubusercontent.com/{self.full_name}/{ref}/{quote(path)}",
        }

    def file(self, path: str, text: str, ref: str) -> dict[str, Any]:
        sha = self.state.blob_sha(text)
        links = self._content_links(path, sha, "file", ref)
        return {
            "type": "file",
            "encoding": "base64",
            "size": len(text.encode()),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": self.state.encode_content(text),
            "sha": sha,
            **links,
            "_links": {"self": links["url"], "git": links["git_url"], "html": links["html_url"]},
        }

    def directory_entry(self, path: str, kind: str, text: str, ref: str) -> dict[str, Any]:
        sha = self.state.blob_sha(text)
        links = self._content_links(path, sha, kind, ref)
        return {
            "type": kind,
            "size": 0 if kind == "dir" else len(text.encode()),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": sha,
            **links,
            "_links": {"self": links["url"], "git": links["git_url"], "html": links["html_url"]},
        }

    def status(self, record: StatusRecord) -> dict[str, Any]:
        creator = self.user(record.login)
        return {
            "url": f"{self.api_repo}/statuses/{record.sha}",
            "avatar_url": creator["avatar_url"],
            "id": record.id,
            "node_id": _node_id("StatusContext", record.id),
            "state": record.state,
            "description": record.description,
            "target_url": record.target_url,
            "context": record.context,
            "created_at": record.created_at,
            "updated_at": record.created_at,
            "creator": creator,
        }

    def check_run(self, record: CheckRunRecord) -> dict[str, Any]:
        body = self._example("check-run")
        body.update(
            id=record.id,
            node_id=_node_id("CheckRun", record.id),
            name=record.name,
            head_sha=record.head_sha,
            status=record.status,
            conclusion=record.conclusion,
            details_url=record.details_url,
            external_id=record.external_id,
            started_at=record.started_at,
            completed_at=record.completed_at,
            url=f"{self.api_repo}/check-runs/{record.id}",
            html_url=f"{self.html_repo}/runs/{record.id}",
            pull_requests=[],
        )
        body["output"].update(
            {k: record.output.get(k) for k in ("title", "summary", "text")},
            annotations_count=0,
            annotations_url=f"{self.api_repo}/check-runs/{record.id}/annotations",
        )
        return body

    # -- artifacts ------------------------------------------------------------------------------------------

    def artifact_blob_url(self, record: ArtifactRecord) -> str:
        # Where GitHub's 302 points: blob storage outside the REST API (see BLOB_PREFIX in server.py).
        return f"{self.base_url}/_blobs/artifacts/{record.id}.zip?sig=emulated"

    def artifact(self, record: ArtifactRecord) -> dict[str, Any]:
        body = self._example("artifact-paginated")["artifacts"][0]
        run = self.state.run(record.run_id)
        api = f"{self.api_repo}/actions/artifacts/{record.id}"
        body.update(
            id=record.id,
            node_id=_node_id("Artifact", record.id),
            name=record.name,
            size_in_bytes=len(record.archive),
            url=api,
            archive_download_url=f"{api}/zip",
            expired=record.expired,
            created_at=record.created_at,
            updated_at=record.created_at,
            expires_at="2026-12-31T00:00:00Z",
            digest=None,
        )
        body["workflow_run"].update(id=run.id, head_sha=run.head_sha, head_branch=run.head_branch)
        return body
