"""``serve()``: the observer's web page and JSON, read-only, on loopback by default.

The HTTP server runs on threads of its own (never a scheduler's) and answers from the
newest snapshot the sampler took: a page left open, or many of them, costs the node one
sample per interval, not one per request.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ._meter import TurnMeter
from ._page import PAGE
from ._source import Observer

logger = logging.getLogger("otpmem.observe")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._answer(HTTPStatus.OK, "text/html; charset=utf-8", PAGE.encode())
        elif path == "/api/snapshot":
            body = json.dumps(self.server.observer.latest(), default=str).encode()
            self._answer(HTTPStatus.OK, "application/json", body)
        elif path == "/metrics":
            exposition = self.server.metrics()
            if exposition is None:
                missing = b"prometheus_client is not installed"
                self._answer(HTTPStatus.NOT_FOUND, "text/plain", missing)
            else:
                content_type, body = exposition
                self._answer(HTTPStatus.OK, content_type, body)
        else:
            self._answer(HTTPStatus.NOT_FOUND, "text/plain", b"not found")

    def _refuse(self) -> None:
        self._answer(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", b"the observer is read-only")

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _answer(self, status: HTTPStatus, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if status == HTTPStatus.METHOD_NOT_ALLOWED:
            self.send_header("Allow", "GET")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("observer http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], observer: Observer) -> None:
        super().__init__(address, _Handler)
        self.observer = observer
        self._registry: Any = None

    def metrics(self) -> tuple[str, bytes] | None:
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        except ImportError:
            return None
        if self._registry is None:
            from .prometheus import registry_for

            self._registry = registry_for(self.observer)
        return CONTENT_TYPE_LATEST, generate_latest(self._registry)


class ObserverServer:
    """A running observer page: ``url``, ``port``, ``observer``; ``stop()`` ends it all."""

    def __init__(self, server: _Server, observer: Observer, owns_observer: bool) -> None:
        self._server = server
        self.observer = observer
        self._owns_observer = owns_observer
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="otpmem-observe-http"
        )
        self._thread.daemon = True
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on (the one picked when serve was given 0)."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The page's address."""
        host = str(self._server.server_address[0])
        return f"http://{host}:{self.port}/"

    def stop(self) -> None:
        """Stop serving, and the sampler if ``serve`` started it."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)
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
    observer: Observer | None = None,
    meter: TurnMeter | None = None,
    interval: float = 0.5,
) -> ObserverServer:
    """Serve the observer page of this node on ``host:port`` (0: a free port), read-only.

    Bound to loopback unless ``host`` says otherwise: the page shows names and counts of
    the node's conversations. Without ``observer``, one over every tree of the node is
    started (sampling every ``interval`` s) and stopped with the server.
    """
    owns = observer is None
    if observer is None:
        observer = Observer(meter=meter)
    observer.start(interval)
    try:
        server = _Server((host, port), observer)
    except OSError:
        if owns:
            observer.close()
        raise
    return ObserverServer(server, observer, owns)
