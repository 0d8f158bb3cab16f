"""Tables: dicts owned by a process, the ETS analogue, with OTP's heir and give_away.

Only the owner's thread writes ("protected" access); any thread reads, and sees every write
the owner finished. A table changes owners by ``give_away``, or when its owner exits: who
gets it then (its heir, the owner's supervisor, or nobody) is in ``_heirs``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

from ._errors import Killed, NoProcess, TableError
from ._handle import Handle
from ._node import current
from ._process import Process
from ._signals import TableTransfer

K = TypeVar("K")
V = TypeVar("V")

# Ownership moves under one lock so that a table never goes to an heir that is itself
# halfway through releasing its own tables (it would be lost with nobody owning it).
# The default heirs' bookkeeping (_heirs) is guarded by it too, for the same reason.
ownership = threading.Lock()
# The owner a thread writes for, inside ``writing_for`` (ETS's public tables, narrowed:
# the owner lets a caller write under a lock of its own, which its exit takes first).
_acting = threading.local()


class Table(Generic[K, V]):
    """A mapping owned by one process. Create it with ``new_table`` inside a server."""

    __slots__ = ("_data", "_owner", "adopted", "heir", "heir_data", "name")

    def __init__(self, name: str, owner: Process, heir: Handle | None, heir_data: Any) -> None:
        self.name = name
        self._owner: Process | None = owner
        self._data: dict[K, V] | None = {}
        self.heir = heir
        self.heir_data = heir_data
        self.adopted = False
        """True when its owner got it back from its supervisor, kept from an earlier
        incarnation, rather than creating it."""

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
        writer = current()
        if writer is not None and writer.killed:
            raise Killed(writer)
        data = self._read()
        owner = self._owner
        if owner is None or (owner is not writer and getattr(_acting, "owner", None) is not owner):
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

    def update(self, puts: dict[K, V], deletes: Iterable[K] = ()) -> None:
        """Write several keys and delete others as one step (owner only): a kill arriving
        meanwhile lands before all of them or after all of them, never between two."""
        data = self._write()
        data.update(puts)
        for key in deletes:
            data.pop(key, None)

    def clear(self) -> None:
        """Remove every key (owner only)."""
        self._write().clear()


class writing_for:
    """Let this thread write ``owner``'s tables, as the owner, until the block ends.

    For an owner that takes writes on its callers' threads (a store's adds, say): the
    owner serialises those writers under a lock of its own, checks it is alive under that
    lock, and takes the lock on its way out before its tables move, so no such write lands
    after it is gone. (A class, not a generator: it is on the hot path of every write.)
    """

    __slots__ = ("_before", "_owner")

    def __init__(self, owner: Process) -> None:
        self._owner = owner
        self._before: Process | None = None

    def __enter__(self) -> None:
        self._before = getattr(_acting, "owner", None)
        _acting.owner = self._owner

    def __exit__(self, *exc: object) -> None:
        _acting.owner = self._before


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
    if not transfer(table, owner, receiver, gift):
        raise NoProcess(to)


def _check_owner(table: Table[Any, Any], what: str) -> Process:
    owner = table.owner
    if owner is None or owner is not current():
        raise TableError(f"{what}: only the owner of table {table.name!r} ({owner!r}) may do this")
    return owner


def transfer(
    table: Table[Any, Any], owner: Process, receiver: Process, data: Any, notify: bool = True
) -> bool:
    """Give ``table`` to a live ``receiver`` (told by a ``TableTransfer`` if ``notify``)."""
    with ownership:
        if receiver.dead:
            return False
        move(table, receiver)
        table.adopted = False
    if notify:
        receiver.send(TableTransfer(table, owner.pid, data))
    return True


def move(table: Table[Any, Any], to: Process) -> None:
    """Make ``to`` the owner of ``table``; the ownership lock is held."""
    owner = table._owner
    if owner is not None and table in owner.tables:
        owner.tables.remove(table)
    table._owner = to
    to.tables.append(table)


def delete(table: Table[Any, Any]) -> None:
    """Delete ``table`` with its data; the ownership lock is held."""
    owner = table._owner
    if owner is not None and table in owner.tables:
        owner.tables.remove(table)
    data, table._owner, table._data = table._data, None, None
    if data is not None:
        # Emptied too, so a reader holding the mapping (see Table.mapping) finds nothing
        # rather than a dead owner's data.
        data.clear()
