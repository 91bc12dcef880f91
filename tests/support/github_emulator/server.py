"""The HTTP side of the emulator: one request's path from socket to answer, with its contract checks.

Order per request: authentication (401), API version (400), route (404), repository (404), request schema
(400/422), injected fault, handler, injected after-the-fact fault, response schema. Every departure from the
contract is a `Violation`; every request is a `RecordedRequest`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .faults import FaultPlan
from .handlers import HANDLERS, Call, Reply
from .shapes import Shapes
from .spec import RestDescription, RouteMatch
from .state import ApiError, RepoState

__all__ = [
    "BLOB_PREFIX",
    "SUPPORTED_API_VERSIONS",
    "RecordedRequest",
    "RequestPipeline",
    "Violation",
    "serve",
]

SUPPORTED_API_VERSIONS = ("2022-11-28", "2026-03-10")
_DEFAULT_API_VERSION = "2022-11-28"
_DOCS = "https://docs.github.com/rest"
# Artifact archives live in blob storage, which the REST API only redirects to (signed URL, no token needed):
# paths under this prefix are served as raw bytes, outside the REST contract.
BLOB_PREFIX = "/_blobs/artifacts/"


@dataclass(frozen=True)
class Violation:
    """A request (or, in strict mode, a response) that breaks GitHub's REST contract."""

    kind: str  # auth | api-version | route | repository | request | dispatch | response
    method: str
    path: str
    operation_id: str | None
    detail: str

    def __str__(self) -> str:
        return (
            f"[{self.kind}] {self.method} {self.path} ({self.operation_id or 'no operation'}): {self.detail}"
        )


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: Mapping[str, str]
    json: Any
    status: int
    time: float  # time.monotonic() when the request arrived
    operation_id: str | None
    headers: Mapping[str, str]
    response: Any


def _error(status: int, message: str, documentation_url: str = _DOCS) -> Reply:
    return Reply(status, {"message": message, "documentation_url": documentation_url, "status": str(status)})


class RequestPipeline:
    """Turns one HTTP request into an answer against a `RepoState`; thread-safe through `lock`."""

    def __init__(
        self,
        *,
        state: RepoState,
        description: RestDescription,
        token: str,
        lock: threading.RLock,
        strict: bool,
    ) -> None:
        self.state, self.description = state, description
        self.token, self.lock, self.strict = token, lock, strict
        # Bodies carry URLs of the emulator itself, known once it listens: `serve` replaces this.
        self.shapes = Shapes(state, "http://127.0.0.1:0")
        self.faults = FaultPlan()
        self.requests: list[RecordedRequest] = []
        self.violations: list[Violation] = []

    def handle(self, method: str, target: str, headers: Mapping[str, str], raw_body: bytes) -> Reply:
        arrived = time.monotonic()
        split = urlsplit(target)
        path, query = split.path, dict(parse_qsl(split.query, keep_blank_values=True))
        route = self.description.match(method, path)
        if method == "GET" and path.startswith(BLOB_PREFIX):
            reply = self._blob(path)
        else:
            reply = self._answer(method, path, query, headers, raw_body, route)
        try:
            parsed: Any = json.loads(raw_body) if raw_body else None
        except ValueError:
            parsed = raw_body.decode(errors="replace")
        with self.lock:
            self.requests.append(
                RecordedRequest(
                    method=method,
                    path=path,
                    query=query,
                    json=parsed,
                    status=reply.status,
                    time=arrived,
                    operation_id=route.operation.operation_id if route else None,
                    headers=dict(headers),
                    response=reply.body,
                )
            )
        return reply

    def _blob(self, path: str) -> Reply:
        name = path.removeprefix(BLOB_PREFIX).removesuffix(".zip")
        with self.lock:
            record = self.state.artifacts.get(int(name)) if name.isdigit() else None
        if record is None:
            return Reply(404, raw=b"BlobNotFound", headers={"Content-Type": "application/xml"})
        return Reply(200, raw=record.archive, headers={"Content-Type": "application/zip"})

    def _violate(self, kind: str, method: str, path: str, route: RouteMatch | None, detail: str) -> None:
        with self.lock:
            self.violations.append(
                Violation(kind, method, path, route.operation.operation_id if route else None, detail)
            )

    def _answer(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: Mapping[str, str],
        raw_body: bytes,
        route: RouteMatch | None,
    ) -> Reply:
        def refuse(kind: str, reply: Reply, detail: str | None = None) -> Reply:
            self._violate(kind, method, path, route, detail or reply.body["message"])
            return reply

        scheme, _, credential = headers.get("authorization", "").partition(" ")
        if scheme.lower() not in ("bearer", "token") or not credential:
            return refuse("auth", _error(401, "Requires authentication"))
        if credential.strip() != self.token:
            return refuse("auth", _error(401, "Bad credentials"))
        api_version = headers.get("x-github-api-version", _DEFAULT_API_VERSION)
        if api_version not in SUPPORTED_API_VERSIONS:
            return refuse("api-version", _error(400, f"API version {api_version!r} is not supported."))
        if route is None:
            return refuse("route", _error(404, "Not Found"), "no operation of the REST description matches")
        op = route.operation
        params = route.path_params
        if "owner" in params and (params["owner"].lower(), params.get("repo", "").lower()) != (
            self.state.owner.lower(),
            self.state.repo.lower(),
        ):
            return refuse(
                "repository",
                _error(404, "Not Found"),
                f"repository {params['owner']}/{params.get('repo')} is not the emulated one",
            )
        errors = self.description.request_errors(
            route, query=query, body=raw_body, content_type=headers.get("content-type", "")
        )
        if errors:
            if raw_body and any("Failed to deserialize" in e for e in errors):
                return refuse("request", _error(400, "Problems parsing JSON", op.documentation_url))
            detail = "\n".join(errors)
            return refuse(
                "request", _error(422, f"Invalid request.\n\n{detail}", op.documentation_url), detail
            )

        with self.lock:
            fault = self.faults.take(method, path)
        if fault is not None and not fault.after_handler:
            return Reply(fault.status, fault.body(), fault.headers())
        call = Call(
            state=self.state,
            shapes=self.shapes,
            path_params=params,
            query=query,
            body=json.loads(raw_body) if raw_body else None,
            api_version=api_version,
            accept=headers.get("accept", ""),
            request_url=f"{self.shapes.base_url}{path}",
        )
        try:
            with self.lock:
                reply = HANDLERS[op.operation_id](call)
        except ApiError as exc:
            reply = _error(exc.status, exc.message, op.documentation_url)
            if exc.breach:
                self._violate("dispatch", method, path, route, exc.message)
        if fault is not None:
            return Reply(fault.status, fault.body(), fault.headers())
        if self.strict and reply.raw is None:
            for problem in self.description.response_errors(route, status=reply.status, body=reply.body):
                self._violate("response", method, path, route, f"{reply.status} response: {problem}")
        return reply


def _make_handler(pipeline: RequestPipeline) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as GitHub and every client library use
        server_version = "GitHub.com"
        sys_version = ""
        timeout = 10  # an idle keep-alive connection releases its thread instead of pinning it
        # Headers and body leave in two writes; with Nagle's algorithm on, the body then waits for the
        # client's delayed ACK, which measured 44 ms per request on loopback (3 ms with it off).
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw_body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = pipeline.handle(self.command, self.path, headers, raw_body)
            if reply.raw is not None:
                payload = reply.raw
            else:
                payload = b"" if reply.body is None else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            sent = {k.lower() for k in reply.headers}
            if "content-type" not in sent and payload:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("X-GitHub-Media-Type", "github.v3; format=json")
            self.send_header(
                "X-GitHub-Api-Version-Selected", headers.get("x-github-api-version", _DEFAULT_API_VERSION)
            )
            self.send_header("X-RateLimit-Limit", "5000")
            self.send_header("X-RateLimit-Remaining", "4999")
            self.send_header("X-RateLimit-Resource", "core")
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            # The request log is `GitHubEmulator.requests`; stderr stays quiet under pytest.
            return

    return Handler


def serve(pipeline: RequestPipeline) -> tuple[str, Callable[[], None]]:
    """Start serving on 127.0.0.1 on a free port; returns the base URL and a function that stops serving."""
    pipeline.description.warm()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(pipeline))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    base_url = f"http://{host}:{port}"
    pipeline.shapes = Shapes(pipeline.state, base_url)
    # shutdown() waits up to one poll interval; the default 0.5 s made every test's teardown cost 0.5 s.
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="github-emulator", daemon=True
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    return base_url, stop
