"""GenServer: OTP's generic server as a lightweight process, and the Handle that talks to it."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self

from . import _names
from ._errors import (
    NORMAL,
    CallingSelf,
    CallTimeout,
    ExitReason,
    Killed,
    NoProcess,
    NotInProcess,
    short_repr,
)
from ._node import current, next_monitor_ref
from ._process import Process, check_not_killed
from ._scheduler import running_process
from ._signals import CallEnvelope, CastEnvelope, Down, Pid, Slot

if TYPE_CHECKING:
    # PEP 696's defaults reach typing.TypeVar in Python 3.13; mypy reads them from here.
    from typing_extensions import TypeVar

    from .faults import FaultPlan
else:
    from typing import TypeVar

logger = logging.getLogger("otpmem.actors")


class ReplyTo:
    """Where a deferred reply goes: hold it, then ``reply(to, value)`` from any thread."""

    __slots__ = ("_process", "_slot", "caller")

    def __init__(self, process: Process, slot: Slot, caller: Process | None) -> None:
        self._process = process
        self._slot = slot
        self.caller = caller

    @property
    def caller_pid(self) -> Pid | None:
        """The pid of the calling process, or None when a plain thread called."""
        return None if self.caller is None else self.caller.pid


def reply(to: ReplyTo, value: Any) -> bool:
    """Answer a call that returned ``NO_REPLY``; False if it already timed out or failed."""
    check_not_killed()
    to._process.pending.discard(to._slot)
    return to._slot.set(value)


def reply_error(to: ReplyTo, error: BaseException) -> bool:
    """Answer a deferred call with an error the caller will raise."""
    check_not_killed()
    to._process.pending.discard(to._slot)
    return to._slot.fail(error)


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


if TYPE_CHECKING:
    H = TypeVar("H", bound=Handle, default=Handle)
else:
    H = TypeVar("H", bound=Handle)


class GenServer(Generic[H]):
    """A server process with OTP's callbacks. Subclass it, then ``start_link``::

        class Counter(GenServer):
            def init(self, start=0):
                self.n = start
            def handle_call(self, msg):
                self.n += msg
                return self.n

        counter = Counter.start_link(10)
        counter.call(5)  # -> 15
        counter.stop()

    Every callback runs in the server's own process, one message at a time; a callback that
    calls another server suspends its process, never its scheduler thread. An exception
    escaping a callback crashes the server (the caller of a pending call gets
    ``ServerExited``), except the types listed in ``caller_errors``, which go back to the
    caller and leave the server running.

    ``GenServer[MyHandle]`` with ``handle_class = MyHandle`` types what ``start_link``
    returns; a subclass may declare a ``start_link`` of its own signature, which calls
    ``spawn``.
    """

    trap_exits: ClassVar[bool] = False
    """When True, exits of linked processes arrive as ``Exit`` info messages."""

    dedicated_thread: ClassVar[bool] = False
    """When True, the process runs on a thread of its own instead of the shared schedulers:
    for the few servers whose timeouts must hold even while other handlers block their
    threads (supervisors), or that wait in native code themselves."""

    caller_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    """Exception types that mean "the caller asked wrongly": returned, not crashed on."""

    if TYPE_CHECKING:
        # Typed by the handle parameter, so a subclass's handle_class must match it.
        handle_class: type[H]
    else:
        handle_class = Handle
    """The client class that ``start_link`` returns."""

    kind: ClassVar[str | None] = None
    """What observers list the server as ("supervisor", "agent", ...); None: its class's
    name in lower case (see ``Process.kind``)."""

    _process: Process

    def init(self, *args: Any, **kwargs: Any) -> Any:
        """Set up state on the server's thread; return ``IGNORE`` to start nothing."""
        return None

    def handle_call(self, message: Any) -> Any:
        """Answer a call: return the reply, ``Stop(...)`` or ``NO_REPLY``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not handle calls: {short_repr(message)}"
        )

    def handle_cast(self, message: Any) -> Any:
        """Handle a cast; return ``Stop(...)`` to stop."""
        logger.warning("%r got an unexpected cast: %s", self._process, short_repr(message))

    def handle_info(self, message: Any) -> Any:
        """Handle any other message (``Exit``, ``Down``, ``TableTransfer``, ...)."""
        logger.warning("%r got an unexpected message: %s", self._process, short_repr(message))

    def terminate(self, reason: ExitReason) -> None:
        """Clean up before exit (not run after a kill or an untrapped exit signal)."""

    # -- what a running server may use -----------------------------------------------------

    @property
    def pid(self) -> Pid:
        """This incarnation's pid."""
        return self._process.pid

    @property
    def handle(self) -> H:
        """A handle to this incarnation (give it to others; do not call it yourself)."""
        return type(self).handle_class(self._process)

    def caller(self) -> ReplyTo:
        """The call being handled, to answer later with ``reply`` after ``NO_REPLY``."""
        envelope = self._process.current_call
        if envelope is None:
            raise RuntimeError("caller() is only meaningful inside handle_call")
        return ReplyTo(self._process, envelope.slot, envelope.caller)

    @classmethod
    def named(cls, name: str) -> H:
        """A client handle (of ``handle_class``) that finds the server by name at every use."""
        return cls.handle_class.named(name)

    # -- starting ---------------------------------------------------------------------------

    @classmethod
    def start_link(cls, *args: Any, **kwargs: Any) -> H:
        """Start a server linked to the calling process and return its handle after ``init``.

        The arguments go to ``init``, but for three keywords of the runtime's own: ``name``
        (register the server under it), ``faults`` (a ``FaultPlan``) and ``start_timeout``
        (seconds ``init`` may take; 5 by default). Raises ``InitFailed`` if ``init`` raised
        or timed out, ``StartIgnored`` if it returned ``IGNORE``, and ``AlreadyStarted`` if
        ``name`` is taken.
        """
        name = kwargs.pop("name", None)
        faults = kwargs.pop("faults", None)
        start_timeout = kwargs.pop("start_timeout", 5.0)
        return cls.spawn(
            args, kwargs, link=True, name=name, faults=faults, start_timeout=start_timeout
        )

    @classmethod
    def start(cls, *args: Any, **kwargs: Any) -> H:
        """Like ``start_link``, without the link (nobody is told when it exits)."""
        name = kwargs.pop("name", None)
        faults = kwargs.pop("faults", None)
        start_timeout = kwargs.pop("start_timeout", 5.0)
        return cls.spawn(
            args, kwargs, link=False, name=name, faults=faults, start_timeout=start_timeout
        )

    @classmethod
    def spawn(
        cls,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        link: bool,
        name: str | None = None,
        faults: FaultPlan | None = None,
        start_timeout: float | None = 5.0,
    ) -> H:
        """Start a server with ``init(*args, **kwargs)``; what ``start_link`` and ``start`` do.

        For a subclass's own ``start_link``: ``link`` links it to the calling process (if
        any), ``name``, ``faults`` and ``start_timeout`` are as for ``start_link``.
        """
        me = running_process()
        if me is not None and me.killed:
            raise Killed(me)
        server = cls.__new__(cls)
        process = Process(server, args, kwargs, me if link else None, faults)
        process.start(name, start_timeout)
        return cls.handle_class(process)

    @classmethod
    def _spawn(
        cls,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        parent: Process | None,
        name: str | None,
        faults: FaultPlan | None,
        start_timeout: float | None,
    ) -> H:
        # The old positional form, for agents/agent.py until it calls spawn; then it goes.
        return cls.spawn(
            args,
            kwargs,
            link=parent is not None,
            name=name,
            faults=faults,
            start_timeout=start_timeout,
        )


def _calling_process(what: str) -> Process:
    process = current()
    if process is None:
        raise NotInProcess(what)
    check_not_killed()
    return process


def link(target: Handle) -> None:
    """Link the calling server to ``target`` (both die of the other's crash unless trapping)."""
    me = _calling_process("link")
    process = target.process_or_none()
    if process is None:
        me.exit_signal(Pid(0), "noproc")
    else:
        me.link(process)


def unlink(target: Handle) -> None:
    """Remove a link of the calling server."""
    _calling_process("unlink").unlink(target.resolve())


def monitor(target: Handle) -> int:
    """Monitor ``target`` from the calling server: a ``Down(ref, pid, reason)`` follows its exit."""
    watcher = _calling_process("monitor")
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
        _calling_process("demonitor").demonitor(process, ref)


def self_handle() -> Handle:
    """A handle to the calling server."""
    return Handle(_calling_process("self_handle"))
