"""A crashed or killed LevelDBStore parks its open database for its next incarnation: the
restart adopts it (no close waiting out a compaction, no log replay), keeps every
acknowledged message, and a database nobody adopts is closed soon after; a stop, a
shutdown or a failed write closes it at once."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from otpmem.actors import NoProcess, ServerExited, faults
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle, StoreUnavailable
from otpmem.supervisors import ChildSpec, Supervisor

WAIT = 30.0
CONV = Conv("ann", "c")
RETRYABLE = (NoProcess, ServerExited, StoreUnavailable)


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def restarted(store: LevelDBStoreHandle, before: object) -> Any:
    """The server of the incarnation after ``before`` (its first add acknowledged)."""
    deadline = threading.Event()
    for _ in range(int(WAIT / 0.005)):
        try:
            process = store.resolve()
            if process is not before and process.wait_ready(WAIT):
                return process.server
        except NoProcess:
            pass
        deadline.wait(0.005)
    raise AssertionError("the store was not restarted")


def opens_elsewhere(path: Path) -> subprocess.CompletedProcess[str]:
    """Open the directory from another OS process, at once (no waiting for the lock)."""
    code = f"import plyvel; plyvel.DB({str(path)!r}).close()"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT
    )


def test_a_store_killed_under_a_plain_childspec_restarts_on_its_open_database(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    spec = ChildSpec("store", start=lambda: LevelDBStore.start_link(path, name="parked-plain"))
    sup = Supervisor.start_link([spec], intensity=100, period=1.0)
    store = LevelDBStore.named("parked-plain")
    try:
        for i in range(50):
            store.add(CONV, [msg(str(i))], idempotency_key=f"k{i}")
        first = store.resolve()
        db = first.server.db
        for kill in range(5):
            faults.kill(store)
            server = restarted(store, first)
            assert server.db is db  # adopted, not closed and reopened
            first = store.resolve()
            store.add(CONV, [msg(f"after {kill}")])
        store.add(CONV, [msg("0")], idempotency_key="k0")  # the keys survived: stored once
        assert [m["content"] for m in store.get(CONV)] == [
            *map(str, range(50)),
            *(f"after {k}" for k in range(5)),
        ]
    finally:
        sup.stop()
    assert opens_elsewhere(path).returncode == 0  # the shutdown closed it


def test_a_crashed_store_is_adopted_too_and_a_failed_write_reopens(tmp_path: Path) -> None:
    sup = Supervisor.start_link([LevelDBStore.child_spec(tmp_path / "db", "parked-crash")])
    store = LevelDBStore.named("parked-crash")
    try:
        store.add(CONV, [msg("kept")])
        first = store.resolve()
        db = first.server.db
        faults.crash(store)
        server = restarted(store, first)
        assert server.db is db

        # LevelDB keeps failing writes once one failed, until it is reopened.
        second = store.resolve()
        store.send(("write_failed", OSError("No space left on device")))
        server = restarted(store, second)
        assert server.db is not db
        assert store.get(CONV) == [msg("kept")]
    finally:
        sup.stop()


def test_a_killed_store_nobody_restarts_lets_its_directory_go(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    store.add(CONV, [msg("kept")])
    faults.kill(store)
    parked = [t for t in threading.enumerate() if t.name.startswith("otpmem-leveldb-parked-")]
    assert len(parked) == 1
    parked[0].join(WAIT)  # its grace ran out: closed

    opened = opens_elsewhere(path)

    assert opened.returncode == 0, opened.stderr
    again = LevelDBStore.start_link(path)
    try:
        assert again.get(CONV) == [msg("kept")]
    finally:
        again.stop()


def test_a_stopped_store_lets_another_process_open_its_directory_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    store.add(CONV, [msg("kept")])
    store.stop()

    opened = opens_elsewhere(path)

    assert opened.returncode == 0, opened.stderr
    assert not [t for t in threading.enumerate() if t.name.startswith("otpmem-leveldb-parked-")]
