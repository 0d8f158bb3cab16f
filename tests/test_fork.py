"""Forks and time travel of a conversation (issue 31, item 2): ``ForkConformance`` on every
store, an agent turn over a fork cut inside a tool round, a LevelDB fork that outlives a
reopen and a kill, a PostgreSQL fork that another node's handle sees, and the reads of
``as_of`` that read only the prefix asked for."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv
from otpmem.stores import (
    ChatMemory,
    ConversationExists,
    ForkStore,
    LevelDBStore,
    MemoryStore,
    PostgresStore,
)
from otpmem.stores.testing import ForkConformance
from tests.test_valid_context import assert_valid

SOURCE, BRANCH = Conv("ann", "trip"), Conv("ann", "trip-b")
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    ],
}
TRIP = [
    {"role": "system", "content": "you plan trips"},
    {"role": "user", "content": "plan a trip to Lyon"},
    CALL,
    {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
    {"role": "assistant", "content": "Lyon is sunny: go"},
    {"role": "user", "content": "and Paris?"},
    {"role": "assistant", "content": "Paris too"},
]


class AgentOverFork:
    """What a user does with a fork: run the next turn on it. The fork cut right after a
    tool call (its result not copied); the model is still sent a valid context."""

    @pytest.mark.parametrize("window", [None, 2])
    def test_an_agent_on_a_fork_cut_inside_a_tool_round_sends_a_valid_context(
        self, store: Any, window: int | None
    ) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=3) == 3  # ends with the call, not its result
        seen: list[list[dict[str, Any]]] = []
        model = ScriptedModel(lambda messages: seen.append(messages) or "rebooked")
        agent = Agent.start_link(
            llm=model,
            memory=DefaultProvider(store, window=window),
            user_id="ann",
            conversation_id="trip-b",
        )
        try:
            assert agent.run("book it instead").content == "rebooked"
        finally:
            agent.stop()
        assert_valid(seen[0])
        roles = [m["role"] for m in seen[0]]
        assert roles[0] == "system" and roles[-1] == "user"
        assert seen[0][-1]["content"] == "book it instead"
        assert store.get(SOURCE) == TRIP, "the source is not the fork's"
        assert store.get(BRANCH, last=2)[-1]["content"] == "rebooked"


class TestMemoryStore(ForkConformance, AgentOverFork):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestSupervisedMemoryStore(ForkConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        from otpmem.supervisors import Supervisor

        sup = Supervisor.start_link([MemoryStore.child_spec("fork-memory")])
        yield MemoryStore.named("fork-memory")
        sup.stop()


class TestLevelDBStore(ForkConformance, AgentOverFork):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestPostgresStore(ForkConformance, AgentOverFork):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()


class ReadingStore:
    """A ChatMemory wrapper that only reads and appends (as a provider's spy does)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def add(
        self, conv: Any, messages: Any, idempotency_key: Any = None, *, follows: Any = None
    ) -> None:
        self.inner.add(conv, messages, idempotency_key, follows=follows)

    def get(self, conv: Any, last: int | None = None) -> list[dict[str, Any]]:
        return self.inner.get(conv, last)

    def clear(self, conv: Any) -> None:
        self.inner.clear(conv)

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        return self.inner.conversations(user_id)

    def count(self, conv: Any) -> int:
        return self.inner.count(conv)

    def forget_user(self, user_id: str) -> None:
        self.inner.forget_user(user_id)

    def pinned(self, conv: Any) -> list[tuple[int, dict[str, Any]]]:
        return self.inner.pinned(conv)

    def window(self, conv: Any, last: int) -> Any:
        return self.inner.window(conv, last)

    def key_position(self, conv: Any, idempotency_key: str) -> int | None:
        return self.inner.key_position(conv, idempotency_key)


def test_every_store_is_a_fork_store_and_a_chat_memory_need_not_fork() -> None:
    store = MemoryStore.start_link()
    try:
        assert isinstance(store, ForkStore) and isinstance(store, ChatMemory)
        reader = ReadingStore(store)
        assert isinstance(reader, ChatMemory) and not isinstance(reader, ForkStore)
        DefaultProvider(reader).append(SOURCE, TRIP[:2])  # a provider still takes it
        assert store.get(SOURCE) == TRIP[:2]
    finally:
        store.stop()


# -- LevelDB: a reopened directory, a killed store ---------------------------------------


def test_a_leveldb_fork_outlives_a_reopen_and_its_retry_still_forks_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    store.add(SOURCE, TRIP)
    assert store.fork(SOURCE, BRANCH, at=4, idempotency_key="f1") == 4
    store.stop()

    reopened = LevelDBStore.start_link(path)
    try:
        assert reopened.get(BRANCH) == TRIP[:4]
        assert reopened.pinned(BRANCH) == [(0, TRIP[0])]
        assert sorted(reopened.conversations("ann")) == sorted([SOURCE, BRANCH])
        assert reopened.fork(SOURCE, BRANCH, at=4, idempotency_key="f1") == 4
        assert reopened.count(BRANCH) == 4
        assert reopened.usage(BRANCH).total_tokens == 0
        reopened.add(BRANCH, [{"role": "user", "content": "after the reopen"}])
        assert reopened.get(BRANCH, as_of=4) == TRIP[:4]
        with pytest.raises(ConversationExists):
            reopened.fork(SOURCE, BRANCH)
    finally:
        reopened.stop()


def test_an_acknowledged_leveldb_fork_survives_a_kill(tmp_path: Path) -> None:
    from otpmem.actors import faults

    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    store.add(SOURCE, TRIP)
    store.fork(SOURCE, BRANCH, idempotency_key="f1")
    faults.kill(store)  # no clean close: what was acknowledged is on disk all the same
    reopened = LevelDBStore.start_link(path)
    try:
        assert reopened.get(BRANCH) == TRIP
        assert reopened.fork(SOURCE, BRANCH, idempotency_key="f1") == len(TRIP)
    finally:
        reopened.stop()


def test_a_leveldb_fork_made_from_a_process_is_answered_once_durable(tmp_path: Path) -> None:
    from otpmem.actors import GenServer

    store = LevelDBStore.start_link(tmp_path / "db")
    store.add(SOURCE, TRIP)

    class Forker(GenServer):
        def handle_call(self, message: Any) -> Any:
            return store.fork(SOURCE, BRANCH, at=message)

    forker = Forker.start_link()
    try:
        assert forker.call(5, timeout=10.0) == 5  # a process's fork: a call, not a thread's
        assert store.get(BRANCH) == TRIP[:5]
    finally:
        forker.stop()
        store.stop()


def test_leveldb_as_of_reads_only_the_prefix(tmp_path: Path) -> None:
    """O(n): on 20,000 messages, as_of=3 reads three message keys (an iterator that
    counts what it yields proves it), never the whole conversation."""
    store = LevelDBStore.start_link(tmp_path / "db", sync=False)
    try:
        long = Conv("ann", "long")
        for start in range(0, 20_000, 1_000):
            store.add(
                long, [{"role": "user", "content": str(i)} for i in range(start, start + 1_000)]
            )
        server: Any = store.process_or_none().server
        real = server.db
        yielded = {"n": 0}

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def snapshot(self) -> Any:
                snap = real.snapshot()

                class Snap:
                    def __enter__(self) -> Any:
                        return self

                    def __exit__(self, *exc: Any) -> None:
                        snap.close()

                    def get(self, key: bytes) -> Any:
                        return snap.get(key)

                    def iterator(self, **kwargs: Any) -> Iterator[Any]:
                        for item in snap.iterator(**kwargs):
                            yielded["n"] += 1
                            yield item

                return Snap()

        server.db = Counting()
        try:
            assert [m["content"] for m in store.get(long, as_of=3)] == ["0", "1", "2"]
            assert yielded["n"] == 3
            assert [m["content"] for m in store.get(long, last=2, as_of=10)] == ["8", "9"]
            assert yielded["n"] == 5
        finally:
            server.db = real
    finally:
        store.stop()


# -- PostgreSQL: another node's handle ---------------------------------------------------


def test_a_postgres_fork_is_seen_by_another_handle_and_retried_there_once(
    postgres_dsn: str, pg_namespace: str
) -> None:
    one = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    other = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)  # another node's
    try:
        one.add(SOURCE, TRIP)
        assert one.fork(SOURCE, BRANCH, at=5, idempotency_key="f1") == 5
        assert other.get(BRANCH) == TRIP[:5]
        assert other.pinned(BRANCH) == [(0, TRIP[0])]
        assert other.fork(SOURCE, BRANCH, at=5, idempotency_key="f1") == 5
        assert other.count(BRANCH) == 5
        with pytest.raises(ConversationExists):
            other.fork(SOURCE, BRANCH)
        assert other.get(SOURCE, as_of=5, last=1) == [TRIP[4]]
    finally:
        other.stop()
        one.stop()


def test_postgres_forks_from_two_handles_into_one_target_one_wins(
    postgres_dsn: str, pg_namespace: str
) -> None:
    one = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    other = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        one.add(SOURCE, TRIP)
        start = threading.Barrier(8)
        results: list[Any] = []
        lock = threading.Lock()

        def run(handle: Any) -> None:
            start.wait(10.0)
            try:
                answer: Any = handle.fork(SOURCE, BRANCH)
            except ConversationExists as exc:
                answer = exc
            with lock:
                results.append(answer)

        threads = [threading.Thread(target=run, args=((one, other)[i % 2],)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30.0)
        assert not any(t.is_alive() for t in threads)
        assert sorted(r for r in results if isinstance(r, int)) == [len(TRIP)]
        assert sum(isinstance(r, ConversationExists) for r in results) == 7
        assert one.get(BRANCH) == TRIP
    finally:
        other.stop()
        one.stop()


def test_a_postgres_schema_without_the_forked_column_gets_it_on_open(
    postgres_dsn: str, pg_namespace: str
) -> None:
    """A schema made before forks (no ``idempotency_keys.forked``): the next store adds
    the column in place, and the keys already held stay keys of adds."""
    from otpmem.stores.postgres import connected

    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    store.add(BRANCH, [{"role": "user", "content": "old"}], idempotency_key="old-key")
    store.stop()
    with connected(postgres_dsn) as conn:
        conn.execute(f"ALTER TABLE {pg_namespace}.idempotency_keys DROP COLUMN forked")
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        assert store.key_position(BRANCH, "old-key") == 0
        with pytest.raises(ConversationExists, match="from an add"):
            store.fork(SOURCE, BRANCH, idempotency_key="old-key")
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, Conv("ann", "new"), idempotency_key="k") == len(TRIP)
        assert store.fork(SOURCE, Conv("ann", "new"), idempotency_key="k") == len(TRIP)
    finally:
        store.stop()


def test_an_async_store_forks_and_reads_as_of() -> None:
    import asyncio

    from otpmem import aio

    store = MemoryStore.start_link()
    try:

        async def main() -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
            face = aio.wrap(store)
            await face.add(SOURCE, TRIP)
            forked = await face.fork(SOURCE, BRANCH, at=4, idempotency_key="f")
            return forked, await face.get(BRANCH), await face.get(SOURCE, last=1, as_of=2)

        assert asyncio.run(main()) == (4, TRIP[:4], TRIP[1:2])
    finally:
        store.stop()


def test_a_recall_index_finds_a_fork_within_its_users_conversations_only() -> None:
    from otpmem.memory.recall import RecallIndex

    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store)
    try:
        store.add(SOURCE, TRIP)
        store.add(Conv("bob", "trip"), [{"role": "user", "content": "Lyon for bob"}])
        store.fork(SOURCE, BRANCH, at=2)
        hits = store.search("lyon", user_id="ann")
        assert sorted((h.conv, h.index) for h in hits) == sorted(
            [(SOURCE, 1), (SOURCE, 4), (BRANCH, 1)]
        )
        assert [h.conv for h in store.search("lyon", conv=BRANCH)] == [BRANCH]
    finally:
        index.stop()
        store.stop()


def test_a_supervised_memory_stores_fork_and_its_retry_outlive_a_kill() -> None:
    from otpmem.actors import faults
    from otpmem.supervisors import Supervisor

    sup = Supervisor.start_link([MemoryStore.child_spec("fork-killed")])
    store = MemoryStore.named("fork-killed")
    try:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=3, idempotency_key="f") == 3
        faults.kill(store)  # the restarted store adopts the table its keeper held
        pair = sup.child("fork-killed")
        assert pair is not None
        pair.sync()  # its supervisor has restarted it
        assert store.fork(SOURCE, BRANCH, at=3, idempotency_key="f") == 3
        assert store.get(BRANCH) == TRIP[:3] and store.call(("adopted",), 10.0) is True
        store.add(BRANCH, [{"role": "user", "content": "after"}])
        assert store.fork(SOURCE, BRANCH, at=3, idempotency_key="f") == 3, "still the fork"
    finally:
        sup.stop()
