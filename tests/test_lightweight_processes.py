"""Processes are not threads: they run on a few schedulers and suspend where they wait."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest

from otpmem.actors import (
    Event,
    GenServer,
    Handle,
    HogReport,
    add_hog_listener,
    blocking,
    remove_hog_listener,
    sleep,
    stop_all,
)
from otpmem.actors import _scheduler as scheduler
from tests.support import WAIT


class Chain(GenServer):
    """Answers a call by calling the next link: a chain of synchronous calls."""

    def init(self, next_: Handle | None) -> None:
        self.next = next_

    def handle_call(self, message: Any) -> Any:
        if message == "thread":
            return threading.current_thread().name
        if self.next is None:
            return 1
        return self.next.call(message, timeout=WAIT) + 1


def test_thousands_of_processes_start_no_threads() -> None:
    scheduler.schedulers()
    threads = threading.active_count()
    servers = [Chain.start(None) for _ in range(5000)]
    try:
        assert threading.active_count() == threads
        assert all(s.call("thread").startswith("otpmem-scheduler-") for s in servers[:50])
    finally:
        stop_all()


def test_a_chain_of_calls_suspends_callers_instead_of_blocking_schedulers() -> None:
    """500 nested synchronous calls on two scheduler threads: with blocking callers every
    scheduler would wait on a callee that can never run."""
    head: Handle | None = None
    for _ in range(500):
        head = Chain.start(head)
    assert head is not None
    try:
        assert head.call("depth", timeout=WAIT) == 500
    finally:
        stop_all()


class Sleeper(GenServer):
    def handle_call(self, message: Any) -> Any:
        kind, arg = message
        if kind == "sleep":
            sleep(arg)
        elif kind == "blocking":
            return blocking(arg.wait, WAIT)
        elif kind == "spin":
            deadline = scheduler.monotonic() + arg
            while scheduler.monotonic() < deadline:  # holds its scheduler, on purpose
                pass
        return kind


def test_blocking_work_and_sleep_leave_the_scheduler_free() -> None:
    held = threading.Event()
    sleepers = [Sleeper.start() for _ in range(8)]
    try:
        results: list[Any] = []
        callers = [
            threading.Thread(target=lambda s=s: results.append(s.call(("blocking", held))))
            for s in sleepers[:4]
        ]
        for caller in callers:
            caller.start()
        # Four processes wait on the pool; the others still answer at once, as does sleep.
        assert [s.call(("sleep", 0.01)) for s in sleepers[4:]] == ["sleep"] * 4
        held.set()
        for caller in callers:
            caller.join(WAIT)
        assert results == [True] * 4
    finally:
        stop_all()


def test_a_hog_is_reported_and_the_queue_behind_it_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler, "HOG_THRESHOLD", 0.05)
    reports: list[HogReport] = []
    reported = threading.Event()

    def listener(report: HogReport) -> None:
        reports.append(report)
        reported.set()

    add_hog_listener(listener)
    hog = Sleeper.start()
    try:
        caller = threading.Thread(target=lambda: hog.call(("spin", 0.5)))
        caller.start()
        assert reported.wait(WAIT)
        assert reports[0].process is hog.resolve()
        assert reports[0].seconds >= 0.05
        # Whatever wakes now runs elsewhere: a fresh process answers while the hog spins.
        other = Sleeper.start()
        assert other.call(("sleep", 0.0)) == "sleep"
        caller.join(WAIT)
    finally:
        remove_hog_listener(listener)
        stop_all()


class Hot(GenServer):
    def init(self) -> None:
        self.handled = 0

    def handle_cast(self, message: Any) -> Any:
        self.handled += 1
        for _ in range(200):  # a little real work per message
            pass

    def handle_call(self, message: Any) -> Any:
        return self.handled


class Driver(GenServer):
    """Floods ``hot`` with casts, then calls ``probe``: both wake on the driver's scheduler."""

    def handle_call(self, message: Any) -> Any:
        hot, probe, n = message
        for _ in range(n):
            hot.cast("work")
        probe.call("pid", timeout=WAIT)
        return hot.resolve().mailbox.__len__()


class Probe(GenServer):
    def handle_call(self, message: Any) -> Any:
        return self.pid


def test_a_busy_process_yields_its_scheduler_after_a_batch() -> None:
    hot, probe, driver = Hot.start(), Probe.start(), Driver.start()
    try:
        queued_when_probe_answered = driver.call((hot, probe, 20_000), timeout=WAIT * 4)
        assert queued_when_probe_answered > 10_000  # the probe did not wait for the flood
        assert hot.call("count", timeout=WAIT * 4) == 20_000
    finally:
        stop_all()


def test_runtime_event_wakes_processes_and_threads() -> None:
    event = Event()

    class Waiter(GenServer):
        def handle_call(self, message: Any) -> Any:
            return event.wait(WAIT)

    waiters = [Waiter.start() for _ in range(3)]
    try:
        results: list[Any] = []
        callers = [
            threading.Thread(target=lambda w=w: results.append(w.call("w"))) for w in waiters
        ]
        thread_result: list[bool] = []
        plain = threading.Thread(target=lambda: thread_result.append(event.wait(WAIT)))
        for t in [*callers, plain]:
            t.start()
        event.set()
        for t in [*callers, plain]:
            t.join(WAIT)
        assert results == [True] * 3
        assert thread_result == [True]
        assert Event().wait(0.01) is False
    finally:
        stop_all()


class Starter(GenServer):
    """An init that waits (a call, a sleep) and spawns a child: all on its starter's thread."""

    def init(self, peer: Handle) -> None:
        self.init_thread = threading.current_thread().name
        self.peer_answer = peer.call("thread", timeout=WAIT)
        sleep(0.001)
        self.child = Chain.start_link(None)

    def handle_call(self, message: Any) -> Any:
        return (self.init_thread, threading.current_thread().name, self.peer_answer)


def test_a_start_from_a_plain_thread_runs_init_there_then_moves_to_the_schedulers() -> None:
    """No thread hand-off for init (the spawn's main cost); afterwards the process is an
    ordinary one on the shared schedulers, and so is the child its init started."""
    peer = Chain.start(None)
    try:
        starter = Starter.start(peer)
        init_thread, later_thread, peer_thread = starter.call("where")
        assert init_thread == threading.current_thread().name
        assert later_thread.startswith("otpmem-scheduler-")
        assert peer_thread.startswith("otpmem-scheduler-")
        child = starter.resolve().server.child
        assert child.call("thread").startswith("otpmem-scheduler-")
        assert starter.resolve().home is not None and not starter.resolve().home.guest
    finally:
        stop_all()


class Answer:
    """A reply whose life a weak reference can watch."""


class Answerer(GenServer):
    def handle_call(self, message: Any) -> Any:
        return Answer()


class Caller(GenServer):
    """Calls ``answerer`` n times with a long timeout; answers weak references to what it got."""

    def handle_call(self, message: Any) -> Any:
        answerer, n = message
        return [weakref.ref(answerer.call("go", timeout=60.0)) for _ in range(n)]


def test_an_answered_call_leaves_nothing_behind_on_its_schedulers_timers() -> None:
    answerer, caller = Answerer.start(), Caller.start()
    try:
        answers = caller.call((answerer, 500), timeout=WAIT)
        gc.collect()
        # Each call's 60 s timeout was a timer: kept until its deadline, it would hold the
        # reply slot and the answer in it for a minute after the call returned.
        assert sum(ref() is not None for ref in answers) == 0
        live = sum(t[2] is not None for s in scheduler.schedulers() for t in s.timers)
        assert live == 0
        assert max(len(s.timers) for s in scheduler.schedulers()) <= 2 * 64
    finally:
        stop_all()


class Idle(GenServer):
    pass


def test_an_idle_process_keeps_few_objects_for_the_cyclic_gc() -> None:
    """A million idle agents are a million of these: each object a process keeps after
    its start is walked by every full collection (a spent start slot, a lock and a
    counter with it, was kept for the process's whole life)."""
    Idle.start()  # the schedulers and their runners exist before counting
    gc.collect()
    before = len(gc.get_objects())
    started = [Idle.start() for _ in range(1_000)]
    try:
        gc.collect()
        assert (len(gc.get_objects()) - before) / len(started) <= 14
        assert all(h.resolve().ready.is_set() for h in started)
    finally:
        stop_all()
