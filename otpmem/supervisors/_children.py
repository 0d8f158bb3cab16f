"""A supervisor's children: their bookkeeping, and OTP's start and shutdown of one child.

Policy (which child to restart, when to give up) lives in ``_supervisor``; this module only
knows how to start a child, how to stop one (orderly with a timeout, then kill), and where
each child stands.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any, Literal

from ..actors import (
    KILLED,
    NORMAL,
    SHUTDOWN,
    ExitReason,
    Handle,
    Pid,
    StartIgnored,
    is_reason,
    is_shutdown,
)
from ..actors.runtime import Process, become_default_heir
from ..reprs import short_repr
from ._spec import (
    ChildCounts,
    ChildInfo,
    ChildNotFound,
    ChildSpec,
    SimpleOneForOneOnly,
    same_id,
)

logger = logging.getLogger("otpmem.supervisor")
KILL_GRACE = 1.0  # how long a killed supervisor waits for its children to die with it

Emit = Callable[[str, "Child | None", "Pid | None", ExitReason], None]
"""How children report: emit(kind, child, pid, reason)."""


class Child:
    """One child of a supervisor: its key, its spec and extra args, and where it stands."""

    __slots__ = ("args", "handle", "key", "last_pid", "process", "spec", "status")

    def __init__(self, key: Hashable, spec: ChildSpec, args: tuple[Any, ...] = ()) -> None:
        self.key = key
        self.spec = spec
        self.args = args
        self.handle: Handle | None = None
        self.process: Process | None = None
        # Under simple_one_for_one a child stuck restarting is still addressed by its old pid.
        self.last_pid: Pid | None = None
        self.status: Literal["running", "restarting", "undefined"] = "undefined"

    def info(self, dynamic: bool) -> ChildInfo:
        return ChildInfo(
            None if dynamic else self.spec.id,
            None if self.process is None else self.process.pid,
            self.handle if self.process is not None else None,
            self.spec.type,
            self.status,
        )


class Children:
    """Every child of one supervisor, in start order, with a pid index and kept tables.

    Built in the supervisor's ``init``: the supervisor becomes the default heir of its
    children's tables (under simple_one_for_one only while it lives, since a restarted one
    starts no children for them to come back to).
    """

    def __init__(self, owner: Process, dynamic: bool, emit: Emit, label: Callable[[], str]) -> None:
        self.owner = owner
        self.dynamic = dynamic
        self.items: list[Child] = []
        self.running: dict[Pid, Child] = {}  # the running children, by pid
        self.emit = emit
        self.label = label
        self.tables = become_default_heir(passes_up=not dynamic)

    def exited(self, pid: Pid) -> Child | None:
        """The child whose exit from ``pid`` just arrived (None: a stale exit)."""
        self.tables.forget(pid)
        return self.running.pop(pid, None)

    def terminate_all(self) -> None:
        if self.dynamic:
            self._terminate_dynamic()
            return
        for child in reversed(self.items):
            self.shutdown(child)

    def kill_all(self) -> None:
        """In the supervisor's exit path: kill the children still running, wait for them.

        Only a supervisor that was itself killed has any (terminate shuts them down
        otherwise). Left to the exit signal, they would die after it, asynchronously: their
        tables would find their heir gone, and a restarted supervisor could find their names
        still taken. Killed here, before anyone hears of its death, they hand their tables
        in while it can still keep them and pass them up.
        """
        running = [c.process for c in self.items if c.process is not None]
        for process in running:
            process.signal_kill(KILLED)
        deadline = time.monotonic() + KILL_GRACE
        for process in running:
            # A blocking wait: the supervisor is killed, so it can no longer suspend; it has
            # a thread of its own (or this is its killer's thread).
            if not process.exited.wait_blocking(max(0.0, deadline - time.monotonic())):
                process.kill(KILLED, grace=0.0)

    def start(self, child: Child, event: str = "started") -> tuple[str, ExitReason]:
        """Run the child's start function: ("ok"|"ignore"|"error", reason)."""
        # The child's init adopts the tables its previous incarnation left; a child that
        # dies before it is tracked still hands them back under this key.
        with self.tables.starting(child.key):
            outcome, reason = self._start(child)
        if child.process is not None and outcome == "ok":
            self.emit(event, child, child.process.pid, None)
        return outcome, reason

    def _start(self, child: Child) -> tuple[str, ExitReason]:
        try:
            handle = child.spec.start(*child.args)
        except StartIgnored:
            handle = None
        except Exception as exc:
            self.emit("start_failed", child, None, exc)
            return "error", exc
        if handle is None:
            child.status = "undefined"
            return "ignore", None
        if not isinstance(handle, Handle):
            reason = TypeError(
                f"start of {short_repr(child.spec.id)} returned {short_repr(handle)}, not a Handle"
            )
            self.emit("start_failed", child, None, reason)
            return "error", reason
        process = handle.process_or_none()
        if process is None:
            reason = (
                f"start of {short_repr(child.spec.id)} returned {short_repr(handle)}, "
                "which names no process"
            )
            self.emit("start_failed", child, None, reason)
            return "error", reason
        # A start function that did not link (e.g. used start()) is linked here. A child that
        # died already counts as started (OTP's {ok, Pid}): its exit, or the noproc this link
        # delivers, arrives next and is handled as any exit.
        self.owner.link(process)
        self.tables.track(process.pid, child.key)
        child.process = process
        child.handle = handle
        child.status = "running"
        self.running[process.pid] = child
        return "ok", None

    def shutdown(self, child: Child) -> None:
        """Stop one child as OTP's ``shutdown/2``: orderly with a timeout, then kill."""
        process = child.process
        child.status = "undefined"
        if process is None:
            return
        self.running.pop(process.pid, None)
        child.process = None
        child.handle = None
        shutdown = child.spec.shutdown
        if shutdown == "brutal_kill":
            process.kill(KILLED)
        elif process.request_shutdown(SHUTDOWN):
            # An exit signal, not a message: it does not wait behind the child's queue.
            if not process.exited.wait(shutdown):
                process.kill(KILLED)
        else:
            process.exited.wait(shutdown if isinstance(shutdown, float | int) else None)
        if process.exited.is_set():
            # Still exiting otherwise: its tables, when it lets them go, are still its own.
            self.tables.forget(process.pid)
        self._report_shutdown(child, process)

    def _report_shutdown(self, child: Child, process: Process) -> None:
        reason = process.exit_reason
        expected = is_shutdown(reason) or (
            child.spec.shutdown == "brutal_kill" and is_reason(reason, KILLED)
        )
        if child.spec.restart != "permanent" and is_reason(reason, NORMAL):
            expected = True
        self.emit("terminated", child, process.pid, reason)
        if not expected:
            logger.error(
                "supervisor %s: child %s did not shut down cleanly: %s",
                self.label(),
                short_repr(child.spec.id),
                short_repr(reason),
            )
            self.emit("shutdown_error", child, process.pid, reason)

    def _terminate_dynamic(self) -> None:
        # simple_one_for_one stops all at once against one deadline, as OTP does.
        children = [c for c in self.items if c.process is not None]
        deadline_s: float | None = 0.0
        for child in children:
            assert child.process is not None
            self.running.pop(child.process.pid, None)
            if child.spec.shutdown == "brutal_kill":
                child.process.signal_kill(KILLED)
            else:
                child.process.request_shutdown(SHUTDOWN)
            shutdown = child.spec.shutdown
            if shutdown is None:
                deadline_s = None
            elif deadline_s is not None and isinstance(shutdown, int | float):
                deadline_s = max(deadline_s, float(shutdown))
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        for child in children:
            process = child.process
            assert process is not None
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not process.exited.wait(remaining):
                process.kill(KILLED)
            self.tables.forget(process.pid)
            child.process = None
            child.handle = None
            self._report_shutdown(child, process)
        self.items.clear()

    def remove(self, child: Child) -> None:
        """Take ``child`` off the list; what is kept for it stays (it may come back)."""
        if child in self.items:
            self.items.remove(child)

    def discard(self, child: Child) -> None:
        """``child`` is gone for good: off the list, and its kept tables deleted."""
        self.remove(child)
        self.tables.drop(child.key)

    def find(self, key: Hashable) -> Child | None:
        """The child under ``key`` (its id, or its number under simple_one_for_one); the
        key a caller gave is compared by ``same_id``, so no __eq__ of its can raise here."""
        for child in self.items:
            if same_id(child.key, key):
                return child
        return None

    def by_id(self, child_id: Hashable, operation: str | None = None) -> Child:
        """The child ``child_id`` for an admin request; ``ChildNotFound`` if none."""
        if self.dynamic:
            raise SimpleOneForOneOnly(operation or "lookup by id")
        try:
            hash(child_id)
        except Exception:
            raise ChildNotFound(child_id, "a child id is a hashable value") from None
        child = self.find(child_id)
        if child is None:
            raise ChildNotFound(child_id)
        return child

    def by_pid(self, target: Any) -> Child:
        """Under simple_one_for_one: the child of a pid or handle, also one between
        restart attempts (by its last pid); ``ChildNotFound`` if none."""
        pid = target.pid if isinstance(target, Handle) else target
        if type(pid) is not Pid:  # a subclass would bring its own __hash__ and __eq__
            raise SimpleOneForOneOnly("terminate_child by id (give a pid or handle)")
        child = self.running.get(pid)
        if child is None:
            child = next(
                (c for c in self.items if c.status == "restarting" and c.last_pid == pid), None
            )
        if child is None:
            raise ChildNotFound(target)
        return child

    def infos(self) -> list[ChildInfo]:
        """``which_children``: every child in start order."""
        return [child.info(self.dynamic) for child in self.items]

    def counts(self) -> ChildCounts:
        """``count_children``: specs, running children, supervisor specs, worker specs."""
        active = sum(1 for c in self.items if c.process is not None)
        supervisors = sum(1 for c in self.items if c.spec.type == "supervisor")
        workers = len(self.items) - supervisors
        # simple_one_for_one has one spec however many children it runs (OTP).
        specs = 1 if self.dynamic else len(self.items)
        return ChildCounts(specs, active, supervisors, workers)
