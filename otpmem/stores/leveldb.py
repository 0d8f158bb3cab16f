"""LevelDBStore: every conversation on disk (plyvel + msgpack), the DETS analogue.

One key per message, ordered by (user, conversation, sequence); see ``_leveldb_keys`` for
the layout. Each ``add`` is one WriteBatch: all of it is stored, or none. With
``sync=True`` (the default) an ``add`` returns only after its batch was fsynced, so an
acknowledged message survives a kill -9 of the process or a power cut; concurrent adds share
one fsync (group commit). ``sync=False`` is several times faster and still survives a
crash of the process (LevelDB replays its log), but not of the machine.

The server owns the database: it opens it in ``init``, assigns sequence numbers and hands
writes to its committer; it closes it on every exit path before its exit is announced, so a
restarted store can open the directory at once. Reads run on the caller's thread.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import plyvel

from ..actors import NO_REPLY, GenServer, Handle, InitFailed, NoProcess, blocking, on_exit, sleep
from ..actors._node import current
from ..actors.faults import FaultPlan
from ..messages import (
    Conv,
    ConvLike,
    FrozenDict,
    InvalidMessage,
    as_conv,
    check_user_id,
    short_repr,
)
from ..supervisors import ChildSpec, Supervisor, SupervisorEvent
from . import _leveldb_keys as keys
from ._base import (
    STORE_INTENSITY,
    STORE_PERIOD,
    StoreClient,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreUnavailable,
    check_last,
    parse_request,
)
from ._committer import Committer, Op

LOCK_RETRY = 0.01
_LOCK_ERROR = re.compile(
    r"^IO error: lock .*: (already held by process|Resource temporarily unavailable)$"
)
READY_TIMEOUT = 30.0


class _ReadGate:
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


def _unpack(raw: bytes) -> dict[str, Any]:
    message: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return message


class LevelDBStoreHandle(StoreClient, Handle):
    """The ``ChatMemory`` face of a LevelDBStore: writes are calls, reads are direct."""

    __slots__ = ()

    @contextmanager
    def _db(self) -> Iterator[Any]:
        process = self.resolve()
        if not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        server: LevelDBStore = process.server  # type: ignore[assignment]
        with server.gate.reading(self._target()):
            yield server.db

    def get(self, conv: ConvLike, last: int | None = None) -> list[dict[str, Any]]:
        """The conversation oldest first, or its newest ``last`` messages (n reads, not all)."""
        prefix = keys.conv_prefix(keys.MESSAGE, as_conv(conv))
        last = check_last(last)
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

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds (one point read)."""
        meta_key = keys.conv_prefix(keys.META, as_conv(conv))
        with self._db() as db:
            raw = db.get(meta_key)
        return 0 if raw is None else int(msgpack.unpackb(raw)[1])

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's (a scan of one key each)."""
        prefix = (
            keys.META if user_id is None else keys.user_prefix(keys.META, check_user_id(user_id))
        )
        with self._db() as db:
            return [keys.decode_conv(k) for k in db.iterator(prefix=prefix, include_value=False)]

    def flush(self, timeout: float | None = 30.0) -> None:
        """Return once every write queued before this call is on disk."""
        self.call(("flush",), timeout)


class LevelDBStore(GenServer):
    """Conversations in a LevelDB directory, restored by reopening it::

    store = LevelDBStore.start_link("data/memory")
    store.add(Conv("alice", "c1"), [{"role": "user", "content": "hi"}])
    store.stop()
    LevelDBStore.start_link("data/memory").get(Conv("alice", "c1"))  # still there
    """

    caller_errors = (InvalidMessage, ValueError, TypeError)
    handle_class = LevelDBStoreHandle

    @classmethod
    def start_link(  # type: ignore[override]
        cls,
        path: str | os.PathLike[str],
        name: str | None = None,
        sync: bool = True,
        *,
        lock_timeout: float = 5.0,
        create: bool = True,
        faults: FaultPlan | None = None,
        start_timeout: float | None = 30.0,
    ) -> LevelDBStoreHandle:
        """Open (or, unless ``create=False``, create) the store at ``path``, linked to the caller.

        Raises ``StoreLocked`` if another process holds the directory for ``lock_timeout``
        s, ``StoreUnavailable`` if it cannot be created or opened, ``StoreCorrupt`` if it is
        damaged.
        """
        if not isinstance(path, str | os.PathLike):
            raise TypeError(f"path must be a str or a path, got {type(path).__name__}")
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be a bool, got {short_repr(sync)}")
        if not isinstance(lock_timeout, int | float) or isinstance(lock_timeout, bool):
            raise TypeError(
                f"lock_timeout must be a number of seconds, got {short_repr(lock_timeout)}"
            )
        try:
            handle = cls._spawn(
                (os.fspath(path), sync, lock_timeout, create),
                {},
                current(),
                name,
                faults,
                start_timeout,
            )
        except InitFailed as failure:
            if isinstance(failure.reason, StoreError):
                raise failure.reason from None
            raise
        assert isinstance(handle, LevelDBStoreHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        path: str | os.PathLike[str],
        name: str,
        child_id: str | None = None,
        *,
        sync: bool = True,
        intensity: int = STORE_INTENSITY,
        period: float = STORE_PERIOD,
        listeners: Iterable[Callable[[SupervisorEvent], None]] = (),
    ) -> ChildSpec:
        """A store named ``name`` at ``path`` under its own supervisor (child ``"store"``).

        Its supervisor absorbs a burst of crashes (``intensity`` restarts in ``period`` s)
        before it gives up, so the supervisor above it counts one restart per burst.
        ``listeners`` hear that supervisor, in every incarnation.
        """
        where = os.fspath(path)
        listeners = list(listeners)

        def start_supervisor() -> Handle:
            return Supervisor.start_link(
                [ChildSpec("store", start=lambda: cls.start_link(where, name=name, sync=sync))],
                intensity=intensity,
                period=period,
                listeners=listeners,
            )

        return ChildSpec(child_id or name, start=start_supervisor, type="supervisor")

    def init(self, path: str, sync: bool, lock_timeout: float, create: bool = True) -> None:
        self.path = path
        self.gate = _ReadGate()
        self.db = _open(path, lock_timeout, create)
        self.meta: dict[Conv, list[int]] = {}
        self.committer = Committer(self.db, sync, self._write_failed, Path(path).name)
        on_exit(self._close)

    def _write_failed(self, exc: BaseException) -> None:
        # Sequence numbers were handed out for writes that did not land: restart from disk.
        self.handle.send(("write_failed", exc))

    def _close(self) -> None:
        self.committer.stop()
        self.gate.close()
        self.db.close()

    def handle_info(self, message: Any) -> Any:
        if isinstance(message, tuple) and message and message[0] == "write_failed":
            raise StoreError(f"LevelDB write failed: {short_repr(message[1])}")
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        kind, arg = parse_request(message, "LevelDBStore")
        if kind == "add":
            self.committer.submit(self._append_ops(*arg), self.caller())
            return NO_REPLY
        if kind == "import":
            ops: list[Op] = []
            for conv, batch in arg:
                ops.extend(self._append_ops(conv, batch))
            self.committer.submit(ops, self.caller())
            return NO_REPLY
        if kind == "clear":
            return self._delete_range([keys.conv_prefix(keys.MESSAGE, arg)], [arg])
        if kind == "forget_user":
            owned = [c for c in self.meta if c.user_id == arg]
            prefixes = [keys.user_prefix(keys.MESSAGE, arg), keys.user_prefix(keys.META, arg)]
            return self._delete_range(prefixes, owned)
        if kind == "flush":
            blocking(self.committer.flush)
            return None
        raise ValueError(f"LevelDBStore does not understand {short_repr(message)}")

    def _meta(self, conv: Conv) -> list[int]:
        meta = self.meta.get(conv)
        if meta is None:
            raw = self.db.get(keys.conv_prefix(keys.META, conv))
            meta = [0, 0] if raw is None else list(msgpack.unpackb(raw))
            self.meta[conv] = meta
        return meta

    def _append_ops(self, conv: Conv, batch: list[FrozenDict]) -> list[Op]:
        if not batch:
            return []
        meta = self._meta(conv)
        prefix = keys.conv_prefix(keys.MESSAGE, conv)
        seq = meta[0]
        ops: list[Op] = [
            (keys.message_key(prefix, seq + i), msgpack.packb(m, use_bin_type=True))
            for i, m in enumerate(batch)
        ]
        meta[0] += len(batch)
        meta[1] += len(batch)
        ops.append((keys.conv_prefix(keys.META, conv), msgpack.packb(meta)))
        return ops

    def _delete_range(self, prefixes: list[bytes], convs: list[Conv]) -> Any:
        # Writes still queued would land after a range computed now: write them first.
        blocking(self.committer.flush)
        ops: list[Op] = []
        for prefix in prefixes:
            ops.extend((k, None) for k in self.db.iterator(prefix=prefix, include_value=False))
        for conv in convs:
            ops.append((keys.conv_prefix(keys.META, conv), None))
            self.meta.pop(conv, None)
        self.committer.submit(ops, self.caller())
        # And on disk before the next request: an add handled meanwhile would read the
        # conversation's old meta key back from disk (its count, persisted wrong).
        blocking(self.committer.flush)
        return NO_REPLY


def _error_text(exc: BaseException) -> str:
    # plyvel's errors carry LevelDB's message as bytes.
    first = exc.args[0] if exc.args else ""
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def _open(path: str, lock_timeout: float, create: bool) -> Any:
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
                f"the LevelDB store at {path!r} is corrupt ({_error_text(exc)}); back it up, "
                f"then try plyvel.repair_db({path!r})"
            ) from exc
        except plyvel.IOError as exc:
            text = _error_text(exc)
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
                f"cannot open the LevelDB store at {path!r}: {_error_text(exc)}"
            ) from exc
