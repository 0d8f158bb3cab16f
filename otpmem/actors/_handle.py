"""Handle: a reference to a server, and what a server does with one (link, monitor)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from . import _names
from ._errors import NORMAL, CallingSelf, CallTimeout, ExitReason, Killed, NoProcess
from ._links import next_monitor_ref
from ._node import calling_process, check_not_killed, current
from ._signals import CallEnvelope, CastEnvelope, Down, Pid, Slot

if TYPE_CHECKING:
    from ._process import Process


class Handle:
    """A reference to a server: by process (one incarnation) or by name (whoever holds it).

    A handle made from a name resolves the name at every call, so it keeps working after
    the server was restarted under that name.
    """

    __slots__ = ("_name", "_process")

    def __init__(self, process: Process | None = None, name: str | None = None) -> None:
        if (process is None) == (name is None):
            raise TypeError("a Handle needs exactly one of process or name")
        self._process = process
        self._name = None if name is None else _names.check_name(name)

    @classmethod
    def named(cls, name: str) -> Self:
        """A handle that looks ``name`` up at every use."""
        return cls(name=name)

    def _target(self) -> object:
        return self._name if self._name is not None else self._process

    def resolve(self) -> Process:
        """The live process behind this handle; ``NoProcess`` if there is none."""
        if self._name is not None:
            process = _names.lookup(self._name)
            if process is None:
                raise NoProcess(self._name)
            return process
        assert self._process is not None
        if self._process.dead:
            raise NoProcess(self._process)
        return self._process

    def process_or_none(self) -> Process | None:
        """The process behind this handle now, or None if a named handle resolves to nothing.

        Unlike ``resolve`` it does not raise: a handle to one incarnation gives it even
        after it exited (its ``dead`` says so).
        """
        if self._name is not None:
            return _names.lookup(self._name)
        return self._process

    @property
    def pid(self) -> Pid | None:
        """The current incarnation's pid (None if a named handle resolves to nothing)."""
        process = self.process_or_none()
        return None if process is None else process.pid

    @property
    def name(self) -> str | None:
        """The registered name of the server, if any."""
        process = self.process_or_none()
        return self._name if process is None else process.name

    @property
    def alive(self) -> bool:
        """True while the process (or the current holder of the name) runs."""
        process = self.process_or_none()
        return process is not None and not process.dead

    @property
    def exit_reason(self) -> ExitReason:
        """The exit reason of a dead incarnation (None while it runs)."""
        process = self.process_or_none()
        return None if process is None else process.exit_reason

    def call(self, message: Any, timeout: float | None = 5.0) -> Any:
        """Send ``message`` to ``handle_call`` and wait for the reply.

        Raises ``CallTimeout`` after ``timeout`` s (``None`` waits forever, rarely right),
        ``NoProcess`` if the server is not running, ``ServerExited`` if it exits first,
        ``CallingSelf`` from the server's own thread, and the server's declared caller
        errors as they were raised.
        """
        me = current()
        if me is not None and me.killed:
            raise Killed(me)
        process = self.resolve()
        if process is me:
            raise CallingSelf(self._target())
        slot = Slot()
        pending = process.pending
        pending.add(slot)
        # Checked after adding: either the exit path sees the slot and fails it, or this
        # check sees `dead`; a call can never be stranded in a dying mailbox.
        if process.dead:
            pending.discard(slot)
            raise NoProcess(self._target())
        process.send(CallEnvelope(message, slot, me))
        if not slot.wait(timeout):
            pending.discard(slot)
            raise CallTimeout(self._target(), timeout)
        if slot.error is not None:
            raise slot.error
        return slot.value

    def cast(self, message: Any) -> None:
        """Send ``message`` to ``handle_cast``; dropped silently if nobody runs (as in OTP)."""
        check_not_killed()
        process = self.process_or_none()
        if process is not None:
            process.send(CastEnvelope(message))

    def send(self, message: Any) -> None:
        """Send ``message`` to ``handle_info`` (Erlang's ``!``); dropped if nobody runs."""
        check_not_killed()
        process = self.process_or_none()
        if process is not None:
            process.send(message)

    def stop(self, reason: ExitReason = NORMAL, timeout: float | None = 5.0) -> None:
        """Stop the server after the messages already queued; ``terminate(reason)`` runs.

        Raises ``NoProcess`` if it is not running and ``CallTimeout`` if it has not exited
        within ``timeout`` s (it still stops when it gets to the request).
        """
        check_not_killed()
        process = self.resolve()
        if process is current():
            raise CallingSelf(self._target())
        if not process.request_stop(reason):
            raise NoProcess(self._target())
        if not process.exited.wait(timeout):
            raise CallTimeout(self._target(), timeout, what="stop")

    def wait(self, timeout: float | None = 5.0) -> ExitReason:
        """Block until this incarnation exits and return its reason; ``CallTimeout`` if not."""
        process = self.process_or_none()
        if process is None:
            raise NoProcess(self._target())
        if not process.exited.wait(timeout):
            raise CallTimeout(self._target(), timeout, what="wait for exit")
        return process.exit_reason

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Handle):
            return NotImplemented
        return self._target() is other._target() or (
            self._name is not None and self._name == other._name
        )

    def __hash__(self) -> int:
        return hash(self._name) if self._name is not None else id(self._process)

    def __repr__(self) -> str:
        if self._name is not None:
            return f"Handle.named({self._name!r})"
        return f"Handle({self._process!r})"


def link(target: Handle) -> None:
    """Link the calling server to ``target`` (both die of the other's crash unless trapping)."""
    me = calling_process("link")
    process = target.process_or_none()
    if process is None:
        me.exit_signal(Pid(0), "noproc")
    else:
        me.link(process)


def unlink(target: Handle) -> None:
    """Remove a link of the calling server."""
    calling_process("unlink").unlink(target.resolve())


def monitor(target: Handle) -> int:
    """Monitor ``target`` from the calling server: a ``Down(ref, pid, reason)`` follows its exit."""
    watcher = calling_process("monitor")
    process = target.process_or_none()
    if process is None:
        ref = next_monitor_ref()
        watcher.send(Down(ref, Pid(0), "noproc"))
        return ref
    return watcher.monitor(process)


def demonitor(target: Handle, ref: int) -> None:
    """Cancel a monitor of the calling server."""
    process = target.process_or_none()
    if process is not None:
        calling_process("demonitor").demonitor(process, ref)


def self_handle() -> Handle:
    """A handle to the calling server."""
    return Handle(calling_process("self_handle"))
