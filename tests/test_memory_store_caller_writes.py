"""MemoryStore's adds on their callers' threads: writers still take turns, a dead store
does nothing more, and what would have crashed the server still crashes it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otpmem.actors import GenServer, NoProcess, ServerExited
from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from otpmem.supervisors import Supervisor
from tests.support import adds_across_a_kill, kill_or_crash, run_threads

WAIT = 30.0


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_writers_on_many_threads_never_interleave_and_clear_takes_its_turn() -> None:
    store = MemoryStore.start_link()
    conv = Conv("ann", "shared")
    cleared = threading.Event()
    try:

        def writer(t: int) -> None:
            if t == 0:
                for _ in range(20):
                    store.clear(conv)  # a server-side write, between the callers' ones
                cleared.set()
                return
            for i in range(300):
                store.add(conv, [msg(f"{t}:{i}:a"), msg(f"{t}:{i}:b")])

        assert run_threads(9, writer) == [] and cleared.is_set()
        contents = [m["content"] for m in store.get(conv)]
        assert len(contents) % 2 == 0
        for a, b in zip(contents[::2], contents[1::2], strict=True):
            assert a.endswith(":a") and b == a[:-1] + "b"  # every batch whole
        assert store.count(conv) == len(contents)
        assert store.conversations("ann") == ([conv] if contents else [])
    finally:
        store.stop()


def test_after_a_kill_no_add_lands_and_every_acknowledged_one_is_kept() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("killed-mid-write")])
    store = MemoryStore.named("killed-mid-write")
    try:
        acked, refused = adds_across_a_kill(store, sup, "killed-mid-write")
        assert len(refused) == 6  # each writer was turned away by the dead incarnation
        for t in range(6):
            stored = [m["content"] for m in store.get(Conv("ann", f"w{t}"))]
            assert stored == acked[t]  # all acknowledged, and nothing after the kill
    finally:
        sup.stop()


def test_an_add_from_a_process_runs_on_its_thread() -> None:
    class Writer(GenServer):
        def handle_call(self, message: Any) -> Any:
            store, n = message
            for i in range(n):
                store.add("from-a-process", [msg(str(i))])
            return store.count("from-a-process")

    store = MemoryStore.start_link()
    writer = Writer.start_link()
    try:
        assert writer.call((store, 50), timeout=WAIT) == 50
    finally:
        writer.stop()
        store.stop()


def test_what_would_have_crashed_the_server_crashes_it_and_it_restarts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("crashing-write")])
    store = MemoryStore.named("crashing-write")
    try:
        store.add("c", [msg("kept")])
        first = store.resolve()
        original = MemoryStore._append

        def broken(self: MemoryStore, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("a bug in the write")

        monkeypatch.setattr(MemoryStore, "_append", broken)
        with pytest.raises(ServerExited, match="a bug in the write"):
            store.add("c", [msg("lost with the bug")])
        monkeypatch.setattr(MemoryStore, "_append", original)
        assert first.exited.wait(WAIT)  # the server died of it
        pair = sup.child("crashing-write")
        assert pair is not None
        pair.sync()
        store.add("c", [msg("after the restart")])
        assert [m["content"] for m in store.get("c")] == ["kept", "after the restart"]
    finally:
        sup.stop()


def test_a_bad_batch_is_refused_and_the_store_lives_on() -> None:
    store = MemoryStore.start_link()
    try:
        with pytest.raises(ValueError):
            store.call(("add", "c", "not a batch"))
        with pytest.raises(ValueError):
            store.call(("import", "not a list"))
        store.call(("add", "c", [msg("raw call")]))
        assert store.get("c") == [msg("raw call")] and store.alive
    finally:
        store.stop()


def test_a_memory_store_handle_named_over_another_store_still_adds_by_call(
    tmp_path: Any,
) -> None:
    from otpmem.stores import LevelDBStore

    other = LevelDBStore.start_link(tmp_path / "db", name="not-a-memory-store")
    try:
        handle = MemoryStore.named("not-a-memory-store")  # a handle's class is not its store's
        handle.add("c", [msg("by call")])
        handle.call(("add", "c", [msg("raw")]))
        assert other.get("c") == [msg("by call"), msg("raw")]
    finally:
        other.stop()


def test_under_a_plain_childspec_kills_and_crashes_lose_and_repeat_no_keyed_add() -> None:
    from otpmem.actors import CallTimeout
    from otpmem.supervisors import ChildSpec

    spec = ChildSpec("plain-memory", start=lambda: MemoryStore.start_link(name="plain-memory"))
    sup = Supervisor.start_link([spec], intensity=1000, period=1.0)
    store = MemoryStore.named("plain-memory")
    stop = threading.Event()
    acked = dict.fromkeys(range(4), 0)

    def writer(t: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                store.add(Conv("u", f"w{t}"), [msg(str(i))], idempotency_key=str(i))
            except (NoProcess, ServerExited, CallTimeout):
                continue  # restarting: the same add again, under its key
            i += 1
            acked[t] = i

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    try:
        for thread in threads:
            thread.start()
        for k in range(20):
            kill_or_crash(store, k)
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT)
    try:
        sup.sync()  # the last fault's restart is done: the store is there to read
        for t in range(4):
            stored = [m["content"] for m in store.get(Conv("u", f"w{t}"))]
            assert stored == [str(i) for i in range(acked[t])]  # the heir kept all, once
    finally:
        sup.stop()
