"""The work of one LevelDBStore add, counted (issue 32): a plain thread's add to a
conversation the store knows reads nothing from disk, validates and packs each message
once, makes no reply slot and no hand-off (its own synced WriteBatch, which LevelDB gathers
with those of the threads beside it), and puts exactly its messages and the meta. Counts,
not times: so the work removed cannot creep back. A write of keys another write has not yet
put on disk still goes through the committer, in order."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import otpmem.messages
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from otpmem.stores.leveldb import _appends
from tests.support import run_threads

WAIT = 30.0


def msg(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


class Counted:
    """A plyvel DB that counts its point reads, write batches and puts (one lock: counted
    from every thread)."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self.lock = threading.Lock()
        self.gets = 0
        self.batches = 0
        self.puts = 0

    def get(self, key: bytes, *args: Any) -> Any:
        with self.lock:
            self.gets += 1
        return self._db.get(key, *args)

    def write_batch(self, **options: Any) -> Any:
        with self.lock:
            self.batches += 1
        return CountedBatch(self, self._db.write_batch(**options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


class CountedBatch:
    def __init__(self, owner: Counted, batch: Any) -> None:
        self.owner, self.batch = owner, batch

    def put(self, key: bytes, value: bytes) -> None:
        with self.owner.lock:
            self.owner.puts += 1
        self.batch.put(key, value)

    def delete(self, key: bytes) -> None:
        self.batch.delete(key)

    def write(self) -> None:
        self.batch.write()


def counted(store: Any) -> tuple[Any, Counted]:
    """The store's server, with its database (the committer's too) counted."""
    server = store.resolve().server
    db = Counted(server.db)
    server.db = server.committer._db = db
    return server, db


@pytest.fixture
def store(tmp_path: Path) -> Any:
    handle = LevelDBStore.start_link(tmp_path / "db")
    try:
        yield handle
    finally:
        handle.stop()


def test_a_known_conversation_s_add_reads_nothing_and_packs_each_message_once(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = Conv("ann", "c")
    store.add(conv, [msg("first")])  # the conversation's meta is read once, here
    server, db = counted(store)
    freezes, packs, slots = [0], [0], [0]
    real_freeze, real_packer, real_slot = otpmem.messages.freeze, server.packer, _appends.OneShot

    def freeze(message: Any, index: int | None = None) -> Any:
        freezes[0] += 1
        return real_freeze(message, index)

    class Packer:
        def pack(self, value: Any) -> bytes:
            packs[0] += 1
            packed: bytes = real_packer.pack(value)
            return packed

    def slot() -> Any:
        slots[0] += 1
        return real_slot()

    monkeypatch.setattr(otpmem.messages, "freeze", freeze)
    monkeypatch.setattr(_appends, "OneShot", slot)
    server.packer = Packer()
    groups, direct = server.committer.groups, server.committer.direct_writes
    adds, per_add = 20, 3
    for i in range(adds):
        store.add(conv, [msg(f"{i}:{j}") for j in range(per_add)])
    assert db.gets == 0  # the meta is cached, and a batch with no key asks for none
    assert freezes[0] == adds * per_add  # validated once, on the caller's thread
    assert packs[0] == adds * (per_add + 1)  # each message once, and the meta
    assert slots[0] == 0  # no reply slot: the thread writes, so it knows when it is done
    assert server.committer.groups == groups  # no hand-off to the committer
    assert server.committer.direct_writes - direct == db.batches == adds
    assert db.puts == adds * (per_add + 1)  # the messages and the meta, nothing else
    assert store.count(conv) == 1 + adds * per_add
    assert store.get(conv, last=1) == [msg(f"{adds - 1}:{per_add - 1}")]


def test_a_keyed_add_reads_its_key_once_and_a_retry_writes_nothing(store: Any) -> None:
    conv = Conv("ann", "keyed")
    store.add(conv, [msg("first")], idempotency_key="k0")
    _, db = counted(store)
    for i in range(1, 11):
        store.add(conv, [msg(f"m{i}")], idempotency_key=f"k{i}")
    assert db.gets == 10  # is the key held? one point read each, nothing else
    # The messages, the meta, the key and its place in the key order.
    assert db.puts == 10 * 4 and db.batches == 10
    store.add(conv, [msg("m10")], idempotency_key="k10")  # a retry
    assert db.batches == 10 and store.count(conv) == 11


def test_a_pinned_message_s_add_writes_its_index_copy_too(store: Any) -> None:
    conv = Conv("ann", "pins")
    store.add(conv, [msg("first")])
    _, db = counted(store)
    store.add(conv, [msg("pin me", metadata={"pinned": True}), msg("plain")])
    assert db.gets == 0 and db.puts == 2 + 1 + 1  # two messages, one pinned copy, the meta
    assert [m["content"] for _, m in store.pinned(conv)] == ["pin me"]


def test_threads_adding_to_their_own_conversations_each_write_their_own_batches(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    threads, adds = 8, 25
    try:
        for t in range(threads):
            store.add(Conv(f"u{t}", "c"), [msg("first")])
        server, db = counted(store)
        groups = server.committer.groups

        def work(t: int) -> None:
            for i in range(adds):
                store.add(Conv(f"u{t}", "c"), [msg(f"{t}:{i}")])

        assert run_threads(threads, work, timeout=WAIT) == []
        assert db.gets == 0 and server.committer.groups == groups
        assert db.batches == threads * adds
    finally:
        store.stop()
    reopened = LevelDBStore.start_link(path)
    try:
        for t in range(threads):
            texts = [m["content"] for m in reopened.get(Conv(f"u{t}", "c"))]
            assert texts == ["first", *(f"{t}:{i}" for i in range(adds))]
    finally:
        reopened.stop()


def test_threads_sharing_a_conversation_queue_behind_each_other_in_order(
    tmp_path: Path,
) -> None:
    # Each add rewrites the conversation's meta: one not yet on disk sends the next add of
    # the conversation to the committer, behind it. Every add lands once, the count true.
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    conv = Conv("ann", "shared")
    threads, adds = 6, 30
    try:

        def work(t: int) -> None:
            for i in range(adds):
                store.add(conv, [msg(f"{t}:{i}"), msg(f"{t}:{i}b")])

        assert run_threads(threads, work, timeout=WAIT) == []
    finally:
        store.stop()
    reopened = LevelDBStore.start_link(path)
    try:
        texts = [m["content"] for m in reopened.get(conv)]
        assert reopened.count(conv) == len(texts) == threads * adds * 2
        for t in range(threads):
            mine = [x for x in texts if x.split(":")[0] == str(t)]
            assert mine == [s for i in range(adds) for s in (f"{t}:{i}", f"{t}:{i}b")]
        for a, b in zip(texts[::2], texts[1::2], strict=True):  # each batch contiguous
            assert b == a + "b"
    finally:
        reopened.stop()
