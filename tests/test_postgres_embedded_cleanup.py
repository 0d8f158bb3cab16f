"""An embedded PostgresStore (no DSN, no data_dir) leaves no temporary directory behind: not
after stop(), not after a crash under its supervisor followed by the supervisor's stop, not
after an interpreter that never stopped it exits (issue 33, point 7)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from otpmem.actors import NoProcess, faults
from otpmem.messages import Conv
from otpmem.stores import PostgresStore
from otpmem.supervisors import Supervisor

WAIT = 60.0
CONV = Conv("ann", "c")


def data_directory(store: Any) -> Path:
    """Where the store's embedded server keeps its cluster (the server says)."""
    with store.connection() as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    return Path(row[0])


def test_a_bare_embedded_store_removes_its_directory_on_stop() -> None:
    store = PostgresStore.start_link(start_timeout=WAIT)
    try:
        store.add(CONV, [{"role": "user", "content": "hello"}])
        where = data_directory(store)
        assert (where / "PG_VERSION").is_file() and where.name.startswith("otpmem-pg-")
    finally:
        store.stop()
    assert not where.exists()


def test_a_crash_keeps_the_directory_for_the_restart_and_the_stop_removes_it() -> None:
    sup = Supervisor.start_link([PostgresStore.child_spec(None, "pg-embedded-crash")])
    try:
        store = PostgresStore.named("pg-embedded-crash")
        store.add(CONV, [{"role": "user", "content": "kept"}])
        where = data_directory(store)
        first = store.resolve()
        faults.crash(store)
        again = threading.Event()
        for _ in range(int(WAIT / 0.01)):
            try:
                if store.resolve() is not first:
                    break
            except NoProcess:
                pass
            again.wait(0.01)
        # The restart came back to the same server, holding the conversation.
        assert [m["content"] for m in store.get(CONV)] == ["kept"]
        assert data_directory(store) == where
    finally:
        sup.stop()
    assert not where.exists()


EXITS_WITHOUT_STOP = """
from otpmem.stores import PostgresStore
store = PostgresStore.start_link(start_timeout=60)
with store.connection() as conn:
    print(conn.execute("SHOW data_directory").fetchone()[0], flush=True)
"""


def test_an_interpreter_that_never_stopped_its_store_removes_the_directory_at_exit() -> None:
    done = subprocess.run(
        [sys.executable, "-c", EXITS_WITHOUT_STOP],
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
    )
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.strip())
    assert where.name.startswith("otpmem-pg-")
    assert not where.exists()
