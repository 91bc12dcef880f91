"""The GitHub client over real HTTP against the REST emulator: calls, retries, waits, and the token."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from github_emulator import GitHubEmulator, github_emulator  # noqa: F401  (the fixture)

from gpumatrix import register
from gpumatrix.bot.github import GitHubApiError, GitHubClient, MissingEnvironment, RetryPolicy

register(on=("cpu",), est_time=20)

SHA = "ab" * 20
INPUTS = {
    "runner": "cpu",
    "tests": "tests/unit/test_a.py",
    "pr_number": "1",
    "sha": SHA,
    "status_comment_id": "9",
}
BASE = 0.25  # backoff base for these tests; waits are recorded, never slept


@pytest.fixture
def gh(github_emulator: GitHubEmulator) -> GitHubEmulator:  # noqa: F811
    github_emulator.add_pull(1, head_sha=SHA, tree={"tests/unit/test_a.py": "x"})
    github_emulator.set_permission("alice", "maintain")
    github_emulator.add_workflow("gpu-tests.yml", inputs=list(INPUTS))
    return github_emulator


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def client(gh: GitHubEmulator, waits: list[float]) -> Iterator[GitHubClient]:
    with GitHubClient(
        token=gh.token,
        repository=gh.repository,
        base_url=gh.base_url,
        retry=RetryPolicy(backoff_base=BASE, max_wait=60),
        sleep=waits.append,
    ) as c:
        yield c


def test_calls(gh: GitHubEmulator, client: GitHubClient) -> None:
    comment = gh.add_comment(1, "/rerun-test test_a.py", login="alice")
    assert client.permission("alice") == ("write", "maintain")
    assert client.pull_head(1).sha == SHA
    assert client.add_reaction(comment["id"], "eyes") is True
    assert client.add_reaction(comment["id"], "eyes") is False  # 200: this token reacted so already
    posted = client.create_comment(1, "first")
    client.update_comment(posted, "second")
    assert client.get_comment(posted).body == "second"
    assert client.get_comment(posted).author_type == "Bot"
    run = client.dispatch("gpu-tests.yml", ref="main", inputs=INPUTS)
    assert gh.run(run.run_id).inputs == INPUTS
    assert gh.run(run.run_id).ref == "main"
    assert run.html_url.endswith(f"/actions/runs/{run.run_id}")
    gh.set_run_state(run.run_id, "completed", "failure")
    info = client.get_run(run.run_id)
    assert (info.status, info.conclusion) == ("completed", "failure")
    assert client.calls == len(gh.requests) == 10


def test_comments_are_paged(gh: GitHubEmulator, client: GitHubClient) -> None:
    for index in range(150):
        gh.add_comment(1, f"comment {index}")
    bodies = [c.body for c in client.list_comments(1)]
    assert bodies == [f"comment {index}" for index in range(150)]
    assert client.calls == 2


# (id, method, path regex, status, times, retry_after, expected waits, expected failure status or None)
FAULTS = [
    ("500 twice, then success.", "GET", r"/pulls/1$", 500, 2, None, [BASE, 2 * BASE], None),
    ("502 once.", "GET", r"/pulls/1$", 502, 1, None, [BASE], None),
    ("503 beyond the retries.", "GET", r"/pulls/1$", 503, 5, None, [BASE, 2 * BASE, 4 * BASE, 8 * BASE], 503),
    ("Secondary rate limit, 403 with Retry-After.", "GET", r"/pulls/1$", 403, 1, 1, [1.0], None),
    ("Secondary rate limit, 429 with Retry-After.", "GET", r"/pulls/1$", 429, 2, 2, [2.0, 2.0], None),
    ("Retry-After beyond max_wait fails at once.", "GET", r"/pulls/1$", 403, 1, 120, [], 403),
    ("Secondary limit without Retry-After waits a minute.", "GET", r"/pulls/1$", 403, 1, None, [60.0], None),
    ("422 is not retried.", "POST", r"/dispatches$", 422, 1, None, [], 422),
    ("502 on dispatch is retried.", "POST", r"/dispatches$", 502, 1, None, [BASE], None),
]


@pytest.mark.parametrize(
    ("method", "path", "status", "times", "retry_after", "expected_waits", "failure"),
    [row[1:] for row in FAULTS],
    ids=[row[0] for row in FAULTS],
)
def test_retries(
    gh: GitHubEmulator,
    client: GitHubClient,
    waits: list[float],
    method: str,
    path: str,
    status: int,
    times: int,
    retry_after: int | None,
    expected_waits: list[float],
    failure: int | None,
) -> None:
    gh.inject_fault(method, path, status, times=times, retry_after=retry_after)

    def call() -> object:
        if method == "POST":
            return client.dispatch("gpu-tests.yml", ref="main", inputs=INPUTS)
        return client.pull_head(1)

    if failure is None:
        call()
    else:
        with pytest.raises(GitHubApiError) as caught:
            call()
        assert caught.value.status == failure
    assert waits == expected_waits
    assert client.calls == len(expected_waits) + 1


def test_a_failed_dispatch_names_status_and_message(gh: GitHubEmulator, client: GitHubClient) -> None:
    gh.inject_fault(
        "POST", r"/dispatches$", 422, message="Workflow does not have 'workflow_dispatch' trigger"
    )
    with pytest.raises(GitHubApiError) as caught:
        client.dispatch("gpu-tests.yml", ref="main", inputs=INPUTS)
    assert str(caught.value) == (
        "POST /repos/acme/mxfuse/actions/workflows/gpu-tests.yml/dispatches: HTTP 422: "
        "Workflow does not have 'workflow_dispatch' trigger"
    )
    assert gh.runs == []


def test_backoff_is_capped_by_max_wait(gh: GitHubEmulator, waits: list[float]) -> None:
    gh.inject_fault("GET", r"/pulls/1$", 500, times=3)
    with GitHubClient(
        token=gh.token,
        repository=gh.repository,
        base_url=gh.base_url,
        retry=RetryPolicy(backoff_base=2.0, max_wait=3.0),
        sleep=waits.append,
    ) as client:
        client.pull_head(1)
    assert waits == [2.0, 3.0, 3.0]


def test_transport_errors_are_retried_then_reported(waits: list[float]) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = GitHubClient(
        token="ghs_secret_value",
        repository="acme/mxfuse",
        base_url=f"http://127.0.0.1:{port}",
        retry=RetryPolicy(max_retries=2, backoff_base=BASE),
        sleep=waits.append,
    )
    with pytest.raises(GitHubApiError) as caught:
        client.pull_head(1)
    assert caught.value.status is None
    assert waits == [BASE, 2 * BASE]
    assert "ghs_secret_value" not in str(caught.value)


def test_the_token_never_shows(gh: GitHubEmulator, waits: list[float]) -> None:
    secret = "ghs_do_not_print_me"
    client = GitHubClient(token=secret, repository=gh.repository, base_url=gh.base_url, sleep=waits.append)
    with pytest.raises(GitHubApiError) as caught:  # the emulator does not know this token: 401
        client.pull_head(1)
    assert caught.value.status == 401
    assert [v.kind for v in gh.take_violations()] == ["auth"]  # provoked on purpose
    shown = [repr(client), str(client), str(caught.value), repr(caught.value), repr(caught.value.args)]
    assert not [text for text in shown if secret in text]
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


# (id, environment, fragment of the error)
ENVIRONMENTS = [
    ("No token.", {"GITHUB_REPOSITORY": "acme/mxfuse"}, "GITHUB_TOKEN must be set"),
    ("No repository.", {"GITHUB_TOKEN": "ghs_x"}, "GITHUB_REPOSITORY must be set"),
    ("Neither.", {}, "GITHUB_TOKEN and GITHUB_REPOSITORY must be set"),
]


@pytest.mark.parametrize(
    ("environ", "fragment"), [r[1:] for r in ENVIRONMENTS], ids=[r[0] for r in ENVIRONMENTS]
)
def test_environment_is_required(environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(MissingEnvironment, match=fragment) as caught:
        GitHubClient.from_env(environ)
    assert "ghs_x" not in str(caught.value)


def test_from_env_reads_the_api_url() -> None:
    client = GitHubClient.from_env(
        {"GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "o/r", "GITHUB_API_URL": "http://127.0.0.1:9/"}
    )
    assert (client.owner, client.repo, client.base_url) == ("o", "r", "http://127.0.0.1:9")
    assert (
        GitHubClient.from_env({"GITHUB_TOKEN": "t", "GITHUB_REPOSITORY": "o/r"}).base_url
        == "https://api.github.com"
    )


# (id, keyword arguments, fragment of the error)
BAD_ARGUMENTS = [
    ("Empty token.", {"token": "", "repository": "o/r"}, "token must be a non-empty string"),
    ("Repository without owner.", {"token": "t", "repository": "mxfuse"}, "repository must be 'owner/name'"),
    ("Repository with a path.", {"token": "t", "repository": "o/r/x"}, "repository must be 'owner/name'"),
]


@pytest.mark.parametrize(
    ("kwargs", "fragment"), [r[1:] for r in BAD_ARGUMENTS], ids=[r[0] for r in BAD_ARGUMENTS]
)
def test_bad_arguments(kwargs: dict[str, str], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        GitHubClient(**kwargs)


# (id, keyword arguments, fragment of the error)
BAD_POLICIES = [
    ("Negative retries.", {"max_retries": -1}, "max_retries must be an integer >= 0"),
    ("Negative backoff.", {"backoff_base": -0.5}, "backoff_base must be >= 0"),
    ("NaN max wait.", {"max_wait": float("nan")}, "max_wait must be >= 0"),
]


@pytest.mark.parametrize(
    ("kwargs", "fragment"), [r[1:] for r in BAD_POLICIES], ids=[r[0] for r in BAD_POLICIES]
)
def test_bad_retry_policy(kwargs: dict[str, float], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        RetryPolicy(**kwargs)
