"""OTP's ``sys`` module: look into a running process, and trace it, without stopping it.

::

    from otpmem.actors import sys as otp_sys

    otp_sys.get_state(counter)           # {'n': 15}: what its server holds, taken by itself
    otp_sys.get_status(counter)          # pid, name, kind, mailbox, links, ... and the state
    otp_sys.trace(counter, True)         # log each message it gets and each reply it sends
    otp_sys.trace_log(counter)           # the last events, oldest first
    otp_sys.trace(counter, False)

Each request is a system message: it waits in the mailbox behind the messages already
there and is answered by the process between two messages, so a state is never read
half-way through a handler; a process stuck in a long handler answers nothing, and the
request raises ``CallTimeout`` after ``timeout`` s (the process is untouched). A dead process
gives ``NoProcess``, one that dies with the request queued ``ServerExited``.

A state is a bounded, JSON-ready copy (``snapshot``): built-in containers and scalars as
they are, up to a depth, a number of items and a length of text, anything else as its
bounded repr. A server that defines ``format_status()`` (OTP's callback) chooses what is
shown instead: ``{"status": <its snapshot>}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ._errors import CallingSelf, CallTimeout, NoProcess
from ._handle import Handle
from ._node import current
from ._process import Process
from ._scheduler import RUNNING
from ._signals import Slot
from ._sysmsg import (
    LAST_TRACES,
    TRACED,
    SysRequest,
    TraceEvent,
    server_state,
    snapshot,
    start_tracing,
    stop_tracing,
)

__all__ = [
    "TraceEvent",
    "get_state",
    "get_status",
    "snapshot",
    "trace",
    "trace_log",
    "traced",
]

TRACE_KEEP = 100
"""Events a trace keeps for ``trace_log``, the newest."""
TRACE_LIMIT = 10_000
"""Events after which a trace switches itself off: a trace forgotten on a busy process
would log forever."""


def _ask(handle: Handle, fn: Callable[[Process], Any], timeout: float | None) -> Any:
    process = handle.resolve()
    if process is current():
        raise CallingSelf(handle)
    slot = Slot()
    process.pending.add(slot)
    # As Handle.call: checked after adding, so a dying process either fails the slot or
    # this sees it dead.
    if process.dead:
        process.pending.discard(slot)
        raise NoProcess(handle)
    process.send(SysRequest(fn, slot))
    if not slot.wait(timeout):
        process.pending.discard(slot)
        raise CallTimeout(handle, timeout, what="system request")
    if slot.error is not None:
        raise slot.error
    return slot.value


def get_state(handle: Handle, timeout: float | None = 5.0) -> dict[str, Any]:
    """The state of the process behind ``handle`` (OTP's ``sys:get_state``), as a snapshot."""
    state: dict[str, Any] = _ask(handle, server_state, timeout)
    return state


def _status(process: Process) -> dict[str, Any]:
    return {
        "pid": repr(process.pid),
        "name": process.name,
        "kind": process.kind,
        "module": f"{type(process.server).__module__}.{type(process.server).__qualname__}",
        "status": "running" if process.run_state == RUNNING else "idle",
        "mailbox": len(process.mailbox),
        "links": sorted(repr(p.pid) for p in process.links),
        "monitored_by": len(process.watchers),
        "parent": None if process.parent is None else repr(process.parent.pid),
        "trap_exits": process.trap_exits,
        "tables": len(process.tables),
        "traced": process in TRACED,
        "state": server_state(process),
    }


def get_status(handle: Handle, timeout: float | None = 5.0) -> dict[str, Any]:
    """What OTP's ``sys:get_status`` tells: identity, mailbox, links, trace, and the state."""
    status: dict[str, Any] = _ask(handle, _status, timeout)
    return status


def trace(
    handle: Handle,
    on: bool = True,
    *,
    to: Callable[[TraceEvent], None] | logging.Logger | None = None,
    keep: int = TRACE_KEEP,
    limit: int | None = TRACE_LIMIT,
    timeout: float | None = 5.0,
) -> None:
    """Switch the trace of a process on or off (OTP's ``sys:trace``).

    Once on, every message it receives (call, cast, info, stop) and every reply it sends
    (reply, error, noreply) is a ``TraceEvent``: logged at INFO to ``to`` if it is a
    logger (``otpmem.actors.sys`` by default), or given to ``to`` if it is a callable
    (run on the process's thread: keep it short; one that raises ends the trace). The last
    ``keep`` events stay readable with ``trace_log``; after ``limit`` events the trace
    switches itself off. Switching on again starts a new log.
    """
    if not isinstance(on, bool):
        raise TypeError(f"trace: on must be True or False, not {type(on).__name__}")
    if type(keep) is not int or keep < 1:
        raise ValueError(f"trace: keep must be an int >= 1, got {keep!r}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise ValueError(f"trace: limit must be None or an int >= 1, got {limit!r}")
    if to is not None and not callable(to) and not isinstance(to, logging.Logger):
        raise TypeError(f"trace: to must be a logger or a callable, not {type(to).__name__}")
    sink = _sink(to)

    def switch(process: Process) -> None:
        if on:
            start_tracing(process, sink, keep, limit)
        else:
            stop_tracing(process)

    _ask(handle, switch, timeout)


def _sink(to: Callable[[TraceEvent], None] | logging.Logger | None) -> Any:
    if isinstance(to, logging.Logger):
        log = to

        def to_logger(event: TraceEvent) -> None:
            log.info("<0.%d.0> %s %s", event.pid, event.kind, event.message)

        return to_logger
    return to


def traced(handle: Handle) -> bool:
    """Whether the process behind ``handle`` is traced now (read without asking it)."""
    process = handle.process_or_none()
    return process is not None and process in TRACED


def trace_log(handle: Handle) -> list[TraceEvent]:
    """The events the process's latest trace kept, oldest first (also after it ended)."""
    process = handle.process_or_none()
    if process is None:
        raise NoProcess(handle)
    tracer = TRACED.get(process) or LAST_TRACES.get(int(process.pid))
    return [] if tracer is None else tracer.events()
