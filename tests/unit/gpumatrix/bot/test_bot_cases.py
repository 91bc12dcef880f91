"""One table of comments through parse -> authorize -> resolve -> plan -> render, with small fakes.

Every row names what a person would see: the action, the runner groups, the refusals, and fragments of
the comment the bot would post.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from gpumatrix_trees import MATRIX_YAML, registered

from gpumatrix import register
from gpumatrix.bot.decide import Decision, plan_comment
from gpumatrix.bot.event import CommentEvent
from gpumatrix.bot.facts import Head, Unavailable
from gpumatrix.bot.model import GroupStatus, StatusComment
from gpumatrix.bot.state import parse_status_comment
from gpumatrix.config import Matrix, parse_matrix
from gpumatrix.registry.discovery import build_registry

register(on=("cpu",), est_time=20)

BOT = "bot: {permission: PERMISSION, allow_edits: EDITS}\n"
MATRIX = parse_matrix(MATRIX_YAML + BOT.replace("PERMISSION", "write").replace("EDITS", "false"))
MATRIX_EDITS = parse_matrix(MATRIX_YAML + BOT.replace("PERMISSION", "write").replace("EDITS", "true"))
MATRIX_MAINTAIN = parse_matrix(MATRIX_YAML + BOT.replace("PERMISSION", "maintain").replace("EDITS", "false"))

SOURCES = {
    "tests/kernels/test_quantize.py": registered(("h100", "b200", "gb300", "5090")),
    "tests/kernels/test_gemm.py": registered(("h100",), gpus=2),
    "tests/e2e/test_model.py": registered(("b200", "gb300"), gpus=4),
    "tests/unit/gpumatrix/registry/test_config.py": registered(("cpu",)),
    "tests/e2e/test_config.py": registered(("cpu",)),
    "tests/unit/test_broken.py": "from gpumatrix import register\nregister(on=CLASSES, est_time=1)\n",
}
REGISTRY = build_registry(SOURCES, MATRIX)
HEAD_SHA = "0123456789abcdef0123456789abcdef01234567"
Q = "tests/kernels/test_quantize.py"
PREVIOUS = StatusComment(
    source_comment_id=11,
    command="/rerun-test test_quantize.py test_gemm.py",
    author="alice",
    pr=7,
    sha="f" * 40,
    groups=(
        GroupStatus("1-gpu-5090", (Q,), "passed", 1, "https://x/runs/1"),
        GroupStatus("1-gpu-h100", (Q,), "failed", 2, "https://x/runs/2"),
        GroupStatus(
            "2-gpu-h100", ("tests/kernels/test_gemm.py",), "error", error="HTTP 422: Unexpected inputs"
        ),
        GroupStatus("4-gpu-b200", (Q, "tests/kernels/test_gone.py"), "cancelled", 4, "https://x/runs/4"),
        GroupStatus("4-gpu-gb300", (Q,), "running", 5, "https://x/runs/5"),
    ),
)
ALL_PASSED = PREVIOUS.with_groups([replace(g, state="passed") for g in PREVIOUS.groups])


@dataclass
class FakeFacts:
    """Answers like GitHub would, and counts what it was asked."""

    levels: dict[str, str | None] = field(
        default_factory=lambda: {
            "alice": "write",
            "mia": "maintain",
            "root": "admin",
            "rita": "read",
            "tom": "triage",
            "ghost": None,
        }
    )
    previous: StatusComment | None = PREVIOUS
    head_error: str | None = None
    asked: list[str] = field(default_factory=list)

    def permission(self, login: str) -> str | None:
        self.asked.append("permission")
        return self.levels.get(login, "none")

    def head(self) -> Head:
        self.asked.append("head")
        if self.head_error:
            raise Unavailable(self.head_error)
        return Head(HEAD_SHA, REGISTRY)

    def latest_status(self) -> StatusComment | None:
        self.asked.append("latest_status")
        return self.previous


@dataclass(frozen=True)
class Case:
    id: str
    body: str
    action: str
    runners: dict[str, list[str]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # fragments, one per error in order
    shows: tuple[str, ...] = ()  # fragments the posted comment holds
    author: str = "alice"
    author_type: str = "User"
    event_action: str = "created"
    is_pr: bool = True
    matrix: Matrix = MATRIX
    facts: FakeFacts | None = None


GPU_Q = {"1-gpu-5090": [Q], "1-gpu-h100": [Q], "4-gpu-b200": [Q], "4-gpu-gb300": [Q]}

CASES = [
    # -- who and where --------------------------------------------------------------------------------
    Case(
        "Comment by a bot.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("Comment by a bot.",),
        author="ci-helper",
        author_type="Bot",
    ),
    Case(
        "Comment by an app account.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("Comment by a bot.",),
        author="renovate[bot]",
    ),
    Case(
        "Comment by gpumatrix itself.",
        "<!-- gpumatrix:source=3 -->\n/rerun-test test_quantize.py",
        "ignore",
        errors=("gpumatrix itself",),
    ),
    Case(
        "Comment on an issue.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("not a pull request",),
        is_pr=False,
    ),
    Case(
        "Edited comment, edits off.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("edited",),
        event_action="edited",
    ),
    Case(
        "Edited comment, edits on.",
        "/rerun-test test_quantize.py",
        "dispatch",
        GPU_Q,
        event_action="edited",
        matrix=MATRIX_EDITS,
    ),
    Case(
        "Deleted comment.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("deleted",),
        event_action="deleted",
    ),
    Case(
        "Read permission is not enough.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("@rita has read permission; /rerun-test needs write",),
        author="rita",
    ),
    Case(
        "Triage is not enough.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("has triage permission",),
        author="tom",
    ),
    Case(
        "Unknown user has none.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("has none permission",),
        author="stranger",
    ),
    Case(
        "Failed lookup fails closed.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("could not be read; treated as none",),
        author="ghost",
    ),
    Case("Maintainer may.", "/rerun-test test_quantize.py", "dispatch", GPU_Q, author="mia"),
    Case("Admin may.", "/rerun-test test_quantize.py", "dispatch", GPU_Q, author="root"),
    Case(
        "Write is below a maintain requirement.",
        "/rerun-test test_quantize.py",
        "ignore",
        errors=("needs maintain",),
        matrix=MATRIX_MAINTAIN,
    ),
    Case(
        "Unauthorized usage error stays silent.",
        "/rerun-test --bogus",
        "ignore",
        errors=("has read",),
        author="rita",
    ),
    # -- where the command is ------------------------------------------------------------------------
    Case("No command.", "Looks good to me.", "ignore", errors=("No /rerun-test",)),
    Case(
        "Command in a quote.", "> /rerun-test test_quantize.py\nagreed", "ignore", errors=("No /rerun-test",)
    ),
    Case(
        "Command in a fence.", "```\n/rerun-test test_quantize.py\n```", "ignore", errors=("No /rerun-test",)
    ),
    Case(
        "Command in inline code.", "try `/rerun-test test_quantize.py`", "ignore", errors=("No /rerun-test",)
    ),
    Case("Invisible characters stripped.", "/rerun\u200b-test test_\u2060quantize.py", "dispatch", GPU_Q),
    Case(
        "Quoted old command, new one below.",
        "> /rerun-test test_gemm.py\n\n/rerun-test test_model.py",
        "dispatch",
        {"4-gpu-b200": ["tests/e2e/test_model.py"], "4-gpu-gb300": ["tests/e2e/test_model.py"]},
    ),
    # -- specs ----------------------------------------------------------------------------------------
    Case(
        "Bare name fans out to every class.",
        "/rerun-test test_quantize.py",
        "dispatch",
        GPU_Q,
        shows=("🚀 1-gpu-h100 (1 test): ⏳", "pytest tests/kernels/test_quantize.py", f"at `{HEAD_SHA}`"),
    ),
    Case(
        "Name without .py.",
        "/rerun-test test_gemm",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Repository path.",
        "/rerun-test tests/e2e/test_model.py",
        "dispatch",
        {"4-gpu-b200": ["tests/e2e/test_model.py"], "4-gpu-gb300": ["tests/e2e/test_model.py"]},
    ),
    Case(
        "Leading ./ is fine.",
        "/rerun-test ./tests/kernels/test_gemm.py",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Node id with parameters.",
        "/rerun-test test_gemm.py::test_mm[bf16-128]",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py::test_mm[bf16-128]"]},
        shows=("pytest 'tests/kernels/test_gemm.py::test_mm[bf16-128]'",),
    ),
    Case(
        "Class node id.",
        "/rerun-test test_gemm.py::TestMM::test_small",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py::TestMM::test_small"]},
    ),
    Case(
        "Duplicates collapse.",
        "/rerun-test test_gemm.py tests/kernels/test_gemm.py test_gemm",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Whole file absorbs its node.",
        "/rerun-test test_gemm.py::test_mm test_gemm.py",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Two nodes of one file.",
        "/rerun-test test_gemm.py::test_a test_gemm.py::test_b",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py::test_a", "tests/kernels/test_gemm.py::test_b"]},
        shows=("(2 tests)",),
    ),
    Case(
        "Unknown name with close matches.",
        "/rerun-test test_quantise.py",
        "refuse",
        errors=("not a registered test file; close matches: tests/kernels/test_quantize.py",),
        shows=("⛔ `test_quantise.py`: is not a registered test file",),
    ),
    Case(
        "Unknown name, nothing close.", "/rerun-test test_zzz.py", "refuse", errors=("`/rerun-test ?` lists",)
    ),
    Case(
        "Ambiguous bare name.",
        "/rerun-test test_config.py",
        "refuse",
        errors=(
            "matches 2 registered files: tests/e2e/test_config.py, tests/unit/gpumatrix/registry/test_config.py; give the path",
        ),
    ),
    Case(
        "Broken registration says why.",
        "/rerun-test test_broken.py",
        "refuse",
        errors=("is not in the registry: register(on=...) must be a literal",),
    ),
    Case("Unregistered path.", "/rerun-test tests/unit/test_nope.py", "refuse", errors=("not a registered",)),
    Case("Path traversal.", "/rerun-test ../../etc/passwd", "refuse", errors=("no `..`",)),
    Case(
        "Traversal inside a path.",
        "/rerun-test tests/../tests/kernels/test_gemm.py",
        "refuse",
        errors=("no `..`",),
    ),
    Case("Absolute path.", "/rerun-test /etc/passwd", "refuse", errors=("absolute paths are not allowed",)),
    Case(
        "Command substitution.",
        "/rerun-test test_gemm.py$(curl${IFS}evil)",
        "refuse",
        errors=("contains '$' '(' ')' '{' '}'",),
        shows=("⛔ `test_gemm.py$(curl${IFS}evil)`",),
    ),
    Case("Semicolon and pipe.", "/rerun-test test_gemm.py;rm|sh", "refuse", errors=("contains ';' '|'",)),
    Case(
        "Backticks.",
        "/rerun-test test_gemm.py`id`",
        "refuse",
        errors=("contains '`'",),
        shows=("⛔ `test_gemm.py'id'`",),
    ),
    Case("Redirection and ampersand.", "/rerun-test a.py>x&", "refuse", errors=("contains '&' '>'",)),
    Case(
        "Quotes and backslash.",
        '/rerun-test "a.py" b\\c.py',
        "refuse",
        errors=("contains '\"'", "contains '\\\\'"),
    ),
    Case(
        "Shell metacharacter in a node id.",
        "/rerun-test test_gemm.py::test_a;id",
        "refuse",
        errors=("contains ';'",),
    ),
    Case(
        "Node id that is not a name.",
        "/rerun-test test_gemm.py::1abc",
        "refuse",
        errors=("must be a test name",),
    ),
    Case(
        "Mention in a spec is not a mention.",
        "/rerun-test @everyone",
        "refuse",
        errors=("contains '@'",),
        shows=("⛔ `@everyone`",),
    ),
    Case(
        "Refusals do not stop valid specs.",
        "/rerun-test test_gemm.py ../x.py test_zzz.py",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
        errors=("no `..`", "not a registered test file"),
        shows=("🚀 2-gpu-h100 (1 test)", "⛔ `../x.py`", "⛔ `test_zzz.py`"),
    ),
    Case(
        "Too many specs.",
        "/rerun-test " + " ".join(["test_gemm.py"] * 51),
        "refuse",
        errors=("too many specs: 51",),
    ),
    Case("Unknown option.", "/rerun-test test_gemm.py --all", "refuse", errors=("unknown option '--all'",)),
    # -- --runner and --sha ---------------------------------------------------------------------------
    Case(
        "Runner narrows.", "/rerun-test test_quantize.py --runner 4-gpu-b200", "dispatch", {"4-gpu-b200": [Q]}
    ),
    Case(
        "Two runners narrow.",
        "/rerun-test test_quantize.py --runner 4-gpu-gb300 --runner 1-gpu-h100",
        "dispatch",
        {"1-gpu-h100": [Q], "4-gpu-gb300": [Q]},
    ),
    Case(
        "Runner the file is not on.",
        "/rerun-test test_quantize.py test_gemm.py --runner 2-gpu-h100",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
        errors=("is registered for 1-gpu-h100, 4-gpu-b200, 4-gpu-gb300, 1-gpu-5090; --runner selects none",),
    ),
    Case(
        "Unknown runner.",
        "/rerun-test test_quantize.py --runner 8-gpu-h100",
        "refuse",
        errors=("--runner 8-gpu-h100",),
    ),
    Case(
        "Matching short SHA.",
        f"/rerun-test test_gemm.py --sha {HEAD_SHA[:7]}",
        "dispatch",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Stale SHA refuses the command.",
        "/rerun-test test_gemm.py --sha deadbee",
        "refuse",
        errors=("--sha deadbee is not the PR head (0123456789ab)",),
        shows=("⛔ `/rerun-test test_gemm.py --sha deadbee`: --sha deadbee is not the PR head",),
    ),
    Case(
        "Head unreadable.",
        "/rerun-test test_gemm.py",
        "refuse",
        errors=("the PR head moved",),
        facts=FakeFacts(head_error="the PR head moved while planning"),
    ),
    # -- list and rerun-failed ------------------------------------------------------------------------
    Case(
        "List.",
        "/rerun-test ?",
        "list",
        {
            "cpu": ["tests/e2e/test_config.py", "tests/unit/gpumatrix/registry/test_config.py"],
            "1-gpu-5090": [Q],
            "1-gpu-h100": [Q],
            "2-gpu-h100": ["tests/kernels/test_gemm.py"],
            "4-gpu-b200": ["tests/e2e/test_model.py", Q],
            "4-gpu-gb300": ["tests/e2e/test_model.py", Q],
        },
        shows=("<summary>4-gpu-b200: 2 files</summary>",),
    ),
    Case(
        "List one runner.",
        "/rerun-test ? --runner 2-gpu-h100",
        "list",
        {"2-gpu-h100": ["tests/kernels/test_gemm.py"]},
    ),
    Case(
        "Rerun failed, cancelled and undispatched.",
        "/rerun-failed",
        "rerun-failed",
        {"1-gpu-h100": [Q], "2-gpu-h100": ["tests/kernels/test_gemm.py"], "4-gpu-b200": [Q]},
        errors=("tests/kernels/test_gone.py",),
        shows=("🚀 4-gpu-b200 (1 test): ⏳",),
    ),
    Case(
        "Rerun failed on one runner.",
        "/rerun-failed --runner 1-gpu-h100",
        "rerun-failed",
        {"1-gpu-h100": [Q]},
    ),
    Case(
        "Rerun failed, nothing failed.",
        "/rerun-failed",
        "refuse",
        errors=("nothing failed",),
        facts=FakeFacts(previous=ALL_PASSED),
    ),
    Case(
        "Rerun failed, no status comment.",
        "/rerun-failed",
        "refuse",
        errors=("no earlier status comment",),
        facts=FakeFacts(previous=None),
    ),
]


def _event(case: Case) -> CommentEvent:
    return CommentEvent(
        action=case.event_action,
        comment_id=42,
        body=case.body,
        author=case.author,
        author_type=case.author_type,
        issue_number=7,
        is_pull_request=case.is_pr,
        repository="acme/mxfuse",
    )


def _decide(case: Case) -> tuple[Decision, FakeFacts]:
    facts = case.facts or FakeFacts()
    return plan_comment(_event(case), matrix=case.matrix, facts=facts), facts


def test_the_table_is_large() -> None:
    assert len(CASES) >= 40
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_comment(case: Case) -> None:
    decision, _ = _decide(case)
    document = decision.to_json()
    assert document["action"] == case.action
    assert {r["label"]: r["tests"] for r in document["runners"]} == case.runners
    assert len(document["errors"]) == len(case.errors), document["errors"]
    for error, fragment in zip(document["errors"], case.errors, strict=True):
        assert fragment in error["message"] or fragment in error["spec"], error
    for fragment in case.shows:
        assert decision.comment is not None and fragment in decision.comment


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.action in ("dispatch", "rerun-failed", "refuse")], ids=lambda c: c.id
)
def test_status_comment_round_trips(case: Case) -> None:
    """What is posted can be read back by `sync`: same groups, refusals and pinned SHA."""
    decision, _ = _decide(case)
    assert decision.comment is not None and decision.status is not None
    back = parse_status_comment(decision.comment)
    assert back == decision.status
    assert back.source_comment_id == 42


@pytest.mark.parametrize("case", [c for c in CASES if c.action == "ignore"], ids=lambda c: c.id)
def test_ignored_comments_post_nothing_and_read_no_head(case: Case) -> None:
    decision, facts = _decide(case)
    assert decision.comment is None
    assert "head" not in facts.asked  # no PR read, no tree read for a comment that is not acted on


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        ("Comment without a command.", []),
        ("/rerun-test test_gemm.py", ["permission", "head"]),
        ("/rerun-test ?", ["permission", "head"]),
        ("/rerun-failed", ["permission", "head", "latest_status"]),
    ],
)
def test_facts_are_asked_only_when_needed(body: str, asked: list[str]) -> None:
    facts = FakeFacts()
    plan_comment(_event(Case("x", body, "dispatch")), matrix=MATRIX, facts=facts)
    assert facts.asked == asked
