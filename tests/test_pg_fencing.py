"""Fenced adds: a write to a leased conversation commits only while its writer still holds
the lease, decided by PostgreSQL, so a writer frozen past its lease (a GC pause, a stopped
VM) thaws to ``LeaseLost``, never to a write beside its successor's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import otpmem
from otpmem.messages import Conv, freeze_batch
from otpmem.stores.postgres import (
    Fence,
    LeaseLost,
    Leases,
    PostgresStore,
    PostgresStoreHandle,
    lease_lock_prefix,
)
from tests.support import run_threads

WAIT = 30.0
CONV = Conv("ann", "c")


@pytest.fixture
def leases(postgres_dsn: str, pg_namespace: str) -> Iterator[dict[str, Leases]]:
    """Two owners' views of the namespace's leases (the store made the table)."""
    made = {name: Leases(postgres_dsn, pg_namespace, owner=name, ttl=30.0) for name in "AB"}
    yield made
    for one in made.values():
        one.close()


@pytest.fixture
def store(
    postgres_dsn: str, pg_namespace: str, leases: dict[str, Leases]
) -> Iterator[PostgresStoreHandle]:
    """A's store: every add to a conversation fenced by the lease of its name."""
    handle = PostgresStore.start_link(
        postgres_dsn,
        namespace=pg_namespace,
        pool_size=4,
        fence=lambda conv: leases["A"].fence(conv.conversation_id),
    )
    yield handle
    handle.stop()


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _expire(dsn: str, namespace: str, name: str) -> None:
    """The lease's time runs out, as a frozen owner's does (the owner does not know)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.leases SET expires_at = '-infinity' WHERE name = %s").format(
                sql.Identifier(namespace)
            ),
            (name,),
        )


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        threading.Event().wait(0.02)


def _waiting_advisory_locks(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return int(row[0]) if row else 0


def test_an_add_after_another_owner_took_the_lease_stores_nothing(
    store: PostgresStoreHandle, leases: dict[str, Leases], postgres_dsn: str, pg_namespace: str
) -> None:
    leases["A"].add(["c"])
    assert leases["A"].claim("c") is not None
    store.add(CONV, [_user("mine")])
    _expire(postgres_dsn, pg_namespace, "c")
    taken = leases["B"].claim("c")
    assert taken is not None and taken.epoch == 2

    with pytest.raises(LeaseLost, match=r"'c' is no longer A's \(epoch 1\)"):
        store.add(CONV, [_user("stale")], idempotency_key="k")

    assert store.get(CONV) == [_user("mine")]
    assert store.key_position(CONV, "k") is None
    assert store.alive  # a refused write is the caller's news, not a crash


def test_a_claim_committed_while_an_add_waited_for_the_lease_is_seen_by_it(
    store: PostgresStoreHandle, leases: dict[str, Leases], postgres_dsn: str, pg_namespace: str
) -> None:
    leases["A"].add(["c"])
    assert leases["A"].claim("c") is not None
    # B's claim, half done: the lease's lock taken, the epoch moved, not committed yet.
    claimer = psycopg.connect(postgres_dsn)
    try:
        claimer.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", (lease_lock_prefix(pg_namespace) + "c",)
        )
        claimer.execute(
            sql.SQL("UPDATE {}.leases SET owner = 'B', epoch = epoch + 1 WHERE name = 'c'").format(
                sql.Identifier(pg_namespace)
            )
        )
        failures = []
        adding = threading.Thread(
            target=lambda: failures.extend(run_threads(1, lambda _: store.add(CONV, [_user("x")])))
        )
        adding.start()
        _until(lambda: _waiting_advisory_locks(postgres_dsn) > 0, "the add never waited")
        claimer.commit()
        adding.join(WAIT)
    finally:
        claimer.close()

    assert not adding.is_alive()
    assert [type(e) for e in failures] == [LeaseLost]  # it read the lease after the claim
    assert store.get(CONV) == []


def test_a_claim_skips_a_lease_whose_fenced_write_is_in_flight(
    store: PostgresStoreHandle, leases: dict[str, Leases], postgres_dsn: str, pg_namespace: str
) -> None:
    leases["A"].add(["c", "d"])
    assert leases["A"].claim("c") is not None and leases["A"].claim("d") is not None
    writer = psycopg.connect(postgres_dsn)  # A's write to c, frozen mid-transaction
    try:
        row = writer.execute(
            sql.SQL("SELECT {}.fence_lost(ARRAY['c'], ARRAY['A'], ARRAY[1::bigint])").format(
                sql.Identifier(pg_namespace)
            )
        ).fetchone()
        assert row is not None and row[0] == []  # A holds c, and now c's lock, shared
        _expire(postgres_dsn, pg_namespace, "c")
        _expire(postgres_dsn, pg_namespace, "d")

        assert leases["B"].claim("c") is None  # not taken, and not blocked either
        assert [lease.name for lease in leases["B"].claim_free(10, below=100)] == ["d"]
        writer.commit()
    finally:
        writer.close()

    taken = leases["B"].claim("c")
    assert taken is not None and taken.epoch == 2


def test_in_one_group_a_lost_add_fails_alone_and_the_others_are_stored(
    store: PostgresStoreHandle, leases: dict[str, Leases], postgres_dsn: str, pg_namespace: str
) -> None:
    leases["A"].add(["c", "d"])
    assert leases["A"].claim("c") is not None and leases["A"].claim("d") is not None
    _expire(postgres_dsn, pg_namespace, "d")
    assert leases["B"].claim("d") is not None
    batch = freeze_batch([_user("one")])
    items = [
        ((CONV, batch, None, None), Fence("c", "A", 1)),
        ((Conv("ann", "d"), batch, None, None), Fence("d", "A", 1)),
        ((Conv("ann", "free"), batch, None, None), None),
    ]

    outcomes = store.resolve().server._commit_adds(items)

    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], LeaseLost)
    assert store.get(CONV) == [_user("one")]
    assert store.get(Conv("ann", "d")) == []
    assert store.get(Conv("ann", "free")) == [_user("one")]


def test_a_lease_this_owner_knows_it_lost_refuses_every_add(
    store: PostgresStoreHandle, leases: dict[str, Leases]
) -> None:
    assert leases["A"].fence("never-claimed") == Fence("never-claimed", "A", 0)
    with pytest.raises(LeaseLost):
        store.add(Conv("ann", "never-claimed"), [_user("x")])


def test_the_store_s_connections_end_a_transaction_left_idle_by_a_frozen_client(
    store: PostgresStoreHandle,
) -> None:
    with store.resolve().server.pool.connection() as conn:
        row = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert row is not None and row[0] == "5s"


def test_fence_is_refused_where_it_cannot_work(postgres_dsn: str, tmp_path: Any) -> None:
    with pytest.raises(TypeError, match="fence must be a callable"):
        PostgresStore.start_link(postgres_dsn, fence=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fence needs store='postgres'"):
        otpmem.start(tmp_path, fence=lambda conv: None)
