"""A small HTTP/1.1 server on one asyncio loop: idle connections cost no thread.

``ThreadingHTTPServer`` gives every connection a thread for as long as it stays open, so a
page that keeps its connection alive (every browser does), or 200 sockets opened and left
idle, hold 200 threads. Here connections are coroutines on one loop thread; a request's
answer is computed on a small bounded pool (it may wait on the node: a system request to a
process, a store read), so a slow answer delays others but never multiplies threads. An
idle connection is closed after ``idle_timeout`` s, a request head must fit in
``HEAD_LIMIT`` bytes and a body in ``BODY_LIMIT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger("otpmem.observe")

HEAD_LIMIT = 16 * 1024
BODY_LIMIT = 64 * 1024
IDLE_TIMEOUT = 30.0
WORKERS = 4
MAX_CONNECTIONS = 1024


@dataclass
class Request:
    """One request: method, path (decoded), query, lower-case headers, body."""

    method: str
    path: str
    query: dict[str, list[str]]
    version: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Response:
    """One answer: status, headers (beyond the framing ones), body."""

    status: HTTPStatus
    content_type: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Response]


def _parse_head(head: bytes) -> Request | None:
    try:
        text = head.decode("latin-1")
        lines = text.split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/1.") or not method.isalpha():
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return None
        key = name.lower()
        if key == "host" and key in headers:
            return None  # two Host headers: which one was checked is ambiguous
        headers[key] = value.strip()
    parts = urlsplit(target)
    return Request(method, unquote(parts.path), parse_qs(parts.query), version, headers)


def _encode(response: Response, keep_alive: bool) -> bytes:
    status = response.status
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    lines += [f"{name}: {value}" for name, value in response.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body


def _plain(status: HTTPStatus, text: str) -> Response:
    return Response(status, "text/plain; charset=utf-8", text.encode())


class HttpServer:
    """Serve ``handler`` on ``host:port`` (0: a free port) until ``stop()``."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        *,
        idle_timeout: float = IDLE_TIMEOUT,
        workers: int = WORKERS,
        wrap: Callable[[Response], Response] | None = None,
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.create_server((host, port), family=family, backlog=512)
        self.address: tuple[str, int] = self._socket.getsockname()[:2]
        self._handler = handler
        self._wrap = wrap
        self._idle_timeout = idle_timeout
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="otpmem-observe-http")
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otpmem-observe-http", daemon=True)
        self._thread.start()
        self._ready.wait(10.0)

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._writers)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=self._socket, limit=HEAD_LIMIT)
        )
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._writers.add(writer)
        try:
            while await self._one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._idle_timeout)
        except asyncio.LimitOverrunError:
            await self._send(
                writer, _plain(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too large")
            )
            return False
        except (asyncio.IncompleteReadError, TimeoutError):
            return False  # closed, or idle too long
        request = _parse_head(head)
        if request is None:
            await self._send(writer, _plain(HTTPStatus.BAD_REQUEST, "bad request"))
            return False
        if "transfer-encoding" in request.headers:
            await self._send(writer, _plain(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length"))
            return False
        length_text = request.headers.get("content-length", "0")
        if not length_text.isdigit() or int(length_text) > BODY_LIMIT:
            await self._send(writer, _plain(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large"))
            return False
        if int(length_text):
            request.body = await asyncio.wait_for(
                reader.readexactly(int(length_text)), self._idle_timeout
            )
        response = await self._loop.run_in_executor(self._pool, self._answer, request)
        connection = request.headers.get("connection", "").lower()
        keep_alive = (
            "close" not in connection
            if request.version == "HTTP/1.1"
            else "keep-alive" in connection
        )
        await self._send(writer, response, keep_alive)
        return keep_alive

    def _answer(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception:  # the page must outlive a failing answer
            logger.exception("observer http: answering %s %s failed", request.method, request.path)
            return _plain(HTTPStatus.INTERNAL_SERVER_ERROR, "the observer failed to answer")

    async def _send(
        self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool = False
    ) -> None:
        if self._wrap is not None:
            response = self._wrap(response)
        writer.write(_encode(response, keep_alive))
        await writer.drain()

    def stop(self) -> None:
        """Close the listening socket and every connection; wait for the loop to end."""

        async def close() -> None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop)
            self._thread.join(5.0)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._socket.close()
