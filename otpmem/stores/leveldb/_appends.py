"""LevelDBStore's write path for adds: each add as the ops of one WriteBatch (its messages,
their pinned copies, its key entries, the new meta and the usage sums), built under the
store's write lock from what the next write will find (this write's own ops, the queued
writes, the disk), then written by the plain thread that adds (one synced WriteBatch of
its own, LevelDB gathering concurrent ones) or handed to the committer (a process's add,
or one of keys a write not yet on disk touches).

``Appending`` is that half of the store's server (a mixin: ``LevelDBStore`` sets its
fields in ``init``); the server keeps opening, closing, parking and the other writes.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

import msgpack

from ...actors import CallTimeout, Handle
from ...actors.runtime import OneShot
from ...messages import Conv, FrozenDict, is_pinned, is_summary
from .._base import KEYS_KEPT, crash_server
from .._client import CheckedAdd
from .._write_rules import admits
from . import _longterm as lt
from . import keys
from ._committer import MISSING, Committer, Op

Staged = dict[bytes, bytes | None]
"""What one write's ops give the keys it touches (None: deletes), for the next to read."""


class Appending:
    """The add path of a LevelDBStore's server."""

    db: Any
    committer: Committer
    write_lock: threading.Lock
    writes_here: bool
    convs: dict[Conv, KnownConversation]
    handle: Handle
    packer: msgpack.Packer  # used under the write lock only: a Packer is not thread-safe
    caller_errors: ClassVar[tuple[type[BaseException], ...]]

    def add_here(self, add: CheckedAdd, timeout: float | None) -> bool:
        """Run an add on the calling thread (not a process's: it waits for the fsync):
        its ops built under the write lock, then written here, synced, unless a write not
        yet on disk touches their keys: then queued behind it, and waited for. False if
        writes are paused (a clear, a stop): the caller then calls, and its add queues
        behind what paused them."""
        with self.write_lock:
            if not self.writes_here:
                return False
            staged: Staged = {}
            try:
                ops = self._append_ops(*add, staged=staged)
            except self.caller_errors:
                raise
            except BaseException as exc:  # a bug: the store restarts, as a call's would
                self.writes_here = False
                raise crash_server(self.handle, self.handle, exc) from exc
            if not ops:
                return True  # stored already: a retry
            token = self.committer.begin_direct(staged)
            if token is None:  # behind a write of the same keys not yet on disk: queued
                durable = OneShot()  # a call's reply slot, without the call
                self.committer.submit(ops, durable, staged)
        if token is not None:
            self.committer.write_direct(ops, staged, token)
            return True
        if not durable.wait(timeout):
            raise CallTimeout(self.handle, timeout, what="add")
        if durable.error is not None:
            raise durable.error
        return True

    def _conversation(self, conv: Conv) -> KnownConversation:
        """The conversation's meta and key prefixes, cached once read."""
        known = self.convs.get(conv)
        if known is None:
            known = KnownConversation(conv)
            raw = self.db.get(known.meta_key)
            if raw is not None:
                known.meta = keys.Meta.unpack(raw)
            self.convs[conv] = known
        return known

    def read_through(self, key: bytes, staged: Staged) -> bytes | None:
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
        staged: Staged,
        forked: int | None = None,
    ) -> list[Op]:
        # ``forked``: the batch is a fork's copy, whose key remembers its size and which
        # records no usage (the spend stays the source's).
        if not batch:
            return []
        if (idempotency_key is not None or follows is not None) and not admits(
            conv, idempotency_key, follows, _KeysHeld(self, conv, staged)
        ):
            return []  # stored already: a retry
        known = self.convs.get(conv) or self._conversation(conv)
        meta, prefix, pinned = known.meta, known.messages, known.pinned
        seq = meta.next_seq
        pack, key = self.packer.pack, keys.message_key  # the packer: under the write lock
        ops: list[Op] = []
        plain = True  # no message pinned, a summary or carrying usage: most batches
        for i, message in enumerate(batch):
            packed = pack(message)
            ops.append((key(prefix, seq + i), packed))
            # Pinned, a summary and usage all need metadata, but a system message's pin.
            if message.get("metadata") is None and message.get("role") != "system":
                continue
            plain = False
            if is_pinned(message):
                meta.pinned_count += 1
                if is_summary(message):
                    if meta.summary_seq >= 0:
                        ops.append((key(pinned, meta.summary_seq), None))
                    meta.summary_seq = seq + i
                ops.append((key(pinned, seq + i), packed))
        if idempotency_key is not None:
            ops.extend(self._key_ops(conv, idempotency_key, meta, seq, staged, forked))
        meta.next_seq += len(batch)
        meta.count += len(batch)
        packed_meta = meta.pack(pack)
        ops.append((known.meta_key, packed_meta))
        staged[known.meta_key] = packed_meta  # the next write of the conversation goes after
        if plain or forked is not None:  # a fork records no usage: the spend is the source's
            return ops
        usage = lt.usage_ops(lambda key: self.read_through(key, staged), conv, batch, self.db)
        for key_, value in usage[:2]:  # the running sums: the next add must see them
            staged[key_] = value
        ops.extend(usage)
        return ops

    def _key_ops(
        self,
        conv: Conv,
        idempotency_key: str,
        meta: keys.Meta,
        position: int,
        staged: Staged,
        forked: int | None = None,
    ) -> list[Op]:
        """Record the key, and forget the conversation's oldest once it holds KEYS_KEPT."""
        order = keys.conv_prefix(keys.KEY_ORDER, conv)
        ordinal = meta.next_ordinal
        meta.next_ordinal += 1
        entry = keys.idempotency_key(conv, idempotency_key)
        raw_key = idempotency_key.encode("utf-8", "surrogatepass")
        ops: list[Op] = [
            (entry, keys.key_entry(ordinal, position, forked)),
            (keys.message_key(order, ordinal), raw_key),
        ]
        if ordinal >= KEYS_KEPT:
            oldest = keys.message_key(order, ordinal - KEYS_KEPT)
            forgotten = self.read_through(oldest, staged)
            ops.append((oldest, None))
            if forgotten is not None:
                forgotten_entry = keys.conv_prefix(keys.KEY, conv) + forgotten
                ops.append((forgotten_entry, None))
                staged[forgotten_entry] = None
            staged[oldest] = None
        staged[entry] = ops[0][1]
        staged[ops[1][0]] = raw_key
        return ops


class _KeysHeld:
    """The idempotency keys a conversation holds, as the next write will find them (what
    ``admits`` asks)."""

    __slots__ = ("conv", "staged", "store")

    def __init__(self, store: Appending, conv: Conv, staged: Staged) -> None:
        self.store = store
        self.conv = conv
        self.staged = staged

    def __contains__(self, key: object) -> bool:
        return (
            isinstance(key, str)
            and self.store.read_through(keys.idempotency_key(self.conv, key), self.staged)
            is not None
        )


class KnownConversation:
    """What the server keeps of a conversation it wrote: its ``Meta`` (as stored under
    ``meta_key``) and its key prefixes, encoded once rather than on every add."""

    __slots__ = ("messages", "meta", "meta_key", "pinned")

    def __init__(self, conv: Conv) -> None:
        self.meta = keys.Meta()
        self.meta_key = keys.conv_prefix(keys.META, conv)
        self.messages = keys.conv_prefix(keys.MESSAGE, conv)
        self.pinned = keys.conv_prefix(keys.PINNED, conv)


__all__ = ["Appending", "KnownConversation", "Staged"]
