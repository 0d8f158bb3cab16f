"""PostgresStore's add path, counted: one round trip per add (libpq's own trace of the
protocol), one pool checkout, the batch checked and frozen once, and the plain add's single
statement keeping every guarantee of ``append`` (order, counters, the pinned index, the
user's lock against ``forget_user``, a reopened store)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from psycopg import pq

from otpmem.messages import Conv
from otpmem.stores import _client
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


class Traffic:
    """What the store's connections said to the server while counted: libpq traces each
    connection the pool hands out, and this reads the traces back."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.traced: dict[int, tuple[Any, int, str]] = {}
        self.checkouts = 0

    def watch(self, conn: Any) -> None:
        self.checkouts += 1
        if id(conn) in self.traced:
            return
        path = os.path.join(self.directory, f"trace-{len(self.traced)}.txt")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        self.traced[id(conn)] = (conn, fd, path)

    def stop(self) -> None:
        for conn, fd, _ in self.traced.values():
            if not conn.closed:
                conn.pgconn.untrace()  # flushes the trace
            os.close(fd)

    def messages(self, sender: str, kind: str) -> int:
        """How many protocol messages of ``kind`` ``sender`` ("F": us, "B": the server) sent."""
        count = 0
        for _, _, path in self.traced.values():
            with open(path) as trace:
                for line in trace:
                    fields = line.rstrip("\n").split("\t")
                    count += fields[0] == sender and fields[2:3] == [kind]
        return count

    def statements(self) -> list[str]:
        """The text of every statement parsed (psycopg sends it until it prepares one)."""
        texts = []
        for _, _, path in self.traced.values():
            with open(path) as trace:
                for line in trace:
                    fields = line.rstrip("\n").split("\t")
                    if fields[0] == "F" and fields[2:3] == ["Parse"]:
                        texts.append(fields[3])
        return texts

    @property
    def round_trips(self) -> int:
        """Requests answered: the server says ReadyForQuery once per Sync or Query."""
        return self.messages("B", "ReadyForQuery")


@contextmanager
def counted(store: PostgresStoreHandle, directory: str) -> Iterator[Traffic]:
    """Trace every connection the store's pool hands out within the block."""
    pool = store.resolve().server.pool
    traffic = Traffic(directory)
    original = pool.getconn

    def getconn(timeout: float | None = None) -> Any:
        conn = original(timeout)
        traffic.watch(conn)
        return conn

    pool.getconn = getconn
    try:
        yield traffic
    finally:
        del pool.getconn  # the class's method again
        traffic.stop()


def _warm(store: PostgresStoreHandle, conv: Conv, batch: list[dict[str, Any]], **kw: Any) -> None:
    # psycopg prepares a statement on its fifth execution on a connection (one round trip
    # more, once): past that, every add is its steady state.
    for i in range(8):
        store.add(conv, batch, **({"idempotency_key": f"warm-{i}"} if kw else {}))


def test_a_plain_add_is_one_round_trip_and_one_checkout(
    store: PostgresStoreHandle, tmp_path: Any
) -> None:
    conv = Conv("ann", "plain")
    _warm(store, conv, [_user("warm")])
    with counted(store, str(tmp_path)) as traffic:
        for i in range(20):
            store.add(conv, [_user(f"m{i}")])
    assert traffic.round_trips == 20
    assert traffic.messages("F", "Sync") == 20  # one extended-protocol request each
    assert traffic.checkouts == 20
    assert store.count(conv) == 28
    assert [m["content"] for m in store.get(conv, last=20)] == [f"m{i}" for i in range(20)]


def test_a_keyed_batch_with_usage_is_one_round_trip_too(
    store: PostgresStoreHandle, tmp_path: Any
) -> None:
    conv = Conv("ann", "keyed")
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    pair = [_user("q"), {"role": "assistant", "content": "a", "metadata": {"usage": usage}}]
    _warm(store, conv, pair, keyed=True)
    with counted(store, str(tmp_path)) as traffic:
        for i in range(10):
            store.add(conv, pair, idempotency_key=f"k{i}")
        store.add(conv, pair, idempotency_key="k3")  # stored already: still one trip
    assert traffic.round_trips == 11
    assert store.count(conv) == 2 * 18
    assert store.usage(conv).total_tokens == 5 * 18


def test_the_first_add_of_a_conversation_makes_its_row_then_plain_adds_skip_append(
    store: PostgresStoreHandle, tmp_path: Any
) -> None:
    conv = Conv("ann", "new")
    with counted(store, str(tmp_path)) as traffic:
        store.add(conv, [_user("first")])  # the plain statement finds no row: append
        store.add(conv, [_user("second")])
        store.add(conv, [_user("third")])
    calls = [text for text in traffic.statements() if ".append(" in text]
    assert len(calls) == 1  # the plain adds after it are one statement, no function call
    assert traffic.round_trips == 4
    assert [m["content"] for m in store.get(conv)] == ["first", "second", "third"]
    assert store.conversations("ann") == [conv]


def test_the_batch_is_checked_and_frozen_once_per_add(
    store: PostgresStoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    conv = Conv("ann", "frozen")
    store.add(conv, [_user("warm")])
    calls = []
    freeze_batch = _client.freeze_batch

    def counting(messages: Any) -> Any:
        calls.append(1)
        return freeze_batch(messages)

    monkeypatch.setattr(_client, "freeze_batch", counting)
    for i in range(5):
        store.add(conv, [_user(f"m{i}")])
    assert len(calls) == 5  # the handle's check; the server's door is not asked again


def test_a_raw_add_call_still_goes_through_the_door(store: PostgresStoreHandle) -> None:
    from otpmem.messages import InvalidMessage

    conv = Conv("ann", "door")
    with pytest.raises(InvalidMessage):
        store.call(("add", conv, [{"role": "nobody", "content": "x"}]))
    store.call(("add", conv, [_user("ok")]))
    assert [m["content"] for m in store.get(conv)] == ["ok"]


def test_plain_adds_keep_the_pinned_index_and_the_counters(store: PostgresStoreHandle) -> None:
    conv = Conv("ann", "pins")
    store.add(conv, [{"role": "system", "content": "rules"}])  # pinned, plain
    for i in range(30):
        store.add(conv, [_user(f"m{i}")])
    store.add(conv, [{"role": "user", "content": "note", "metadata": {"pinned": True}}])
    window = store.window(conv, last=5)
    assert [(p, m["content"]) for p, m in window.pinned] == [(0, "rules")]
    assert [m["content"] for m in window.tail] == ["m26", "m27", "m28", "m29", "note"]
    assert window.total == 32 and store.count(conv) == 32
    assert window.pinned_before == 1 and window.tail_pinned == 1


def test_sixteen_threads_of_plain_adds_to_one_conversation_leave_no_gap(
    store: PostgresStoreHandle,
) -> None:
    conv = Conv("ann", "shared")
    store.add(conv, [_user("start")])

    def writer(t: int) -> None:
        for i in range(20):
            store.add(conv, [_user(f"{t}:{i}")])

    assert run_threads(16, writer) == []
    stored = [m["content"] for m in store.get(conv)]
    assert len(stored) == 1 + 16 * 20 and store.count(conv) == len(stored)
    for t in range(16):  # each writer's adds in its order
        assert [c for c in stored if c.startswith(f"{t}:")] == [f"{t}:{i}" for i in range(20)]


def test_forget_user_during_plain_adds_leaves_nothing_behind(
    store: PostgresStoreHandle,
) -> None:
    convs = [Conv("bob", f"c{t}") for t in range(4)]
    for conv in convs:
        store.add(conv, [_user("first")])
    forgotten = threading.Event()
    after: list[int] = []

    def writer(t: int) -> None:
        for i in range(40):
            store.add(convs[t], [_user(f"{t}:{i}")])
            if forgotten.is_set():
                after.append(t)
                return

    def forget() -> None:
        store.forget_user("bob")
        forgotten.set()

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    killer = threading.Thread(target=forget)
    for thread in [*threads, killer]:
        thread.start()
    for thread in [*threads, killer]:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in [*threads, killer])
    # Whatever a writer added after the forget committed is a fresh conversation, whole:
    # its row, its count and its messages agree (no message left behind a deleted row).
    for conv in convs:
        stored = store.get(conv)
        assert store.count(conv) == len(stored)
        if stored:
            assert conv in store.conversations("bob")


def test_a_reopened_store_goes_on_numbering_plain_adds(
    postgres_dsn: str, pg_namespace: str
) -> None:
    conv = Conv("ann", "reopen")
    first = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        for i in range(5):
            first.add(conv, [_user(f"a{i}")])
    finally:
        first.stop()
    second = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        for i in range(5):
            second.add(conv, [_user(f"b{i}")])
        assert [m["content"] for m in second.get(conv)] == [
            *(f"a{i}" for i in range(5)),
            *(f"b{i}" for i in range(5)),
        ]
        assert second.count(conv) == 10
    finally:
        second.stop()


def test_a_plain_add_after_clear_starts_the_conversation_again(
    store: PostgresStoreHandle,
) -> None:
    conv = Conv("ann", "cleared")
    for i in range(3):
        store.add(conv, [_user(f"old{i}")])
    store.clear(conv)
    store.add(conv, [_user("new")])
    assert [m["content"] for m in store.get(conv)] == ["new"]
    assert store.count(conv) == 1
