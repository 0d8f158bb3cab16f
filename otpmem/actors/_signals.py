"""What travels through a mailbox: info messages users see, envelopes they do not."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import NORMAL, ExitReason

if TYPE_CHECKING:
    from ._process import Process
    from ._tables import Table


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


IGNORE: Any = _Sentinel("IGNORE")
"""Return from ``init`` to start nothing, without error (OTP's ``ignore``)."""

NO_REPLY: Any = _Sentinel("NO_REPLY")
"""Return from ``handle_call`` to answer later with ``reply(self.caller(), value)``."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Return from a handler to stop the server with ``reason`` (after replying ``reply``)."""

    reason: ExitReason = NORMAL
    reply: Any = None


class Pid(int):
    """A process id, unique per incarnation: a restarted server gets a new one."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"<0.{int(self)}.0>"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class Exit:
    """Info message to a process that traps exits: a linked process ``pid`` exited."""

    pid: Pid
    reason: ExitReason


@dataclass(frozen=True, slots=True)
class Down:
    """Info message to a monitoring process: the monitored process ``pid`` exited."""

    ref: int
    pid: Pid
    reason: ExitReason


@dataclass(frozen=True, slots=True)
class TableTransfer:
    """Info message to a table's new owner (OTP's ``'ETS-TRANSFER'``)."""

    table: Table[Any, Any]
    from_pid: Pid
    data: Any


class Slot:
    """A one-shot reply slot: the first ``set`` or ``fail`` wins, later ones are dropped.

    A bare lock is the cheapest blocking primitive in CPython; ``itertools.count`` gives an
    atomic test-and-set under the GIL, so a late reply after a timeout cannot clobber anything.
    """

    __slots__ = ("_claim", "_done", "error", "value")

    def __init__(self) -> None:
        self._claim = itertools.count().__next__
        self._done = threading.Lock()
        self._done.acquire()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any) -> bool:
        """Store the reply; False if the slot was already answered."""
        if self._claim():
            return False
        self.value = value
        self._done.release()
        return True

    def fail(self, error: BaseException) -> bool:
        """Store an error for the waiter to raise; False if already answered."""
        if self._claim():
            return False
        self.error = error
        self._done.release()
        return True

    def wait(self, timeout: float | None) -> bool:
        """Block until answered; False on timeout. ``None`` waits forever."""
        return self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0))


class CallEnvelope:
    """A call in flight: its payload, where to reply, and who asked."""

    __slots__ = ("caller", "payload", "slot")

    def __init__(self, payload: Any, slot: Slot, caller: Process | None) -> None:
        self.payload = payload
        self.slot = slot
        self.caller = caller


class CastEnvelope:
    """A cast: handled by ``handle_cast``, never answered."""

    __slots__ = ("payload",)

    def __init__(self, payload: Any) -> None:
        self.payload = payload


@dataclass(frozen=True, slots=True)
class StopRequest:
    """Orderly stop, queued behind earlier messages like OTP's ``gen_server:stop``."""

    reason: ExitReason


@dataclass(frozen=True, slots=True)
class CrashRequest:
    """Injected crash, queued behind earlier messages; ``terminate`` runs."""

    reason: ExitReason


class Wake:
    """Wakes an idle process so that it notices it was killed."""

    __slots__ = ()


WAKE = Wake()
