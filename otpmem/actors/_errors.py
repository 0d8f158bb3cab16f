"""Errors of the runtime, and the vocabulary of exit reasons.

An exit reason is ``"normal"``, ``"shutdown"``, ``("shutdown", detail)``, ``"killed"``,
or anything else (usually the exception that crashed the server).
"""

from __future__ import annotations

from typing import Any

# The runtime describes requests and exit reasons with the one bounded repr; its modules
# import it from here.
from ..reprs import short_repr as short_repr

ExitReason = Any
"""A process's exit reason: a string, a ``("shutdown", detail)`` tuple or an exception."""

NORMAL = "normal"
SHUTDOWN = "shutdown"
KILLED = "killed"


def is_reason(reason: ExitReason, name: str) -> bool:
    """True if ``reason`` is the str ``name`` (``NORMAL``, ``SHUTDOWN``, ``KILLED``).

    An exit reason is whatever a process exited with, a caller's object included: only an
    exact str is compared, so no reason's own ``__eq__`` runs on a dying process's path.
    """
    return type(reason) is str and reason == name


def is_shutdown(reason: ExitReason) -> bool:
    """True for ``"shutdown"`` and ``("shutdown", detail)``."""
    return is_reason(reason, SHUTDOWN) or (
        type(reason) is tuple and len(reason) == 2 and is_reason(reason[0], SHUTDOWN)
    )


def is_normal_exit(reason: ExitReason) -> bool:
    """True for the reasons OTP treats as a clean exit: normal, shutdown, (shutdown, x)."""
    return is_reason(reason, NORMAL) or is_shutdown(reason)


class ActorError(Exception):
    """Base class of every error the runtime raises."""


class NoProcess(ActorError):
    """The target is dead, or no process is registered under the name."""

    def __init__(self, target: object) -> None:
        super().__init__(
            f"no process: {target!r} is not running "
            "(it exited, was never started, or the name is not registered)"
        )
        self.target = target


class CallTimeout(ActorError, TimeoutError):
    """A call, stop or start did not complete within its timeout; the server is untouched."""

    def __init__(self, target: object, timeout: float | None, what: str = "call") -> None:
        super().__init__(
            f"{what} to {target!r} got no answer within {timeout} s; the server may be busy or "
            "deadlocked (a call back to a process that is calling you waits forever)"
        )
        self.target = target
        self.timeout = timeout


class CallingSelf(ActorError):
    """A server called itself; in OTP this deadlocks, so it is refused at once."""

    def __init__(self, target: object) -> None:
        super().__init__(
            f"{target!r} called itself: the call could never be answered; "
            "do the work inline or cast to yourself instead"
        )
        self.target = target


class ServerExited(ActorError):
    """The server exited while the call was pending; ``reason`` is its exit reason."""

    def __init__(self, target: object, reason: ExitReason) -> None:
        # Built on the dying server's thread: a reason that cannot be described in a few
        # lines must not stop it from telling its callers and links that it is gone.
        super().__init__(f"{target!r} exited with reason {short_repr(reason)} before replying")
        self.target = target
        self.reason = reason


class AlreadyStarted(ActorError):
    """A name is already registered to a live process."""

    def __init__(self, name: str, holder: object) -> None:
        super().__init__(f"name {name!r} is already registered to {holder!r}")
        self.name = name
        self.holder = holder


class InitFailed(ActorError):
    """A server's ``init`` raised (or the start timed out); nothing was left running."""

    def __init__(self, server: str, reason: ExitReason) -> None:
        super().__init__(f"{server} failed to start: {short_repr(reason)}")
        self.server = server
        self.reason = reason


class StartIgnored(ActorError):
    """A server's ``init`` returned ``IGNORE``: there is no process, by its own choice."""

    def __init__(self, server: str) -> None:
        super().__init__(f"{server}.init returned IGNORE: no process was started")
        self.server = server


class NotInProcess(ActorError):
    """An operation that needs a calling process (link, monitor) ran outside any actor."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} must be called from inside a running server")


class TableError(ActorError):
    """A table was used against its ownership rules, or after it was deleted."""


class Killed(BaseException):
    """Raised in a process that was killed, at its next runtime operation or wait.

    A ``BaseException``, so an ``except Exception`` in user code does not swallow it: a
    process declared dead does nothing more, whatever its handler was doing.
    """

    def __init__(self, process: object) -> None:
        super().__init__(f"{process!r} was killed: it may not call, send, link or write anymore")
        self.process = process
