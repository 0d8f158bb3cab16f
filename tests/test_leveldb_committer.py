"""The LevelDB committer: a plain thread writes its own batch (LevelDB gathers concurrent
ones into one fsync); a write of keys another write has not yet put on disk queues behind
it, and a queued group waits for the direct writes claimed before it; stop, flush and a
failed write wait for or answer a direct write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from otpmem.actors.runtime import OneShot
from otpmem.stores import StoreError
from otpmem.stores.leveldb._committer import MISSING, Committer

WAIT = 10.0
NOT_YET = 0.1  # how long a test watches for something that must not happen


class Batch:
    def __init__(self, db: FakeDB) -> None:
        self.db = db
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        self.ops.append((key, None))

    def write(self) -> None:
        db = self.db
        with db.lock:
            db.entries += 1
            entered = db.entered if db.entries == 1 else db.entered_again
        entered.set()
        if not db.gate.wait(WAIT):
            raise AssertionError("the test never opened the gate")
        if db.fail:
            raise OSError("disk on fire")
        with db.lock:
            db.written.append((threading.current_thread().name, [k for k, _ in self.ops]))


class FakeDB:
    """What the committer needs of plyvel: write batches; a write waits at ``gate``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gate = threading.Event()
        self.gate.set()
        self.entries = 0
        self.entered = threading.Event()  # the first write began
        self.entered_again = threading.Event()  # another one did
        self.fail = False
        self.written: list[tuple[str, list[bytes]]] = []

    def write_batch(self, sync: bool) -> Batch:
        return Batch(self)


@pytest.fixture
def db() -> FakeDB:
    return FakeDB()


@pytest.fixture
def committer(db: FakeDB) -> Iterator[Committer]:
    failures: list[BaseException] = []
    committer = Committer(db, True, failures.append, "test")
    committer.failures = failures  # type: ignore[attr-defined]
    try:
        yield committer
    finally:
        db.gate.set()
        committer.stop()


def direct(committer: Committer, key: bytes) -> bool:
    """A plain thread's write as LevelDBStore.add_here makes it; False if it had to queue."""
    staged: dict[bytes, bytes | None] = {key: b"v"}
    token = committer.begin_direct(staged)
    if token is None:
        return False
    committer.write_direct([(key, b"v")], staged, token)
    return True


def in_thread(work: Any, name: str) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def body() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread, result


def test_a_plain_thread_writes_its_own_batch_and_no_group(committer: Committer, db: FakeDB) -> None:
    assert all(direct(committer, f"k{i}".encode()) for i in range(3))
    me = threading.current_thread().name
    assert db.written == [(me, [b"k0"]), (me, [b"k1"]), (me, [b"k2"])]
    assert committer.groups == 0 and committer.direct_writes == 3
    assert committer.staged(b"k2") is MISSING  # on disk: no longer staged


def test_direct_writes_of_other_keys_go_at_once_beside_one_in_flight(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    first, _ = in_thread(lambda: direct(committer, b"a"), "first")
    assert db.entered.wait(WAIT)
    assert committer.staged(b"a") == b"v"  # staged until it is on disk
    second, result = in_thread(lambda: direct(committer, b"b"), "second")
    # Both are in the write at once: LevelDB, not we, gathers them into one fsync.
    assert db.entered_again.wait(WAIT)
    db.gate.set()
    first.join(WAIT)
    second.join(WAIT)
    assert result == {"value": True}
    assert sorted(keys for _, keys in db.written) == [[b"a"], [b"b"]]


def test_a_write_of_a_key_in_flight_queues_and_lands_after_it(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    first, _ = in_thread(lambda: direct(committer, b"meta"), "first")
    assert db.entered.wait(WAIT)
    # Same key: no direct write; queued, its group waits for the direct write to land.
    assert committer.begin_direct({b"meta": b"w"}) is None
    behind = OneShot()
    committer.submit([(b"meta", b"w")], behind, {b"meta": b"w"})
    assert committer.staged(b"meta") == b"w"  # the newest write's value
    assert not db.entered_again.wait(NOT_YET), "a group went before a direct write it follows"
    assert committer.flush(timeout=NOT_YET) is False
    db.gate.set()
    first.join(WAIT)
    assert behind.wait(WAIT) and behind.error is None
    assert [keys for _, keys in db.written] == [[b"meta"], [b"meta"]]
    assert db.written[0][0] == "first" and db.written[1][0].startswith("committer-")
    assert committer.staged(b"meta") is MISSING


def test_a_direct_write_waits_for_no_group_of_other_keys(committer: Committer, db: FakeDB) -> None:
    db.gate.clear()
    queued = OneShot()
    committer.submit([(b"server", b"v")], queued, {b"server": b"v"})
    assert db.entered.wait(WAIT)  # the committer's group is in its write
    mine, result = in_thread(lambda: direct(committer, b"mine"), "mine")
    assert db.entered_again.wait(WAIT)
    db.gate.set()
    mine.join(WAIT)
    assert queued.wait(WAIT) and result == {"value": True}


def test_stop_and_flush_wait_for_a_direct_write(committer: Committer, db: FakeDB) -> None:
    db.gate.clear()
    writer, _ = in_thread(lambda: direct(committer, b"k"), "writer")
    assert db.entered.wait(WAIT)
    assert committer.flush(timeout=NOT_YET) is False  # the direct write is not on disk yet
    stopped, _ = in_thread(committer.stop, "stop")
    stopped.join(NOT_YET)
    assert stopped.is_alive(), "stop returned while a caller's write was still on its way"
    db.gate.set()
    stopped.join(WAIT)
    writer.join(WAIT)
    assert not stopped.is_alive() and [keys for _, keys in db.written] == [[b"k"]]
    with pytest.raises(StoreError, match="stopping"):
        committer.begin_direct({b"late": b"v"})
    late = OneShot()
    committer.submit([(b"late", b"v")], late)
    assert isinstance(late.error, StoreError)


def test_a_failed_direct_write_fails_its_writer_and_what_queued_behind_it(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    db.fail = True
    writer, result = in_thread(lambda: direct(committer, b"k"), "writer")
    assert db.entered.wait(WAIT)
    queued = OneShot()  # built on the failed write's keys: it must not land either
    committer.submit([(b"k", b"w")], queued, {b"k": b"w"})
    db.gate.set()
    writer.join(WAIT)
    assert queued.wait(WAIT)
    assert isinstance(result["error"], StoreError)
    assert isinstance(queued.error, StoreError)
    assert [type(e) for e in committer.failures] == [OSError]  # type: ignore[attr-defined]
    assert db.written == []
    with pytest.raises(StoreError, match="disk on fire"):
        committer.begin_direct({b"after": b"v"})


def test_direct_writes_failing_together_restart_the_store_once(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    db.fail = True
    first, one = in_thread(lambda: direct(committer, b"a"), "one")
    assert db.entered.wait(WAIT)
    second, two = in_thread(lambda: direct(committer, b"b"), "two")
    assert db.entered_again.wait(WAIT)
    db.gate.set()
    first.join(WAIT)
    second.join(WAIT)
    assert isinstance(one["error"], StoreError) and isinstance(two["error"], StoreError)
    assert len(committer.failures) == 1  # type: ignore[attr-defined]


def test_flush_waits_for_the_direct_writes_claimed_before_it_not_those_after(
    committer: Committer, db: FakeDB
) -> None:
    # Threads that go on adding must not starve a flush (or a clear behind it).
    first = committer.begin_direct({b"a": b"v"})
    assert first is not None
    flushed, result = in_thread(lambda: committer.flush(timeout=WAIT), "flush")
    flushed.join(NOT_YET)
    assert flushed.is_alive(), "flush returned before a write claimed before it was on disk"
    later = committer.begin_direct({b"b": b"v"})
    assert later is not None
    committer.write_direct([(b"a", b"v")], {b"a": b"v"}, first)
    flushed.join(WAIT)
    assert result == {"value": True}  # with the later write still on its way
    committer.write_direct([(b"b", b"v")], {b"b": b"v"}, later)
    assert [keys for _, keys in db.written] == [[b"a"], [b"b"]]


def test_a_write_queued_while_a_flush_waits_goes_after_the_direct_write_before_it(
    committer: Committer, db: FakeDB
) -> None:
    # The flush and the committer thread wait on one condition: both are woken, and the
    # queued group still goes only after the direct write claimed before it.
    claimed = committer.begin_direct({b"a": b"v"})
    assert claimed is not None
    flushed, result = in_thread(lambda: committer.flush(timeout=WAIT), "flush")
    flushed.join(NOT_YET)
    queued = OneShot()
    committer.submit([(b"q", b"v")], queued, {b"q": b"v"})
    assert not db.entered.wait(NOT_YET), "a group went before a direct write claimed before it"
    committer.write_direct([(b"a", b"v")], {b"a": b"v"}, claimed)
    assert queued.wait(WAIT) and queued.error is None
    flushed.join(WAIT)
    assert result == {"value": True}
    assert [keys for _, keys in db.written] == [[b"a"], [b"q"]]
