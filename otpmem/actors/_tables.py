"""Tables: dicts owned by a process, the ETS analogue, with OTP's heir and give_away.

A table dies with its owner unless it has an heir: then ownership passes to the heir, which
receives a ``TableTransfer`` message. Only the owner's thread writes ("protected" access);
any thread reads, and sees every write the owner finished.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from ._errors import NoProcess, NotInProcess, TableError, short_repr
from ._genserver import GenServer, Handle
from ._node import current
from ._process import Process
from ._signals import TableTransfer

K = TypeVar("K")
V = TypeVar("V")

# Ownership moves under one lock so that a table never goes to an heir that is itself
# halfway through releasing its own tables (it would be lost with nobody owning it).
_ownership = threading.Lock()


class Table(Generic[K, V]):
    """A mapping owned by one process. Create it with ``new_table`` inside a server."""

    __slots__ = ("_data", "_owner", "heir", "heir_data", "name")

    def __init__(self, name: str, owner: Process, heir: Handle | None, heir_data: Any) -> None:
        self.name = name
        self._owner: Process | None = owner
        self._data: dict[K, V] | None = {}
        self.heir = heir
        self.heir_data = heir_data

    def __repr__(self) -> str:
        state = "deleted" if self._data is None else f"owner={self._owner!r}"
        return f"<Table {self.name!r} {state}>"

    @property
    def owner(self) -> Process | None:
        """The owning process; None once the table is deleted."""
        return self._owner

    @property
    def deleted(self) -> bool:
        """True once the table died with its owner."""
        return self._data is None

    def _read(self) -> dict[K, V]:
        data = self._data
        if data is None:
            raise TableError(f"table {self.name!r} was deleted when its owner exited")
        return data

    def _write(self) -> dict[K, V]:
        data = self._read()
        owner = self._owner
        if owner is None or owner.thread is not threading.current_thread():
            raise TableError(
                f"table {self.name!r} is protected: only its owner {owner!r} may write it"
            )
        return data

    def mapping(self) -> dict[K, V]:
        """The live dict, for readers that look up often: read it, never write it.

        It is emptied when the table is deleted, so a miss must be checked with
        ``deleted``; a hit is always live data.
        """
        return self._read()

    def get(self, key: K, default: Any = None) -> Any:
        """The value under ``key``, or ``default``."""
        return self._read().get(key, default)

    def __getitem__(self, key: K) -> V:
        return self._read()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._read()

    def __len__(self) -> int:
        return len(self._read())

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._read()))

    def keys(self) -> list[K]:
        """A snapshot of the keys."""
        return list(self._read())

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the items."""
        return list(self._read().items())

    def __setitem__(self, key: K, value: V) -> None:
        self._write()[key] = value

    def __delitem__(self, key: K) -> None:
        del self._write()[key]

    def pop(self, key: K, default: Any = None) -> Any:
        """Remove ``key`` and return its value (owner only)."""
        return self._write().pop(key, default)

    def clear(self) -> None:
        """Remove every key (owner only)."""
        self._write().clear()


def new_table(name: str, *, heir: Handle | None = None, heir_data: Any = None) -> Table[Any, Any]:
    """Create a table owned by the calling server (OTP's ``ets:new`` with ``{heir, ...}``)."""
    owner = current()
    if owner is None:
        raise NotInProcess("new_table")
    table: Table[Any, Any] = Table(name, owner, heir, heir_data)
    with _ownership:
        owner.tables.append(table)
    return table


def set_heir(table: Table[Any, Any], heir: Handle | None, heir_data: Any = None) -> None:
    """Change who inherits ``table`` (owner only, as OTP's ``ets:setopts``)."""
    _check_owner(table, "set_heir")
    table.heir = heir
    table.heir_data = heir_data


def give_away(table: Table[Any, Any], to: Handle, gift: Any = None) -> None:
    """Hand ``table`` to another live process, which gets ``TableTransfer(table, pid, gift)``."""
    owner = _check_owner(table, "give_away")
    receiver = to.resolve()
    if receiver is owner:
        raise TableError(f"{owner!r} cannot give table {table.name!r} to itself")
    if not _transfer(table, owner, receiver, gift):
        raise NoProcess(to)


def _check_owner(table: Table[Any, Any], what: str) -> Process:
    owner = table.owner
    if owner is None or owner is not current():
        raise TableError(f"{what}: only the owner of table {table.name!r} ({owner!r}) may do this")
    return owner


def _transfer(
    table: Table[Any, Any], owner: Process, receiver: Process, data: Any, notify: bool = True
) -> bool:
    with _ownership:
        if receiver.dead:
            return False
        if table in owner.tables:
            owner.tables.remove(table)
        table._owner = receiver
        receiver.tables.append(table)
    if notify:
        receiver.send(TableTransfer(table, owner.pid, data))
    return True


def release_tables(owner: Process) -> None:
    """On exit: pass each table to its live heir, or delete it."""
    with _ownership:
        tables = list(owner.tables)
        owner.tables.clear()
    for table in tables:
        heir = None
        if table.heir is not None:
            try:
                heir = table.heir.resolve()
            except NoProcess:
                heir = None
        if (
            heir is not None
            and heir is not owner
            and _transfer(table, owner, heir, table.heir_data)
        ):
            continue
        with _ownership:
            data, table._owner, table._data = table._data, None, None
        if data is not None:
            # Emptied too, so a reader holding the mapping (see Table.mapping) finds nothing
            # rather than a dead owner's data.
            data.clear()


class TableKeeper(GenServer):
    """An heir that holds the tables of crashed owners until their successor claims them.

    Start it before the owners (e.g. first child of a ``rest_for_one`` supervisor) and name
    it as their heir; a restarted owner calls ``claim_table(keeper, name)`` in ``init``.
    """

    caller_errors = (ValueError,)

    def init(self) -> None:
        self.kept: dict[str, Table[Any, Any]] = {}

    def handle_info(self, message: Any) -> Any:
        if isinstance(message, TableTransfer):
            self.kept[message.table.name] = message.table
            return None
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        if not (isinstance(message, tuple) and len(message) == 2):
            raise ValueError(f"TableKeeper does not understand {short_repr(message)}")
        kind, name = message
        if kind == "claim":
            table = self.kept.pop(name, None)
            caller = self.caller().caller
            if table is None or caller is None:
                return None
            # The claimer gets the table as the reply, so no TableTransfer message follows.
            if not _transfer(table, self._process, caller, None, notify=False):
                self.kept[name] = table
                return None
            return table
        if kind == "held":
            return sorted(self.kept)
        raise ValueError(f"TableKeeper does not understand {short_repr(message)}")


def claim_table(keeper: Handle, name: str, timeout: float = 5.0) -> Table[Any, Any] | None:
    """From inside a server: take back table ``name`` from ``keeper`` (None if it holds none)."""
    if current() is None:
        raise NotInProcess("claim_table")
    table: Table[Any, Any] | None = keeper.call(("claim", name), timeout=timeout)
    return table
