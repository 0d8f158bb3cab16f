"""MemoryStore: conversations in a table owned by a server, the ETS analogue.

The server owns the table and is its only writer, so two writers never interleave. Readers
on any thread read the table directly, never queueing behind writes: each conversation is
stored as an immutable snapshot ``(messages, n)`` over an append-only list, replaced on
every write, so a reader sees either all of an ``add`` or none of it. Each user's
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..actors import (
    CallingSelf,
    GenServer,
    Handle,
    Killed,
    NoProcess,
    ServerExited,
    Table,
    TableError,
    TableKeeper,
    claim_table,
    new_table,
    on_exit,
    writing_for,
)
from ..actors._names import lookup
from ..actors._node import current
from ..actors._process import Process
from ..actors.faults import FaultPlan
from ..messages import (
    Conv,
    ConvLike,
    FrozenDict,
    InvalidMessage,
    as_conv,
    check_user_id,
    is_pinned,
    is_summary,
    short_repr,
)
from ..supervisors import ChildSpec, Supervisor, SupervisorEvent
from . import _longterm_table as lt
from ._base import (
    KEYS_KEPT,
    STORE_INTENSITY,
    STORE_PERIOD,
    ConversationCleared,
    StoredWindow,
    check_key,
    check_last,
)
from ._client import StoreClient, parse_request
from ._longterm_client import LONGTERM_KINDS, LongTermClient, parse_longterm
from ._user_index import UserIndex, UserKey, list_conversation, reindex_users, unlist_conversation
from .longterm import FactLimitReached

READY_TIMEOUT = 5.0
CLOSE_TIMEOUT = 1.0  # how long an exiting store waits for a caller's write in progress
WRITES_HERE = frozenset({"add", "import"})
# (messages, n, pinned positions, idempotency key -> position of its batch or None,
#  how many pinned messages the n hold, superseded summaries included)
_Snapshot = tuple[list[dict[str, Any]], int, tuple[int, ...], dict[str, int] | None, int]
TableKey = Any  # a conversation (str or Conv), a user's index, or a long-term record


def table_key(conv: Conv) -> TableKey:
    """How a conversation is keyed in the table: a conversation of no user by its id alone.

    A str key hashes once and for all (a tuple rehashes on every lookup), and most reads
    name a conversation by a plain str.
    """
    return conv.conversation_id if conv.user_id is None else conv


class MemoryStoreHandle(StoreClient, LongTermClient, lt.TableReads, Handle):
    """The ``ChatMemory`` (and ``LongTermStore``) face of a MemoryStore: writes are calls,
    reads are direct."""

    __slots__ = ("_fast", "_last_table", "_own")

    def __init__(self, process: Any = None, name: str | None = None) -> None:
        super().__init__(process, name)
        self._last_table: Table[TableKey, _Snapshot] | None = None
        # (incarnation, its table's mapping), valid while that incarnation lives and, for a
        # named handle, still holds the name: the read path then costs a few lookups.
        self._fast: tuple[Process, dict[TableKey, _Snapshot]] | None = None
        # The same mapping for a handle to one incarnation, which needs no check at all:
        # one slot read on the hot path pays for get's key type check (measured).
        self._own: dict[TableKey, _Snapshot] | None = None

    def _table(self) -> Table[TableKey, _Snapshot]:
        process = self._process
        if process is None or process.dead:
            try:
                process = self.resolve()
            except NoProcess:
                # Restarting under an heir: the table is intact and only its owner writes,
                # so reads go on from it rather than fail.
                table = self._last_table
                if table is not None and not table.deleted:
                    return table
                raise
        if not process.ready.is_set():
            table = self._last_table
            if table is not None and not table.deleted:
                return table
            if not process.wait_ready(READY_TIMEOUT):
                raise NoProcess(self._target())
        current_table: Table[TableKey, _Snapshot] = process.server.table  # type: ignore[attr-defined]
        self._last_table = current_table
        try:
            self._fast = (process, current_table.mapping())
        except TableError:
            raise NoProcess(self._target()) from None
        if self._name is None:
            self._own = self._fast[1]
        return current_table

    def _mapping(self) -> dict[TableKey, _Snapshot]:
        fast = self._fast
        if fast is not None:
            process, mapping = fast
            if not process.dead and (self._name is None or lookup(self._name) is process):
                return mapping
        try:
            return self._table().mapping()
        except TableError:
            raise NoProcess(self._target()) from None

    def call(self, message: Any, timeout: float | None = 5.0) -> Any:
        """An add or an import runs here, on this thread, under the store's write lock (no
        mailbox round trip); anything else, and any write to a store with an injected
        fault plan (whose faults ride on messages), is a call."""
        if type(message) is tuple and message and message[0] in WRITES_HERE:
            process = self._writer()
            if process is not None:
                server: MemoryStore = process.server  # type: ignore[assignment]
                kind, arg = parse_request(message, "MemoryStore")
                server.write_here(process, kind, arg, self._target())
                return None
        return super().call(message, timeout)

    def _add_checked(
        self,
        conv: Conv,
        batch: list[FrozenDict],
        idempotency_key: str | None,
        follows: str | None,
        timeout: float | None,
    ) -> None:
        process = self._writer()
        if process is None:
            super()._add_checked(conv, batch, idempotency_key, follows, timeout)
            return
        server: MemoryStore = process.server  # type: ignore[assignment]
        server.write_here(process, "add", (conv, batch, idempotency_key, follows), self._target())

    def _writer(self) -> Process | None:
        """The store to write on this thread, ready; None if writes must be calls."""
        process = self._process
        if process is None or process.dead or self._name is not None:
            process = self.resolve()
        if process.faults is not None:
            return None
        me = current()
        if me is process:
            raise CallingSelf(self._target())
        if me is not None and me.killed:
            raise Killed(me)
        if not process.ready.is_set() and not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        return process

    def get(self, conv: ConvLike, last: int | None = None) -> list[dict[str, Any]]:
        """The conversation oldest first, or its newest ``last`` messages (read-only dicts)."""
        # The hot read path, kept flat: each bytecode costs next to the slice it guards.
        # One incarnation's table empties only when deleted, so for a handle to a process a
        # hit needs no liveness check; a named handle checks who holds the name. Stored keys
        # were validated when added, so a hit needs only the key's type checked: a plain
        # tuple equals a Conv and a str subclass its str, and must be refused as as_conv
        # refuses them. Misses and odd arguments take _get_checked, which raises what bad
        # input deserves.
        mapping = self._own
        if mapping is None:
            mapping = self._mapping()
        kind = type(conv)
        try:
            entry = mapping.get(conv)
            if entry is None and kind is Conv and conv[0] is None:
                entry = mapping.get(conv[1])  # a conversation of no user is keyed by its id
        except TypeError:  # unhashable: not a conversation
            entry = None
        if entry is not None and (kind is str or kind is Conv):
            messages, n = entry[0], entry[1]
            if type(last) is int and 0 <= last <= n:
                return messages[n - last : n]
            if last is None:
                return messages[:n]
        return self._get_checked(conv, last)

    def _get_checked(self, conv: ConvLike, last: int | None) -> list[dict[str, Any]]:
        key = table_key(as_conv(conv))
        last = check_last(last)
        entry = self._mapping().get(key)
        if entry is None:
            return []
        messages, n = entry[0], entry[1]
        return messages[:n] if last is None or last >= n else messages[n - last : n]

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """The pinned index: (position, message) of each system and pinned message and of
        the newest summary, oldest first."""
        entry = self._mapping().get(table_key(as_conv(conv)))
        if entry is None:
            return []
        messages = entry[0]
        return [(position, messages[position]) for position in entry[2]]

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them, from one snapshot."""
        key = table_key(as_conv(conv))
        if check_last(last) is None:
            raise ValueError("window needs last: an int >= 0")
        entry = self._mapping().get(key)
        if entry is None:
            return StoredWindow([], [], 0, 0)
        messages, n, pins, _, pinned_count = entry
        start = max(0, n - last)
        tail = messages[start:n]
        before = [(p, messages[p]) for p in pins if p < start]
        pinned_before = pinned_count - sum(1 for m in tail if is_pinned(m))
        return StoredWindow(before, tail, start, n, pinned_before)

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None."""
        key = table_key(as_conv(conv))
        if check_key(idempotency_key) is None:
            raise ValueError("key_position needs an idempotency_key")
        entry = self._mapping().get(key)
        keys = None if entry is None else entry[3]
        return None if keys is None else keys.get(idempotency_key)

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        entry = self._mapping().get(table_key(as_conv(conv)))
        return 0 if entry is None else entry[1]

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's (from that user's index:
        O(their conversations), whatever everybody else holds)."""
        check_user_id(user_id)
        mapping: Mapping[Any, Any] = self._mapping()
        if user_id is None:
            return [
                Conv(None, k) if isinstance(k, str) else k
                for k in list(mapping)
                if type(k) is not UserKey and not lt.is_longterm(k)
            ]
        index: UserIndex | None = mapping.get(UserKey(user_id))
        if index is None:
            return []
        convs, n = index
        # A conversation is published before it is indexed and dropped before it is
        # unlisted: the presence check hides the one being cleared.
        return [c for c in convs[:n] if c in mapping]


class MemoryStore(GenServer):
    """The default, in-memory store. Start it alone, or supervised (its table then lasts)::

    store = MemoryStore.start_link()
    store.add("c1", [{"role": "user", "content": "hi"}])
    store.get("c1")  # [{"role": "user", "content": "hi"}]

    sup = Supervisor.start_link([MemoryStore.child_spec("memory")])
    Handle.named("memory")  # a MemoryStoreHandle's calls go through the name
    """

    caller_errors = (
        InvalidMessage,
        ValueError,
        TypeError,
        ConversationCleared,
        FactLimitReached,
    )
    handle_class = MemoryStoreHandle

    @classmethod
    def start_link(  # type: ignore[override]
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
        handle = cls._spawn((heir, table_name), {}, current(), name, faults, start_timeout)
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
        self.table: Table[TableKey, _Snapshot] = claimed or new_table(table_name, heir=heir)
        self.adopted = claimed is not None or self.table.adopted
        if self.adopted:
            # An incarnation killed between a conversation's write and its index's left
            # them apart: derive the index again from the conversations themselves.
            reindex_users(self.table)
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
                    if kind == "add":
                        self._append(*arg)
                    else:
                        for conv, batch, key in arg:
                            self._append(conv, batch, key)
            except self.caller_errors:
                raise
            except BaseException as exc:
                # What would have crashed the server crashes it still: let it restart.
                process.send(("write_crashed", exc))
                raise ServerExited(target, exc) from exc

    def handle_info(self, message: Any) -> Any:
        if type(message) is tuple and len(message) == 2 and message[0] == "write_crashed":
            raise message[1]
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        with self.write_lock:
            return self._handle_call(message)

    def _handle_call(self, message: Any) -> Any:
        if isinstance(message, tuple) and message and message[0] in LONGTERM_KINDS:
            return self._longterm(*parse_longterm(message, "MemoryStore"))
        kind, arg = parse_request(message, "MemoryStore")
        if kind == "add":
            conv, batch, key, follows = arg
            self._append(conv, batch, key, follows)
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
            self.table.update(lt.forget_puts(rows, arg), [UserKey(arg), *convs, *records])
        elif kind == "import":
            for conv, batch, key in arg:
                self._append(conv, batch, key)
        elif kind == "adopted":
            return self.adopted
        else:
            raise ValueError(f"MemoryStore does not understand {short_repr(message)}")
        return None

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
        keys = None if entry is None else entry[3]
        if idempotency_key is not None and keys is not None and idempotency_key in keys:
            return  # stored already: a retry
        if follows is not None and (keys is None or follows not in keys):
            raise ConversationCleared(
                f"conversation {conv} no longer holds the batch {follows!r} this write "
                "follows: it was cleared since; nothing was stored"
            )
        pins: tuple[int, ...] = ()
        pinned_count = 0
        if entry is None:
            messages: list[dict[str, Any]] = []
            n = 0
        else:
            messages, n, pins, _, pinned_count = entry
            # Readers hold (messages, n) and never look past n, so extending in place is
            # safe; a new tuple publishes the longer snapshot in one step.
            del messages[n:]
        messages.extend(batch)
        pins = _pins_after(messages, pins, n)
        pinned_count += sum(1 for m in batch if is_pinned(m))
        if idempotency_key is not None:
            if keys is None:
                keys = {}
            keys[idempotency_key] = n
            if len(keys) > KEYS_KEPT:
                del keys[next(iter(keys))]  # the oldest: dicts keep insertion order
        puts: dict[Any, Any] = lt.usage_puts(self.table.mapping(), conv, batch)
        puts[key] = (messages, n + len(batch), pins, keys, pinned_count)
        self.table.update(puts)  # the messages and their usage sums in one step
        if entry is None and conv.user_id is not None:
            list_conversation(self.table, conv)  # after the snapshot: a listed conversation exists

    def _longterm(self, kind: str, arg: Any) -> Any:
        mapping: dict[Any, Any] = self.table.mapping()
        if kind == "save_facts":
            user_id, facts, deletes, cursor, max_facts, evict = arg
            saved, puts = lt.fact_write(mapping, user_id, facts, deletes, cursor, max_facts, evict)
            before: set[str] = set(mapping.get(lt.key("facts", user_id), {}))
            self.table.update(puts)
            after: set[str] = set(puts[lt.key("facts", user_id)])
            return saved, sorted(before - after)
        if kind == "save_profile":
            self.table.update({lt.key("profile", arg.user_id): arg})
            return arg
        if kind == "delete_profile":
            return self.table.pop(lt.key("profile", arg)) is not None
        conv, upto = arg
        self.table.update(lt.job_puts(mapping, conv, upto))
        return None


def _pins_after(messages: list[dict[str, Any]], pins: tuple[int, ...], old: int) -> tuple[int, ...]:
    """The pinned positions once ``messages[old:]`` were added: a new summary replaces the
    one indexed before it."""
    added = [p for p in range(old, len(messages)) if is_pinned(messages[p])]
    if not added:
        return pins
    kept = list(pins)
    for position in added:
        if is_summary(messages[position]):
            kept = [p for p in kept if not is_summary(messages[p])]
        kept.append(position)
    return tuple(kept)
