"""The runtime: OTP's generic server, links, names and tables, on pykka threads."""

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
    NoProcess,
    NotInProcess,
    ServerExited,
    StartIgnored,
    TableError,
    is_normal_exit,
    is_shutdown,
)
from ._genserver import (
    GenServer,
    Handle,
    ReplyTo,
    demonitor,
    link,
    monitor,
    reply,
    reply_error,
    self_handle,
    unlink,
)
from ._keeper import TableKeeper, claim_table
from ._names import registered
from ._node import live_processes, on_exit, stop_all
from ._signals import IGNORE, NO_REPLY, Down, Exit, Pid, Stop, TableTransfer
from ._tables import Table, adopt_kept_tables, give_away, new_table, set_heir

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
    "Exit",
    "ExitReason",
    "GenServer",
    "Handle",
    "InitFailed",
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
    "adopt_kept_tables",
    "claim_table",
    "demonitor",
    "give_away",
    "is_normal_exit",
    "is_shutdown",
    "link",
    "live_processes",
    "monitor",
    "new_table",
    "on_exit",
    "register",
    "registered",
    "reply",
    "reply_error",
    "self_handle",
    "set_heir",
    "stop_all",
    "unlink",
    "unregister",
    "whereis",
]


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
