"""Tables: dicts owned by a process, the ETS analogue, with OTP's heir and give_away.

When its owner exits, a table passes to its heir, if that heir is alive (it receives a
``TableTransfer`` message); else to the owner's supervisor, its *default heir*, which keeps
it for the child restarted under the same id: that child's ``new_table`` adopts it (no
message; ``table.adopted`` says so). A supervisor that exits hands what it keeps to its own
supervisor, and it comes back down as the subtree restarts. With no supervisor left to
keep it (an unsupervised owner, a child deleted for good, the root stopping) a table dies
with its owner, as in ETS. Only the owner's thread writes ("protected" access); any thread
reads, and sees every write the owner finished.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from ._errors import Killed, NoProcess, NotInProcess, TableError
from ._handle import Handle
from ._node import current
from ._process import Process
from ._signals import Pid, TableTransfer

K = TypeVar("K")
V = TypeVar("V")

# Ownership moves under one lock so that a table never goes to an heir that is itself
# halfway through releasing its own tables (it would be lost with nobody owning it).
# The default heirs' bookkeeping is guarded by it too, for the same reason.
_ownership = threading.Lock()
_NOBODY: Any = object()  # no child is being started
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


def new_table(name: str, *, heir: Handle | None = None, heir_data: Any = None) -> Table[Any, Any]:
    """Create a table owned by the calling server (OTP's ``ets:new`` with ``{heir, ...}``).

    Called in ``init`` by a child its supervisor is restarting, it returns instead the table
    of that name the child's previous incarnation held (``adopted`` is then True).
    """
    owner = current()
    if owner is None:
        raise NotInProcess("new_table")
    with _ownership:
        tables = _take_offered(owner, name)
        if tables:
            (table,) = tables
            table.heir, table.heir_data = heir, heir_data
            return table
        table = Table(name, owner, heir, heir_data)
        owner.tables.append(table)
    return table


def adopt_kept_tables() -> list[Table[Any, Any]]:
    """From a server's ``init``: every table its supervisor kept for its previous incarnation."""
    owner = current()
    if owner is None:
        raise NotInProcess("adopt_kept_tables")
    with _ownership:
        return _take_offered(owner, None)


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
        _move(table, receiver)
        table.adopted = False
    if notify:
        receiver.send(TableTransfer(table, owner.pid, data))
    return True


def _move(table: Table[Any, Any], to: Process) -> None:
    # The ownership lock is held.
    owner = table._owner
    if owner is not None and table in owner.tables:
        owner.tables.remove(table)
    table._owner = to
    to.tables.append(table)


def _delete(table: Table[Any, Any]) -> None:
    # The ownership lock is held.
    owner = table._owner
    if owner is not None and table in owner.tables:
        owner.tables.remove(table)
    data, table._owner, table._data = table._data, None, None
    if data is not None:
        # Emptied too, so a reader holding the mapping (see Table.mapping) finds nothing
        # rather than a dead owner's data.
        data.clear()


def release_tables(owner: Process) -> None:
    """On exit: each table goes to its live heir, else to the owner's supervisor, else dies."""
    with _ownership:
        tables = list(owner.tables)
        owner.tables.clear()
        kept = _Kept()
        mine = _default_heirs.pop(owner, None)
        if mine is not None:
            # What this supervisor kept for its children travels up with it, explicit heirs
            # or not: those heirs were its children, and are gone.
            mine._closed = True
            kept.below = mine.kept
    held = {id(t) for t in kept.all_tables()}
    for table in tables:
        if id(table) in held:
            continue
        heir = _live_heir(table, owner)
        if heir is not None and _transfer(table, owner, heir, table.heir_data):
            continue
        with _ownership:
            if table.name in kept.tables:
                _delete(kept.tables[table.name])  # kept by name: the newer of two wins
            kept.tables[table.name] = table
    with _ownership:
        heirs = _supervisor_of(owner)
        if mine is not None and not mine.passes_up:
            for node in kept.below.values():
                node.delete()
            kept.below = {}
        if heirs is not None and heirs._keep(owner, kept):
            return
        kept.delete()


def _live_heir(table: Table[Any, Any], owner: Process) -> Process | None:
    if table.heir is None:
        return None
    try:
        heir = table.heir.resolve()
    except NoProcess:
        return None
    return None if heir is owner else heir


class _Kept:
    """What is kept for one child that is not running: its tables, and what it kept."""

    __slots__ = ("below", "tables")

    def __init__(self) -> None:
        self.tables: dict[str, Table[Any, Any]] = {}
        self.below: dict[Hashable, _Kept] = {}

    def __bool__(self) -> bool:
        return bool(self.tables or self.below)

    def all_tables(self) -> Iterator[Table[Any, Any]]:
        yield from self.tables.values()
        for node in self.below.values():
            yield from node.all_tables()

    def merge(self, other: _Kept) -> None:
        for name, table in other.tables.items():
            old = self.tables.get(name)
            if old is not None and old is not table:
                _delete(old)
            self.tables[name] = table
        for key, node in other.below.items():
            self.below.setdefault(key, _Kept()).merge(node)

    def delete(self) -> None:
        for table in list(self.all_tables()):
            _delete(table)
        self.tables.clear()
        self.below.clear()


class ChildTables:
    """A supervisor's part as default heir: the tables of its children, by child key.

    The supervisor runs each start function inside ``starting(key)``, tells which pid is
    which child (``track``/``forget``), and ``drop``s a child deleted for good. Children
    exiting on their own threads hand their tables in meanwhile, so every method takes the
    ownership lock.
    """

    def __init__(self, owner: Process, passes_up: bool) -> None:
        self.owner = owner
        self.passes_up = passes_up
        self.kept: dict[Hashable, _Kept] = {}
        self._keys: dict[Pid, Hashable] = {}
        self._starting: Hashable = _NOBODY
        self._closed = False

    @contextmanager
    def starting(self, key: Hashable) -> Iterator[None]:
        """While child ``key``'s start function runs, what is kept for it is on offer."""
        with _ownership:
            self._starting = key
        try:
            yield
        finally:
            with _ownership:
                self._starting = _NOBODY

    def track(self, pid: Pid, key: Hashable) -> None:
        """Process ``pid`` is child ``key``: its tables are kept under that key."""
        with _ownership:
            self._keys[pid] = key

    def forget(self, pid: Pid) -> None:
        """Process ``pid`` has exited and its exit was handled."""
        with _ownership:
            self._keys.pop(pid, None)

    def drop(self, key: Hashable) -> None:
        """Child ``key`` is gone for good: delete what is kept for it."""
        with _ownership:
            if not self._closed:
                node = self.kept.pop(key, None)
                if node is not None:
                    node.delete()

    def _keep(self, child: Process, node: _Kept) -> bool:
        # The ownership lock is held, as below.
        if self._closed:
            return False
        key = self._keys.get(child.pid, self._starting)
        if key is _NOBODY:
            return False  # not one of the children: e.g. a helper its start function left
        if node:
            for table in node.all_tables():
                _move(table, self.owner)
            self.kept.setdefault(key, _Kept()).merge(node)
        return True

    def _offered(self) -> _Kept | None:
        if self._closed or self._starting is _NOBODY:
            return None
        return self.kept.get(self._starting)

    def _prune(self) -> None:
        node = self.kept.get(self._starting)
        if node is not None and not node:
            del self.kept[self._starting]


_default_heirs: dict[Process, ChildTables] = {}


def _supervisor_of(process: Process) -> ChildTables | None:
    parent = process.parent
    return None if parent is None else _default_heirs.get(parent)


def _take_offered(owner: Process, name: str | None) -> list[Table[Any, Any]]:
    # The ownership lock is held. The tables kept for the child being started that the
    # caller is, all of them or the one named ``name``.
    heirs = _supervisor_of(owner)
    node = None if heirs is None else heirs._offered()
    if heirs is None or node is None:
        return []
    names = list(node.tables) if name is None else [name] if name in node.tables else []
    tables = [node.tables.pop(n) for n in names]
    heirs._prune()
    for table in tables:
        _move(table, owner)
        table.adopted = True
    return tables


def become_default_heir(*, passes_up: bool = True) -> ChildTables:
    """From a supervisor's ``init``: keep the tables of its children when they exit.

    It takes back what its own supervisor kept for its previous incarnation. With
    ``passes_up=False`` (children that never come back when it restarts, as under
    ``simple_one_for_one``) what it keeps dies with it instead of going up.
    """
    owner = current()
    if owner is None:
        raise NotInProcess("become_default_heir")
    heirs = ChildTables(owner, passes_up)
    with _ownership:
        _take_offered(owner, None)
        parent = _supervisor_of(owner)
        node = None if parent is None else parent._offered()
        if parent is not None and node is not None:
            below, node.below = node.below, {}
            parent._prune()
            for child in below.values():
                for table in child.all_tables():
                    _move(table, owner)
            heirs.kept = below
        _default_heirs[owner] = heirs
    return heirs
