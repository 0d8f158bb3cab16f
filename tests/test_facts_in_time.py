"""Facts that know when they were true (issue 30, item 3): the conformance cases on every
store, a property against a simple model, reopened and restarted stores, older data, and
extraction stamping facts with their turn's time."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import plyvel
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.memory.longterm import LongTermMemory, RuleFactExtractor
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, LevelDBStoreHandle, MemoryStore, PostgresStore
from otpmem.stores.leveldb import keys
from otpmem.stores.testing import FactsInTimeConformance

T0 = 1_700_000_000.0
DAY = 86_400.0


class TestMemoryStore(FactsInTimeConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestLevelDBStore(FactsInTimeConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestPostgresStore(FactsInTimeConformance):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()


# -- the property: as_of(t) is what a simple model says ----------------------------------------

KEYS = ("city", "job")
VALUES = ("a", "b", "c")
OPS = st.lists(
    st.tuples(
        st.sampled_from(("save", "save", "close", "delete")),
        st.sampled_from(KEYS),
        st.sampled_from(VALUES),
        st.integers(0, 8),  # the op's time, T0 + n days: at times before what is stored
    ),
    max_size=12,
)


class Model:
    """What was true when, kept the plainest way: open values and closed intervals."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[str, float]] = {}
        self.closed: list[tuple[str, str, float, float]] = []

    def apply(self, op: str, key: str, value: str, at: float) -> bool:
        """Do the op; False when the store must refuse it (closing before the start)."""
        held = self.open.get(key)
        if op == "delete":
            self.open.pop(key, None)
            return True
        if op == "save" and held is not None and held[0] == value:
            return True
        if held is not None and at < held[1]:
            return False
        if held is not None:
            self.closed.append((key, held[0], held[1], at))
            del self.open[key]
        if op == "save":
            self.open[key] = (value, at)
        return True

    def as_of(self, t: float) -> dict[str, str]:
        """Per key, of the values true at t, the one that began last (the newer on a tie)."""
        found: dict[str, tuple[float, str]] = {}
        candidates = [(k, v, s) for k, v, s, e in self.closed if s <= t < e]
        candidates += [(k, v, s) for k, (v, s) in self.open.items() if s <= t]
        for key, value, began in candidates:
            if key not in found or found[key][0] <= began:
                found[key] = (began, value)
        return {k: v for k, (_, v) in found.items()}


_users = itertools.count()


def check_against_model(store: Any, ops: list[tuple[str, str, str, int]]) -> None:
    """Run ``ops`` on a fresh user of ``store`` and on the model; every read agrees."""
    user, model = f"u{next(_users)}", Model()
    for op, key, value, day in ops:
        at = T0 + day * DAY
        allowed = model.apply(op, key, value, at)
        try:
            if op == "save":
                store.save_fact(Fact(user, key, value, valid_from=at))
            elif op == "close":
                store.close_fact(user, key, valid_to=at)
            else:
                store.delete_fact(user, key)
        except ValueError:
            assert not allowed, f"{op} {key}={value} at day {day} was refused"
            continue
        assert allowed, f"{op} {key}={value} at day {day} should have been refused"
    now = {f.key: f.value for f in store.get_facts(user)}
    assert now == {k: v for k, (v, _) in model.open.items()}
    for half_days in range(-1, 20):
        t = T0 + half_days * DAY / 2
        answered = {f.key: f.value for f in store.get_facts(user, as_of=t)}
        assert answered == model.as_of(t), f"as_of day {half_days / 2}"


@pytest.fixture(scope="module")
def memory_store() -> Iterator[Any]:
    store = MemoryStore.start_link()
    yield store
    store.stop()


@pytest.fixture(scope="module")
def leveldb_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    store = LevelDBStore.start_link(tmp_path_factory.mktemp("prop") / "db")
    yield store
    store.stop()


@settings(max_examples=150, deadline=None)
@given(ops=OPS)
def test_as_of_matches_the_model_on_a_memory_store(memory_store: Any, ops: Any) -> None:
    check_against_model(memory_store, ops)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_as_of_matches_the_model_on_a_leveldb_store(leveldb_store: Any, ops: Any) -> None:
    check_against_model(leveldb_store, ops)


def test_as_of_matches_the_model_on_postgres(postgres_dsn: str, pg_namespace: str) -> None:
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        check_against_model(
            store,
            [
                ("save", "city", "a", 0),
                ("save", "city", "b", 2),
                ("close", "city", "b", 4),
                ("save", "city", "c", 1),  # after the close: a new, back-dated value
                ("save", "job", "a", 3),
                ("save", "job", "b", 2),  # refused: before the value it corrects
                ("delete", "job", "a", 5),
                ("save", "job", "c", 6),
            ],
        )
    finally:
        store.stop()


# -- durability and older data -----------------------------------------------------------------


def _write_history(store: Any) -> list[Fact]:
    store.save_fact(Fact("ann", "city", "Lyon", valid_from=T0))
    store.save_fact(Fact("ann", "city", "Paris", valid_from=T0 + DAY))
    store.save_fact(Fact("ann", "job", "nurse", valid_from=T0))
    store.close_fact("ann", "job", valid_to=T0 + 2 * DAY)
    return store.get_facts("ann", as_of=T0 + 1)


def test_a_reopened_leveldb_store_keeps_the_times(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    first = opened(tmp_path / "db")
    before = _write_history(first)
    first.stop()
    again = opened(tmp_path / "db")
    assert again.get_facts("ann", as_of=T0 + 1) == before
    assert [(f.key, f.valid_to) for f in before] == [("city", T0 + DAY), ("job", T0 + 2 * DAY)]
    assert [f.value for f in again.get_facts("ann")] == ["Paris"]


def test_a_restarted_postgres_store_keeps_the_times(postgres_dsn: str, pg_namespace: str) -> None:
    first = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        before = _write_history(first)
    finally:
        first.stop()
    again = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        assert again.get_facts("ann", as_of=T0 + 1) == before
        assert [f.value for f in again.get_facts("ann")] == ["Paris"]
    finally:
        again.stop()


def _untimed(raw: bytes) -> bytes:
    return msgpack.packb(msgpack.unpackb(raw)[:7])  # the record before facts had times


def test_a_layout_2_leveldb_directory_opens_with_unknown_times(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    path = tmp_path / "db"
    store = opened(path)
    store.save_fact(Fact("ann", "city", "Lyon"))
    store.stop()
    db = plyvel.DB(str(path))
    try:
        for key, raw in list(db.iterator(prefix=b"f")):
            db.put(key, _untimed(raw))
        db.put(b"v", b"2")
    finally:
        db.close()
    again = opened(path)
    [old] = again.get_facts("ann")
    assert (old.value, old.valid_from, old.valid_to) == ("Lyon", None, None)
    assert again.get_facts("ann", as_of=T0) == [old], "an unknown start: true before its end"
    again.save_fact(Fact("ann", "city", "Paris", valid_from=T0 + DAY))
    assert again.get_facts("ann", as_of=T0) == [replace(old, valid_to=T0 + DAY)]
    again.stop()
    db = plyvel.DB(str(path))
    try:
        assert db.get(b"v") == str(keys.LAYOUT_VERSION).encode()  # the current layout
    finally:
        db.close()


def test_a_version_2_postgres_schema_opens_with_unknown_times(
    postgres_dsn: str, pg_namespace: str
) -> None:
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        store.save_fact(Fact("ann", "city", "Lyon"))
        store.save_fact(Fact("ann", "city", "Paris"))
    finally:
        store.stop()
    ns = pg_namespace
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for table in ("facts", "fact_history"):
            rows = conn.execute(f"SELECT ctid, record FROM {ns}.{table}").fetchall()
            for ctid, raw in rows:
                conn.execute(
                    f"UPDATE {ns}.{table} SET record = %s WHERE ctid = %s", (_untimed(raw), ctid)
                )
        conn.execute(f"ALTER TABLE {ns}.fact_history DROP COLUMN valid_from, DROP COLUMN valid_to")
        conn.execute(f"UPDATE {ns}.schema_version SET version = 2")
    again = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        [now] = again.get_facts("ann")
        assert (now.value, now.valid_from) == ("Paris", None)
        assert [f.value for f in again.get_facts("ann", as_of=T0)] == ["Paris"], (
            "history from before has no times: no as_of read answers it"
        )
        again.save_fact(Fact("ann", "city", "Rome", valid_from=T0 + DAY))
        assert [f.value for f in again.get_facts("ann", as_of=T0)] == ["Paris"]
        assert [f.value for f in again.get_facts("ann", as_of=T0 + DAY)] == ["Rome"]
    finally:
        again.stop()
    with psycopg.connect(postgres_dsn) as conn:
        assert conn.execute(f"SELECT version FROM {ns}.schema_version").fetchall() == [(4,)]


# -- extraction: a fact is true from the turn that said it -------------------------------------


def test_extraction_stamps_facts_with_their_turns_time() -> None:
    store = MemoryStore.start_link()
    try:
        ltm = LongTermMemory(store, RuleFactExtractor())
        ann = Conv("ann", "c1")
        store.add(ann, [{"role": "user", "content": "I live in Lyon", "metadata": {"time": T0}}])
        ltm.extract(ann)
        store.add(
            ann,
            [
                {
                    "role": "user",
                    "content": "I live in Paris",
                    "metadata": {"timestamp": "2023-11-24T22:13:20+00:00"},  # T0 + 10 days
                },
                {"role": "user", "content": "I work at Acme"},
            ],
        )
        ltm.extract(ann)
        lyon = ltm.get_facts("ann", as_of=T0 + DAY)
        assert [(f.key, f.value, f.valid_from) for f in lyon] == [("location", "Lyon", T0)]
        assert lyon[0].valid_to == T0 + 10 * DAY
        now = {f.key: f for f in ltm.get_facts("ann")}
        assert now["location"].valid_from == T0 + 10 * DAY
        assert now["employer"].valid_from > T0 + 10 * DAY, "no time in the turn: the save's"
    finally:
        store.stop()


def test_a_turn_stamped_before_the_value_it_corrects_does_not_stall_extraction() -> None:
    store = MemoryStore.start_link()
    try:
        ltm = LongTermMemory(store, RuleFactExtractor())
        ann = Conv("ann", "c1")
        store.add(ann, [{"role": "user", "content": "I live in Lyon", "metadata": {"time": T0}}])
        ltm.extract(ann)
        store.add(ann, [{"role": "user", "content": "I live in Oslo", "metadata": {"time": 5.0}}])
        report = ltm.extract(ann)
        assert report.ok and store.extraction_cursor(ann) == 2
        [now] = ltm.get_facts("ann")
        assert (now.value, now.valid_from) == ("Oslo", T0)
    finally:
        store.stop()
