"""Processes: a mailbox on the schedulers, with a pid, a start, and one way to die.

Every exit path (a handler raising, an orderly stop, a shutdown or exit signal, a brutal
kill) ends in ``Process._exit``, which runs once and in OTP's order: terminate callback,
release what the process owned (tables go to their heir, names are freed), fail pending
calls, notify links and monitors, then set ``exited``. A process therefore never learns of a
death before the dead process's resources are free to take.

Signals do not queue behind messages: a kill, a shutdown (``request_shutdown``) or an exit
signal from the parent takes effect after the message being handled now, whatever waits
in the mailbox; a process suspended in a wait is woken by a kill at once. Its links and
monitors, and what an exit signal does to it, are its other half (``_links.Linked``).

Its life is four flags, each set once: ``killed`` (nothing more may happen on its behalf),
``dead`` (exiting: no new call is accepted), ``_finished`` (letting go of what it owned),
``told`` (its links and watchers know); then ``exited``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _mailbox, _names
from ._errors import (
    KILLED,
    NORMAL,
    ExitReason,
    InitFailed,
    Killed,
    ServerExited,
    StartIgnored,
    short_repr,
)
from ._guest import run_here
from ._links import Linked, link_lock
from ._node import READY_POLL, _pid_counter, install_exit_hook, live_table
from ._scheduler import (
    IDLE,
    QUEUED,
    Scheduler,
    dedicated_scheduler,
    in_runner,
    monotonic,
    poke,
    retire,
    running_process,
    wake,
)
from ._signals import IGNORE, WAKE, CallEnvelope, Pid, StopRequest
from ._waits import Event, OneShot

if TYPE_CHECKING:
    from ._genserver import GenServer
    from ._tables import Table
    from .faults import FaultPlan

logger = logging.getLogger("otpmem.actors")


_READY = Event()
_READY.set()


class Process(Linked):
    """One incarnation of a server: its identity, its mailbox, its lifecycle."""

    __slots__ = (
        "__weakref__",
        "_args",
        "_finished",
        "_initialized",
        "_kwargs",
        "_lock",
        "_shutdown",
        "_started",
        "abandoned",
        "cleanups",
        "current_call",
        "dead",
        "exit_reason",
        "exited",
        "faults",
        "home",
        "kill_event",
        "kill_reason",
        "killed",
        "mailbox",
        "name",
        "parent",
        "pending",
        "pid",
        "ready",
        "run_lock",
        "run_state",
        "server",
        "tables",
        "waiting",
    )

    def __init__(
        self,
        server: GenServer[Any],
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
        self.mailbox: deque[Any] = deque()
        self.run_state = IDLE
        self.run_lock = threading.Lock()
        # A dedicated thread keeps the process's timers and waits alive whatever other
        # processes do to the shared schedulers (a supervisor must be able to kill a child
        # that holds a thread).
        self.home: Scheduler | None = (
            dedicated_scheduler(str(self.pid)) if server.dedicated_thread else None
        )
        self.waiting: OneShot | None = None
        # The wait a kill cut short (a call's reply, blocking work's answer): the work
        # behind it may still finish, e.g. a store write already sent.
        self.abandoned: OneShot | None = None
        self.exited = Event()
        # Set once init has returned: direct readers of a server's state wait for it, since a
        # name is visible (and calls queue) from before init runs, as in OTP.
        self.ready = Event()
        self.kill_event = Event()
        self.exit_reason: ExitReason = None
        self.tables: list[Table[Any, Any]] = []
        self.cleanups: list[Callable[[], None]] = []
        self.pending: set[OneShot] = set()
        self.dead = False
        self.killed = False
        self.kill_reason: ExitReason = None
        self.current_call: CallEnvelope | None = None
        self._args = args
        self._kwargs = kwargs
        self._lock = threading.Lock()
        self._finished = False
        self._initialized = False
        # The half in _links, set here: one call fewer per spawn.
        self.trap_exits = server.trap_exits
        self.links = set()
        self.watchers = {}
        self.told = False
        self._shutdown: ExitReason = None
        self._started: OneShot | None = OneShot()
        server._process = self

    def __repr__(self) -> str:
        label = type(self.server).__name__
        return f"<{label} {self.name} {self.pid}>" if self.name else f"<{label} {self.pid}>"

    @property
    def kind(self) -> str:
        """What observers list it as: its server's ``kind``, else its class's name in lower case."""
        server = type(self.server)
        return server.kind or server.__name__.lower()

    # -- starting ---------------------------------------------------------------------------

    def start(self, name: str | None, timeout: float | None) -> None:
        """Queue ``init`` on a scheduler and wait for it (OTP's init_ack); raise if it failed."""
        if name is not None:
            _names.reserve(name, self)
        if self.parent is not None:
            with link_lock:
                self.links.add(self.parent)
                self.parent.links.add(self)
        live_table.add(self)
        install_exit_hook()
        self.run_state = QUEUED
        started = self._started  # init lets go of it once answered (see _answer_start)
        assert started is not None
        if self.home is None and not in_runner():
            in_time = run_here(self, timeout, self._give_up_start)
        else:
            wake(self)
            in_time = started.wait(timeout)
        if not in_time:
            self._give_up_start()
            self.kill(KILLED, grace=1.0)
            raise InitFailed(repr(self), f"init did not finish within {timeout} s")
        if started.error is not None:
            raise started.error

    def _give_up_start(self) -> None:
        # As proc_lib does: unlink first, so the starter is told by the error only.
        if self.parent is not None:
            self.parent.unlink(self)
        self.signal_kill(KILLED)

    def _run_init(self) -> None:
        server = type(self.server).__name__
        try:
            if self.faults is not None:
                self.faults._before_init(self)
            result = self.server.init(*self._args, **self._kwargs)
        except BaseException as exc:
            if self.killed:
                self._exit(self.kill_reason, run_terminate=False)
                self._answer_start(InitFailed(server, self.kill_reason))
            else:
                self._abort_start(exc, InitFailed(server, exc), exc)
            return
        if self.killed:
            self._exit(self.kill_reason, run_terminate=False)
            self._answer_start(InitFailed(server, self.kill_reason))
        elif result is IGNORE:
            self._abort_start(NORMAL, StartIgnored(server), None)
        else:
            self.ready.set()
            # Set for good: every process that started shares one set event from now on.
            self.ready = _READY
            self._answer_start(None)

    def _answer_start(self, error: BaseException | None) -> None:
        # Let go of the start's slot once answered: a process lives on for long after its
        # start, and a million idle agents would keep a million spent slots (a lock and a
        # counter each) for the cyclic GC to walk.
        started, self._started = self._started, None
        if started is None:
            return
        if error is None:
            started.set(None)
        else:
            started.fail(error)

    def _abort_start(
        self, reason: ExitReason, error: Exception, cause: BaseException | None
    ) -> None:
        # The starter hears of the failure from start_link itself, so no exit signal goes to
        # it as well (OTP's init_fail).
        if self.parent is not None:
            self.unlink(self.parent)
        self._exit(reason, run_terminate=False)
        error.__cause__ = cause
        self._answer_start(error)

    # -- the mailbox ------------------------------------------------------------------------

    def send(self, message: Any) -> bool:
        """Put ``message`` in the mailbox; False if the process is gone."""
        if self._finished:
            return False
        self.mailbox.append(message)
        if self.run_state == IDLE:
            poke(self)
        return True

    def run_batch(self) -> None:
        """Handle messages until the mailbox is empty or a batch is done (on a runner)."""
        _mailbox.run_batch(self)

    # -- signals ----------------------------------------------------------------------------

    def wait_ready(self, timeout: float | None) -> bool:
        """Wait until ``init`` has returned; False at once if the process exits first."""
        deadline = None if timeout is None else monotonic() + timeout
        while not self.ready.wait(READY_POLL):
            if self.exited.is_set() or (deadline is not None and monotonic() > deadline):
                return self.ready.is_set()
        return True

    def request_stop(self, reason: ExitReason) -> bool:
        """Queue an orderly stop behind the messages already in the mailbox."""
        return not self.dead and self.send(StopRequest(reason))

    def request_shutdown(self, reason: ExitReason) -> bool:
        """An exit signal out of band: exit after the current message, ``terminate`` runs.

        Whatever is queued is not handled (its callers get ``ServerExited``), as an OTP
        process that is sent ``exit(Pid, shutdown)`` does not first drain its mailbox.
        """
        with self._lock:
            if self.dead:
                return False
            if self._shutdown is None:
                self._shutdown = reason
        self.send(WAKE)
        return True

    def kill(self, reason: ExitReason = KILLED, grace: float | None = 1.0) -> None:
        """Kill without running ``terminate``; wait up to ``grace`` s for it to be dead.

        A process suspended in a wait dies at once. A handler that blocks its thread in
        native code cannot be pre-empted in Python: after ``grace`` the process is declared
        dead from outside (tables to their heir, names freed, links told, pending calls
        failed), and whatever its thread still does fails with ``Killed``.
        """
        self.signal_kill(reason)
        if running_process() is self:
            self._exit(reason, run_terminate=False)
            return
        if not self.exited.wait(grace):
            logger.error(
                "%r did not return from its handler within %s s of being killed; it is "
                "declared dead, and its thread can no longer reach any process or table",
                self,
                grace,
            )
            with self._lock:
                self.dead = True
            self._finish(reason)

    def signal_kill(self, reason: ExitReason) -> None:
        """Mark the process killed and wake it; returns at once."""
        with self._lock:
            if self._finished or self.killed:
                return
            self.killed = True
            self.kill_reason = reason
        # Cuts short the waits of fault plans (slow init, slow terminate).
        self.kill_event.set()
        waiting = self.waiting
        if waiting is not None:
            waiting.time_out()  # a suspended process wakes to find itself killed
        self.send(WAKE)

    # -- dying ------------------------------------------------------------------------------

    def _exit(self, reason: ExitReason, run_terminate: bool) -> bool:
        with self._lock:
            if self.dead:
                return False
            self.dead = True
        if run_terminate:
            self._run_terminate(reason)
        return self._finish(reason)

    def _finish(self, reason: ExitReason) -> bool:
        # Runs once: on the process's runner, or on a killer's when the handler is stuck.
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            if self.killed:
                reason = self.kill_reason  # a kill overrides the reason of an exit in progress
        while self.cleanups:
            cleanup = self.cleanups.pop()
            try:
                cleanup()
            except Exception:
                logger.exception("%r: exit cleanup %r failed", self, cleanup)
        from ._heirs import release_tables

        release_tables(self)
        _names.release(self)
        self.exit_reason = reason
        error = _exit_error(self, reason)
        for slot in list(self.pending):
            slot.fail(error)
        self.pending.clear()
        for message in _drain(self.mailbox):
            if type(message) is CallEnvelope:
                message.slot.fail(error)
        live_table.remove(self)
        self.tell_exit(reason)
        # Set last: whoever waits on `exited` finds the exit signals already in the mailboxes
        # of links and monitors, so a call made after kill() returns sees the restart.
        self.exited.set()
        if self.home is not None and self.home.dedicated:
            retire(self.home)
        return True

    def _run_terminate(self, reason: ExitReason) -> None:
        try:
            if self.faults is not None:
                self.faults._before_terminate(self)
                if self.killed:
                    return  # killed during the injected delay: a killed process runs nothing more
            self.server.terminate(reason)
        except Killed:
            pass
        except BaseException:
            logger.exception("%r raised in terminate(%s)", self, short_repr(reason))


def _drain(mailbox: deque[Any]) -> list[Any]:
    drained = []
    while mailbox:
        try:
            drained.append(mailbox.popleft())
        except IndexError:
            break
    return drained


def _exit_error(process: Process, reason: ExitReason) -> Exception:
    error = ServerExited(process, reason)
    if isinstance(reason, BaseException):
        error.__cause__ = reason
    return error
