"""Where a RecallIndex keeps its snapshot chunks: beside the store they were made from.

- ``LevelDBShelf``: a LevelDB database of its own in the store's directory, ``<store>/recall``
  (LevelDB leaves a subdirectory it did not make alone: it only reads, writes and deletes
  the files it names itself, and otpmem's read-only snapshot of a store copies files, not
  directories). Key layout, one range per tenant and per conversation::

      r <user> <conversation> <start: 8 bytes>  ->  a chunk (``chunks``)

  with ``<user>`` and ``<conversation>`` encoded as the store encodes them
  (``otpmem.stores.leveldb.keys``: length-prefixed, so no tenant's range holds another's).
  Written without fsync: a chunk lost to a crash is re-indexed from the store.
- ``PostgresShelf``: the table ``<schema>.recall_chunks`` in the store's own schema, reached
  through the store's pool (``PostgresStoreHandle.connection``), one row per chunk.

A MemoryStore (or any other ``ChatMemory``) has no shelf: nothing of its index outlives it.
A shelf is opened and used on the blocking pool, never on a scheduler.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import plyvel

from ...messages import Conv
from ...stores import ChatMemory, LevelDBStoreHandle
from ...stores.leveldb import keys
from .handle import Owner

logger = logging.getLogger("otpmem.recall")

KIND = b"r"
SUBDIRECTORY = "recall"
PARK_SECONDS = 0.5
"""How long a killed index's shelf stays open for its restarted incarnation to adopt."""
CLOSE_WAIT = 10.0
"""How long an open waits for the same database's close (LevelDB's lock) at most."""

Row = tuple[Conv, int, bytes]
"""A stored chunk: its conversation, its start, its bytes."""


class ShelfClosed(RuntimeError):
    """The shelf was closed meanwhile (its index exited)."""


@dataclass
class Batch:
    """Writes applied together, in this order: tenants forgotten, conversations cut from a
    start on, then chunks put."""

    forgotten: list[Owner] = field(default_factory=list)
    cuts: list[tuple[Conv, int]] = field(default_factory=list)
    puts: list[Row] = field(default_factory=list)


class Shelf(Protocol):
    """A place for chunks, read by tenant."""

    where: str

    def load(self, owner: Owner) -> list[Row]:
        """The tenant's chunks, by conversation then start (one range read)."""

    def write(self, batch: Batch) -> None:
        """Apply ``batch`` as one write."""

    def release(self, killed: bool) -> None:
        """The index is done with it (``killed``: close later, off this thread)."""


def shelf_for(store: ChatMemory) -> Shelf | None:
    """The shelf beside ``store``, opened (None: a store of no durable place)."""
    if isinstance(store, LevelDBStoreHandle):
        return LevelDBShelf.acquire(os.path.join(store.directory(), SUBDIRECTORY))
    postgres = sys.modules.get("otpmem.stores.postgres")  # a PG handle means it is loaded
    if postgres is not None and isinstance(store, postgres.PostgresStoreHandle):
        return PostgresShelf(store)
    return None


class LevelDBShelf:
    """A LevelDB database of chunks, shared by every index of this OS process that uses it."""

    _open: dict[str, LevelDBShelf] = {}
    _closing: dict[str, LevelDBShelf] = {}  # LevelDB's lock is held until close returns
    _registry = threading.Lock()

    def __init__(self, path: str) -> None:
        self.where = path
        self.db = _open_db(path)
        self.users = 0
        self.closed = threading.Event()
        self.lock = threading.Lock()  # a read or a write in flight: close waits for it
        self.timer: threading.Timer | None = None

    @classmethod
    def acquire(cls, path: str) -> LevelDBShelf:
        """The open shelf at ``path`` (adopted if parked), or a new one."""
        key = os.path.realpath(path)
        with cls._registry:
            closing = cls._closing.get(key)
        if closing is not None:
            closing.closed.wait(CLOSE_WAIT)
        with cls._registry:  # held while opening: one database handle per path
            found = cls._open.get(key)
            if found is None:
                found = cls._open[key] = cls(path)
            found.users += 1
            if found.timer is not None:
                found.timer.cancel()
                found.timer = None
            return found

    def release(self, killed: bool) -> None:
        """One index fewer; closed by the last (after ``PARK_SECONDS`` if it was killed)."""
        key = os.path.realpath(self.where)
        with self._registry:
            self.users -= 1
            if self.users > 0:
                return
            if killed:
                self.timer = threading.Timer(PARK_SECONDS, self._expire, args=(key,))
                self.timer.name = "otpmem-recall-parked"
                self.timer.start()
                return
            self._open.pop(key, None)
            self._closing[key] = self
        self._close(key)

    def _expire(self, key: str) -> None:
        with self._registry:
            if self.users > 0 or self._open.get(key) is not self:
                return
            del self._open[key]
            self._closing[key] = self
        self._close(key)

    def _close(self, key: str) -> None:
        with self.lock:
            if not self.closed.is_set():
                self.db.close()
                self.closed.set()
        with self._registry:
            if self._closing.get(key) is self:
                del self._closing[key]

    @contextmanager
    def _using(self) -> Iterator[Any]:
        with self.lock:
            if self.closed.is_set():
                raise ShelfClosed(self.where)
            yield self.db

    def load(self, owner: Owner) -> list[Row]:
        """The tenant's chunks in key order; a key that does not parse is skipped."""
        rows = []
        with self._using() as db:
            for key, value in db.iterator(prefix=keys.user_prefix(KIND, owner)):
                try:
                    conv = keys.decode_conv(key)
                    start = keys.seq_of(key)
                except (IndexError, ValueError, UnicodeDecodeError):
                    continue
                if _key(conv, start) == key and conv.user_id == owner:
                    rows.append((conv, start, value))
        return rows

    def write(self, batch: Batch) -> None:
        """One WriteBatch, without fsync (a lost chunk is re-indexed)."""
        with self._using() as db, db.write_batch() as out:
            for owner in batch.forgotten:
                for key in db.iterator(prefix=keys.user_prefix(KIND, owner), include_value=False):
                    out.delete(key)
            for conv, start in batch.cuts:
                prefix = keys.conv_prefix(KIND, conv)
                first = keys.message_key(prefix, start)
                for key in db.iterator(prefix=prefix, include_value=False):
                    if len(key) != len(first) or key >= first:  # a malformed one goes too
                        out.delete(key)
            for conv, start, value in batch.puts:
                out.put(_key(conv, start), value)


def _key(conv: Conv, start: int) -> bytes:
    return keys.message_key(keys.conv_prefix(KIND, conv), start)


def _open_db(path: str) -> Any:
    """Open (or create) the database at ``path``; a damaged one is a cache: destroyed and
    made anew."""
    try:
        return plyvel.DB(path, create_if_missing=True)
    except plyvel.CorruptionError as exc:
        logger.warning("recall snapshots at %s are damaged (%s): starting them anew", path, exc)
    except plyvel.IOError as exc:
        if "lock" in str(exc):
            raise
        logger.warning("recall snapshots at %s cannot be opened (%s): starting anew", path, exc)
    plyvel.destroy_db(path)
    return plyvel.DB(path, create_if_missing=True)


_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} (user_key text NOT NULL, conversation_id text NOT "
    "NULL, start bigint NOT NULL, chunk bytea NOT NULL, PRIMARY KEY (user_key, "
    "conversation_id, start))"
)


class PostgresShelf:
    """Chunks in ``<schema>.recall_chunks``, through the store's own pool."""

    def __init__(self, store: Any) -> None:
        from psycopg import errors, sql

        self.store = store
        schema = store.schema()
        self.where = f"{schema}.recall_chunks"
        table = sql.Identifier(schema, "recall_chunks")
        self.sql = {
            name: sql.SQL(text).format(table=table)
            for name, text in {
                "ddl": _DDL,
                "load": "SELECT conversation_id, start, chunk FROM {table} WHERE user_key = %s "
                "ORDER BY conversation_id, start",
                "forget": "DELETE FROM {table} WHERE user_key = %s",
                "cut": "DELETE FROM {table} WHERE user_key = %s AND conversation_id = %s AND "
                "start >= %s",
                "put": "INSERT INTO {table} VALUES (%s, %s, %s, %s) ON CONFLICT (user_key, "
                "conversation_id, start) DO UPDATE SET chunk = EXCLUDED.chunk",
            }.items()
        }
        # Another node making it at the same moment is as good.
        with store.connection() as conn, suppress(errors.UniqueViolation, errors.DuplicateTable):
            conn.execute(self.sql["ddl"])

    def load(self, owner: Owner) -> list[Row]:
        """The tenant's chunks, one statement."""
        with self.store.connection() as conn:
            rows = conn.execute(self.sql["load"], (_user_key(owner),)).fetchall()
        return [(Conv(owner, conv_id), int(start), bytes(chunk)) for conv_id, start, chunk in rows]

    def write(self, batch: Batch) -> None:
        """One transaction."""
        with self.store.connection() as conn, conn.transaction(), conn.cursor() as cur:
            for owner in batch.forgotten:
                cur.execute(self.sql["forget"], (_user_key(owner),))
            for conv, start in batch.cuts:
                cur.execute(self.sql["cut"], (_user_key(conv.user_id), conv.conversation_id, start))
            if batch.puts:
                cur.executemany(
                    self.sql["put"],
                    [(_user_key(c.user_id), c.conversation_id, s, v) for c, s, v in batch.puts],
                )

    def release(self, killed: bool) -> None:
        """Nothing to close: the connections are the store's."""


def _user_key(owner: Owner) -> str:
    # '' for the conversations of no user: user ids are never empty.
    return "" if owner is None else owner
