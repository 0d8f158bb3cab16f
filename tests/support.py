"""Shared test servers and synchronisation helpers (no sleeps: events with timeouts)."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from otpmem.actors import GenServer, Handle, NoProcess, Stop, Table, faults, new_table
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorEvent, SupervisorHandle

WAIT = 5.0


class Trace:
    """A thread-safe list of events that tests can wait on."""

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    append = __call__

    @property
    def items(self) -> list[Any]:
        with self._cond:
            return list(self._items)

    def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float = WAIT) -> list[Any]:
        """Block until ``predicate(items)`` holds; fail the test on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self._items), timeout):
                raise AssertionError(f"timed out waiting; trace so far: {self._items!r}")
            return list(self._items)

    def kinds(self, kind: str) -> list[SupervisorEvent]:
        """Supervisor events of one kind."""
        return [e for e in self.items if isinstance(e, SupervisorEvent) and e.kind == kind]

    def wait_kind(self, kind: str, count: int = 1, timeout: float = WAIT) -> list[Any]:
        """Block until ``count`` supervisor events of ``kind`` were seen."""
        return self.wait_for(
            lambda items: sum(1 for e in items if getattr(e, "kind", None) == kind) >= count,
            timeout,
        )


class Worker(GenServer):
    """A test worker.

    Calls: "ping" -> "pong"; "pid" -> its pid; ("stop", reason) -> stops with reason;
    ("raise", exc) -> raises exc (a crash); ("block", event) -> waits on the event.
    ``terminate`` records ("terminate", tag, reason) in ``trace`` when one is given.
    """

    def init(self, tag: Any = None, trace: Trace | None = None) -> None:
        self.tag = tag
        self.trace = trace
        if trace is not None:
            trace(("init", tag))

    def handle_call(self, message: Any) -> Any:
        if message == "ping":
            return "pong"
        if message == "pid":
            return self.pid
        kind, arg = message
        if kind == "stop":
            return Stop(arg, reply="stopping")
        if kind == "raise":
            raise arg
        if kind == "block":
            arg.wait(WAIT)
            return "unblocked"
        raise ValueError(f"unknown message {message!r}")

    def handle_cast(self, message: Any) -> Any:
        kind, arg = message
        if kind == "stop":
            return Stop(arg)
        if kind == "raise":
            raise arg
        return None

    def terminate(self, reason: Any) -> None:
        if self.trace is not None:
            self.trace(("terminate", self.tag, reason))


def worker_spec(child_id: Any, trace: Trace | None = None, **kwargs: Any) -> ChildSpec:
    """A ChildSpec for a Worker tagged with its id."""
    return ChildSpec(child_id, start=lambda: Worker.start_link(child_id, trace), **kwargs)


class LineReader:
    """A subprocess's stdout lines, read on a thread into a queue and awaited with deadlines.

    ``lines`` holds every line consumed so far (without its newline).
    """

    TAIL = 20
    """Lines of output a failure message shows: the last ones read."""

    def __init__(self, proc: subprocess.Popen[str], name: str = "line-reader") -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._read, name=name, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, done: Callable[[str], bool], timeout: float, what: str = "") -> str:
        """Consume lines until ``done(line)`` holds for one and return it; fail the test on
        EOF or at the deadline, naming ``what`` was awaited and the last lines read."""
        deadline = time.monotonic() + timeout
        awaited = what or "the awaited line"
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"no {awaited} in {timeout} s; output so far: {self.lines[-self.TAIL :]!r}"
                )
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(
                    f"output ended before {awaited}; output: {self.lines[-self.TAIL :]!r}"
                )
            self.lines.append(line)
            if done(line):
                return line

    def expect(self, prefix: str, timeout: float) -> str:
        """The next line starting with ``prefix`` (lines before it are consumed)."""
        return self.read_until(
            lambda line: line.startswith(prefix), timeout, f"line starting {prefix!r}"
        )

    def close(self, timeout: float) -> None:
        """Kill the process if it still runs, reap it, join the reader, close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=timeout)
        self.thread.join(timeout)
        assert not self.thread.is_alive()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def assert_pair_safe(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool result comes after the assistant message that called it (by id)."""
    asked: set[str] = set()
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            assert message.get("tool_call_id") in asked, (
                f"messages[{i}] is a tool result for {message.get('tool_call_id')!r} "
                f"with no earlier call: {message!r}"
            )
        asked |= {call["id"] for call in message.get("tool_calls") or ()}


class Holder(GenServer):
    """A table owner for the default-heir tests: creates (or adopts) table ``name`` in init.

    Calls: ("put", k, v); ("table",); ("adopted",); ("stop", reason).
    """

    def init(self, name: str = "held", heir: Handle | None = None) -> None:
        self.table: Table[Any, Any] = new_table(name, heir=heir)

    def handle_call(self, message: Any) -> Any:
        kind, *args = message
        if kind == "put":
            self.table[args[0]] = args[1]
            return None
        if kind == "table":
            return self.table
        if kind == "adopted":
            return self.table.adopted
        if kind == "stop":
            return Stop(args[0])
        raise ValueError(message)


def holder_spec(child_id: str, name: str | None = None, **kwargs: Any) -> ChildSpec:
    """A ChildSpec for a Holder whose table is named after the child (or ``name``)."""
    return ChildSpec(child_id, start=lambda: Holder.start_link(name or child_id), **kwargs)


def sup_spec(child_id: str, children: list[ChildSpec], **flags: Any) -> ChildSpec:
    """A ChildSpec for a sub-supervisor of ``children``."""
    return ChildSpec(
        child_id, start=lambda: Supervisor.start_link(children, **flags), type="supervisor"
    )


def child_at(sup: SupervisorHandle, *path: str) -> Handle:
    """The running child at ``path`` below ``sup``."""
    handle: Handle | None = sup
    for child_id in path:
        assert isinstance(handle, SupervisorHandle)
        handle = handle.child(child_id)
        assert handle is not None, f"{child_id!r} is not running"
    assert handle is not None
    return handle


@contextmanager
def loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """An HTTP server of ``handler`` on 127.0.0.1 (a free port) for the block: its base URL
    (``http://127.0.0.1:PORT/v1``, as an OpenAI-compatible client takes it)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5.0)


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: Any,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer the request ``handler`` holds with ``payload`` as JSON."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


def run_threads(
    threads: int, work: Callable[[int], object], timeout: float = 30.0
) -> list[BaseException]:
    """Run ``work(t)`` on ``threads`` threads at once and join them all; what they raised."""
    errors: list[BaseException] = []

    def body(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:
            errors.append(exc)

    running = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(timeout)
        assert not thread.is_alive(), "a thread did not finish in time"
    return errors


def started_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """``work()`` running on a thread of its own; what it raised lands in the list (join the
    thread first)."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            work()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


def adds_across_a_kill(
    store: Any, sup: SupervisorHandle, child_id: str, writers: int = 6
) -> tuple[dict[int, list[str]], list[BaseException]]:
    """``writers`` threads add to ``Conv("ann", "w<t>")`` through a handle to the store's
    current incarnation only, until the test kills it; what each had acknowledged and the
    error each was turned away with, once the next incarnation is up."""
    from otpmem.actors import NoProcess, ServerExited, faults
    from otpmem.messages import Conv
    from otpmem.stores import StoreUnavailable

    first = store.resolve()
    stop = threading.Event()  # only if the test fails: each writer ends when refused
    adding = [threading.Event() for _ in range(writers)]
    acked: dict[int, list[str]] = {t: [] for t in range(writers)}
    refused: list[BaseException] = []

    def writer(t: int) -> None:
        handle = type(store)(first)  # this incarnation only: never the next
        i = 0
        while not stop.is_set():
            text = f"{t}:{i}"
            try:
                handle.add(Conv("ann", f"w{t}"), [{"role": "user", "content": text}])
            except (NoProcess, ServerExited, StoreUnavailable) as exc:
                refused.append(exc)
                return
            acked[t].append(text)
            adding[t].set()
            i += 1

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(writers)]
    try:
        for thread in threads:
            thread.start()
        # Killed with every writer under way (a writer not yet started when the test
        # ended would be neither acknowledged nor refused); each then runs into the kill.
        assert all(started.wait(30.0) for started in adding)
        faults.kill(store)
        for thread in threads:
            thread.join(30.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30.0)
    assert not any(thread.is_alive() for thread in threads)
    pair = sup.child(child_id)
    assert pair is not None
    pair.sync()
    return acked, refused


def kill_or_crash(server: Handle, n: int) -> bool:
    """The n-th fault of a storm: a kill when n is odd, a crash (RuntimeError) when even;
    False (nothing done) if the server is between incarnations."""
    try:
        if n % 2:
            faults.kill(server)
        else:
            faults.crash(server, RuntimeError(f"crash {n}"))
    except NoProcess:
        return False
    return True
