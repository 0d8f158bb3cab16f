"""Heirs: where a table goes when its owner exits, and what a supervisor keeps meanwhile.

A table passes to its heir, if that heir is alive (it receives a ``TableTransfer``
message); else to the owner's supervisor, its *default heir*, which keeps it for the child
restarted under the same id: that child's ``new_table`` adopts it (no message;
``table.adopted`` says so). A supervisor that exits hands what it keeps to its own
supervisor, and it comes back down as the subtree restarts. With no supervisor left to keep
it (an unsupervised owner, a child deleted for good, the root stopping) a table dies with
its owner, as in ETS.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from ._errors import NoProcess, NotInProcess
from ._handle import Handle
from ._node import current
from ._process import Process
from ._signals import Pid
from ._tables import Table, delete, move, ownership, transfer

_NOBODY: Any = object()  # no child is being started


def new_table(name: str, *, heir: Handle | None = None, heir_data: Any = None) -> Table[Any, Any]:
    """Create a table owned by the calling server (OTP's ``ets:new`` with ``{heir, ...}``).

    Called in ``init`` by a child its supervisor is restarting, it returns instead the table
    of that name the child's previous incarnation held (``adopted`` is then True).
    """
    owner = current()
    if owner is None:
        raise NotInProcess("new_table")
    with ownership:
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
    with ownership:
        return _take_offered(owner, None)


def release_tables(owner: Process) -> None:
    """On exit: each table goes to its live heir, else to the owner's supervisor, else dies."""
    with ownership:
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
        if heir is not None and transfer(table, owner, heir, table.heir_data):
            continue
        with ownership:
            if table.name in kept.tables:
                delete(kept.tables[table.name])  # kept by name: the newer of two wins
            kept.tables[table.name] = table
    with ownership:
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
                delete(old)
            self.tables[name] = table
        for key, node in other.below.items():
            self.below.setdefault(key, _Kept()).merge(node)

    def delete(self) -> None:
        for table in list(self.all_tables()):
            delete(table)
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
        with ownership:
            self._starting = key
        try:
            yield
        finally:
            with ownership:
                self._starting = _NOBODY

    def track(self, pid: Pid, key: Hashable) -> None:
        """Process ``pid`` is child ``key``: its tables are kept under that key."""
        with ownership:
            self._keys[pid] = key

    def forget(self, pid: Pid) -> None:
        """Process ``pid`` has exited and its exit was handled."""
        with ownership:
            self._keys.pop(pid, None)

    def drop(self, key: Hashable) -> None:
        """Child ``key`` is gone for good: delete what is kept for it."""
        with ownership:
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
                move(table, self.owner)
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
        move(table, owner)
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
    with ownership:
        _take_offered(owner, None)
        parent = _supervisor_of(owner)
        node = None if parent is None else parent._offered()
        if parent is not None and node is not None:
            below, node.below = node.below, {}
            parent._prune()
            for child in below.values():
                for table in child.all_tables():
                    move(table, owner)
            heirs.kept = below
        _default_heirs[owner] = heirs
    return heirs
