"""PostgresStore across processes: one writer per conversation between OS processes, no
acknowledged message lost to a SIGKILL or a restarted server, clear errors for bad DSNs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from otpmem.actors import GenServer, HogReport, add_hog_listener, remove_hog_listener
from otpmem.actors import _scheduler as scheduler
from otpmem.messages import Conv
from otpmem.stores import StoreUnavailable
from otpmem.stores.postgres import Leases, PostgresStore, PostgresStoreHandle, redact
from otpmem.supervisors import Supervisor
from tests.support import Trace

WAIT = 60.0
CONV = Conv("ann", "shared")


@pytest.fixture
def store(postgres_dsn: str, pg_namespace: str) -> Iterator[PostgresStoreHandle]:
    handle = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    yield handle
    handle.stop()


def writer_script(dsn: str, namespace: str, writer: int, batches: int, *, kill: bool) -> str:
    """A node: its own store on the shared schema, adding pairs to one conversation."""
    return textwrap.dedent(
        f"""
        import os, signal
        from otpmem.messages import Conv
        from otpmem.stores.postgres import PostgresStore
        store = PostgresStore.start_link({dsn!r}, namespace={namespace!r})
        conv = Conv("ann", "shared")
        for i in range({batches}):
            pair = [{{"role": "user", "content": "{writer}:%d:a" % i}},
                    {{"role": "assistant", "content": "{writer}:%d:b" % i}}]
            store.add(conv, pair, idempotency_key="w{writer}:%d" % i)
            print(i, flush=True)
        if {kill!r}:
            os.kill(os.getpid(), signal.SIGKILL)
        store.stop()
        """
    )


def test_two_processes_writing_one_conversation_never_interleave(
    store: PostgresStoreHandle, postgres_dsn: str, pg_namespace: str
) -> None:
    batches = 60
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                writer_script(postgres_dsn, pg_namespace, w, batches, kill=False),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(2)
    ]
    for node in nodes:
        out, err = node.communicate(timeout=WAIT)
        assert node.returncode == 0, err
        assert len(out.split()) == batches
    stored = store.get(CONV)
    assert store.count(CONV) == len(stored) == 2 * 2 * batches
    for first, second in zip(stored[::2], stored[1::2], strict=True):
        assert first["content"][:-1] == second["content"][:-1], "a batch was interleaved"
    for w in range(2):
        mine = [m["content"] for m in stored[::2] if m["content"].startswith(f"{w}:")]
        assert mine == [f"{w}:{i}:a" for i in range(batches)], "a node's order changed"
    assert store.window(CONV, 4).start == 4 * batches - 4, "sequence numbers have gaps"


def test_a_sigkilled_writer_loses_no_acknowledged_add(
    store: PostgresStoreHandle, postgres_dsn: str, pg_namespace: str
) -> None:
    script = writer_script(postgres_dsn, pg_namespace, 7, 40, kill=True)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT
    )
    assert result.returncode == -9, result.stderr
    acknowledged = len(result.stdout.split())
    assert acknowledged == 40
    stored = [m["content"] for m in store.get(CONV)]
    assert stored[: 2 * acknowledged : 2] == [f"7:{i}:a" for i in range(acknowledged)]
    # The same batches sent again from another node are stored once.
    again = writer_script(postgres_dsn, pg_namespace, 7, 40, kill=False)
    done = subprocess.run([sys.executable, "-c", again], capture_output=True, timeout=WAIT)
    assert done.returncode == 0
    assert store.count(CONV) == 80


def test_a_restarted_server_costs_retryable_errors_and_no_acknowledged_message() -> None:
    import pgserver

    where = tempfile.mkdtemp(prefix="otpmem-test-pg-restart-")
    server = pgserver.get_server(where, cleanup_mode="stop")
    dsn = server.get_uri()
    # Supervised, with every default: the store rides the restart out in place.
    sup = Supervisor.start_link([PostgresStore.child_spec(dsn, "pg-restart", namespace="restart")])
    try:
        store = PostgresStore.named("pg-restart")
        acknowledged, errors = Trace(), Trace()
        stop, back = threading.Event(), threading.Event()

        def write() -> None:
            i = 0
            while not stop.is_set():
                try:
                    store.add(CONV, [{"role": "user", "content": str(i)}], idempotency_key=str(i))
                except Exception as exc:  # retryable: the same add again, once the server is back
                    errors.append(exc)
                    back.wait(WAIT)
                    continue
                acknowledged.append(i)
                i += 1

        writer = threading.Thread(target=write)
        writer.start()
        acknowledged.wait_for(lambda items: len(items) >= 20, WAIT)
        server.cleanup()  # the server stops under the running store
        errors.wait_for(bool, WAIT)
        server = pgserver.get_server(where, cleanup_mode="stop")
        back.set()
        before = len(acknowledged.items)
        acknowledged.wait_for(lambda items: len(items) >= before + 20, WAIT)
        stop.set()
        writer.join(WAIT)
        assert any(isinstance(e, StoreUnavailable) for e in errors.items), errors.items[:3]
        stored = [int(m["content"]) for m in PostgresStore.named("pg-restart").get(CONV)]
        assert stored == sorted(set(stored)), "an add was stored twice"
        assert set(acknowledged.items) <= set(stored), "an acknowledged add was lost"
    finally:
        sup.stop()
        server.cleanup()
        shutil.rmtree(where, ignore_errors=True)


def test_an_unreachable_server_is_named_without_its_password() -> None:
    dsn = "postgresql://app:s3cret@127.0.0.1:9/otpmem?connect_timeout=1"
    with pytest.raises(StoreUnavailable) as caught:
        PostgresStore.start_link(dsn, connect_timeout=1.0)  # the pool's wait: kept short
    assert "127.0.0.1:9" in str(caught.value) and "s3cret" not in str(caught.value)
    assert redact("host=x password=hunter2 user=y") == "host=x password=*** user=y"
    assert redact("postgresql://postgres:@/db?host=/s") == "postgresql://postgres:@/db?host=/s"


def test_a_schema_from_a_newer_otpmem_is_refused(postgres_dsn: str, pg_namespace: str) -> None:
    PostgresStore.start_link(postgres_dsn, namespace=pg_namespace).stop()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {pg_namespace}.schema_version SET version = 99")
    with pytest.raises(StoreUnavailable, match="version 99, made by a newer otpmem"):
        PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)


def test_bad_arguments_are_refused_before_connecting() -> None:
    bad: list[dict[str, Any]] = [
        {"namespace": "Has-Caps"},
        {"namespace": "x" * 70},
        {"pool_size": 0},
        {"connect_timeout": 0},
        {"connect_timeout": float("nan")},
        {"connect_timeout": "10"},
        {"connect_timeout": True},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError):
            PostgresStore.start_link("postgresql://nowhere", **kwargs)
    with pytest.raises(TypeError):
        PostgresStore.start_link(42)  # type: ignore[arg-type]
    # A DSN libpq cannot parse is named as such, its password hidden, before connecting.
    with pytest.raises(ValueError, match='not a PostgreSQL DSN: missing "=" after "port"') as bad:
        PostgresStore.start_link("host=db password=hunter2 port")
    assert "hunter2" not in str(bad.value)
    with pytest.raises(ValueError, match="not a PostgreSQL DSN"):
        Leases("notadsn", "otpmem", owner="n0")


def test_a_database_that_is_not_there_is_named(postgres_dsn: str) -> None:
    # The pool retries it for CONNECT_TIMEOUT and then says only that it timed out.
    missing = re.sub(r"/postgres(\?|$)", r"/no_such_db\1", postgres_dsn)
    assert missing != postgres_dsn
    with pytest.raises(StoreUnavailable, match='database "no_such_db" does not exist'):
        PostgresStore.start_link(missing, start_timeout=WAIT, connect_timeout=1.0)


def test_an_id_postgresql_cannot_hold_is_a_clear_error_and_stores_nothing(
    store: PostgresStoreHandle,
) -> None:
    nul = Conv("ann\x00x", "c")
    with pytest.raises(ValueError, match=r"PostgreSQL cannot store this: .*NUL"):
        store.add(nul, [{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="PostgreSQL cannot store this"):
        store.get(nul)
    assert store.conversations() == []
    # A NUL inside a message is fine: bodies are bytes.
    store.add(CONV, [{"role": "user", "content": "a \x00 b"}])
    assert store.get(CONV) == [{"role": "user", "content": "a \x00 b"}]
    assert store.alive


def read_waits_on_a_lock(dsn: str, timeout: float = WAIT) -> bool:
    """Whether a statement comes to wait on a lock within ``timeout`` s (asked of the
    server every 10 ms: the wait has no event of its own to wait on)."""
    pause = threading.Event()
    with psycopg.connect(dsn, autocommit=True) as watcher:
        for _ in range(int(timeout / 0.01)):
            row = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if row and row[0]:
                return True
            pause.wait(0.01)
    return False


class Reader(GenServer):
    """A process that reads a conversation back, as an agent reads its window."""

    def init(self, store: PostgresStoreHandle) -> None:
        self.store = store

    def handle_call(self, conv: Conv) -> Any:
        return self.store.get(conv)


def test_a_slow_read_from_a_process_leaves_its_scheduler_free(
    store: PostgresStoreHandle,
    postgres_dsn: str,
    pg_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler, "HOG_THRESHOLD", 0.1)
    store.add(CONV, [{"role": "user", "content": "held"}])
    reports: list[HogReport] = []
    hogged = threading.Event()

    def listener(report: HogReport) -> None:
        reports.append(report)
        hogged.set()

    add_hog_listener(listener)
    reader = Reader.start_link(store)
    answers: list[Any] = []
    try:
        with psycopg.connect(postgres_dsn) as holder:
            # A table lock makes the read wait on the server for as long as the test likes.
            holder.execute(f'LOCK TABLE "{pg_namespace}".messages IN ACCESS EXCLUSIVE MODE')
            asking = threading.Thread(target=lambda: answers.append(reader.call(CONV, WAIT)))
            asking.start()
            assert read_waits_on_a_lock(postgres_dsn)
            # A read that held its scheduler for 5 thresholds would have been reported.
            assert not hogged.wait(0.5), reports
            assert answers == []  # still waiting on the server
            holder.rollback()
        asking.join(WAIT)
        assert answers == [[{"role": "user", "content": "held"}]]
    finally:
        remove_hog_listener(listener)
        reader.stop()
