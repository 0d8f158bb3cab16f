"""PostgresStore's group commit: concurrent adds share one transaction, and each still
stands alone in what it stores, what it refuses and what it sums."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from otpmem.messages import Conv, freeze_batch
from otpmem.stores import KEYS_KEPT, ConversationCleared
from otpmem.stores.longterm import Usage
from otpmem.stores.postgres import PostgresStore, PostgresStoreHandle
from tests.support import run_threads

WAIT = 60.0


@pytest.fixture
def store(postgres_dsn: str, pg_namespace: str) -> Iterator[PostgresStoreHandle]:
    handle = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, pool_size=4)
    yield handle
    handle.stop()


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _answer(text: str, tokens: int, cost: str) -> dict[str, Any]:
    usage = {"prompt_tokens": tokens, "completion_tokens": 1, "total_tokens": tokens + 1}
    return {"role": "assistant", "content": text, "metadata": {"usage": {**usage, "cost": cost}}}


def _commit(store: PostgresStoreHandle, adds: list[tuple[Any, ...]]) -> list[Any]:
    """Commit ``adds`` as one group, as the group's leader would."""
    server = store.resolve().server
    return list(server._commit_adds([((c, freeze_batch(b), k, f), None) for c, b, k, f in adds]))


def test_sixteen_writers_share_commits_and_every_add_stands_whole(
    store: PostgresStoreHandle,
) -> None:
    shared = Conv("ann", "shared")

    def writer(t: int) -> None:
        own = Conv("ann" if t % 2 else "bob", f"own-{t}")
        for i in range(25):
            pair = [_user(f"{t}:{i}"), _answer(f"{t}:{i}", 10, "0.001")]
            store.add(own, pair, idempotency_key=f"{t}:{i}")
            store.add(shared, [_user(f"{t}:{i}:a"), _user(f"{t}:{i}:b")])

    assert run_threads(16, writer) == []
    group = store.resolve().server.group
    assert group.groups < group.items  # adds did share commits
    for t in range(16):
        own = Conv("ann" if t % 2 else "bob", f"own-{t}")
        stored = store.get(own)
        assert [m["content"] for m in stored] == [f"{t}:{i}" for i in range(25) for _ in (0, 1)]
        assert store.usage(own) == Usage(250, 25, 275, Decimal("0.025"))
    contents = [m["content"] for m in store.get(shared)]
    assert len(contents) == 16 * 25 * 2
    pairs = list(zip(contents[::2], contents[1::2], strict=True))
    assert all(a[:-1] == b[:-1] and a.endswith(":a") for a, b in pairs)  # batches whole
    for t in range(16):  # and in each writer's order
        mine = [a for a, _ in pairs if a.startswith(f"{t}:")]
        assert mine == [f"{t}:{i}:a" for i in range(25)]
    assert store.user_usage("ann") == Usage(2000, 200, 2200, Decimal("0.200"))
    assert store.user_usage("bob") == Usage(2000, 200, 2200, Decimal("0.200"))


def test_an_add_postgresql_cannot_hold_fails_alone_in_its_group(
    store: PostgresStoreHandle,
) -> None:
    good, bad, later = Conv("ann", "a"), Conv("ann\x00x", "b"), Conv("ann", "c")
    outcomes = _commit(
        store,
        [
            (good, [_user("1")], None, None),
            (bad, [_user("2")], None, None),
            (later, [_user("3")], None, None),
        ],
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], ValueError) and "cannot store" in str(outcomes[1])
    assert store.get(good) == [_user("1")] and store.get(later) == [_user("3")]
    assert sorted(store.conversations()) == [good, later]


def test_an_add_following_a_cleared_batch_fails_alone_in_its_group(
    store: PostgresStoreHandle,
) -> None:
    turn, other = Conv("ann", "turn"), Conv("ann", "other")
    store.add(turn, [_user("first")], idempotency_key="turn:1:0")
    store.clear(turn)
    outcomes = _commit(
        store, [(turn, [_user("tail")], "turn:1:1", "turn:1:0"), (other, [_user("x")], None, None)]
    )
    assert isinstance(outcomes[0], ConversationCleared) and outcomes[1] is None
    assert store.get(turn) == [] and store.get(other) == [_user("x")]


def test_one_key_twice_in_one_group_is_stored_once_and_summed_once(
    store: PostgresStoreHandle,
) -> None:
    conv = Conv("ann", "twice")
    batch = [_user("q"), _answer("a", 5, "0.5")]
    assert _commit(store, [(conv, batch, "k", None), (conv, batch, "k", None)]) == [None, None]
    assert store.get(conv) == batch
    assert store.user_usage("ann") == Usage(5, 1, 6, Decimal("0.5"))
    assert store.key_position(conv, "k") == 0


def test_a_group_sums_each_users_usage(store: PostgresStoreHandle) -> None:
    adds = [
        (Conv("ann", "x"), [_answer("1", 1, "0.1")], None, None),
        (Conv("bob", "y"), [_answer("2", 2, "0.2")], None, None),
        (Conv("ann", "z"), [_answer("3", 3, "0.3")], None, None),
        (Conv(None, "anon"), [_answer("4", 4, "0.4")], None, None),
    ]
    assert _commit(store, adds) == [None] * 4
    assert store.user_usage("ann") == Usage(4, 2, 6, Decimal("0.4"))
    assert store.user_usage("bob") == Usage(2, 1, 3, Decimal("0.2"))
    assert store.usage(Conv("ann", "z")) == Usage(3, 1, 4, Decimal("0.3"))


def test_forget_user_racing_group_commits_never_deadlocks(
    store: PostgresStoreHandle, postgres_dsn: str
) -> None:
    def deadlocks() -> int:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return int(row[0]) if row else 0

    before = deadlocks()
    stop = threading.Event()

    def work(t: int) -> None:
        if t == 0:
            for _ in range(15):
                store.forget_user("ann")
            stop.set()
            return
        i = 0
        while not stop.is_set():  # each add locks its conversation, then ann's sums
            i += 1
            conv = Conv("ann", f"c{(t * 7 + i) % 5}")
            store.add(conv, [_user(str(i)), _answer(str(i), 1, "0.01")])

    assert run_threads(8, work) == []
    assert deadlocks() == before


def test_only_the_newest_keys_are_kept_as_rows(
    store: PostgresStoreHandle, postgres_dsn: str, pg_namespace: str
) -> None:
    conv = Conv("ann", "many")
    for i in range(KEYS_KEPT * 2 + 10):
        store.add(conv, [_user(str(i))], idempotency_key=f"k{i}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT count(*) FROM {pg_namespace}.idempotency_keys").fetchone()
    assert rows is not None and KEYS_KEPT <= rows[0] <= 2 * KEYS_KEPT
    assert store.key_position(conv, f"k{KEYS_KEPT + 9}") is None  # forgotten, row or not
    assert store.key_position(conv, f"k{KEYS_KEPT + 10}") == KEYS_KEPT + 10
    store.add(conv, [_user("again")], idempotency_key=f"k{KEYS_KEPT * 2 + 9}")
    assert store.count(conv) == KEYS_KEPT * 2 + 10


def test_a_version_1_schema_is_migrated_in_place(postgres_dsn: str, pg_namespace: str) -> None:
    conv = Conv("ann", "old")
    first = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    first.add(conv, [_user("kept")], idempotency_key="before")
    first.stop()
    ns = pg_namespace
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # what version 1 left
        conn.execute(f"UPDATE {ns}.schema_version SET version = 1")
        conn.execute(
            f"CREATE INDEX idempotency_keys_order ON {ns}.idempotency_keys "
            "(user_key, conversation_id, ordinal)"
        )
        conn.execute(
            f"CREATE FUNCTION {ns}.append(text, text, bytea[], boolean[], integer, integer, "
            "text, text, bigint, bigint, bigint, numeric, double precision, integer) "
            "RETURNS integer LANGUAGE sql AS 'SELECT 1'"
        )
    again = PostgresStore.start_link(postgres_dsn, namespace=ns)
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            # Migrated in place, step by step, to the newest schema (4: scopes).
            assert conn.execute(f"SELECT version FROM {ns}.schema_version").fetchall() == [(4,)]
            index = conn.execute(
                "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                (ns, "idempotency_keys_order"),
            ).fetchall()
            functions = conn.execute(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %s AND p.proname = 'append'",
                (ns,),
            ).fetchone()
        assert index == [] and functions == (1,)
        again.add(conv, [_user("kept")], idempotency_key="before")  # the key survived
        again.add(conv, [_user("new")])
        assert again.get(conv) == [_user("kept"), _user("new")]
    finally:
        again.stop()
