"""Background consolidation stays bounded (issue 30, item 4): each fact key's history is cut
to its newest ``keep_history`` values in the writes that add, without changing an
``as_of`` answer inside that retention; the extraction cursor moves by compare-and-set, so
extractors racing on one store (threads, two servers, two PostgreSQL connections) save
every turn exactly once, across a reopen and a restart too; the usage log keeps what is
inside its horizon and drops the rest as adds come."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from otpmem.memory.longterm import Decision, LongTermMemory
from otpmem.messages import Conv
from otpmem.stores import (
    KEEP_FACT_HISTORY,
    CursorMoved,
    Fact,
    LevelDBStore,
    MemoryStore,
    PostgresStore,
    longterm,
)
from otpmem.supervisors import Supervisor
from tests.longterm_support import answered, user

T0 = 1_700_000_000.0
DAY = 86_400.0
ANN = Conv("ann", "chat")
WAIT = 10.0


@pytest.fixture(params=["memory", "leveldb", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def opener(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], Any]]:
    """Opens a store of the kind (again: the same LevelDB directory, the same PostgreSQL
    namespace); every one opened is stopped at the end."""
    started: list[Any] = []
    memory = MemoryStore.start_link() if kind == "memory" else None

    def open_store() -> Any:
        if memory is not None:
            return memory
        if kind == "leveldb":
            store: Any = LevelDBStore.start_link(tmp_path / "db")
        else:
            dsn = request.getfixturevalue("postgres_dsn")
            namespace = request.getfixturevalue("pg_namespace")
            store = PostgresStore.start_link(dsn, namespace=namespace)
        started.append(store)
        return store

    yield open_store
    for store in [*started, memory]:
        if store is not None and store.alive:
            store.stop()


def _correct(store: Any, n: int, keep: int, start: int = 0, who: str = "ann") -> None:
    for i in range(start, start + n):  # a new city every day
        fact = Fact(who, "city", f"c{i}", valid_from=T0 + i * DAY)
        store.save_facts(who, [fact], keep_history=keep)


def _answers(store: Any, days: range, who: str = "ann") -> list[list[tuple[str, Any]]]:
    return [
        [(f.value, f.valid_from, f.valid_to) for f in store.get_facts(who, as_of=T0 + d * DAY + 1)]
        for d in days
    ]


# -- the history bound -------------------------------------------------------------------------


def test_a_keys_history_keeps_its_newest_values(opener: Callable[[], Any]) -> None:
    store = opener()
    _correct(store, 20, keep=5)
    history = store.fact_history("ann", "city")
    assert [f.value for f in history] == ["c14", "c15", "c16", "c17", "c18"]
    assert [f.valid_to for f in history] == [T0 + d * DAY for d in range(15, 20)]
    assert store.get_fact("ann", "city").value == "c19"
    assert store.get_fact("ann", "city").version == 20, "versions still count every change"


def test_as_of_answers_inside_the_retention_survive_compaction(opener: Callable[[], Any]) -> None:
    store, keep = opener(), 6
    for done in range(0, 14, 2):  # compaction along the way, two corrections at a time
        _correct(store, 2, keep=keep, start=done)
        _correct(store, 2, keep=1000, start=done, who="bob")  # the same, never compacted
        kept_from = max(0, done + 2 - 1 - keep)  # the oldest value still kept
        days = range(kept_from, done + 2)
        assert _answers(store, days) == _answers(store, days, "bob")
    assert _answers(store, range(0, 7)) == [[]] * 7, "before the retention: dropped"
    assert [f.value for f in store.fact_history("ann", "city")] == [f"c{i}" for i in range(7, 13)]


def test_a_lower_bound_later_drops_every_older_value(opener: Callable[[], Any]) -> None:
    store = opener()
    _correct(store, 20, keep=100)
    _correct(store, 1, keep=3, start=20)
    assert [f.value for f in store.fact_history("ann", "city")] == ["c17", "c18", "c19"]
    store.forget_user("ann")
    _correct(store, 6, keep=3)  # counted afresh after a forget
    assert [f.value for f in store.fact_history("ann", "city")] == ["c2", "c3", "c4"]


def test_other_keys_and_other_users_keep_their_history(opener: Callable[[], Any]) -> None:
    store = opener()
    store.save_facts("bob", [Fact("bob", "city", "b0")])
    store.save_facts("bob", [Fact("bob", "city", "b1")])
    store.save_facts("ann", [Fact("ann", "job", "j0")])
    store.save_facts("ann", [Fact("ann", "job", "j1")])
    _correct(store, 10, keep=2)
    assert [f.value for f in store.fact_history("bob", "city")] == ["b0"]
    assert [f.value for f in store.fact_history("ann", "job")] == ["j0"]
    assert len(store.fact_history("ann", "city")) == 2


def test_the_default_bound_and_deletes(opener: Callable[[], Any]) -> None:
    store = opener()
    for i in range(KEEP_FACT_HISTORY + 5):
        store.save_fact(Fact("ann", "mood", f"m{i}"))
    assert store.delete_fact("ann", "mood")
    history = store.fact_history("ann", "mood")
    assert len(history) == KEEP_FACT_HISTORY
    assert history[-1].value == f"m{KEEP_FACT_HISTORY + 4}", "the deleted value is the newest"


def test_a_bad_bound_is_refused_and_nothing_saved(opener: Callable[[], Any]) -> None:
    store = opener()
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="keep_history"):
            store.save_facts("ann", [Fact("ann", "city", "Lyon")], keep_history=bad)
    assert store.get_facts("ann") == []


# -- the cursor's compare-and-set --------------------------------------------------------------


def test_a_cursor_move_from_elsewhere_is_refused(opener: Callable[[], Any]) -> None:
    store = opener()
    store.add(ANN, [user("1"), user("2"), user("3")])
    store.save_facts("ann", [Fact("ann", "a", "1")], cursor=(ANN, 2), cursor_from=0)
    with pytest.raises(CursorMoved, match="at 2, not at 0"):
        store.save_facts("ann", [Fact("ann", "b", "1")], cursor=(ANN, 3), cursor_from=0)
    assert store.extraction_cursor(ANN) == 2
    assert [f.key for f in store.get_facts("ann")] == ["a"], "nothing of the refused write"
    with pytest.raises(ValueError, match="cursor_from"):
        store.save_facts("ann", [], cursor=(ANN, 3), cursor_from=-1)
    with pytest.raises(ValueError, match="cursor_from needs a cursor"):
        store.save_facts("ann", [], cursor_from=2)
    store.save_facts("ann", [], cursor=(ANN, 3), cursor_from=2)
    assert store.extraction_cursor(ANN) == 3


class Counting:
    """One fact per user message (``t<text>``), valued by the call that decided it: a turn
    saved twice would show as a version 2. The first call of each of ``meet`` threads waits
    for the others, so they start from one cursor and race to save."""

    blocks = False

    def __init__(self, meet: int = 2) -> None:
        self.calls = itertools.count()
        self.seen: list[str] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(meet, timeout=WAIT)
        self.met: set[int] = set()

    def extract(self, messages: Sequence[Mapping[str, Any]], known: Sequence[Fact]) -> Any:
        call = next(self.calls)
        with self.lock:
            self.seen.extend(str(m["content"]) for m in messages)
            first = threading.get_ident() not in self.met
            self.met.add(threading.get_ident())
        if first:
            self.barrier.wait()
        return [
            Decision("ADD", f"t{m['content']}", f"call{call}", index=i)
            for i, m in enumerate(messages)
            if m["role"] == "user"
        ]


def _race(stores: Sequence[Any], extractor: Counting) -> None:
    """Extract ANN on one thread per store, each through its own LongTermMemory."""
    errors: list[BaseException] = []

    def work(store: Any) -> None:
        try:
            LongTermMemory(store, extractor, batch=3).extract_now(ANN)
        except BaseException as exc:  # the test thread reports it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def _each_turn_once(store: Any, turns: range) -> None:
    facts = {f.key: f for f in store.get_facts("ann")}
    assert sorted(facts) == sorted(f"t{i}" for i in turns)
    assert [k for k, f in facts.items() if f.version != 1] == [], "a turn saved twice"
    assert all(store.fact_history("ann", k) == [] for k in facts)


def _second(opener: Callable[[], Any], kind: str, first: Any) -> Any:
    """Another handle on the same data: PostgreSQL, a second store (its own connection)."""
    return opener() if kind == "postgres" else first


def test_two_extractors_racing_save_every_turn_once(
    opener: Callable[[], Any], kind: str
) -> None:
    store = opener()
    other = _second(opener, kind, store)
    store.add(ANN, [user(str(i)) for i in range(30)])
    extractor = Counting()
    _race([store, other], extractor)
    _each_turn_once(store, range(30))
    assert store.extraction_cursor(ANN) == 30
    assert len(extractor.seen) > 30, "the two started from one cursor: one lost the race"


def test_the_cursor_stays_right_across_a_reopen(opener: Callable[[], Any], kind: str) -> None:
    store = opener()
    other = _second(opener, kind, store)
    store.add(ANN, [user(str(i)) for i in range(12)])
    _race([store, other], Counting())
    if kind != "memory":  # a reopened directory, a restarted PostgreSQL store
        other.stop() if other is not store else None
        store.stop()
        store = opener()
    assert store.extraction_cursor(ANN) == 12
    store.add(ANN, [user(str(i)) for i in range(12, 20)])
    _race([store, _second(opener, kind, store)], Counting())
    _each_turn_once(store, range(20))
    assert store.extraction_cursor(ANN) == 20


def test_two_async_servers_on_one_store_extract_each_turn_once(
    opener: Callable[[], Any],
) -> None:
    store = opener()
    sup = Supervisor.start_link([], strategy="one_for_one", intensity=5)
    extractor = Counting(meet=1)
    first = LongTermMemory(store, extractor, mode="async", supervisor=sup, batch=2)
    second = LongTermMemory(store, extractor, mode="async", supervisor=sup, batch=2)
    try:
        for i in range(0, 24, 3):
            store.add(ANN, [user(str(n)) for n in range(i, i + 3)])
            first.extract(ANN)
            second.extract(ANN)
        assert first.flush(WAIT) == {} and second.flush(WAIT) == {}
        _each_turn_once(store, range(24))
        assert store.pending_extractions() == []
    finally:
        first.close()
        second.close()
        sup.stop()


# -- the usage log's horizon -------------------------------------------------------------------


def _spend(store: Any, n: int) -> None:
    for i in range(n):  # one token a call: a window's sum counts the log entries it saw
        store.add(ANN, [answered(f"a{i}", 1, 0)])


def test_the_usage_log_keeps_what_is_inside_the_horizon(opener: Callable[[], Any]) -> None:
    store = opener()
    _spend(store, 30)
    assert store.user_usage("ann", since=0).total_tokens == 30, "all inside the horizon"
    assert store.usage(ANN, since=0).total_tokens == 30


def test_the_usage_log_drops_what_is_past_the_horizon(
    opener: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(longterm, "USAGE_LOG_HORIZON", 0.0)  # every earlier entry is past it
    store = opener()
    _spend(store, 30)
    assert store.user_usage("ann").total_tokens == 30, "the running sums keep everything"
    assert store.usage(ANN).total_tokens == 30
    assert store.user_usage("ann", since=0).total_tokens == 1, "the log: the newest entry"


def test_a_leveldb_log_backlog_drains_a_bounded_step_per_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LevelDBStore.start_link(tmp_path / "db")
    try:
        _spend(store, 200)
        monkeypatch.setattr(longterm, "USAGE_LOG_HORIZON", 0.0)
        _spend(store, 1)
        drained = longterm.USAGE_EXPIRED_PER_ADD
        assert store.user_usage("ann", since=0).total_tokens == 200 - drained + 1
        _spend(store, 3)
        assert store.user_usage("ann", since=0).total_tokens == 1
        assert store.user_usage("ann").total_tokens == 204
    finally:
        store.stop()
