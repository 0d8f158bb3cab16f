"""The observer's page over HTTP, with raw sockets: the Host check, the security headers,
idle connections without a thread each, and a process's state and trace on the page."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from otpmem.actors import GenServer
from otpmem.observe import ObserverServer, serve
from otpmem.observe._server import CSP

WAIT = 10.0


@pytest.fixture
def page() -> Iterator[ObserverServer]:
    server = serve(port=0, interval=0.1)
    try:
        yield server
    finally:
        server.stop()


def exchange(
    port: int, request: bytes, host: str = "127.0.0.1"
) -> tuple[int, dict[str, str], bytes]:
    """Send one raw request on a new connection; the status, headers and body answered."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(WAIT)
        sock.connect((host, port))
        sock.sendall(request)
        return read_response(sock)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole head: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return status, headers, body


def get(path: str, host: str | None, extra: str = "") -> bytes:
    host_line = "" if host is None else f"Host: {host}\r\n"
    return f"GET {path} HTTP/1.1\r\n{host_line}{extra}Connection: close\r\n\r\n".encode()


def test_the_page_answers_its_own_names_and_refuses_any_other_host(page: ObserverServer) -> None:
    port = page.port
    for host in (f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}", f"[::1]:{port}"):
        status, _, body = exchange(port, get("/api/snapshot", host))
        assert status == 200, host
        assert "tree" in json.loads(body)
    # A DNS-rebinding page reaches the port under its own name: refused, and shown nothing.
    for host in (f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil", ""):
        status, headers, body = exchange(port, get("/api/snapshot", host))
        assert status == 403, host
        assert b"tree" not in body and headers["x-frame-options"] == "DENY"
    status, _, _ = exchange(port, get("/", None))  # no Host at all
    assert status == 403
    doubled = b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n\r\n"
    assert exchange(port, doubled)[0] == 400


def test_every_answer_carries_csp_nosniff_and_deny_framing(page: ObserverServer) -> None:
    host = f"127.0.0.1:{page.port}"
    for path, expected in (("/", 200), ("/api/snapshot", 200), ("/nowhere", 404)):
        status, headers, _ = exchange(page.port, get(path, host))
        assert status == expected
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
    assert "default-src 'none'" in CSP and "frame-ancestors 'none'" in CSP
    assert "'unsafe-inline'" not in CSP  # the page's own script and style go in by hash
    status, headers, _ = exchange(page.port, f"DELETE / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    assert status == 405 and headers["allow"] == "GET"


def test_bound_to_ipv6_loopback_it_accepts_its_bound_address() -> None:
    try:
        server = serve(port=0, host="::1")
    except OSError:
        pytest.fail("this machine has no IPv6 loopback; the observer must bind ::1")
    try:
        status, _, _ = exchange(server.port, get("/", f"[::1]:{server.port}"), host="::1")
        assert status == 200 and server.url == f"http://[::1]:{server.port}/"
    finally:
        server.stop()


def test_two_hundred_idle_connections_do_not_take_two_hundred_threads(
    page: ObserverServer,
) -> None:
    before = threading.active_count()
    sockets = [socket.create_connection(("127.0.0.1", page.port), timeout=WAIT) for _ in range(200)]
    try:
        # Each connection asks once and stays open (keep-alive), as a browser's does.
        for sock in sockets[:20]:
            sock.sendall(get("/api/snapshot", "localhost").replace(b"Connection: close\r\n", b""))
            assert read_response(sock)[0] == 200
        assert page.connections == 200
        assert threading.active_count() - before < 10
        # An idle connection is still served: a second request on the first one.
        sockets[0].sendall(get("/", "localhost").replace(b"Connection: close\r\n", b""))
        assert read_response(sockets[0])[0] == 200
    finally:
        for sock in sockets:
            sock.close()


class Counter(GenServer):
    def init(self) -> None:
        self.count = 0

    def handle_call(self, message: Any) -> Any:
        self.count += message
        return self.count


def post_trace(port: int, pid: int, body: bytes, extra: str = "") -> tuple[int, bytes]:
    request = (
        f"POST /api/trace/{pid} HTTP/1.1\r\nHost: localhost:{port}\r\n{extra}"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    status, _, answer = exchange(port, request)
    return status, answer


def test_the_page_shows_a_process_state_and_switches_its_trace(page: ObserverServer) -> None:
    counter = Counter.start_link(name="http-counter")
    pid = int(counter.pid or 0)
    json_type = "Content-Type: application/json\r\n"
    try:
        counter.call(2)
        status, _, body = exchange(page.port, get(f"/api/process/{pid}", "localhost"))
        row = json.loads(body)
        assert status == 200 and row["state"] == {"count": 2} and row["traced"] is False
        # A form on another site cannot switch it: not JSON, or not this page's origin.
        assert post_trace(page.port, pid, b"on=true")[0] == 415
        cross = json_type + "Origin: http://evil.example\r\n"
        assert post_trace(page.port, pid, b'{"on": true}', cross)[0] == 403
        assert post_trace(page.port, pid, b'{"on": "yes"}', json_type)[0] == 400
        own = json_type + f"Origin: http://localhost:{page.port}\r\n"
        assert post_trace(page.port, pid, b'{"on": true}', own)[0] == 200
        counter.call(3)
        row = json.loads(exchange(page.port, get(f"/api/process/{pid}", "localhost"))[2])
        assert row["traced"] is True and row["state"] == {"count": 5}
        assert [(e["kind"], e["message"]) for e in row["trace"]] == [("call", "3"), ("reply", "5")]
        assert post_trace(page.port, pid, b'{"on": false}', json_type)[0] == 200
        counter.call(1)
        row = json.loads(exchange(page.port, get(f"/api/process/{pid}", "localhost"))[2])
        assert row["traced"] is False and len(row["trace"]) == 2  # the log kept, nothing new
    finally:
        counter.stop()
    assert exchange(page.port, get(f"/api/process/{pid}", "localhost"))[0] == 404
    assert post_trace(page.port, pid, b'{"on": true}', json_type)[0] == 404
