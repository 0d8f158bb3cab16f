"""System messages and traces: what ``otpmem.actors.sys`` asks of a process, between messages.

A system request travels through the mailbox like any message and is answered by the
process itself when it reaches it, so whatever it reads (the server's state) is read by
the one thread that writes it, never half-way through a handler. A trace is the process's
own record of what it receives and replies, kept in ``TRACED`` (process -> tracer) so that
an untraced process pays one truth test of an empty dict per message.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..reprs import short_repr
from ._signals import CallEnvelope, CastEnvelope, Slot, StopRequest, Wake

if TYPE_CHECKING:
    from ._process import Process

logger = logging.getLogger("otpmem.actors.sys")

SNAPSHOT_DEPTH = 4
SNAPSHOT_ITEMS = 20
SNAPSHOT_TEXT = 200
SNAPSHOT_NODES = 400
"""Values a snapshot describes at most, whatever the server holds; past it, reprs only."""


class SysRequest:
    """A system message: ``answer(process)`` runs on the process and fills ``slot``."""

    __slots__ = ("fn", "slot")

    def __init__(self, fn: Callable[[Process], Any], slot: Slot) -> None:
        self.fn = fn
        self.slot = slot

    def answer(self, process: Process) -> None:
        """Run the request on ``process`` and reply (its error goes to the asker)."""
        process.pending.discard(self.slot)
        try:
            value = self.fn(process)
        except Exception as exc:  # a system request never crashes the process it asks
            self.slot.fail(exc)
            return
        self.slot.set(value)


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One traced event: ``kind`` is call, cast, info or stop (received) or reply, error,
    noreply (sent back); ``message`` a bounded repr of it; ``caller`` the asking pid."""

    seq: int
    at: float
    pid: int
    kind: str
    message: str
    caller: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The event as a JSON-ready dict."""
        return {
            "seq": self.seq,
            "at": self.at,
            "pid": self.pid,
            "kind": self.kind,
            "message": self.message,
            "caller": self.caller,
        }


Sink = Callable[[TraceEvent], None]


class Tracer:
    """A process's trace: a bounded log of its last ``keep`` events, each also given to ``sink``."""

    def __init__(self, process: Process, sink: Sink | None, keep: int, limit: int | None) -> None:
        self.process = process
        self.sink = sink
        self.limit = limit
        self.count = 0
        self.log: deque[TraceEvent] = deque(maxlen=keep)
        self.lock = threading.Lock()  # the log is read by other threads (the observer)

    def record(self, kind: str, payload: Any, caller: Process | None = None) -> None:
        """Log one event and give it to the sink; stop tracing once the limit is reached."""
        self.count += 1
        process = self.process
        event = TraceEvent(
            self.count,
            time.time(),
            int(process.pid),
            kind,
            short_repr(payload),
            None if caller is None else repr(caller.pid),
        )
        with self.lock:
            self.log.append(event)
        if self.sink is None:
            logger.info("%r %s %s", process, kind, event.message)
        else:
            try:
                self.sink(event)
            except Exception:
                logger.exception("%r: a trace subscriber failed; its trace is off", process)
                stop_tracing(process)
                return
        if self.limit is not None and self.count >= self.limit:
            logger.info("%r: trace off after %d events (its limit)", process, self.count)
            stop_tracing(process)

    def events(self) -> list[TraceEvent]:
        """The events kept, oldest first."""
        with self.lock:
            return list(self.log)


TRACED: dict[Process, Tracer] = {}
"""The processes traced now; only their own threads add and remove their entries."""
LAST_TRACES: dict[int, Tracer] = {}
"""The tracer a process last had, by pid, so its log stays readable after the trace ends."""
LAST_KEPT = 64


def start_tracing(process: Process, sink: Sink | None, keep: int, limit: int | None) -> None:
    """On ``process``: switch its trace on (a new log), or give a running one a new sink."""
    tracer = Tracer(process, sink, keep, limit)
    if process not in TRACED:
        process.cleanups.append(_untrace_cleanup(process))
    TRACED[process] = tracer
    LAST_TRACES.pop(int(process.pid), None)
    LAST_TRACES[int(process.pid)] = tracer
    while len(LAST_TRACES) > LAST_KEPT:
        LAST_TRACES.pop(next(iter(LAST_TRACES)))


def stop_tracing(process: Process) -> None:
    """On ``process``: switch its trace off (its log stays readable in ``LAST_TRACES``)."""
    TRACED.pop(process, None)


def _untrace_cleanup(process: Process) -> Callable[[], None]:
    def untrace() -> None:
        TRACED.pop(process, None)

    return untrace


def traced_dispatch(
    process: Process, message: Any, dispatch: Callable[[Process, Any], None]
) -> None:
    """Handle ``message`` as ``dispatch`` does, recording what came in and what went back."""
    tracer = TRACED.get(process)
    kind = type(message)
    if tracer is None or kind is Wake or kind is SysRequest:
        dispatch(process, message)
        return
    if kind is CallEnvelope:
        tracer.record("call", message.payload, message.caller)
        dispatch(process, message)
        slot = message.slot
        if slot.error is not None:
            tracer.record("error", slot.error, message.caller)
        elif slot in process.pending:
            tracer.record("noreply", message.payload, message.caller)
        elif not slot.timed_out:
            tracer.record("reply", slot.value, message.caller)
        return
    if kind is CastEnvelope:
        tracer.record("cast", message.payload)
    elif kind is StopRequest:
        tracer.record("stop", message.reason)
    else:
        tracer.record("info", message)
    dispatch(process, message)


# -- snapshots ---------------------------------------------------------------------------


def snapshot(value: Any) -> Any:
    """``value`` as a JSON-ready copy, bounded in depth, items, text and size; never raises.

    Built-in containers become dicts and lists, scalars stay, anything else becomes its
    bounded repr: the copy shares nothing with the live value, so it can leave the process.
    """
    budget = [SNAPSHOT_NODES]
    try:
        return _copy(value, SNAPSHOT_DEPTH, budget)
    except Exception:
        return short_repr(value)


def _copy(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if value.bit_length() <= 53 else short_repr(value)
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if kind is str:
        return value if len(value) <= SNAPSHOT_TEXT else value[: SNAPSHOT_TEXT - 3] + "..."
    if depth <= 0 or budget[0] <= 0:
        return short_repr(value)
    if kind is dict:
        out: dict[str, Any] = {}
        for i, (key, item) in enumerate(value.items()):
            if i >= SNAPSHOT_ITEMS:
                out["..."] = f"{len(value) - SNAPSHOT_ITEMS} more"
                break
            label = key if type(key) is str else short_repr(key)
            out[label] = _copy(item, depth - 1, budget)
        return out
    if kind in (list, tuple, set, frozenset, deque):
        items = []
        for i, item in enumerate(value):
            if i >= SNAPSHOT_ITEMS:
                items.append(f"... {len(value) - SNAPSHOT_ITEMS} more")
                break
            items.append(_copy(item, depth - 1, budget))
        return items
    return short_repr(value)


def server_state(process: Process) -> dict[str, Any]:
    """What the server object holds (its ``format_status()`` if it has one), as a snapshot."""
    server = process.server
    format_status = getattr(server, "format_status", None)
    if callable(format_status):
        return {"status": snapshot(format_status())}
    fields: dict[str, Any] = {}
    for name in _field_names(server):
        if name == "_process":
            continue
        try:
            fields[name] = getattr(server, name)
        except AttributeError:
            continue  # a slot never set
    return {name: snapshot(item) for name, item in fields.items()}


def _field_names(server: object) -> list[str]:
    names = list(getattr(server, "__dict__", {}))
    for cls in type(server).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in names:
                names.append(name)
    return names
