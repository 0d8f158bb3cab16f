"""LevelDBStore under writers: a kill or a crash in the middle of their adds loses no
acknowledged message, lets no add land after it, and never leaves the database open
behind a dead store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors import NoProcess, ServerExited
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, StoreUnavailable
from otpmem.supervisors import Supervisor
from tests.support import adds_across_a_kill, kill_or_crash

WAIT = 30.0
RETRYABLE = (NoProcess, ServerExited, StoreUnavailable)


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_after_a_kill_no_add_lands_and_every_acknowledged_one_is_on_disk(tmp_path: Path) -> None:
    sup = Supervisor.start_link([LevelDBStore.child_spec(tmp_path / "db", "lv-killed")])
    store = LevelDBStore.named("lv-killed")
    try:
        acked, refused = adds_across_a_kill(store, sup, "lv-killed")
        assert len(refused) == 6  # each writer was turned away by the dead incarnation
        for t in range(6):
            stored = [m["content"] for m in store.get(Conv("ann", f"w{t}"))]
            # Every acknowledged add is there; one in flight at the kill may be too.
            assert stored[: len(acked[t])] == acked[t] and len(stored) <= len(acked[t]) + 1
    finally:
        sup.stop()


def test_kills_and_crashes_under_writers_and_readers_lose_nothing_and_the_store_comes_back(
    tmp_path: Path,
) -> None:
    sup = Supervisor.start_link(
        [LevelDBStore.child_spec(tmp_path / "db", "lv-storm", intensity=100, period=1.0)]
    )
    store = LevelDBStore.named("lv-storm")
    pair = sup.child("lv-storm")
    assert pair is not None
    stop = threading.Event()
    acked: dict[int, int] = {t: 0 for t in range(4)}

    def writer(t: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                store.add(
                    Conv("ann", f"w{t}"),
                    [msg(f"{t}:{i}")],
                    idempotency_key=f"{t}:{i}",
                    timeout=WAIT,
                )
            except RETRYABLE:
                stop.wait(0.001)  # pacing while it restarts, then the same add again
                continue
            i += 1
            acked[t] = i

    read_errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                store.get(Conv("ann", "w0"), last=20)
            except RETRYABLE:
                continue
            except BaseException as exc:  # anything else a read hears is a failure
                read_errors.append(exc)
                return

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for n in range(12):
            before = sum(acked.values())
            while sum(acked.values()) < before + 20 and not stop.wait(0.001):
                pass  # let some adds land between faults
            kill_or_crash(store, n)
            pair.sync()
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT)
    try:
        assert sup.alive
        assert read_errors == []
        for t in range(4):
            stored = [m["content"] for m in store.get(Conv("ann", f"w{t}"))]
            assert stored == [f"{t}:{i}" for i in range(acked[t])]  # keys: each once
    finally:
        sup.stop()


def test_a_crash_while_an_add_is_worked_out_crashes_the_store_and_closes_the_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LevelDBStore.start_link(tmp_path / "db")
    store.add("c", [msg("kept")])
    process = store.resolve()

    def broken(self: LevelDBStore, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the add")

    monkeypatch.setattr(LevelDBStore, "_append_ops", broken)
    with pytest.raises(ServerExited, match="a bug in the add"):
        store.add("c", [msg("never")])
    assert process.exited.wait(WAIT)
    again = LevelDBStore.start_link(tmp_path / "db")  # parked behind it: adopted at once
    try:
        assert again.get("c") == [msg("kept")]
    finally:
        again.stop()
