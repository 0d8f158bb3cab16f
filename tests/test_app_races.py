"""Races between the application's restarts and its users, pinned."""

from __future__ import annotations

import threading
from pathlib import Path

import otpmem
from otpmem.actors import InitFailed, NoProcess, faults, whereis
from otpmem.actors.faults import FaultPlan
from otpmem.stores import DEFAULT_STORE_NAME, LevelDBStore, LevelDBStoreHandle
from otpmem.supervisors import SupervisorHandle
from tests.support import WAIT


def test_default_store_during_a_restart_never_starts_a_second_store(tmp_path: Path) -> None:
    with otpmem.running(tmp_path / "data") as root:
        store_sup = root.child("default_store")
        assert isinstance(store_sup, SupervisorHandle)
        for _ in range(10):
            faults.kill(otpmem.default_store())
            # The name is free until the supervisor has restarted the store: asking for the
            # default store now must give a handle that waits, not an unsupervised store.
            handle = otpmem.default_store()
            assert isinstance(handle, LevelDBStoreHandle)
            store_sup.sync()
            assert isinstance(whereis(DEFAULT_STORE_NAME), LevelDBStoreHandle)


def test_a_reader_waiting_for_init_gives_up_when_the_store_dies_starting(tmp_path: Path) -> None:
    release = threading.Event()
    plan = FaultPlan().slow_init(WAIT * 10)
    errors: list[BaseException] = []
    start_errors: list[BaseException] = []

    def start() -> None:
        try:
            LevelDBStore.start_link(tmp_path / "db", name="slow-store", faults=plan)
        except InitFailed as exc:
            start_errors.append(exc)

    starter = threading.Thread(target=start)
    starter.start()
    store = LevelDBStore.named("slow-store")

    def reader() -> None:
        release.set()
        try:
            store.get("c")
        except NoProcess as exc:
            errors.append(exc)

    # Wait until the slow store holds its name, then read and kill it mid-init.
    for _ in range(1000):
        if whereis("slow-store") is not None:
            break
        release.wait(0.005)
    thread = threading.Thread(target=reader)
    thread.start()
    release.wait(WAIT)
    faults.kill(whereis("slow-store"))  # type: ignore[arg-type]
    thread.join(WAIT)  # far below the 30 s a reader would wait for a store that lives
    starter.join(WAIT)
    assert not thread.is_alive()
    assert len(errors) == 1
    assert len(start_errors) == 1  # the starter heard of the failed init
