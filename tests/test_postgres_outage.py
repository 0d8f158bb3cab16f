"""A PostgresStore outlives its server: stopped, crashed and started again under a running
store, the server costs callers retryable ``StoreUnavailable`` errors, never the store's
process, never an acknowledged message; the same handle serves again once it is back, with
no supervisor to restart anything."""

from __future__ import annotations

import functools
import logging
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from otpmem.messages import Conv
from otpmem.stores import LeaseLost, StoreUnavailable
from otpmem.stores.postgres import Leases, PostgresStore, PostgresStoreHandle
from tests.support import Trace

T = TypeVar("T")
WAIT = 60.0
OUTAGE_WAIT = 0.5  # the stores' connect_timeout here: how long a call waits in an outage
CONV = Conv("ann", "c")


class RestartableServer:
    """An embedded PostgreSQL of the tests' own, to stop (or crash) and start again."""

    def __init__(self) -> None:
        with warnings.catch_warnings():  # XDG_RUNTIME_DIR unset: pgserver's lock goes to /tmp
            warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
            import pgserver

        self._pgserver = pgserver
        # mkdtemp, not tmp_path: run as root, pgserver runs the server as another user.
        self.where = Path(tempfile.mkdtemp(prefix="otpmem-test-pg-outage-"))
        self._server = pgserver.get_server(self.where, cleanup_mode="stop")
        self.dsn: str = self._server.get_uri()
        self.running = True

    def stop(self) -> None:
        """``pg_ctl stop``: a fast shutdown, which ends every session."""
        self._server.cleanup()
        self.running = False

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every process quits at once, no checkpoint, so
        the start replays the WAL, as after a power cut."""
        self._pgserver.pg_ctl(
            ["-w", "-m", "immediate", "stop"], pgdata=self.where, user=self._server.system_user
        )
        self._server.cleanup()  # pgserver's bookkeeping only: the server is already down
        self.running = False

    def start(self) -> None:
        """Start it again on the same data and socket (so the same DSN)."""
        self._server = self._pgserver.get_server(self.where, cleanup_mode="stop")
        self.running = True
        assert self._server.get_uri() == self.dsn

    def close(self) -> None:
        self._server.cleanup()
        shutil.rmtree(self.where, ignore_errors=True)


@pytest.fixture(scope="module")
def restartable() -> Iterator[RestartableServer]:
    """One server for this module's tests (an initdb costs seconds); each its own schema."""
    made = RestartableServer()
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def server(restartable: RestartableServer) -> RestartableServer:
    """The module's server, running (a test that failed mid-outage left it stopped)."""
    if not restartable.running:
        restartable.start()
    return restartable


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def retried(call: Callable[[], T], errors: Trace) -> T:
    """``call()`` again while it raises ``StoreUnavailable`` (as its message says to), up
    to WAIT s; each error goes to ``errors``."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            return call()
        except StoreUnavailable as exc:
            errors.append(exc)
            if time.monotonic() > deadline:
                raise


def test_a_bare_store_serves_again_on_the_same_handle_once_its_server_is_back(
    server: RestartableServer,
) -> None:
    # The README's first example: no supervisor anywhere.
    store = PostgresStore.start_link(server.dsn, namespace="bare", connect_timeout=OUTAGE_WAIT)
    try:
        process = store.resolve()
        store.add(CONV, [_user("before")], idempotency_key="k0")
        server.stop()
        outage: list[Callable[[], object]] = [
            lambda: store.add(CONV, [_user("during")], idempotency_key="k1"),
            lambda: store.get(CONV),
            lambda: store.window(CONV, 10),
            lambda: store.clear(Conv("bob", "other")),
        ]
        for call in outage:
            with pytest.raises(StoreUnavailable, match="try again") as caught:
                call()
            assert server.dsn in str(caught.value)
        assert store.alive
        server.start()
        errors = Trace()
        # The add the outage refused, retried as its error said, with its key.
        retried(lambda: store.add(CONV, [_user("during")], idempotency_key="k1"), errors)
        assert all(isinstance(e, StoreUnavailable) for e in errors.items)
        store.add(CONV, [_user("during")], idempotency_key="k1")  # once more: stored once
        store.add(CONV, [_user("after")], idempotency_key="k2")
        assert [m["content"] for m in store.get(CONV)] == ["before", "during", "after"]
        assert store.count(CONV) == 3
        assert store.resolve() is process and not process.exited.is_set()
    finally:
        store.stop()


def test_writers_hammering_through_a_crashed_server_lose_and_double_nothing(
    server: RestartableServer,
) -> None:
    store = PostgresStore.start_link(
        server.dsn, namespace="hammer", pool_size=4, connect_timeout=OUTAGE_WAIT
    )
    writers = 4  # at once, so adds commit in groups and whole groups fail mid-outage
    acknowledged = [Trace() for _ in range(writers)]
    errors, failures = Trace(), Trace()
    stop = threading.Event()

    def add(text: str) -> None:
        store.add(CONV, [_user(text)], idempotency_key=text)

    def write(w: int) -> None:
        try:
            i = 0
            while not stop.is_set():
                # Each add until it is acknowledged, under its key: a retry of an add that
                # was committed after all stores nothing more.
                retried(functools.partial(add, f"{w}:{i}"), errors)
                acknowledged[w].append(i)
                i += 1
        except BaseException as exc:  # anything but StoreUnavailable fails the test
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    try:
        process = store.resolve()
        for thread in threads:
            thread.start()
        for trace in acknowledged:
            trace.wait_for(lambda items: len(items) >= 20, WAIT)
        server.crash()
        errors.wait_for(bool, WAIT)
        server.start()
        counts = [len(trace.items) for trace in acknowledged]
        for trace, count in zip(acknowledged, counts, strict=True):
            trace.wait_for(lambda items, count=count: len(items) >= count + 20, WAIT)
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT)
    try:
        assert failures.items == []
        assert store.resolve() is process and not process.exited.is_set()
        stored = [m["content"] for m in store.get(CONV)]
        for w, trace in enumerate(acknowledged):
            mine = [text for text in stored if text.startswith(f"{w}:")]
            # Every acknowledged add there, once, in order; none the writer gave up on.
            assert mine == [f"{w}:{i}" for i in trace.items]
        assert len(stored) == sum(len(trace.items) for trace in acknowledged)
    finally:
        store.stop()


def _waiting_on_locks(dsn: str, count: int) -> None:
    deadline = time.monotonic() + WAIT
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while True:
            row = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if row and row[0] >= count:
                return
            assert time.monotonic() < deadline, f"fewer than {count} statements wait on a lock"
            threading.Event().wait(0.01)  # the server has no event to wait on


def test_connections_the_server_dropped_while_idle_are_never_handed_to_a_call(
    server: RestartableServer,
) -> None:
    store = PostgresStore.start_link(server.dsn, namespace="idle", pool_size=3)
    try:
        store.add(CONV, [_user("kept")])
        # Three reads at once, held on a table lock: the pool grows to three connections.
        answers = Trace()
        with psycopg.connect(server.dsn) as holder:
            holder.execute("LOCK TABLE idle.messages IN ACCESS EXCLUSIVE MODE")
            readers = [
                threading.Thread(target=lambda: answers.append(store.get(CONV))) for _ in range(3)
            ]
            for reader in readers:
                reader.start()
            _waiting_on_locks(server.dsn, 3)
            holder.rollback()
        for reader in readers:
            reader.join(WAIT)
        assert answers.items == [[_user("kept")]] * 3
        server.stop()  # every pooled connection is now a dead one, idle in the pool
        server.start()
        # Each call is served at once by a fresh connection, never a dead one.
        for _ in range(4):
            assert store.count(CONV) == 1
        store.add(CONV, [_user("after")])
        assert [m["content"] for m in store.get(CONV)] == ["kept", "after"]
    finally:
        store.stop()


def test_a_fenced_store_back_from_an_outage_is_refused_a_lease_taken_meanwhile(
    server: RestartableServer,
) -> None:
    owner = Leases(server.dsn, "fenced", owner="A", ttl=30.0)
    store = PostgresStore.start_link(
        server.dsn,
        namespace="fenced",
        fence=lambda conv: owner.fence(conv.conversation_id),
        connect_timeout=OUTAGE_WAIT,
    )
    successor: Leases | None = None
    try:
        owner.add(["c", "d"])
        assert owner.claim("c") is not None and owner.claim("d") is not None
        store.add(CONV, [_user("A's")])
        server.stop()
        with pytest.raises(StoreUnavailable, match="try again"):
            store.add(CONV, [_user("during")])
        server.start()
        assert owner.owners() == {"A"}  # the leases' own connection is a new one too
        # While A was cut off its lease on c ran out and B took it; d is still A's.
        successor = Leases(server.dsn, "fenced", owner="B", ttl=30.0)
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("UPDATE fenced.leases SET expires_at = '-infinity' WHERE name = 'c'")
        assert successor.claim("c") is not None
        errors = Trace()
        with pytest.raises(LeaseLost):
            retried(lambda: store.add(CONV, [_user("stale")]), errors)
        assert [m["content"] for m in store.get(CONV)] == ["A's"]
        store.add(Conv("ann", "d"), [_user("still A's")])  # the store itself carries on
        assert store.count(Conv("ann", "d")) == 1
        assert store.alive
    finally:
        store.stop()
        owner.close()
        if successor is not None:
            successor.close()


def test_a_supervised_store_recovers_in_place_without_a_restart(
    server: RestartableServer,
) -> None:
    from otpmem.supervisors import Supervisor

    events = Trace()
    sup = Supervisor.start_link(
        [
            PostgresStore.child_spec(
                server.dsn,
                "pg-outage",
                namespace="supervised",
                connect_timeout=OUTAGE_WAIT,
                listeners=[events],
            )
        ]
    )
    try:
        store = PostgresStoreHandle.named("pg-outage")
        before = store.resolve()
        store.add(CONV, [_user("before")], idempotency_key="k0")
        server.stop()
        with pytest.raises(StoreUnavailable, match="try again"):
            store.add(CONV, [_user("during")], idempotency_key="k1")
        server.start()
        retried(lambda: store.add(CONV, [_user("during")], idempotency_key="k1"), Trace())
        assert [m["content"] for m in store.get(CONV)] == ["before", "during"]
        assert store.resolve() is before and not before.exited.is_set()
        assert events.kinds("exited") == [] and events.kinds("restarted") == []
    finally:
        sup.stop()


class _GaveUp(logging.Handler):
    """Hears psycopg_pool give up a series of reconnection attempts."""

    def __init__(self) -> None:
        super().__init__()
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("reconnection attempt"):
            self.event.set()


def test_a_call_waiting_out_an_outage_is_served_when_the_server_is_back(
    server: RestartableServer,
) -> None:
    # It waits longer than one series of the pool's reconnection attempts lasts: the pool
    # starts another while a call waits, instead of leaving it to time out.
    store = PostgresStore.start_link(server.dsn, namespace="waiting", connect_timeout=15.0)
    gave_up = _GaveUp()
    pool_log = logging.getLogger("psycopg.pool")
    pool_log.addHandler(gave_up)
    outcome = Trace()

    def add() -> None:
        try:
            store.add(CONV, [_user("waited")], idempotency_key="w")
            outcome.append("added")
        except BaseException as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=add)
    try:
        store.add(CONV, [_user("before")])
        server.stop()
        waiting.start()
        assert gave_up.event.wait(WAIT), "the pool never gave up a series"
        assert outcome.items == []  # still waiting for a connection
        server.start()
        assert outcome.wait_for(bool, WAIT) == ["added"]
        assert [m["content"] for m in store.get(CONV)] == ["before", "waited"]
    finally:
        pool_log.removeHandler(gave_up)
        waiting.join(WAIT)
        store.stop()
