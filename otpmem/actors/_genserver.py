"""GenServer: OTP's generic server as a lightweight process, and its deferred replies."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from ._errors import ExitReason, Killed, short_repr
from ._handle import Handle
from ._node import check_not_killed
from ._process import Process
from ._scheduler import running_process
from ._signals import Pid, Slot

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
