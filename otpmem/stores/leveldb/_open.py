"""Opening a LevelDB store's directory: the lock, clear errors, and the key layout's version.

A directory written by wave 1 (layout 1: messages and meta only) is brought to layout 2 on
its first open, once: its pinned index is built from the messages, so no stored system
message goes missing from a window. A layout-2 or layout-3 directory becomes layout 4 by
its number (layout 2's facts read with unknown times; neither holds a scope's record, so
the scope registry and members start empty), and the records of user ids that begin
with ``scopes.MARK`` move to those ids' owner keys, found by seeks, not a scan.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import plyvel

from ...actors import NoProcess, sleep
from ...messages import Conv, is_pinned, is_summary
from .._base import StoreCorrupt, StoreLocked, StoreUnavailable
from . import _scopes, keys

logger = logging.getLogger("otpmem.stores")

LOCK_RETRY = 0.01
_LOCK_ERROR = re.compile(
    r"^IO error: lock .*: (already held by process|Resource temporarily unavailable)$"
)
_MIGRATION_BATCH = 10_000


PARK_SECONDS = 0.5
_parked: dict[str, tuple[Any, tuple[int, int] | None, threading.Timer]] = {}
_parked_lock = threading.Lock()


def directory_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path`` now; None if there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def park(path: str, db: Any, identity: tuple[int, int] | None) -> None:
    """Keep a crashed or killed store's open database for its next incarnation, which a
    supervisor starts within milliseconds: no close (which waits out a running
    compaction) and no reopen (which replays the log into a table). Closed after
    ``PARK_SECONDS`` if no incarnation adopts it, so the directory is not held.
    ``identity`` is the directory's when it was opened."""
    key = os.path.realpath(path)
    timer = threading.Timer(PARK_SECONDS, _close_parked, args=(key, db))
    timer.name = f"otpmem-leveldb-parked-{os.path.basename(key)}"
    with _parked_lock:
        _parked[key] = (db, identity, timer)
    timer.start()


def adopt(path: str) -> Any | None:
    """The database an earlier incarnation parked for ``path``, if ``path`` still names
    the directory it was opened from (one moved or replaced meanwhile is closed)."""
    with _parked_lock:
        entry = _parked.pop(os.path.realpath(path), None)
    if entry is None:
        return None
    db, identity, timer = entry
    timer.cancel()
    if identity is None or directory_identity(path) != identity:
        db.close()
        return None
    return db


def _close_parked(key: str, db: Any) -> None:
    with _parked_lock:
        entry = _parked.get(key)
        if entry is None or entry[0] is not db:
            return  # adopted meanwhile
        del _parked[key]
    db.close()


class ReadGate:
    """Lets reader threads use the DB while it is open, and close wait for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self.closed = False

    @contextmanager
    def reading(self, owner: object) -> Iterator[None]:
        with self._cond:
            if self.closed:
                raise NoProcess(owner)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.wait_for(lambda: self._readers == 0)


def error_text(exc: BaseException) -> str:
    # plyvel's errors carry LevelDB's message as bytes.
    first = exc.args[0] if exc.args else ""
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def open_db(path: str, lock_timeout: float, create: bool) -> Any:
    if not create and not os.path.exists(os.path.join(path, "CURRENT")):
        raise StoreUnavailable(f"there is no LevelDB store at {path!r}")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"cannot create the store directory {path!r}: {exc.strerror}"
        ) from exc
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            return plyvel.DB(path, create_if_missing=create)
        except plyvel.CorruptionError as exc:
            raise StoreCorrupt(
                f"the LevelDB store at {path!r} is corrupt ({error_text(exc)}); back it up, "
                f"then try plyvel.repair_db({path!r})"
            ) from exc
        except plyvel.IOError as exc:
            text = error_text(exc)
            # LevelDB says "IO error: lock <path>/LOCK: already held by process" (another
            # DB in this process) or "...: Resource temporarily unavailable" (another process).
            if _LOCK_ERROR.match(text):
                if time.monotonic() < deadline:
                    sleep(LOCK_RETRY)  # another process's lock has no event to wait on
                    continue
                raise StoreLocked(
                    f"the LevelDB store at {path!r} is locked by another process (or a store "
                    f"there did not exit) after waiting {lock_timeout} s"
                ) from exc
            raise StoreUnavailable(f"cannot open the LevelDB store at {path!r}: {text}") from exc
        except plyvel.Error as exc:
            raise StoreCorrupt(
                f"cannot open the LevelDB store at {path!r}: {error_text(exc)}"
            ) from exc


def ensure_layout(db: Any, path: str) -> None:
    """Check the directory's key layout; bring a wave-1 store to the current one."""
    raw = db.get(keys.VERSION)
    if raw is not None:
        version = int(raw)
        if version > keys.LAYOUT_VERSION:
            raise StoreUnavailable(
                f"the LevelDB store at {path!r} has key layout {version}, written by a newer "
                f"otpmem; this one reads layouts up to {keys.LAYOUT_VERSION}"
            )
        # 2 -> 3: facts gain times (no record changes); 3 -> 4: scopes (new kinds, and
        # only the records of user ids that begin with scopes.MARK move).
        if version < keys.LAYOUT_VERSION:
            _to_layout_4(db, path)
        return
    with db.iterator(prefix=keys.META, include_value=False) as it:
        empty = next(it, None) is None
    if not empty:
        _build_pinned_index(db, path)
    _to_layout_4(db, path)


def _to_layout_4(db: Any, path: str) -> None:
    """Move what ``_scopes.rekey_ops`` moves and write the new number, in one synced
    batch: a rerun after a crash finds the directory as it was (moved records begin with
    the mark too, so a second move would encode them twice)."""
    ops = _scopes.rekey_ops(db)
    with db.write_batch(sync=True) as batch:
        for key, value in ops:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        batch.put(keys.VERSION, str(keys.LAYOUT_VERSION).encode())
    if ops:
        logger.info(
            "LevelDB store %s: moved %d records of user ids that begin with the scope mark "
            "to their owner keys (key layout 4)",
            path,
            sum(1 for _, value in ops if value is None),
        )


def _build_pinned_index(db: Any, path: str) -> None:
    started = time.monotonic()
    summaries: dict[Conv, int] = {}
    pinned_counts: dict[Conv, int] = {}
    batch = db.write_batch()
    pending = indexed = 0
    for key, value in db.iterator(prefix=keys.MESSAGE):
        message = msgpack.unpackb(value, raw=False)
        if not is_pinned(message):
            continue
        conv, seq = keys.decode_conv(key), keys.seq_of(key)
        pinned_counts[conv] = pinned_counts.get(conv, 0) + 1
        pinned_prefix = keys.conv_prefix(keys.PINNED, conv)
        if is_summary(message):
            older = summaries.get(conv)
            if older is not None:
                batch.delete(keys.message_key(pinned_prefix, older))
            summaries[conv] = seq
        batch.put(keys.message_key(pinned_prefix, seq), value)
        indexed += 1
        pending += 1
        if pending >= _MIGRATION_BATCH:
            batch.write()
            batch, pending = db.write_batch(), 0
    for meta_key, raw in db.iterator(prefix=keys.META):
        conv = keys.decode_conv(meta_key)
        stored = keys.Meta.unpack(raw)  # layout 1: next_seq and count
        meta = keys.Meta(
            stored.next_seq, stored.count, 0, summaries.get(conv, -1), pinned_counts.get(conv, 0)
        )
        batch.put(meta_key, meta.pack())
    batch.write()
    logger.info(
        "LevelDB store %s: built the pinned index of a layout-1 store (%d pinned messages) "
        "in %.2f s",
        path,
        indexed,
        time.monotonic() - started,
    )
