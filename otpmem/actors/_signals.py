"""What travels through a mailbox: info messages users see, envelopes they do not."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import NORMAL, ExitReason
from ._waits import OneShot

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


Slot = OneShot
"""A call's one-shot reply slot (see ``OneShot``)."""


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
