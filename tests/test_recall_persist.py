"""Recall snapshots: a RecallIndex over a LevelDB or PostgreSQL store keeps its partitions
beside the store, and a reopened (restarted, killed, evicted) index ranks exactly as a
fresh rebuild while reading one message per conversation from the store, not all of them.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import plyvel
import pytest

from otpmem.actors import faults
from otpmem.memory.recall import (
    STANDALONE,
    HashingEmbedder,
    RecallIndex,
    RecallIndexHandle,
    lexical,
)
from otpmem.memory.recall.chunks import Piece, Terms
from otpmem.memory.recall.partition import Partition, analyze_meta, document_text, fingerprint
from otpmem.memory.recall.restore import build
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle, MemoryStore
from otpmem.stores.leveldb import keys
from otpmem.supervisors import Supervisor

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0
WORDS = [
    "walrus",
    "narwhal",
    "lyon",
    "paris",
    "peanut",
    "shellfish",
    "allergy",
    "sister",
    "brother",
    "nurse",
    "teacher",
    "garden",
    "train",
    "late",
    "morning",
    "coffee",
    "passport",
    "expires",
    "cooking",
    "pasta",
    "garlic",
    "basil",
    "violin",
    "chess",
    "marathon",
    "knee",
    "doctor",
    "tuesday",
    "birthday",
    "cake",
    "moving",
    "boxes",
    "apartment",
    "rent",
    "landlord",
    "cat",
    "dog",
    "parrot",
    "weather",
    "rain",
    "sunny",
    "holiday",
    "beach",
    "mountain",
    "ski",
    "ticket",
    "concert",
    "guitar",
]
QUERIES = ["walrus allergy", "sister in lyon", "train late again", "passport", "cat dog parrot"]


def message(rng: random.Random, i: int) -> dict[str, Any]:
    """A message of varied length and words; some with a speaker, a date or a tool call."""
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 18)))
    found: dict[str, Any] = {"role": "user" if i % 2 == 0 else "assistant", "content": text}
    if i % 5 == 0:
        found["name"] = rng.choice(["Maya", "Tom"])
    if i % 7 == 0:
        found["metadata"] = {"timestamp": f"2024-0{1 + i % 9}-1{i % 10}T10:00:00"}
    return found


def fill(store: Any, owners: Sequence[str | None], convs: int, per: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    for owner in owners:
        for c in range(convs):
            store.add(Conv(owner, f"c{c}"), [message(rng, i) for i in range(per)])


def answers(index: RecallIndexHandle, owners: Sequence[str | None]) -> list[Any]:
    """Every owner's fused and BM25 answers to every query, comparable across indexes."""
    found: list[Any] = []
    for owner in owners:
        for q in QUERIES:
            hits = index.get_relevant(q, user_id=owner, limit=8, timeout=WAIT)
            found.append([(h.conv, h.position, h.score, h.message) for h in hits])
            bm25 = index.search(q, user_id=owner, limit=8, timeout=WAIT)
            found.append([(h.conv, h.index, h.score) for h in bm25])
    return found


class CountingLevelDB(LevelDBStoreHandle):
    """A LevelDB store's handle that records every ``get`` (conversation, last, returned)."""

    __slots__ = ("gets",)

    def __init__(self, store: LevelDBStoreHandle) -> None:
        super().__init__(process=store.resolve())
        self.gets: list[tuple[Conv, int | None, int]] = []

    def get(self, conv: Any, last: int | None = None) -> list[dict[str, Any]]:
        found = super().get(conv, last)
        self.gets.append((conv, last, len(found)))
        return found


def rebuilt(store: Any, owners: Sequence[str | None], **options: Any) -> list[Any]:
    """What a fresh index, keeping nothing, answers."""
    index = RecallIndex.start_link(store, snapshots=False, **options)
    try:
        return answers(index, owners)
    finally:
        index.stop()


def first_reads(
    index: RecallIndexHandle, gets: list[Any], owners: Sequence[str | None]
) -> list[Any]:
    """The store reads of each owner's first catch-up (every later query reads one newest
    message per conversation too: the check that it is level with the store)."""
    gets.clear()
    for owner in owners:
        index.refresh(user_id=owner, timeout=WAIT)
    found = list(gets)
    gets.clear()
    return found


def one_read_each(gets: list[tuple[Conv, int | None, int]], owners: Sequence[str | None]) -> bool:
    """Whether the reads were one newest message per conversation of ``owners``, no more."""
    return all(last == 1 and n == 1 for _, last, n in gets) and {
        c.user_id for c, _, _ in gets
    } <= set(owners)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "db"


OWNERS = ["ann", "bob", None]


def test_a_reopened_leveldb_store_ranks_as_a_rebuild_reading_one_message_per_conversation(
    db: Path,
) -> None:
    store = LevelDBStore.start_link(db)
    try:
        fill(store, OWNERS, convs=4, per=60)
        first = RecallIndex.start_link(store)
        try:
            before = answers(first, OWNERS)
        finally:
            first.stop()  # writes what is queued
    finally:
        store.stop()
    assert (db / "recall" / "CURRENT").is_file()

    store = LevelDBStore.start_link(db)
    counting = CountingLevelDB(store)
    index = RecallIndex.start_link(counting)
    try:
        gets = first_reads(index, counting.gets, OWNERS)
        assert index.stats()["restored"] == 3
        assert len(gets) == 3 * 4 and one_read_each(gets, OWNERS)
        assert answers(index, OWNERS) == rebuilt(store, OWNERS) == before
        # A reopened index keeps pulling: a new message is found at once, and kept.
        store.add(Conv("ann", "c9"), [{"role": "user", "content": "my new walrus named Gus"}])
        assert index.get_relevant("Gus", user_id="ann")[0].conv == Conv("ann", "c9")
    finally:
        index.stop()
    again = RecallIndex.start_link(counting)
    try:
        gets = first_reads(again, counting.gets, ["ann"])
        assert len(gets) == 5 and one_read_each(gets, ["ann"])
        assert again.get_relevant("Gus", user_id="ann")[0].conv == Conv("ann", "c9")
    finally:
        again.stop()
        store.stop()


def test_no_snapshot_is_kept_when_turned_off_over_a_memory_store_or_for_an_anonymous_embedder(
    db: Path,
) -> None:
    class Plain:  # no __repr__ of its own: which model it is cannot be told
        dim = 8

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0] * 8 for _ in texts]

    store = LevelDBStore.start_link(db)
    memory = MemoryStore.start_link()
    try:
        fill(store, ["ann"], convs=1, per=5)
        fill(memory, ["ann"], convs=1, per=5)
        for kept in (
            RecallIndex.start_link(store, snapshots=False),
            RecallIndex.start_link(store, Plain()),
        ):
            kept.refresh(user_id="ann")
            kept.stop()
        assert not (db / "recall").exists() or not _chunk_keys(db)
        index = RecallIndex.start_link(memory)
        index.refresh(user_id="ann")
        assert index.flush() is True and index.stats()["restored"] == 0
        index.stop()
        with pytest.raises(TypeError, match="snapshots must be True or False"):
            RecallIndex.start_link(store, snapshots="yes")  # type: ignore[arg-type]
    finally:
        store.stop()
        memory.stop()


def _chunk_keys(db: Path) -> list[bytes]:
    shelf = plyvel.DB(str(db / "recall"), create_if_missing=False)
    try:
        return list(shelf.iterator(include_value=False))
    finally:
        shelf.close()


CHILD = textwrap.dedent(
    """
    import sys
    from otpmem.memory.recall import RecallIndex
    from otpmem.messages import Conv
    from otpmem.stores import LevelDBStore
    store = LevelDBStore.start_link(sys.argv[1], sync=False)
    index = RecallIndex.start_link(store)
    users = int(sys.argv[2])
    for u in range(users):
        index.get_relevant("walrus", user_id=f"u{u:03d}", timeout=60)
        if u == users // 2:
            index.flush(timeout=60)
            print("flushed", u, flush=True)
    n = 0
    while True:  # indexing until killed: new messages of the second half, and new tenants
        n += 1
        owner = f"u{users // 2 + 1 + n % (users // 2 - 1):03d}" if n % 3 else f"new{n}"
        store.add(Conv(owner, "c0"), [{"role": "user", "content": f"walrus {n} again"}])
        index.get_relevant("walrus", user_id=owner, timeout=60)
    """
)


def test_a_process_killed_mid_indexing_reopens_as_a_rebuild(db: Path) -> None:
    users = 40
    owners = [f"u{u:03d}" for u in range(users)]
    store = LevelDBStore.start_link(db, sync=False)
    fill(store, owners, convs=3, per=80)
    store.stop()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(users)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in child.stdout or ()])
    reader.start()
    try:
        assert lines.get(timeout=WAIT).split()[0] == "flushed"
        child.send_signal(signal.SIGKILL)  # while it indexes the second half
    finally:
        child.kill()
        child.wait(timeout=WAIT)
        reader.join(timeout=WAIT)
    assert child.returncode == -signal.SIGKILL
    store = LevelDBStore.start_link(db)
    counting = CountingLevelDB(store)
    index = RecallIndex.start_link(counting)
    try:
        half = owners[: users // 2 + 1]
        gets = first_reads(index, counting.gets, half)
        assert len(gets) == 3 * len(half) and one_read_each(gets, half)
        assert answers(index, half) == rebuilt(store, half)
        assert answers(index, owners) == rebuilt(store, owners)  # the rest, partly kept or not
    finally:
        index.stop()
        store.stop()


def test_a_conversation_cleared_and_rewritten_while_the_index_was_down_is_reindexed(
    db: Path,
) -> None:
    store = LevelDBStore.start_link(db)
    counting = CountingLevelDB(store)
    try:
        fill(store, ["ann"], convs=4, per=20)
        first = RecallIndex.start_link(store)
        first.refresh(user_id="ann")
        first.stop()
        rng = random.Random(9)
        longer = [*[message(rng, i) for i in range(24)], {"role": "user", "content": "zebra"}]
        store.clear(Conv("ann", "c0"))
        store.add(Conv("ann", "c0"), longer)  # rewritten longer: another message at 19
        store.clear(Conv("ann", "c1"))
        store.add(Conv("ann", "c1"), [{"role": "user", "content": "short okapi"}])  # shorter
        store.clear(Conv("ann", "c2"))  # gone
        index = RecallIndex.start_link(counting)
        try:
            gets = first_reads(index, counting.gets, ["ann"])
            assert {c for c, last, _ in gets if last is None} == {
                Conv("ann", "c0"),
                Conv("ann", "c1"),
            }
            assert index.get_relevant("zebra", user_id="ann")[0].conv == Conv("ann", "c0")
            assert index.get_relevant("okapi", user_id="ann")[0].conv == Conv("ann", "c1")
            assert index.stats()["conversations"] == 3
            assert answers(index, ["ann"]) == rebuilt(store, ["ann"])
        finally:
            index.stop()
        again = RecallIndex.start_link(counting)  # the replaced chunks were written
        try:
            gets = first_reads(again, counting.gets, ["ann"])
            assert len(gets) == 3 and one_read_each(gets, ["ann"])
            assert answers(again, ["ann"]) == rebuilt(store, ["ann"])
        finally:
            again.stop()
    finally:
        store.stop()


def _tamper(db: Path, change: Any) -> None:
    shelf = plyvel.DB(str(db / "recall"), create_if_missing=False)
    try:
        change(shelf)
    finally:
        shelf.close()


def _key(conv: Conv, start: int = 0) -> bytes:
    return keys.message_key(keys.conv_prefix(b"r", conv), start)


def test_a_corrupt_or_stale_snapshot_is_ignored_and_rebuilt(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LevelDBStore.start_link(db)
    counting = CountingLevelDB(store)
    try:
        fill(store, ["ann", "bob"], convs=4, per=30)
        first = RecallIndex.start_link(store)
        first.refresh(user_id="ann")
        first.refresh(user_id="bob")
        first.stop()

        def damage(shelf: Any) -> None:
            value = bytearray(shelf.get(_key(Conv("ann", "c0"))))
            value[len(value) // 2] ^= 0xFF  # a flipped bit inside
            shelf.put(_key(Conv("ann", "c0")), bytes(value))
            shelf.put(_key(Conv("ann", "c1")), b"garbage")
            # bob's own chunk under ann's key: well formed, but not ann's.
            shelf.put(_key(Conv("ann", "c2")), shelf.get(_key(Conv("bob", "c2"))))
            shelf.put(keys.user_prefix(b"r", "ann") + b"\x07junk", b"junk")

        _tamper(db, damage)
        index = RecallIndex.start_link(counting)
        try:
            gets = first_reads(index, counting.gets, ["ann", "bob"])
            full = {c for c, last, _ in gets if last is None}
            assert full == {Conv("ann", "c0"), Conv("ann", "c1"), Conv("ann", "c2")}
            assert answers(index, ["ann", "bob"]) == rebuilt(store, ["ann", "bob"])
        finally:
            index.stop()
        for name in os.listdir(db / "recall"):  # the database itself damaged: made anew
            if name.startswith("MANIFEST") or name == "CURRENT":
                (db / "recall" / name).write_bytes(b"\x00not a manifest\x00" * 8)
        index = RecallIndex.start_link(store)
        try:
            assert answers(index, ["ann"]) == rebuilt(store, ["ann"])
            assert index.stats()["restored"] == 0
        finally:
            index.stop()
        # Made by another embedder, or by another analyzer: not used.
        other = HashingEmbedder(dim=64)
        index = RecallIndex.start_link(store, other)
        try:
            assert answers(index, ["ann"]) == rebuilt(store, ["ann"], embedder=other)
            assert index.stats()["restored"] == 0
        finally:
            index.stop()
        monkeypatch.setattr(lexical, "ANALYZER_VERSION", lexical.ANALYZER_VERSION + 1)
        index = RecallIndex.start_link(store)
        try:
            index.refresh(user_id="ann")
            assert index.stats()["restored"] == 0
        finally:
            index.stop()
    finally:
        store.stop()


def test_vectors_of_a_changed_hashing_are_not_reused(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LevelDBStore.start_link(db)
    try:
        fill(store, ["ann"], convs=2, per=10)
        first = RecallIndex.start_link(store, HashingEmbedder())
        first.refresh(user_id="ann")
        first.stop()
        hashed = HashingEmbedder.embed
        monkeypatch.setattr(
            HashingEmbedder, "embed", lambda self, texts: [-v for v in hashed(self, texts)]
        )
        index = RecallIndex.start_link(store, HashingEmbedder())  # same repr, other vectors
        try:
            index.refresh(user_id="ann")
            assert index.stats()["restored"] == 0
            assert answers(index, ["ann"]) == rebuilt(store, ["ann"], embedder=HashingEmbedder())
        finally:
            index.stop()
    finally:
        store.stop()


TENANTS = ["ann", "an", "ann\x00", "a\x01nn", None]


def test_tenants_never_load_each_others_chunks_and_forgetting_deletes_them(db: Path) -> None:
    store = LevelDBStore.start_link(db)
    try:
        for n, owner in enumerate(TENANTS):
            for c in ("c", "cc"):
                store.add(Conv(owner, c), [{"role": "user", "content": f"secret marker{n}"}] * 3)
        first = RecallIndex.start_link(store)
        for owner in TENANTS:
            first.refresh(user_id=owner)
        first.stop()
        index = RecallIndex.start_link(store)
        try:
            for n, owner in enumerate(TENANTS):
                hits = index.get_relevant("secret", user_id=owner, limit=20, distinct=False)
                assert {h.message["content"] for h in hits} == {f"secret marker{n}"}
                assert len(hits) == 6 and {h.conv.user_id for h in hits} == {owner}
                # Loading a tenant loads its chunks alone.
                assert index.stats()["documents"] == 6 * (n + 1)
            assert index.stats()["restored"] == len(TENANTS)
            store.forget_user("ann")
            index.forget_user("ann")
            store.clear(Conv("an", "c"))
            index.forget(Conv("an", "c"))
        finally:
            index.stop()
        left = {keys.decode_conv(k) for k in _chunk_keys(db)}
        assert left == {Conv(o, c) for o in TENANTS for c in ("c", "cc")} - {
            Conv("ann", "c"),
            Conv("ann", "cc"),
            Conv("an", "c"),
        }
    finally:
        store.stop()


def test_an_evicted_tenant_and_a_killed_index_come_back_from_their_snapshot(db: Path) -> None:
    sup = Supervisor.start_link(
        [
            LevelDBStore.child_spec(db, "persist-store"),
            RecallIndex.child_spec(LevelDBStore.named("persist-store"), "persist-index"),
        ],
        strategy="rest_for_one",
    )
    try:
        store = LevelDBStore.named("persist-store")
        fill(store, ["ann", "bob"], convs=2, per=10)
        index = RecallIndex.named("persist-index")
        before = answers(index, ["ann", "bob"])
        assert index.flush() is True
        old = index.pid
        faults.kill(index)
        sup.sync()
        assert index.pid != old
        assert answers(index, ["ann", "bob"]) == before
        assert index.stats()["restored"] == 2  # adopted the killed one's open snapshots
    finally:
        sup.stop()
    store = LevelDBStore.start_link(db)
    counting = CountingLevelDB(store)
    small = RecallIndex.start_link(counting, max_documents=25)  # one tenant at a time
    try:
        small.refresh(user_id="ann")
        small.refresh(user_id="bob")  # ann is evicted
        gets = first_reads(small, counting.gets, ["ann"])
        assert len(gets) == 2 and one_read_each(gets, ["ann"])
        assert answers(small, ["ann"]) == before[: 2 * len(QUERIES)]
        assert small.stats()["restored"] == 3
    finally:
        small.stop()
        store.stop()


def test_writers_and_queries_on_many_threads_leave_a_snapshot_a_rebuild_agrees_with(
    db: Path,
) -> None:
    store = LevelDBStore.start_link(db)
    index = RecallIndex.start_link(store)
    errors: list[BaseException] = []

    def tenant(n: int) -> None:
        rng = random.Random(n)
        try:
            for i in range(30):
                store.add(Conv(f"t{n}", f"c{i % 3}"), [message(rng, i)])
                index.get_relevant(rng.choice(QUERIES), user_id=f"t{n}", timeout=WAIT)
        except BaseException as exc:
            errors.append(exc)

    owners = [f"t{n}" for n in range(4)]
    threads = [threading.Thread(target=tenant, args=(n,)) for n in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=WAIT)
        assert not errors and not any(t.is_alive() for t in threads)
        assert index.flush() is True
    finally:
        index.stop()
    counting = CountingLevelDB(store)
    again = RecallIndex.start_link(counting)
    try:
        gets = first_reads(again, counting.gets, owners)
        assert len(gets) == 12 and one_read_each(gets, owners)
        assert answers(again, owners) == rebuilt(store, owners)
    finally:
        again.stop()
        store.stop()


def test_big_snapshot_writes_and_loads_run_off_the_schedulers(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from otpmem.actors import HogReport, add_hog_listener, remove_hog_listener
    from otpmem.actors import _scheduler as scheduler

    monkeypatch.setattr(scheduler, "HOG_THRESHOLD", 0.2)
    reports: list[HogReport] = []
    add_hog_listener(reports.append)
    store = LevelDBStore.start_link(db, sync=False)
    try:
        fill(store, ["big"], convs=2, per=10_000)
        index = RecallIndex.start_link(store)
        try:
            assert index.refresh(user_id="big", timeout=WAIT) == 20_000
            assert index.flush(timeout=WAIT) is True  # tens of MB of chunks
            mine = [index.resolve()]
        finally:
            index.stop()
        again = RecallIndex.start_link(store)
        try:
            assert again.refresh(user_id="big", timeout=WAIT) == 20_000
            assert again.stats()["restored"] == 1
            mine.append(again.resolve())
        finally:
            again.stop()
        assert [r for r in reports if r.process in mine] == []
    finally:
        remove_hog_listener(reports.append)
        store.stop()


def test_a_restored_partition_equals_the_one_its_messages_were_appended_to() -> None:
    rng = random.Random(5)
    embedder = HashingEmbedder(dim=32)
    convs = [Conv("ann", f"c{c}") for c in range(5)]
    appended = Partition(32)
    segments = []
    for conv in convs:
        pieces = []
        for size in (rng.randint(1, 40), rng.randint(1, 40)):
            batch = [message(rng, i) for i in range(size)]
            # Some standalone documents among the turns: linked to no neighbour.
            batch = [
                {**m, "metadata": {**(m.get("metadata") or {}), STANDALONE: True}}
                if i % 7 == 3
                else m
                for i, m in enumerate(batch)
            ]
            tokens = [lexical.tokenize(document_text(m)) for m in batch]
            meta = [analyze_meta(m) for m in batch]
            vectors = np.asarray(embedder.embed([document_text(m) for m in batch]), np.float32)
            appended.append(conv, batch, tokens, vectors, meta)
            pieces.append(Piece(batch, Terms.of(tokens), Terms.of(meta), vectors))
        segments.append((conv, pieces, fingerprint(batch[-1])))
    restored = build(32, segments)
    assert set(vars(restored)) == set(vars(appended))  # a new field needs restoring too
    for name, value in vars(appended).items():
        other = getattr(restored, name)
        if name in ("lexical", "meta"):
            assert vars(other) == vars(value), name
        elif isinstance(value, np.ndarray):
            assert value.dtype == other.dtype and np.array_equal(value, other), name
        else:
            assert other == value, name


def test_a_postgres_store_keeps_its_index_in_its_schema(
    postgres_dsn: str, pg_namespace: str
) -> None:
    from otpmem.stores.postgres import PostgresStore, PostgresStoreHandle, connected

    class CountingPostgres(PostgresStoreHandle):
        __slots__ = ("gets",)

        def __init__(self, store: PostgresStoreHandle) -> None:
            super().__init__(process=store.resolve())
            self.gets: list[tuple[Conv, int | None, int]] = []

        def get(self, conv: Any, last: int | None = None) -> list[dict[str, Any]]:
            found = super().get(conv, last)
            self.gets.append((conv, last, len(found)))
            return found

    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        fill(store, OWNERS, convs=3, per=25)
        first = RecallIndex.start_link(store)
        before = answers(first, OWNERS)
        first.stop()
        counting = CountingPostgres(store)
        index = RecallIndex.start_link(counting)
        try:
            gets = first_reads(index, counting.gets, OWNERS)
            assert len(gets) == 9 and one_read_each(gets, OWNERS)
            assert answers(index, OWNERS) == before == rebuilt(store, OWNERS)
            store.forget_user("bob")
            index.forget_user("bob")
        finally:
            index.stop()
        table = f"{pg_namespace}.recall_chunks"
        with connected(postgres_dsn) as conn:
            owners = {r[0] for r in conn.execute(f"SELECT user_key FROM {table}").fetchall()}
            assert owners == {"ann", ""}
            conn.execute(f"UPDATE {table} SET chunk = 'garbage' WHERE conversation_id = 'c1'")
            store.clear(Conv("ann", "c2"))
            store.add(Conv("ann", "c2"), [{"role": "user", "content": "okapi at last"}])
        index = RecallIndex.start_link(counting)
        try:
            gets = first_reads(index, counting.gets, ["ann", None])
            full = {c for c, last, _ in gets if last is None}
            assert full == {Conv("ann", "c1"), Conv(None, "c1"), Conv("ann", "c2")}
            assert answers(index, ["ann", None]) == rebuilt(store, ["ann", None])
        finally:
            index.stop()
    finally:
        store.stop()
