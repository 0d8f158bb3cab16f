"""MemoryStore: conversations in a table owned by a server, the ETS analogue.

The server owns the table. Adds run on their callers' threads under the store's write lock
(ETS's write_concurrency), which the server's own writes take too, so two writers never
interleave and no add costs a mailbox round trip; the server's exit takes the lock before
the table moves, so no add lands after it is gone. Readers
on any thread read the table directly, never queueing behind writes: each conversation is
stored as an immutable ``Snapshot`` (its messages up to a count, its pinned positions, its
idempotency keys) over an append-only list, replaced on every write, so a reader sees
either all of an ``add`` or none of it. Each user's
conversations are listed the same way, under a ``UserKey`` of the same table, so
``conversations(user_id)`` costs that user's conversations, not everybody's.

Under a supervisor the table outlives a crash of its owner: its heir (a ``TableKeeper``),
or else the supervisor, keeps it and the restarted store adopts it, so no acknowledged
message is lost; up the tree, only the root stopping or giving up loses it. Unsupervised,
the table dies with its owner, as an ETS table does. ``MemoryStore.child_spec(...)`` builds
the store under its own supervisor, with a keeper beside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ...actors import (
    GenServer,
    Handle,
    NoProcess,
    Table,
    TableKeeper,
    claim_table,
    new_table,
    on_exit,
    writing_for,
)
from ...actors.faults import FaultPlan
from ...actors.runtime import Process
from ...messages import Conv, is_pinned, is_summary
from ...supervisors import ChildSpec, Supervisor, SupervisorEvent
from .._base import KEYS_KEPT, STORE_INTENSITY, STORE_PERIOD, crash_server, raise_write_crash
from .._client import REQUESTS as STORE_REQUESTS
from .._client import parse_request
from .._holds import Ledger
from .._longterm_client import LONGTERM_KINDS
from .._write_rules import CALLER_ERRORS, NO_KEYS, admits
from ..blocks import is_block_edit, parse_block_edit
from ..longterm import Usage
from ..reservations import Limit, abandoned_hold, is_reservation, parse_reservation
from ..scopes import owner_key
from . import _blocks, _fork, _scopes
from . import _longterm as lt
from ._handle import WRITES_HERE, MemoryStoreHandle
from ._snapshot import Snapshot, TableKey, table_key
from ._users import UserIndex, UserKey, list_conversation, reindex_users, unlist_conversation

CLOSE_TIMEOUT = 1.0  # how long an exiting store waits for a caller's write in progress
REQUESTS = {**STORE_REQUESTS, "adopted": (0,)}  # whether its table came from an heir


class MemoryStore(GenServer):
    """The default, in-memory store. Start it alone, or supervised (its table then lasts)::

    store = MemoryStore.start_link()
    store.add("c1", [{"role": "user", "content": "hi"}])
    store.get("c1")  # [{"role": "user", "content": "hi"}]

    sup = Supervisor.start_link([MemoryStore.child_spec("memory")])
    Handle.named("memory")  # a MemoryStoreHandle's calls go through the name
    """

    caller_errors = CALLER_ERRORS
    handle_class = MemoryStoreHandle
    writes_on_callers = True  # its handles run adds on their own threads (write_here)

    @classmethod
    def start_link(
        cls,
        name: str | None = None,
        heir: Handle | None = None,
        table: str | None = None,
        *,
        faults: FaultPlan | None = None,
        start_timeout: float | None = 5.0,
    ) -> MemoryStoreHandle:
        """Start a store linked to the caller.

        Its table (named ``table``, default: ``name``) survives a crash when the caller is
        a supervisor, or with ``heir`` (a ``TableKeeper``); the store restarted under the
        same child id, or started with the same heir and table name, adopts it.
        """
        table_name = table or name or "otpmem.memory"
        handle = cls.spawn(
            (heir, table_name), {}, link=True, name=name, faults=faults, start_timeout=start_timeout
        )
        assert isinstance(handle, MemoryStoreHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        name: str,
        child_id: str | None = None,
        *,
        intensity: int = STORE_INTENSITY,
        period: float = STORE_PERIOD,
        listeners: Iterable[Callable[[SupervisorEvent], None]] = (),
    ) -> ChildSpec:
        """A supervised store named ``name``: a rest_for_one pair of a keeper and the store.

        If the store crashes, the keeper holds its table and the restarted store adopts it.
        If the keeper crashes, or the pair gives up after ``intensity`` restarts in
        ``period`` s, the pair's supervisor keeps the table and the restarted pair gets it
        back: only the root of the tree giving up, or stopping, loses it. ``listeners``
        hear the pair's supervisor, in every incarnation.
        """
        keeper = f"{name}.keeper"
        listeners = list(listeners)

        def start_pair() -> Handle:
            return Supervisor.start_link(
                [
                    ChildSpec("keeper", start=lambda: TableKeeper.start_link(name=keeper)),
                    ChildSpec(
                        "store",
                        start=lambda: cls.start_link(name=name, heir=Handle.named(keeper)),
                    ),
                ],
                strategy="rest_for_one",
                intensity=intensity,
                period=period,
                listeners=listeners,
            )

        return ChildSpec(child_id or name, start=start_pair, type="supervisor")

    def init(self, heir: Handle | None = None, table_name: str = "otpmem.memory") -> None:
        claimed = claim_table(heir, table_name) if heir is not None else None
        # Without the heir's copy, new_table still adopts what our supervisor kept.
        self.table: Table[TableKey, Snapshot] = claimed or new_table(table_name, heir=heir)
        self.adopted = claimed is not None or self.table.adopted
        if self.adopted:
            # An incarnation killed between a conversation's write and its index's left
            # them apart: derive the index again from the conversations themselves.
            reindex_users(self.table)
        # The holds of calls in flight live in the table, so they outlast a crash with it.
        holds = self.table.get(lt.HOLDS)
        if holds is None:
            holds = Ledger()
            puts: dict[Any, Any] = {lt.HOLDS: holds}
            self.table.update(puts)
        self.holds: Ledger = holds
        # Adds run on their callers' threads (ETS's write_concurrency): this lock makes them
        # take turns with each other and with the writes this server runs itself.
        self.write_lock = threading.Lock()
        self.writes_open = True
        on_exit(self._close_writes)

    def _close_writes(self) -> None:
        # Runs before the table moves to its heir: a write in progress finishes first, and
        # none starts after (a dead store does nothing more).
        got = self.write_lock.acquire(timeout=CLOSE_TIMEOUT)
        self.writes_open = False
        if got:
            self.write_lock.release()

    def write_here(self, process: Process, kind: str, arg: Any, target: object) -> None:
        """Run a checked add or import on the calling thread, as this store's own write."""
        with self.write_lock:
            if not self.writes_open or process.killed or process.dead:
                raise NoProcess(target)
            try:
                with writing_for(process):
                    self._add_or_import(kind, arg)
            except self.caller_errors:
                raise
            except BaseException as exc:
                # What would have crashed the server crashes it still: let it restart.
                raise crash_server(process, target, exc) from exc

    def hold_here(self, process: Process, kind: str, arg: Any, target: object) -> Any:
        """Run a checked ``reserve`` or ``release`` on the calling thread, under the write
        lock every reservation takes: the check and the hold are one step."""
        with self.write_lock:
            if not self.writes_open or process.killed or process.dead:
                raise NoProcess(target)
            return self._hold(kind, arg)

    def _hold(self, kind: str, arg: Any) -> Any:
        if kind == "release":
            return self.holds.release(arg)
        conv, hold_id, hold, limits, ttl = arg
        return self.holds.reserve(conv, hold_id, hold, limits, ttl, self._recorded)

    def handle_info(self, message: Any) -> Any:
        raise_write_crash(message)
        abandoned = abandoned_hold(message)
        if abandoned is not None:
            with self.write_lock:
                self.holds.release(abandoned)
            return None
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        with self.write_lock:
            return self._handle_call(message)

    def _handle_call(self, message: Any) -> Any:
        if is_reservation(message):
            return self._hold(*parse_reservation(message, "MemoryStore"))
        if is_block_edit(message):
            edit = parse_block_edit(message)
            listing = _scopes.listed(self.table.mapping(), edit[1])
            return _blocks.edit(self.table, edit, listing)
        kind, arg = parse_request(message, "MemoryStore", REQUESTS)
        if kind in LONGTERM_KINDS:
            return self._longterm(kind, arg)
        if kind in WRITES_HERE:
            self._add_or_import(kind, arg)
        elif kind == "fork":
            return _fork.fork(self.table, arg)
        elif kind == "clear":
            mapping = self.table.mapping()
            existed = table_key(arg) in mapping
            self.table.update(lt.clear_puts(mapping, arg), [table_key(arg), *lt.clear_deletes(arg)])
            if existed and arg.user_id is not None:
                unlist_conversation(self.table, arg)
        elif kind == "forget_user":
            rows: dict[Any, Any] = self.table.mapping()
            index: UserIndex | None = rows.get(UserKey(arg))
            convs = [] if index is None else index[0][: index[1]]
            records = lt.user_records(arg, convs)
            # One step: the index, the conversations and the records go together.
            gone = [
                UserKey(arg),
                *convs,
                *records,
                _blocks.key(owner_key(arg)),
            ]  # the user's own blocks
            gone += _scopes.forget_records(rows, arg)  # and everything of the user's scopes
            self.table.update(lt.forget_puts(rows, arg), gone)
        else:  # "adopted", the only other request parse_request lets through
            return self.adopted
        return None

    def _add_or_import(self, kind: str, arg: Any) -> None:
        """A parsed ``add`` or ``import``, on whichever thread writes for this store."""
        if kind == "add":
            self._append(*arg)
        else:
            for conv, batch, key in arg:
                self._append(conv, batch, key)

    def _append(
        self,
        conv: Conv,
        batch: Sequence[dict[str, Any]],
        idempotency_key: str | None = None,
        follows: str | None = None,
    ) -> None:
        if not batch:
            return
        key = table_key(conv)
        entry = self.table.get(key)
        keys = None if entry is None else entry.keys
        if (idempotency_key is not None or follows is not None) and not admits(
            conv, idempotency_key, follows, keys or NO_KEYS
        ):
            return  # stored already: a retry
        pins: tuple[int, ...] = ()
        pinned_count = 0
        forked = None
        if entry is None:
            messages: list[dict[str, Any]] = []
            n = 0
        else:
            messages, n = entry.messages, entry.count
            pins, pinned_count, forked = entry.pins, entry.pinned_count, entry.forked
            # Readers hold a snapshot and never look past its count, so extending in place
            # is safe; a new snapshot publishes the longer list in one step.
            del messages[n:]
        messages.extend(batch)
        added = [p for p in range(n, len(messages)) if is_pinned(messages[p])]
        if added:
            pins = _pins_with(messages, pins, added)
            pinned_count += len(added)
        if idempotency_key is not None:
            if keys is None:
                keys = {}
            keys[idempotency_key] = n
            if len(keys) > KEYS_KEPT:
                del keys[next(iter(keys))]  # the oldest: dicts keep insertion order
        puts: dict[Any, Any] = lt.usage_puts(self.table.mapping(), conv, batch)
        puts[key] = Snapshot(messages, n + len(batch), pins, keys, pinned_count, forked)
        self.table.update(puts)  # the messages and their usage sums in one step
        if entry is None and conv.user_id is not None:
            list_conversation(self.table, conv)  # after the snapshot: a listed conversation exists

    def _recorded(self, conv: Conv, limit: Limit) -> Usage:
        """What the table has recorded in a limit's scope, for a reservation."""
        mapping = self.table.mapping()
        if limit.scope == "user":
            assert conv.user_id is not None  # checked with the limit
            return lt.read_user_usage(mapping, conv.user_id, limit.since)
        return lt.read_usage(mapping, conv, limit.since)

    def _longterm(self, kind: str, arg: Any) -> Any:
        mapping: dict[Any, Any] = self.table.mapping()
        if kind == "save_facts":
            user_id = arg[0]
            saved, puts = lt.fact_write(mapping, *arg)
            before: set[str] = set(mapping.get(lt.key("facts", user_id), {}))
            puts.update(_scopes.listed(mapping, user_id))
            self.table.update(puts)
            after: set[str] = set(puts[lt.key("facts", user_id)])
            return saved, sorted(before - after)
        if kind == "save_profile":
            owner = owner_key(arg.user_id)
            self.table.update({lt.key("profile", owner): arg, **_scopes.listed(mapping, owner)})
            return arg
        if kind == "delete_profile":
            return self.table.pop(lt.key("profile", arg)) is not None
        if kind == "join_scope":
            self.table.update(_scopes.join_puts(mapping, *arg))
            return None
        conv, upto = arg
        self.table.update(lt.job_puts(mapping, conv, upto))
        return None


def _pins_with(
    messages: list[dict[str, Any]], pins: tuple[int, ...], added: list[int]
) -> tuple[int, ...]:
    """The pinned positions once the pinned messages at ``added`` were added: a new summary
    replaces the one indexed before it."""
    kept = list(pins)
    for position in added:
        if is_summary(messages[position]):
            kept = [p for p in kept if not is_summary(messages[p])]
        kept.append(position)
    return tuple(kept)
