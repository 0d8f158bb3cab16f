"""The runtime: OTP's generic server, links, names and tables, as lightweight processes."""

from collections.abc import Callable
from typing import Any, TypeVar

from ._errors import (
    KILLED,
    NORMAL,
    SHUTDOWN,
    ActorError,
    AlreadyStarted,
    CallingSelf,
    CallTimeout,
    ExitReason,
    InitFailed,
    Killed,
    NoProcess,
    NotInProcess,
    ServerExited,
    StartIgnored,
    TableError,
    is_normal_exit,
    is_reason,
    is_shutdown,
)
from ._genserver import GenServer, ReplyTo, reply, reply_error
from ._handle import Handle, demonitor, link, monitor, self_handle, unlink
from ._heirs import adopt_kept_tables, new_table
from ._keeper import TableKeeper, claim_table
from ._names import registered
from ._node import current, live_processes, on_exit, stop_all
from ._requests import is_tagged, split_request
from ._scheduler import runtime_thread
from ._shell import GreenletActor
from ._signals import IGNORE, NO_REPLY, Down, Exit, Pid, Stop, TableTransfer
from ._sysmon import HogReport, add_hog_listener, remove_hog_listener
from ._tables import Table, give_away, set_heir, writing_for
from ._timers import Timer, cancel_timer, send_after
from ._waits import Event, sleep
from ._waits import run_blocking as _run_blocking

__all__ = [
    "IGNORE",
    "KILLED",
    "NORMAL",
    "NO_REPLY",
    "SHUTDOWN",
    "ActorError",
    "AlreadyStarted",
    "CallTimeout",
    "CallingSelf",
    "Down",
    "Event",
    "Exit",
    "ExitReason",
    "GenServer",
    "GreenletActor",
    "Handle",
    "HogReport",
    "InitFailed",
    "Killed",
    "NoProcess",
    "NotInProcess",
    "Pid",
    "ReplyTo",
    "ServerExited",
    "StartIgnored",
    "Stop",
    "Table",
    "TableError",
    "TableKeeper",
    "TableTransfer",
    "Timer",
    "add_hog_listener",
    "adopt_kept_tables",
    "blocking",
    "cancel_timer",
    "claim_table",
    "current",
    "demonitor",
    "give_away",
    "is_normal_exit",
    "is_reason",
    "is_shutdown",
    "is_tagged",
    "link",
    "live_processes",
    "monitor",
    "new_table",
    "on_exit",
    "register",
    "registered",
    "remove_hog_listener",
    "reply",
    "reply_error",
    "runtime_thread",
    "self_handle",
    "send_after",
    "set_heir",
    "sleep",
    "split_request",
    "stop_all",
    "unlink",
    "unregister",
    "whereis",
    "writing_for",
]


T = TypeVar("T")


def register(name: str, target: Handle) -> None:
    """Register ``target`` under ``name``; ``AlreadyStarted`` if a live process holds it."""
    from . import _names

    _names.reserve(name, target.resolve())


def unregister(name: str) -> None:
    """Remove ``name`` from the registry; ``KeyError`` if it is not registered."""
    from . import _names

    _names.unregister(name)


def whereis(name: str) -> Handle | None:
    """A handle to the process registered as ``name`` right now, or None."""
    from . import _names

    process = _names.lookup(name)
    return None if process is None else type(process.server).handle_class(process)


def blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on the blocking pool; the calling process suspends meanwhile.

    For work that blocks its thread (HTTP, tools, files, fsync): a process that ran it
    inline would hold its scheduler. Off a scheduler (a plain thread), ``fn`` runs inline.
    A process killed while the work is in flight never sees its result.
    """
    result: T = _run_blocking(fn, args, kwargs)
    return result
