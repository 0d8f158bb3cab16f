"""Bursts of store crashes under the application's default intensities.

The soak: 100 kills of the default store under 16 writers. Every ``add`` that returned is
read back afterwards, in memory and on LevelDB, however many times the store's supervisor
gave up on the way, and the tree is alive at the end. Its figures (the README's durability
section quotes them) are printed and recorded as test properties. A store that cannot start
again still brings the application down: the budgets absorb bursts, not crash loops.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.actors import CallTimeout, NoProcess, ServerExited, faults, whereis
from otpmem.llm import ScriptedModel
from otpmem.stores import DEFAULT_STORE_NAME, StoreError
from otpmem.supervisors import SupervisorHandle
from tests.support import WAIT, Trace

KILLS = 100
WRITERS = 16
RETRYABLE = (NoProcess, ServerExited, CallTimeout, StoreError)
"""What a writer may see while the store restarts: the documented errors, all retried."""


@pytest.fixture
def no_app() -> Iterator[None]:
    assert whereis("otpmem") is None and whereis(DEFAULT_STORE_NAME) is None
    yield
    assert whereis("otpmem") is None


def kill_store_and_wait_for_restart(root: SupervisorHandle) -> None:
    """Kill the store; return once it runs again, restarted by its supervisor or the root."""
    store = whereis(DEFAULT_STORE_NAME)
    assert store is not None
    faults.kill(store)
    root.sync_tree()


class Writers:
    """Threads that add numbered messages, one conversation each, retrying what failed."""

    def __init__(self, n: int) -> None:
        self.acked: list[list[str]] = [[] for _ in range(n)]
        self.errors: Counter[str] = Counter()
        self.failures: list[BaseException] = []
        self.progress = threading.Condition()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(w,)) for w in range(n)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(WAIT * 2)

    def total(self) -> int:
        return sum(len(a) for a in self.acked)

    def wait_past(self, count: int) -> None:
        """Block until more than ``count`` adds were acknowledged in all."""
        with self.progress:
            assert self.progress.wait_for(lambda: self.total() > count or self.failures, WAIT)
        assert not self.failures, self.failures

    def _write(self, w: int) -> None:
        store = otpmem.default_store()
        seq = 0
        try:
            while not self.stop.is_set():
                text = f"{w}:{seq}"
                try:
                    store.add(f"soak-{w}", [{"role": "user", "content": text}], timeout=WAIT)
                except RETRYABLE as exc:
                    with self.progress:
                        self.errors[type(exc).__name__] += 1
                    self.stop.wait(0.001)  # pacing, not synchronisation: let the restart run
                    continue
                with self.progress:
                    self.acked[w].append(text)
                    self.progress.notify_all()
                seq += 1
        except BaseException as exc:  # pragma: no cover - reported by wait_past
            with self.progress:
                self.failures.append(exc)
                self.progress.notify_all()


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "leveldb"])
def test_100_store_kills_under_16_writers_lose_no_acknowledged_message_at_the_defaults(
    durable: bool,
    tmp_path: Path,
    no_app: None,
    record_property: Callable[[str, Any], None],
) -> None:
    events = Trace()
    started = time.monotonic()
    with otpmem.running(data_dir=tmp_path if durable else None) as root:
        root.subscribe(events)
        agents = root.child("agents")
        with Writers(WRITERS) as writers:
            for _ in range(KILLS):
                # Every incarnation takes writes: WRITERS more acknowledged adds per kill.
                writers.wait_past(writers.total() + WRITERS - 1)
                kill_store_and_wait_for_restart(root)
            writers.wait_past(writers.total() + WRITERS - 1)
        assert not writers.failures, writers.failures
        elapsed = time.monotonic() - started
        store = otpmem.default_store()
        lost = 0
        for w, acked in enumerate(writers.acked):
            stored = list(dict.fromkeys(m["content"] for m in store.get(f"soak-{w}")))
            lost += len(set(acked) - set(stored))
            # At least once: the last write, cut by the stop, may have landed unacknowledged.
            assert stored[: len(acked)] == acked and len(stored) - len(acked) <= 1, w
        escalations = sum(1 for e in events.kinds("restarted") if e.child_id == "default_store")
        figures = {
            "backend": "leveldb" if durable else "memory",
            "kills": KILLS,
            "writers": WRITERS,
            "acked": writers.total(),
            "lost": lost,
            "store_supervisor_gave_up": escalations,
            "writer_errors_retried": dict(writers.errors),
            "seconds": round(elapsed, 2),
        }
        print(f"soak: {figures}")
        for key, value in figures.items():
            record_property(key, value)
        assert lost == 0
        assert root.alive and not events.kinds("max_intensity")
        assert root.child("agents") == agents and store.alive


def test_the_store_budget_is_settable_and_its_exhaustion_loses_nothing(no_app: None) -> None:
    events = Trace()
    with otpmem.running(store_intensity=0) as root:
        root.subscribe(events)
        store = otpmem.default_store()
        store.add("c", [{"role": "user", "content": "acknowledged"}])
        kill_store_and_wait_for_restart(root)  # one crash is one too many for the store's sup
        assert [e.child_id for e in events.kinds("restarted")] == ["default_store"]
        assert store.call(("adopted",)) is True
        assert store.get("c") == [{"role": "user", "content": "acknowledged"}]


def test_a_store_that_can_never_start_again_still_brings_the_application_down(
    tmp_path: Path, no_app: None
) -> None:
    events = Trace()
    data = tmp_path / "data"
    root = otpmem.start(data_dir=data)
    root.subscribe(events)
    # The running store keeps its open directory; every restart finds a file in its place.
    data.rename(tmp_path / "moved")
    data.write_text("not a directory")
    faults.kill(whereis(DEFAULT_STORE_NAME))  # type: ignore[arg-type]
    assert root.wait(WAIT) == "shutdown"
    assert events.kinds("max_intensity")
    assert whereis(DEFAULT_STORE_NAME) is None


def test_listeners_hear_every_supervisor_of_the_tree_across_its_restarts(no_app: None) -> None:
    events = Trace()
    with otpmem.running(store_intensity=0, listeners=[events]) as root:
        for _ in range(2):  # the second kill reaches the store's restarted supervisor
            kill_store_and_wait_for_restart(root)
        agent = otpmem.start_agent(llm=ScriptedModel(["ok"]), memory=False)
        faults.kill(agent)
        root.sync_tree()
    by = Counter((e.supervisor, e.kind, e.child_id) for e in events.items)
    assert by[("otpmem", "restarted", "default_store")] == 2
    assert sum(n for (_, kind, child), n in by.items() if kind == "max_intensity") == 2
    assert by[("otpmem.agents", "restarted", None)] == 1
