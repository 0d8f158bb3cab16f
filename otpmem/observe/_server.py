"""``serve()``: the observer's web page and JSON, on loopback by default.

The page answers from the newest snapshot its source took (a page left open, or many,
cost the node one sample per interval, not one per request), over ``_http``'s one loop
thread: an idle connection holds no thread. What a page on another site could do to it
is refused: a request whose ``Host`` is not this machine's loopback names or the bound
address gets 403 (a DNS-rebinding page reaches the port under its own name), every answer
carries a ``Content-Security-Policy`` that lets in only the page's own script and style,
``X-Content-Type-Options: nosniff`` and ``X-Frame-Options: DENY``. The one request that
is not a read, switching a process's trace (``POST /api/trace/PID``), also needs a JSON
body and, if the browser sends an ``Origin``, this page's own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from collections.abc import Iterable
from http import HTTPStatus
from typing import Any, Protocol

from ._http import HttpServer, Request, Response
from ._meter import TurnMeter
from ._page import FAVICON, PAGE
from ._source import Observer

logger = logging.getLogger("otpmem.observe")

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


class Source(Protocol):
    """What a page shows: a local ``Observer`` or an attached one (``attach``)."""

    def start(self, interval: float = 0.5) -> Any:
        """Begin sampling."""

    def latest(self) -> dict[str, Any]:
        """The newest snapshot."""

    def process(self, pid: int) -> dict[str, Any] | None:
        """One process's status, state and trace, or None if there is no such process."""

    def trace(self, pid: int, on: bool) -> bool:
        """Switch a process's trace; False if there is no such process."""

    def close(self) -> None:
        """Stop sampling."""


def _hash_of(tag: str) -> str:
    body = PAGE.split(f"<{tag}>", 1)[1].split(f"</{tag}>", 1)[0]
    digest = hashlib.sha256(body.encode()).digest()
    return f"'sha256-{base64.b64encode(digest).decode()}'"


CSP = (
    f"default-src 'none'; script-src {_hash_of('script')}; style-src {_hash_of('style')}; "
    "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]
_PROCESS = re.compile(r"^/api/process/(\d{1,18})$")
_TRACE = re.compile(r"^/api/trace/(\d{1,18})$")


def host_name(host: str) -> str:
    """The name part of a ``Host`` header, lower case, without its port."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host if end < 0 else host[: end + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _json(value: Any, status: HTTPStatus = HTTPStatus.OK) -> Response:
    return Response(status, "application/json", json.dumps(value, default=str).encode())


def _text(status: HTTPStatus, text: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", text.encode())


class _Site:
    """The routes, behind the Host check."""

    def __init__(self, source: Source, allowed: set[str]) -> None:
        self.source = source
        self.allowed = allowed
        self._registry: Any = None

    def answer(self, request: Request) -> Response:
        host = request.headers.get("host")
        if host is None or host_name(host) not in self.allowed:
            return _text(HTTPStatus.FORBIDDEN, "this page answers its own address only")
        path = request.path
        if request.method == "POST" and _TRACE.match(path):
            return self._switch_trace(request, int(_TRACE.match(path).group(1)))  # type: ignore[union-attr]
        if request.method != "GET":
            response = _text(HTTPStatus.METHOD_NOT_ALLOWED, "the observer is read-only")
            response.headers.append(("Allow", "GET"))
            return response
        if path in ("/", "/index.html"):
            return Response(HTTPStatus.OK, "text/html; charset=utf-8", PAGE.encode())
        if path == "/favicon.ico":  # asked for by every browser: a 404 in its console
            return Response(HTTPStatus.OK, "image/svg+xml", FAVICON)
        if path == "/api/snapshot":
            return _json(self.source.latest())
        found = _PROCESS.match(path)
        if found:
            row = self.source.process(int(found.group(1)))
            if row is None:
                return _json({"error": "no such process"}, HTTPStatus.NOT_FOUND)
            return _json(row)
        if path == "/metrics":
            return self._metrics()
        return _text(HTTPStatus.NOT_FOUND, "not found")

    def _switch_trace(self, request: Request, pid: int) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and host_name(origin.split("://", 1)[-1]) not in self.allowed:
            return _text(HTTPStatus.FORBIDDEN, "a trace is switched from this page only")
        if not request.headers.get("content-type", "").startswith("application/json"):
            return _text(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, 'send {"on": true|false} as JSON')
        try:
            on = json.loads(request.body)["on"]
        except (ValueError, KeyError, TypeError):
            on = None
        if not isinstance(on, bool):
            return _text(HTTPStatus.BAD_REQUEST, 'send {"on": true|false} as JSON')
        if not isinstance(self.source, Observer):
            return _text(HTTPStatus.CONFLICT, "an attached observer is read-only: no trace")
        if not self.source.trace(pid, on):
            return _json({"error": "no such process"}, HTTPStatus.NOT_FOUND)
        return _json({"pid": pid, "traced": on})

    def _metrics(self) -> Response:
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        except ImportError:
            return _text(HTTPStatus.NOT_FOUND, "prometheus_client is not installed")
        if not isinstance(self.source, Observer):
            return _text(HTTPStatus.NOT_FOUND, "metrics are the observed node's own")
        if self._registry is None:
            from .prometheus import registry_for

            self._registry = registry_for(self.source)
        return Response(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self._registry))


def _secured(response: Response) -> Response:
    response.headers.extend(SECURITY_HEADERS)
    return response


class ObserverServer:
    """A running observer page: ``url``, ``port``, ``observer``; ``stop()`` ends it all."""

    def __init__(self, http: HttpServer, observer: Any, owns_observer: bool) -> None:
        self._http = http
        self.observer = observer
        self._owns_observer = owns_observer

    @property
    def port(self) -> int:
        """The port it listens on (the one picked when serve was given 0)."""
        return int(self._http.address[1])

    @property
    def host(self) -> str:
        """The address it is bound to."""
        return str(self._http.address[0])

    @property
    def url(self) -> str:
        """The page's address."""
        host = self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    @property
    def connections(self) -> int:
        """Connections open now."""
        return self._http.connections

    def stop(self) -> None:
        """Stop serving, and the sampler if ``serve`` started it."""
        self._http.stop()
        if self._owns_observer:
            self.observer.close()

    def __enter__(self) -> ObserverServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(
    port: int = 0,
    host: str = "127.0.0.1",
    *,
    observer: Source | None = None,
    meter: TurnMeter | None = None,
    interval: float = 0.5,
    allowed_hosts: Iterable[str] = (),
) -> ObserverServer:
    """Serve the observer page of this node on ``host:port`` (0: a free port).

    Bound to loopback unless ``host`` says otherwise: the page shows names and counts of
    the node's conversations. Without ``observer``, one over every tree of the node is
    started (sampling every ``interval`` s) and stopped with the server; ``observer`` may
    also be an attached one (``attach``). Requests must name the page by a loopback name,
    the bound address or one of ``allowed_hosts`` in their ``Host`` header.
    """
    owns = observer is None
    source: Source = Observer(meter=meter) if observer is None else observer
    allowed = {*LOOPBACK_NAMES, host_name(host), *(host_name(h) for h in allowed_hosts)}
    if ":" in host:
        allowed.add(f"[{host.lower()}]")
    source.start(interval)
    site = _Site(source, allowed)
    try:
        http = HttpServer(host, port, site.answer, wrap=_secured)
    except OSError:
        if owns:
            source.close()
        raise
    return ObserverServer(http, source, owns)
