"""Injected failures: GitHub answering 5xx, a secondary rate limit, or a 422 the request did not earn."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Fault", "FaultPlan", "SECONDARY_RATE_LIMIT_MESSAGE"]

SECONDARY_RATE_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. If you reach "
    "out to GitHub Support for help, please include the request ID 0000:0000:0000000:0000000:00000000."
)
_DOCS = {
    403: "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
    429: "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
    422: "https://docs.github.com/rest/actions/workflows#create-a-workflow-dispatch-event",
}
_DEFAULT_MESSAGES = {
    403: SECONDARY_RATE_LIMIT_MESSAGE,
    429: SECONDARY_RATE_LIMIT_MESSAGE,
    422: "Unexpected inputs provided",
    500: "Server Error",
    502: "Server Error",
    503: "Service Unavailable",
    504: "We couldn't respond to your request in time. Sorry about that. Please try resubmitting your request "
    "and contact us if the problem persists.",
}


@dataclass
class Fault:
    """Answer the next `times` requests matching `method` and `path_regex` with `status`.

    With `after_handler`, the request takes effect first and only its answer is replaced: the write went
    through but the client saw an error (what a 502 from a proxy in front of GitHub looks like).
    """

    method: str
    path_regex: re.Pattern[str]
    status: int
    times: int
    retry_after: int | None
    message: str
    after_handler: bool
    hits: int = field(default=0)

    def matches(self, method: str, path: str) -> bool:
        return self.hits < self.times and self.method in (method, "*") and bool(self.path_regex.search(path))

    def body(self) -> dict[str, object]:
        return {
            "message": self.message,
            "documentation_url": _DOCS.get(self.status, "https://docs.github.com/rest"),
            "status": str(self.status),
        }

    def headers(self) -> Mapping[str, str]:
        return {} if self.retry_after is None else {"Retry-After": str(self.retry_after)}


class FaultPlan:
    """The faults a test asked for, consumed in the order they were added. Callers hold the emulator's lock."""

    def __init__(self) -> None:
        self._faults: list[Fault] = []

    def add(
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int,
        retry_after: int | None,
        message: str | None,
        after_handler: bool,
    ) -> Fault:
        if not isinstance(method, str) or not method:
            raise TypeError(f"method: expected an HTTP method or '*', got {method!r}")
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise ValueError(f"status: expected an HTTP error status (400-599), got {status!r}")
        if not isinstance(times, int) or times < 1:
            raise ValueError(f"times: expected a positive int, got {times!r}")
        if retry_after is not None and (not isinstance(retry_after, int) or retry_after < 0):
            raise ValueError(f"retry_after: expected seconds as a non-negative int, got {retry_after!r}")
        try:
            pattern = re.compile(path_regex)
        except (re.error, TypeError) as exc:
            raise ValueError(f"path_regex: not a regular expression: {path_regex!r} ({exc})") from None
        fault = Fault(
            method=method.upper(),
            path_regex=pattern,
            status=status,
            times=times,
            retry_after=retry_after,
            message=message if message is not None else _DEFAULT_MESSAGES.get(status, "Error"),
            after_handler=after_handler,
        )
        self._faults.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        """The first armed fault matching the request, counted as used; None when none matches."""
        for fault in self._faults:
            if fault.matches(method, path):
                fault.hits += 1
                return fault
        return None

    def pending(self) -> list[Fault]:
        return [f for f in self._faults if f.hits < f.times]
