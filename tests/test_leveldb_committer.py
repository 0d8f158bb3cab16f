"""The LevelDB committer: a lone plain thread writes its own group; writes queued behind a
group go after it, whoever writes it; stop, flush and a failed write wait for or answer
the group a caller leads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from otpmem.actors.runtime import OneShot
from otpmem.stores import StoreError
from otpmem.stores.leveldb._committer import MISSING, Committer

WAIT = 10.0


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
        db.entered.set()
        if not db.gate.wait(WAIT):
            raise AssertionError("the test never opened the gate")
        if db.fail:
            raise OSError("disk on fire")
        db.written.append((threading.current_thread().name, [k for k, _ in self.ops]))


class FakeDB:
    """What the committer needs of plyvel: write batches; a write waits at ``gate``."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
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


def lead(committer: Committer, key: bytes) -> OneShot:
    """A plain thread's write as LevelDBStore.add_here makes it: led here if it may be."""
    slot = OneShot()
    group = committer.submit_here([(key, b"v")], slot, {key: b"v"})
    if group is not None:
        committer.write_led(group)
    return slot


def test_a_lone_writer_writes_on_its_own_thread(committer: Committer, db: FakeDB) -> None:
    slots = [lead(committer, f"k{i}".encode()) for i in range(3)]
    assert all(slot.wait(WAIT) and slot.error is None for slot in slots)
    me = threading.current_thread().name
    assert db.written == [(me, [b"k0"]), (me, [b"k1"]), (me, [b"k2"])]
    assert committer.staged(b"k2") is MISSING  # on disk: no longer staged


def test_writes_queued_behind_a_led_group_are_written_after_it(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    first = OneShot()
    leader = threading.Thread(
        target=lambda: first.set(lead(committer, b"first")), name="leader", daemon=True
    )
    leader.start()
    assert db.entered.wait(WAIT), "the lone writer did not start its write"
    # While it writes: a server's write and another plain thread's queue behind it.
    from_server = OneShot()
    committer.submit([(b"server", b"v")], from_server)
    behind = OneShot()
    assert committer.submit_here([(b"behind", b"v")], behind) is None
    assert committer.staged(b"first") == b"v"  # staged until its group is on disk
    db.gate.set()
    leader.join(WAIT)
    assert from_server.wait(WAIT) and behind.wait(WAIT)
    assert [keys for _, keys in db.written] == [[b"first"], [b"server", b"behind"]]
    assert db.written[0][0] == "leader"
    assert db.written[1][0].startswith("committer-")


def test_after_a_group_of_many_a_lone_write_is_gathered_by_the_committer(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    slots = [OneShot() for _ in range(3)]
    committer.submit([(b"a", b"v")], slots[0])
    assert db.entered.wait(WAIT)
    committer.submit([(b"b", b"v")], slots[1])
    committer.submit([(b"c", b"v")], slots[2])
    db.gate.set()
    assert all(slot.wait(WAIT) for slot in slots)
    assert [keys for _, keys in db.written] == [[b"a"], [b"b", b"c"]]
    # Writers arrived together: the next lone one is gathered, and leads only after that.
    assert lead(committer, b"d").wait(WAIT)
    assert lead(committer, b"e").wait(WAIT)
    assert db.written[2][0].startswith("committer-")
    assert db.written[3][0] == threading.current_thread().name


def test_stop_and_flush_wait_for_a_led_group(committer: Committer, db: FakeDB) -> None:
    db.gate.clear()
    leader = threading.Thread(target=lead, args=(committer, b"k"), daemon=True)
    leader.start()
    assert db.entered.wait(WAIT)
    assert committer.flush(timeout=0.05) is False  # the led group is not on disk yet
    stopped = threading.Thread(target=committer.stop, daemon=True)
    stopped.start()
    stopped.join(0.05)
    assert stopped.is_alive(), "stop returned while a caller's write was still on its way"
    db.gate.set()
    stopped.join(WAIT)
    leader.join(WAIT)
    assert not stopped.is_alive() and [keys for _, keys in db.written] == [[b"k"]]
    late = OneShot()
    assert committer.submit_here([(b"late", b"v")], late) is None
    assert isinstance(late.error, StoreError)


def test_a_failed_led_write_fails_its_writer_and_those_queued_behind(
    committer: Committer, db: FakeDB
) -> None:
    db.gate.clear()
    db.fail = True
    result: dict[str, Any] = {}
    leader = threading.Thread(target=lambda: result.update(slot=lead(committer, b"k")), daemon=True)
    leader.start()
    assert db.entered.wait(WAIT)
    queued = OneShot()
    committer.submit([(b"q", b"v")], queued)
    db.gate.set()
    leader.join(WAIT)
    assert queued.wait(WAIT)
    assert isinstance(result["slot"].error, StoreError)
    assert isinstance(queued.error, StoreError)
    assert [type(e) for e in committer.failures] == [OSError]  # type: ignore[attr-defined]
    assert db.written == []
    refused = OneShot()
    assert committer.submit_here([(b"after", b"v")], refused) is None
    assert isinstance(refused.error, StoreError)
