"""The face of a LevelDBStore: reads run on the caller's thread against the open database;
an add from a thread that is not a process runs there too (its ops built under the store's
write lock, then a wait for its fsync); other writes, and a process's adds, are calls to
the server (see ``_server``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack

from ...actors import Handle, NoProcess, current
from ...messages import Conv, ConvLike, as_conv, check_user_id, is_pinned
from .._base import StoredWindow, check_as_of, check_key, check_last
from .._blocks_client import BlocksClient
from .._client import CheckedAdd, StoreClient
from .._holds import ReservationClient
from .._longterm_client import LongTermClient
from . import _longterm as lt
from . import keys
from ._blocks import LevelDBBlockReads
from ._fork import read_as_of
from ._scopes import LevelDBScopeReads

READY_TIMEOUT = 30.0


def _unpack(raw: bytes) -> dict[str, Any]:
    message: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return message


class LevelDBStoreHandle(
    StoreClient,
    LongTermClient,
    ReservationClient,
    BlocksClient,
    lt.LevelDBReads,
    LevelDBBlockReads,
    LevelDBScopeReads,
    Handle,
):
    """The ``ChatMemory`` (and ``LongTermStore``, ``ReservationStore``) face of a
    LevelDBStore: writes are calls, reads are direct."""

    __slots__ = ()

    @contextmanager
    def _db(self) -> Iterator[Any]:
        process = self.resolve()
        if not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        server: Any = process.server  # a LevelDBStore: its gate and its open database
        with server.gate.reading(self._target()):
            yield server.db

    def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """The conversation oldest first, or its newest ``last`` messages (n reads, not all);
        ``as_of=n``: as it was after its n-th message (at most n reads)."""
        key = as_conv(conv)
        prefix = keys.conv_prefix(keys.MESSAGE, key)
        last = check_last(last)
        upto = check_as_of(as_of)
        if upto is not None:
            with self._db() as db:
                return read_as_of(db, key, last, upto)
        if last == 0:
            return []
        with self._db() as db:
            if last is None:
                return [_unpack(v) for v in db.iterator(prefix=prefix, include_key=False)]
            newest = []
            with db.iterator(prefix=prefix, include_key=False, reverse=True) as it:
                for value in it:
                    newest.append(value)
                    if len(newest) == last:
                        break
        return [_unpack(v) for v in reversed(newest)]

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """The pinned index: (position, message) of each system and pinned message and of
        the newest summary, oldest first (one range scan of the index)."""
        prefix = keys.conv_prefix(keys.PINNED, as_conv(conv))
        with self._db() as db:
            return [(keys.seq_of(k), _unpack(v)) for k, v in db.iterator(prefix=prefix)]

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them, from one snapshot:
        O(last + pinned) reads, whatever the conversation's length."""
        key = as_conv(conv)
        if check_last(last) is None:
            raise ValueError("window needs last: an int >= 0")
        messages = keys.conv_prefix(keys.MESSAGE, key)
        pinned = keys.conv_prefix(keys.PINNED, key)
        newest: list[bytes] = []
        with self._db() as db, db.snapshot() as snapshot:
            raw = snapshot.get(keys.conv_prefix(keys.META, key))
            meta = keys.Meta() if raw is None else keys.Meta.unpack(raw)
            total = meta.count
            if last:
                with snapshot.iterator(prefix=messages, include_key=False, reverse=True) as it:
                    for value in it:
                        newest.append(value)
                        if len(newest) == last:
                            break
            start = total - len(newest)
            before = [
                (keys.seq_of(k), _unpack(v))
                for k, v in snapshot.iterator(start=pinned, stop=keys.message_key(pinned, start))
            ]
        tail = [_unpack(v) for v in reversed(newest)]
        tail_pinned = sum(1 for m in tail if is_pinned(m))
        pinned_before = meta.pinned_count - tail_pinned
        return StoredWindow(before, tail, start, total, pinned_before, tail_pinned)

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None."""
        key = as_conv(conv)
        if check_key(idempotency_key) is None:
            raise ValueError("key_position needs an idempotency_key")
        with self._db() as db:
            raw = db.get(keys.idempotency_key(key, idempotency_key))
        return None if raw is None else keys.position_of(raw)

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds (one point read)."""
        meta_key = keys.conv_prefix(keys.META, as_conv(conv))
        with self._db() as db:
            raw = db.get(meta_key)
        return 0 if raw is None else keys.count_of(raw)

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's (a scan of one key each)."""
        prefix = (
            keys.META if user_id is None else keys.user_prefix(keys.META, check_user_id(user_id))
        )
        with self._db() as db:
            return [keys.decode_conv(k) for k in db.iterator(prefix=prefix, include_value=False)]

    def _add_checked(self, add: CheckedAdd, timeout: float | None) -> None:
        server = self._writer()
        if server is None or not server.add_here(add, timeout):
            super()._add_checked(add, timeout)

    def _writer(self) -> Any:
        """The store to add on this thread, ready; None if the add must be a call: from a
        process (no scheduler thread waits for an fsync), to a store whose faults ride on
        messages, or to a name another kind of store holds."""
        if current() is not None:
            return None
        process = self.resolve()
        if process.faults is not None:
            return None
        if not process.ready.is_set() and not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        server = process.server
        return server if getattr(server, "adds_on_callers", False) else None

    def directory(self) -> str:
        """The store's directory, as it was opened (a RecallIndex keeps its snapshots in
        its ``recall`` subdirectory)."""
        process = self.resolve()
        if not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        server: Any = process.server  # a LevelDBStore
        path: str = server.path
        return path

    def flush(self, timeout: float | None = 30.0) -> None:
        """Return once every write queued before this call is on disk."""
        self.call(("flush",), timeout)
