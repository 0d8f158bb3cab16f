"""LevelDBStore: every conversation on disk (plyvel + msgpack), the DETS analogue.

One key per message, ordered by (user, conversation, sequence); see ``_leveldb_keys`` for
the layout. Each ``add`` is one WriteBatch: all of it is stored, or none. With
``sync=True`` (the default) an ``add`` returns only after its batch was fsynced, so an
acknowledged message survives a kill -9 of the process or a power cut; concurrent adds share
one fsync (group commit). ``sync=False`` is several times faster and still survives a
crash of the process (LevelDB replays its log), but not of the machine.

The server owns the database: it opens it in ``init``, assigns sequence numbers and hands
writes to its committer; it closes it on every exit path before its exit is announced, so a
restarted store can open the directory at once, except after a crash or a kill, when the
open database is parked for the next incarnation to adopt (``_leveldb_open.park``): a
restart then neither waits out a compaction nor replays the log. Reads run on the caller's
thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

from ...actors import NO_REPLY, CallTimeout, GenServer, blocking, on_exit
from ...actors.faults import FaultPlan
from ...actors.runtime import OneShot
from ...messages import (
    Conv,
    FrozenDict,
    InvalidMessage,
    is_pinned,
    is_summary,
    short_repr,
)
from ...supervisors import ChildSpec, SupervisorEvent
from .._base import (
    KEYS_KEPT,
    STORE_INTENSITY,
    STORE_PERIOD,
    ConversationCleared,
    StoreError,
    crash_server,
    raise_write_crash,
)
from .._client import CheckedAdd, parse_request
from .._longterm_client import LONGTERM_KINDS, parse_longterm
from .._supervised import spawn_store, supervised_store
from ..longterm import FactLimitReached
from . import _longterm as lt
from . import keys
from ._committer import MISSING, Committer, Op
from ._handle import READY_TIMEOUT, LevelDBStoreHandle
from ._open import (
    ReadGate,
    adopt,
    directory_identity,
    ensure_layout,
    open_db,
    park,
)

__all__ = ["READY_TIMEOUT", "LevelDBStore", "LevelDBStoreHandle"]


class LevelDBStore(GenServer):
    """Conversations in a LevelDB directory, restored by reopening it::

    store = LevelDBStore.start_link("data/memory")
    store.add(Conv("alice", "c1"), [{"role": "user", "content": "hi"}])
    store.stop()
    LevelDBStore.start_link("data/memory").get(Conv("alice", "c1"))  # still there
    """

    caller_errors = (
        InvalidMessage,
        ValueError,
        TypeError,
        ConversationCleared,
        FactLimitReached,
    )
    handle_class = LevelDBStoreHandle
    adds_on_callers = True  # see add_here

    @classmethod
    def start_link(
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
        handle = spawn_store(
            cls, (os.fspath(path), sync, lock_timeout, create), name, faults, start_timeout
        )
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
        return supervised_store(
            child_id or name,
            lambda: cls.start_link(where, name=name, sync=sync),
            intensity,
            period,
            listeners,
        )

    def init(self, path: str, sync: bool, lock_timeout: float, create: bool = True) -> None:
        self.path = path
        self.gate = ReadGate()
        adopted = adopt(path)
        if adopted is not None:
            self.db = adopted
        else:
            self.db = open_db(path, lock_timeout, create)
            try:
                blocking(ensure_layout, self.db, path)
            except BaseException:
                self.db.close()
                raise
        self.directory = directory_identity(path)
        # A crash or a kill parks the open database for the next incarnation; a stop, a
        # shutdown or a failed write (LevelDB keeps failing until reopened) closes it.
        self.keep_open = True
        self.convs: dict[Conv, _Conversation] = {}
        self.committer = Committer(self.db, sync, self._write_failed, Path(path).name)
        # Threads that are not processes add on their own thread (``add_here``): the ops
        # built under this lock, which the server takes too for anything that reads or
        # changes what an add builds on; clears and long-term writes pause them instead.
        self.write_lock = threading.Lock()
        self.writes_here = True
        self.closed = False
        on_exit(self._close)

    def _write_failed(self, exc: BaseException) -> None:
        # Sequence numbers were handed out for writes that did not land: restart from disk.
        self.handle.send(("write_failed", exc))

    def _close(self) -> None:
        with self.write_lock:
            self.writes_here, self.closed = False, True
        self.committer.stop()
        self.gate.close()
        if self.keep_open:
            park(self.path, self.db, self.directory)
        else:
            self.db.close()

    def terminate(self, reason: Any) -> None:
        if not isinstance(reason, BaseException):  # normal, or a shutdown: nothing follows
            self.keep_open = False

    def handle_info(self, message: Any) -> Any:
        raise_write_crash(message)
        if isinstance(message, tuple) and message and message[0] == "write_failed":
            self.keep_open = False
            raise StoreError(f"LevelDB write failed: {short_repr(message[1])}")
        return super().handle_info(message)

    def add_here(self, add: CheckedAdd, timeout: float | None) -> bool:
        """Run an add on the calling thread (not a process's: it waits for the fsync):
        its ops built under the write lock, then a wait for its group to be on disk.
        False if writes are paused (a clear, a stop): the caller then calls, and its add
        queues behind what paused them."""
        durable = OneShot()  # a call's reply slot, without the call
        with self.write_lock:
            if not self.writes_here:
                return False
            staged: dict[bytes, bytes | None] = {}
            try:
                ops = self._append_ops(*add, staged=staged)
            except self.caller_errors:
                raise
            except BaseException as exc:  # a bug: the store restarts, as a call's would
                self.writes_here = False
                raise crash_server(self.handle, self.handle, exc) from exc
            if not ops:
                return True  # stored already: a retry
            group = self.committer.submit_here(ops, durable, staged)
        if group is not None:  # no group was being written: this thread writes one now
            self.committer.write_led(group)
        if not durable.wait(timeout):
            raise CallTimeout(self.handle, timeout, what="add")
        if durable.error is not None:
            raise durable.error
        return True

    @contextmanager
    def _adds_paused(self) -> Iterator[None]:
        """No add on a caller's thread in the block: theirs wait in the mailbox."""
        with self.write_lock:
            self.writes_here = False
        try:
            yield
        finally:
            with self.write_lock:
                self.writes_here = not self.closed

    def handle_call(self, message: Any) -> Any:
        if isinstance(message, tuple) and message and message[0] in LONGTERM_KINDS:
            with self._adds_paused():
                return self._longterm(*parse_longterm(message, "LevelDBStore"))
        kind, arg = parse_request(message, "LevelDBStore")
        if kind == "add":
            staged: dict[bytes, bytes | None] = {}
            with self.write_lock:
                ops = self._append_ops(*arg, staged=staged)
                self.committer.submit(ops, self.caller(), staged)
            return NO_REPLY
        if kind == "import":
            staged = {}
            ops = []
            with self.write_lock:
                for conv, batch, key in arg:
                    ops.extend(self._append_ops(conv, batch, key, staged=staged))
                self.committer.submit(ops, self.caller(), staged)
            return NO_REPLY
        if kind == "clear":
            of_conv = (*keys.CONVERSATION_KINDS, *lt.CONVERSATION_KINDS)
            prefixes = [keys.conv_prefix(k, arg) for k in of_conv]
            with self._adds_paused():
                return self._delete_range(prefixes, [arg], [lt.cleared_op(arg)])
        if kind == "forget_user":
            kinds = (*keys.CONVERSATION_KINDS, keys.META)
            prefixes = [keys.user_prefix(k, arg) for k in kinds]
            with self._adds_paused():
                # Listed once adds are paused: a conversation a thread begins until then
                # is cached by now, and its cached count must go with it.
                owned = [c for c in self.convs if c.user_id == arg]
                return self._delete_range([*prefixes, *lt.iter_user_prefixes(arg)], owned)
        if kind == "flush":
            blocking(self.committer.flush)
            return None
        raise ValueError(f"LevelDBStore does not understand {short_repr(message)}")

    def _conversation(self, conv: Conv) -> _Conversation:
        """The conversation's meta and key prefixes, cached once read."""
        known = self.convs.get(conv)
        if known is None:
            known = _Conversation(conv)
            raw = self.db.get(known.meta_key)
            if raw is not None:
                known.meta = list(msgpack.unpackb(raw))
            self.convs[conv] = known
        return known

    def _read(self, key: bytes, staged: dict[bytes, bytes | None]) -> bytes | None:
        """A key as the next write will find it: this write's own ops, then the queued
        writes, then the disk."""
        if key in staged:
            return staged[key]
        found = self.committer.staged(key)
        if found is MISSING:
            value: bytes | None = self.db.get(key)
            return value
        return found  # type: ignore[return-value]

    def _append_ops(
        self,
        conv: Conv,
        batch: list[FrozenDict],
        idempotency_key: str | None = None,
        follows: str | None = None,
        *,
        staged: dict[bytes, bytes | None],
    ) -> list[Op]:
        if not batch:
            return []
        if (
            idempotency_key is not None
            and self._read(keys.idempotency_key(conv, idempotency_key), staged) is not None
        ):
            return []  # stored already: a retry
        if follows is not None and self._read(keys.idempotency_key(conv, follows), staged) is None:
            raise ConversationCleared(
                f"conversation {conv} no longer holds the batch {follows!r} this write "
                "follows: it was cleared since; nothing was stored"
            )
        known = self._conversation(conv)
        meta, prefix, pinned = known.meta, known.messages, known.pinned
        seq = meta[0]
        ops: list[Op] = []
        for i, message in enumerate(batch):
            packed = msgpack.packb(message, use_bin_type=True)
            ops.append((keys.message_key(prefix, seq + i), packed))
            if is_pinned(message):
                meta[4] += 1
                if is_summary(message):
                    if meta[3] >= 0:
                        ops.append((keys.message_key(pinned, meta[3]), None))
                    meta[3] = seq + i
                ops.append((keys.message_key(pinned, seq + i), packed))
        if idempotency_key is not None:
            ops.extend(self._key_ops(conv, idempotency_key, meta, seq, staged))
        meta[0] += len(batch)
        meta[1] += len(batch)
        ops.append((known.meta_key, msgpack.packb(meta)))
        usage = lt.usage_ops(lambda key: self._read(key, staged), conv, batch)
        for key, value in usage[:2]:  # the running sums: the next add must see them
            staged[key] = value
        ops.extend(usage)
        return ops

    def _key_ops(
        self,
        conv: Conv,
        idempotency_key: str,
        meta: list[int],
        position: int,
        staged: dict[bytes, bytes | None],
    ) -> list[Op]:
        """Record the key, and forget the conversation's oldest once it holds KEYS_KEPT."""
        order = keys.conv_prefix(keys.KEY_ORDER, conv)
        ordinal = meta[2]
        meta[2] += 1
        entry = keys.idempotency_key(conv, idempotency_key)
        raw_key = idempotency_key.encode("utf-8", "surrogatepass")
        ops: list[Op] = [
            (entry, msgpack.packb([ordinal, position])),
            (keys.message_key(order, ordinal), raw_key),
        ]
        if ordinal >= KEYS_KEPT:
            oldest = keys.message_key(order, ordinal - KEYS_KEPT)
            forgotten = self._read(oldest, staged)
            ops.append((oldest, None))
            if forgotten is not None:
                forgotten_entry = keys.conv_prefix(keys.KEY, conv) + forgotten
                ops.append((forgotten_entry, None))
                staged[forgotten_entry] = None
            staged[oldest] = None
        staged[entry] = ops[0][1]
        staged[ops[1][0]] = raw_key
        return ops

    def _longterm(self, kind: str, arg: Any) -> Any:
        # Facts are read, then written: everything queued must be on disk before the read.
        blocking(self.committer.flush)
        if kind == "save_facts":
            saved, removed, ops = lt.fact_ops(self.db, *arg)
            self.committer.submit(ops, self.caller(), answer=(saved, removed))
            return NO_REPLY
        if kind == "save_profile":
            self.committer.submit([lt.profile_op(arg)], self.caller(), answer=arg)
            return NO_REPLY
        if kind == "delete_profile":
            entry = keys.user_prefix(lt.PROFILE, arg)
            existed = self.db.get(entry) is not None
            self.committer.submit([(entry, None)], self.caller(), answer=existed)
            return NO_REPLY
        self.committer.submit(lt.job_ops(self.db, *arg), self.caller())
        return NO_REPLY

    def _delete_range(
        self, prefixes: list[bytes], convs: list[Conv], puts: Sequence[Op] = ()
    ) -> Any:
        # Writes still queued would land after a range computed now: write them first.
        blocking(self.committer.flush)
        ops: list[Op] = []
        for prefix in prefixes:
            ops.extend((k, None) for k in self.db.iterator(prefix=prefix, include_value=False))
        for conv in convs:
            ops.append((keys.conv_prefix(keys.META, conv), None))
            self.convs.pop(conv, None)
        ops.extend(puts)
        self.committer.submit(ops, self.caller())
        # And on disk before the next request: an add handled meanwhile would read the
        # conversation's old meta key back from disk (its count, persisted wrong).
        blocking(self.committer.flush)
        return NO_REPLY


class _Conversation:
    """What the server keeps of a conversation it wrote: its meta (``[next_seq, count,
    next_ordinal, summary_seq, pinned_count]``, as stored under ``meta_key``) and its key
    prefixes, encoded once rather than on every add."""

    __slots__ = ("messages", "meta", "meta_key", "pinned")

    def __init__(self, conv: Conv) -> None:
        self.meta = [0, 0, 0, -1, 0]
        self.meta_key = keys.conv_prefix(keys.META, conv)
        self.messages = keys.conv_prefix(keys.MESSAGE, conv)
        self.pinned = keys.conv_prefix(keys.PINNED, conv)
