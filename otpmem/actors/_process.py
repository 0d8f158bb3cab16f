"""Processes: a pykka thread with a pid, links, monitors, and exactly one way to die.

Every exit path (a handler raising, an orderly stop, an exit signal from a link, a brutal
kill) ends in ``Process._exit``, which runs once and in OTP's order: terminate callback,
release what the process owned (tables go to their heir, names are freed), fail pending
calls, notify links and monitors, then set ``exited``. A process therefore never learns of a
death before the dead process's resources are free to take.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pykka

from . import _names
from ._errors import KILLED, NORMAL, ExitReason, InitFailed, ServerExited, StartIgnored
from ._node import (
    READY_POLL,
    _link_lock,
    _local,
    _pid_counter,
    current,
    install_exit_hook,
    live_table,
    next_monitor_ref,
)
from ._signals import (
    IGNORE,
    NO_REPLY,
    WAKE,
    CallEnvelope,
    CastEnvelope,
    CrashRequest,
    Down,
    Exit,
    Pid,
    Slot,
    Stop,
    StopRequest,
    Wake,
)

if TYPE_CHECKING:
    from ._genserver import GenServer
    from ._tables import Table
    from .faults import FaultPlan

logger = logging.getLogger("otpmem.actors")


class _Shell(pykka.ThreadingActor):
    """The pykka actor that runs a Process: a thread and a mailbox, no policy of its own."""

    use_daemon_thread = False  # so that terminate callbacks run at interpreter exit

    @staticmethod
    def _create_actor_inbox() -> Any:
        # SimpleQueue roundtrips are about twice as fast as queue.Queue (perf_anchors.md §1).
        return queue.SimpleQueue()

    def __init__(self, process: Process) -> None:
        super().__init__()
        self.process = process

    def on_start(self) -> None:
        self.process._run_init()

    def on_receive(self, message: Any) -> Any:
        self.process._dispatch(message)

    def on_stop(self) -> None:
        # Only reached if someone stops the pykka actor directly (e.g. ActorRegistry.stop_all):
        # it still exits through the one exit path, so links and supervisors hear of it.
        self.process._exit("shutdown", run_terminate=True)

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        # Unreachable while _dispatch catches everything; kept so no exit goes unreported.
        self.process._exit(exc, run_terminate=False)


class Process:
    """One incarnation of a server: its identity, its links, its lifecycle."""

    def __init__(
        self,
        server: GenServer,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent: Process | None,
        faults: FaultPlan | None,
    ) -> None:
        self.pid = Pid(next(_pid_counter))
        self.server = server
        self.name: str | None = None
        self.parent = parent
        self.faults = faults
        self.trap_exits = server.trap_exits
        self.thread: threading.Thread | None = None
        self.exited = threading.Event()
        # Set once init has returned: direct readers of a server's state wait for it, since a
        # name is visible (and calls queue) from before init runs, as in OTP.
        self.ready = threading.Event()
        self.exit_reason: ExitReason = None
        self.tables: list[Table[Any, Any]] = []
        self.cleanups: list[Callable[[], None]] = []
        self.links: set[Process] = set()
        self.watchers: dict[int, Process] = {}  # monitor ref -> the process watching us
        self.pending: set[Slot] = set()
        self.dead = False  # no new call is accepted once set
        self.current_call: CallEnvelope | None = None
        self.kill_event = threading.Event()
        self._args = args
        self._kwargs = kwargs
        self._lock = threading.Lock()
        self._exiting = False
        self._finished = False
        self._notified = False
        self._killed: ExitReason = None
        self._is_killed = False
        self._started = Slot()
        # The mailbox exists before the name is registered, so a message sent by name in the
        # window before init finishes is queued, as in OTP.
        self._shell = _Shell(self)
        server._process = self

    def __repr__(self) -> str:
        label = type(self.server).__name__
        return f"<{label} {self.name} {self.pid}>" if self.name else f"<{label} {self.pid}>"

    # -- starting ---------------------------------------------------------------------------

    def start(self, name: str | None, timeout: float | None) -> None:
        """Start the thread, wait for ``init`` (OTP's init_ack); raise if it failed."""
        if name is not None:
            _names.reserve(name, self)
        if self.parent is not None:
            with _link_lock:
                self.links.add(self.parent)
                self.parent.links.add(self)
        live_table.add(self)
        install_exit_hook()
        # What pykka's Actor.start does, split so the actor exists before its name does.
        pykka.ActorRegistry.register(self._shell.actor_ref)
        self._shell._start_actor_loop()
        if not self._started.wait(timeout):
            # As proc_lib does: unlink first, so the starter is told by this error only.
            if self.parent is not None:
                self.parent.unlink(self)
            self.kill(KILLED, grace=1.0)
            raise InitFailed(repr(self), f"init did not finish within {timeout} s")
        if self._started.error is not None:
            raise self._started.error

    def _run_init(self) -> None:
        _local.process = self
        self.thread = threading.current_thread()
        server = type(self.server).__name__
        try:
            if self.faults is not None:
                self.faults._before_init(self)
            result = self.server.init(*self._args, **self._kwargs)
        except BaseException as exc:
            self._abort_start(exc, InitFailed(server, exc), exc)
            return
        if self._is_killed:
            self._exit(self._killed, run_terminate=False)
            self._started.fail(InitFailed(server, self._killed))
        elif result is IGNORE:
            self._abort_start(NORMAL, StartIgnored(server), None)
        else:
            self.ready.set()
            self._started.set(None)

    def _abort_start(
        self, reason: ExitReason, error: Exception, cause: BaseException | None
    ) -> None:
        # The starter hears of the failure from start_link itself, so no exit signal goes to
        # it as well (OTP's init_fail).
        if self.parent is not None:
            with _link_lock:
                self.links.discard(self.parent)
                self.parent.links.discard(self)
        self._exit(reason, run_terminate=False)
        error.__cause__ = cause
        self._started.fail(error)

    # -- the mailbox ------------------------------------------------------------------------

    def send(self, message: Any) -> bool:
        """Put ``message`` in the mailbox; False if the process is gone."""
        try:
            self._shell.actor_ref.tell(message)
        except pykka.ActorDeadError:
            return False
        return True

    def _dispatch(self, message: Any) -> None:
        if self._is_killed:
            self._exit(self._killed, run_terminate=False)
            return
        kind = type(message)
        server = self.server
        try:
            if kind is CallEnvelope:
                self._handle_call(message)
            elif kind is CastEnvelope:
                if self.faults is not None:
                    self.faults._before_message(self, message.payload)
                self._after_handler(server.handle_cast(message.payload))
            elif kind is StopRequest:
                self._exit(message.reason, run_terminate=True)
            elif kind is CrashRequest:
                self._crash(message.reason)
            elif kind is Wake:
                pass
            elif kind is Exit and self.parent is not None and message.pid == self.parent.pid:
                # A server that traps exits still dies with its parent (gen_server rule).
                self._exit(message.reason, run_terminate=True)
            else:
                if self.faults is not None:
                    self.faults._before_message(self, message)
                self._after_handler(server.handle_info(message))
        except BaseException as exc:
            self._crash(exc)
        if self._is_killed:
            self._exit(self._killed, run_terminate=False)

    def _handle_call(self, envelope: CallEnvelope) -> None:
        slot = envelope.slot
        self.current_call = envelope
        try:
            if self.faults is not None:
                self.faults._before_message(self, envelope.payload)
            result = self.server.handle_call(envelope.payload)
        except self.server.caller_errors as exc:
            # The caller's mistake: answer with the error, keep serving (stores use this for
            # invalid messages).
            self.current_call = None
            self.pending.discard(slot)
            slot.fail(exc)
            return
        self.current_call = None
        if self._is_killed:
            return  # killed mid-call: the exit path fails the slot, as OTP's caller sees 'killed'
        if result is NO_REPLY:
            return
        if type(result) is Stop:
            self.pending.discard(slot)
            slot.set(result.reply)
            self._exit(result.reason, run_terminate=True)
            return
        self.pending.discard(slot)
        slot.set(result)

    def _after_handler(self, result: Any) -> None:
        if type(result) is Stop:
            self._exit(result.reason, run_terminate=True)

    def _crash(self, reason: ExitReason) -> None:
        if isinstance(reason, BaseException):
            logger.error("%r crashed", self, exc_info=reason)
        else:
            logger.error("%r crashed with reason %r", self, reason)
        self._exit(reason, run_terminate=True)

    # -- dying ------------------------------------------------------------------------------

    def wait_ready(self, timeout: float | None) -> bool:
        """Wait until ``init`` has returned; False at once if the process exits first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.ready.wait(READY_POLL):
            if self.exited.is_set() or (deadline is not None and time.monotonic() > deadline):
                return self.ready.is_set()
        return True

    def request_stop(self, reason: ExitReason) -> bool:
        """Queue an orderly stop behind the messages already in the mailbox."""
        return not self.dead and self.send(StopRequest(reason))

    def kill(self, reason: ExitReason = KILLED, grace: float | None = 1.0) -> None:
        """Kill without running ``terminate``; wait up to ``grace`` s for the thread to notice.

        A thread cannot be pre-empted in Python: a handler that does not return within
        ``grace`` leaves a zombie thread, whose process is then declared dead from outside
        (tables to their heir, names freed, links told) so nothing waits on it.
        """
        self.signal_kill(reason)
        if current() is self:
            self._exit(reason, run_terminate=False)
            return
        if not self.exited.wait(grace):
            logger.error(
                "%r did not return from its handler within %s s of being killed; "
                "its thread is left running as a zombie",
                self,
                grace,
            )
            with self._lock:
                self._exiting = True
                self.dead = True
            self._shell.actor_stopped.set()
            self._finish(reason)

    def signal_kill(self, reason: ExitReason) -> None:
        """Mark the process killed and wake it; returns at once."""
        with self._lock:
            if self._finished:
                return
            if not self._is_killed:
                self._is_killed = True
                self._killed = reason
        # Cuts short the waits of fault plans (slow init, slow terminate).
        self.kill_event.set()
        # actor_stopped is left alone: the loop must still pick up a message to see the flag.
        self._shell.actor_inbox.put(_wake_envelope())

    def exit_signal(self, source: Pid, reason: ExitReason) -> None:
        """A linked process exited: trap it as an ``Exit`` message, or die of it."""
        if self.trap_exits:
            self.send(Exit(source, reason))
        elif reason != NORMAL:
            self.signal_kill(reason)

    def _exit(self, reason: ExitReason, run_terminate: bool) -> bool:
        with self._lock:
            if self._exiting:
                return False
            self._exiting = True
            self.dead = True
        self._shell.actor_stopped.set()
        if run_terminate:
            self._run_terminate(reason)
        return self._finish(reason)

    def _finish(self, reason: ExitReason) -> bool:
        # Runs once, on the process's thread, or on a killer's when that thread is stuck.
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            if self._is_killed:
                reason = self._killed  # a kill overrides the reason of an exit in progress
        pykka.ActorRegistry.unregister(self._shell.actor_ref)
        while self.cleanups:
            cleanup = self.cleanups.pop()
            try:
                cleanup()
            except Exception:
                logger.exception("%r: exit cleanup %r failed", self, cleanup)
        from ._tables import release_tables

        release_tables(self)
        _names.release(self)
        self.exit_reason = reason
        error = _exit_error(self, reason)
        for slot in list(self.pending):
            slot.fail(error)
        self.pending.clear()
        live_table.remove(self)
        with _link_lock:
            self._notified = True
            partners = list(self.links)
            for partner in partners:
                partner.links.discard(self)
            self.links.clear()
            watchers = list(self.watchers.items())
            self.watchers.clear()
        for partner in partners:
            partner.exit_signal(self.pid, reason)
        for ref, watcher in watchers:
            watcher.send(Down(ref, self.pid, reason))
        # Set last: whoever waits on `exited` finds the exit signals already in the mailboxes
        # of links and monitors, so a call made after kill() returns sees the restart.
        self.exited.set()
        return True

    def _run_terminate(self, reason: ExitReason) -> None:
        try:
            if self.faults is not None:
                self.faults._before_terminate(self)
                if self._is_killed:
                    return  # killed during the injected delay: a killed process runs nothing more
            self.server.terminate(reason)
        except BaseException:
            logger.exception("%r raised in terminate(%r)", self, reason)

    # -- links and monitors -----------------------------------------------------------------

    def link(self, other: Process) -> None:
        """Link both ways; if ``other`` is already dead, this process gets ``noproc``."""
        with _link_lock:
            if not other._notified:
                self.links.add(other)
                other.links.add(self)
                return
        self.exit_signal(other.pid, "noproc")

    def unlink(self, other: Process) -> None:
        """Remove the link both ways; no exit signal will follow."""
        with _link_lock:
            self.links.discard(other)
            other.links.discard(self)

    def monitor(self, other: Process) -> int:
        """Watch ``other``: a ``Down`` message arrives when it exits (at once if dead)."""
        ref = next_monitor_ref()
        with _link_lock:
            if not other._notified:
                other.watchers[ref] = self
                return ref
        self.send(Down(ref, other.pid, "noproc"))
        return ref

    def demonitor(self, other: Process, ref: int) -> None:
        """Stop watching; no ``Down`` for ``ref`` is sent after this returns."""
        with _link_lock:
            other.watchers.pop(ref, None)


def _exit_error(process: Process, reason: ExitReason) -> Exception:

    error = ServerExited(process, reason)
    if isinstance(reason, BaseException):
        error.__cause__ = reason
    return error


def _wake_envelope() -> Any:
    # The inbox takes pykka envelopes; a killed process must be woken even after pykka
    # considers it stopped, so this bypasses ActorRef.tell's liveness check.
    from pykka._envelope import Envelope

    return Envelope(WAKE)
