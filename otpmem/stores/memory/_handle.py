"""The face of a MemoryStore: reads straight from its table, adds on the caller's thread
under the store's write lock, other writes as calls (see ``_server``)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...actors import CallingSelf, Handle, Killed, NoProcess, Table, TableError, current
from ...actors.runtime import Process, lookup
from ...messages import Conv, ConvLike, as_conv, check_user_id, is_pinned
from .._base import StoredWindow, check_as_of, check_key, check_last
from .._blocks_client import BlocksClient
from .._client import CheckedAdd, StoreClient, parse_request
from .._fork import bounds
from .._holds import ReservationClient
from .._longterm_client import LongTermClient
from ..reservations import Reservation, ReserveArgs
from . import _longterm as lt
from ._blocks import MemoryBlockReads
from ._scopes import ScopeReads
from ._snapshot import Snapshot, TableKey, table_key
from ._users import UserIndex, UserKey

if TYPE_CHECKING:
    from ._server import MemoryStore

READY_TIMEOUT = 5.0
WRITES_HERE = frozenset({"add", "import"})


class MemoryStoreHandle(
    StoreClient,
    LongTermClient,
    ReservationClient,
    BlocksClient,
    lt.TableReads,
    MemoryBlockReads,
    ScopeReads,
    Handle,
):
    """The ``ChatMemory`` (and ``LongTermStore``, ``ReservationStore``) face of a
    MemoryStore: writes are calls, reads are direct."""

    __slots__ = ("_fast", "_last_table", "_own")

    def __init__(self, process: Any = None, name: str | None = None) -> None:
        super().__init__(process, name)
        self._last_table: Table[TableKey, Snapshot] | None = None
        # (incarnation, its table's mapping), valid while that incarnation lives and, for a
        # named handle, still holds the name: the read path then costs a few lookups.
        self._fast: tuple[Process, dict[TableKey, Snapshot]] | None = None
        # The same mapping for a handle to one incarnation, which needs no check at all:
        # one slot read on the hot path pays for get's key type check (measured).
        self._own: dict[TableKey, Snapshot] | None = None

    def _table(self) -> Table[TableKey, Snapshot]:
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
        current_table: Table[TableKey, Snapshot] = process.server.table  # type: ignore[attr-defined]
        self._last_table = current_table
        try:
            self._fast = (process, current_table.mapping())
        except TableError:
            raise NoProcess(self._target()) from None
        if self._name is None:
            self._own = self._fast[1]
        return current_table

    def _mapping(self) -> dict[TableKey, Snapshot]:
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
        mailbox round trip), as do ``reserve`` and ``release`` made with their methods;
        anything else, and any write to a store with an injected fault plan (whose faults
        ride on messages), is a call."""
        if (
            type(message) is tuple
            and message
            and type(message[0]) is str
            and (message[0] in WRITES_HERE)
        ):
            writer = self._writer()
            if writer is not None:
                process, server = writer
                kind, arg = parse_request(message, "MemoryStore")
                server.write_here(process, kind, arg, self._target())
                return None
        return super().call(message, timeout)

    def _add_checked(self, add: CheckedAdd, timeout: float | None) -> None:
        writer = self._writer()
        if writer is None:
            super()._add_checked(add, timeout)
            return
        process, server = writer
        server.write_here(process, "add", add, self._target())

    def _reserve_checked(self, checked: ReserveArgs, timeout: float | None) -> Reservation:
        here, answer = self._hold_here("reserve", checked)
        return answer if here else super()._reserve_checked(checked, timeout)

    def _release_checked(self, hold_id: str, timeout: float | None) -> bool:
        here, released = self._hold_here("release", hold_id)
        return released if here else super()._release_checked(hold_id, timeout)

    def _hold_here(self, kind: str, arg: Any) -> tuple[bool, Any]:
        """(True, the answer) if this thread takes or drops the hold on the store itself,
        as its adds are written; (False, None) if it must be a call."""
        writer = self._writer()
        if writer is None:
            return False, None
        process, server = writer
        return True, server.hold_here(process, kind, arg, self._target())

    def _writer(self) -> tuple[Process, MemoryStore] | None:
        """The store to write on this thread, ready; None if writes must be calls: its
        faults ride on messages, or the name is another kind of store's."""
        process = self._process
        if process is None or process.dead or self._name is not None:
            process = self.resolve()
        server: MemoryStore = process.server  # type: ignore[assignment]
        if process.faults is not None or not getattr(server, "writes_on_callers", False):
            return None
        me = current()
        if me is process:
            raise CallingSelf(self._target())
        if me is not None and me.killed:
            raise Killed(me)
        if not process.ready.is_set() and not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        return process, server

    def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """The conversation oldest first, or its newest ``last`` messages (read-only dicts);
        ``as_of=n``: as it was after its n-th message (``last`` counts back from there)."""
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
        except Exception:  # unhashable, or its own __hash__ or __eq__ raised: no key of ours
            entry = None
        if entry is not None and as_of is None and (kind is str or kind is Conv):
            messages, n = entry.messages, entry.count
            if type(last) is int and 0 <= last <= n:
                return messages[n - last : n]
            if last is None:
                return messages[:n]
        return self._get_checked(conv, last, as_of)

    def _get_checked(
        self, conv: ConvLike, last: int | None, as_of: int | None
    ) -> list[dict[str, Any]]:
        key = table_key(as_conv(conv))
        last = check_last(last)
        as_of = check_as_of(as_of)
        entry = self._mapping().get(key)
        if entry is None:
            return []
        start, stop = bounds(entry.count, last, as_of)
        return entry.messages[start:stop]

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """The pinned index: (position, message) of each system and pinned message and of
        the newest summary, oldest first."""
        entry = self._mapping().get(table_key(as_conv(conv)))
        if entry is None:
            return []
        messages = entry.messages
        return [(position, messages[position]) for position in entry.pins]

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them, from one snapshot."""
        key = table_key(as_conv(conv))
        if check_last(last) is None:
            raise ValueError("window needs last: an int >= 0")
        entry = self._mapping().get(key)
        if entry is None:
            return StoredWindow([], [], 0, 0)
        messages, n = entry.messages, entry.count
        start = max(0, n - last)
        tail = messages[start:n]
        pins = entry.pins  # ascending
        at = bisect_left(pins, start)
        before = [(p, messages[p]) for p in pins[:at]]
        if entry.pinned_count == len(pins):
            # Every pinned message is indexed (no superseded summary): the tail's are the
            # indexed ones from start on, counted without reading a message.
            tail_pinned = len(pins) - at
        else:
            tail_pinned = sum(1 for m in tail if is_pinned(m))
        pinned_before = entry.pinned_count - tail_pinned
        return StoredWindow(before, tail, start, n, pinned_before, tail_pinned)

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None."""
        key = table_key(as_conv(conv))
        if check_key(idempotency_key) is None:
            raise ValueError("key_position needs an idempotency_key")
        entry = self._mapping().get(key)
        keys = None if entry is None else entry.keys
        return None if keys is None else keys.get(idempotency_key)

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        entry = self._mapping().get(table_key(as_conv(conv)))
        return 0 if entry is None else entry.count

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
