"""Shared test servers and synchronisation helpers (no sleeps: events with timeouts)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from otpmem.actors import GenServer, Stop
from otpmem.supervisors import ChildSpec, SupervisorEvent

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
