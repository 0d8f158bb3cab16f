"""The schedulers under an adversary: kills at every kind of wait, racing calls, timers."""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

from otpmem.actors import (
    SHUTDOWN,
    CallTimeout,
    GenServer,
    Handle,
    Killed,
    NoProcess,
    ServerExited,
    blocking,
    faults,
    live_processes,
    sleep,
    stop_all,
)
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, Trace


class Peer(GenServer):
    """Answers, sleeps, relays or blocks, as told; records what it did after each wait."""

    def init(self, trace: Trace | None = None) -> None:
        self.trace = trace

    def handle_call(self, message: Any) -> Any:
        kind, arg = message
        if kind == "echo":
            return arg
        if kind == "sleep":
            sleep(arg)
        elif kind == "relay":
            target, inner = arg
            if self.trace is not None:
                self.trace(("calling", self.pid))
            result = target.call(inner, timeout=WAIT)
            if self.trace is not None:
                self.trace(("after call", self.pid))
            return result
        elif kind == "blocking":
            if self.trace is not None:
                self.trace(("calling", self.pid))
            result = blocking(self._blocked, arg)
            if self.trace is not None:
                self.trace(("after blocking", self.pid))
            return result
        return kind

    def _blocked(self, release: threading.Event) -> str:
        release.wait(WAIT)
        try:
            self.handle.cast(("late", None))
        except Killed:
            if self.trace is not None:
                self.trace(("blocking work refused", self.pid))
        return "released"

    def terminate(self, reason: Any) -> None:
        if self.trace is not None:
            self.trace(("terminate", self.pid, reason))


def call_in_thread(target: Handle, message: Any) -> tuple[threading.Thread, list[Any]]:
    """Call ``target`` from a new thread; the list gets the answer, or the exit reason."""
    outcome: list[Any] = []

    def call() -> None:
        try:
            outcome.append(target.call(message))
        except ServerExited as exc:
            outcome.append(exc.reason)

    thread = threading.Thread(target=call)
    thread.start()
    return thread, outcome


def test_a_process_killed_while_suspended_in_a_call_dies_at_once() -> None:
    trace = Trace()
    slow, caller = Peer.start(), Peer.start(trace)
    thread, outcome = call_in_thread(caller, ("relay", (slow, ("sleep", 3.0))))
    try:
        # Wait until the caller is suspended in its call to slow.
        process = caller.resolve()
        trace.wait_for(lambda items: ("calling", process.pid) in items)
        faults.kill(caller, grace=WAIT)
        thread.join(WAIT)
        assert outcome == ["killed"]
        assert ("after call", process.pid) not in trace.items  # its handler never resumed
        assert slow.alive
    finally:
        stop_all()


def test_a_process_killed_in_blocking_work_dies_and_the_work_reaches_nothing() -> None:
    trace = Trace()
    peer = Peer.start(trace)
    release = threading.Event()
    thread, outcome = call_in_thread(peer, ("blocking", release))
    try:
        process = peer.resolve()
        trace.wait_for(lambda items: ("calling", process.pid) in items)
        faults.kill(peer, grace=WAIT)
        thread.join(WAIT)
        assert outcome == ["killed"]
        release.set()
        trace.wait_for(lambda items: ("blocking work refused", process.pid) in items)
        assert ("after blocking", process.pid) not in trace.items
    finally:
        release.set()
        stop_all()


def test_a_shutdown_lets_the_call_in_hand_finish_then_runs_terminate() -> None:
    trace = Trace()
    slow, caller = Peer.start(), Peer.start(trace)
    answers: list[Any] = []
    thread = threading.Thread(
        target=lambda: answers.append(caller.call(("relay", (slow, ("sleep", 0.05)))))
    )
    thread.start()
    try:
        process = caller.resolve()
        trace.wait_for(lambda items: ("calling", process.pid) in items)
        assert process.request_shutdown(SHUTDOWN)
        thread.join(WAIT)
        assert answers == ["sleep"]
        assert caller.wait(WAIT) == SHUTDOWN
        items = trace.items
        assert items.index(("after call", process.pid)) < items.index(
            ("terminate", process.pid, SHUTDOWN)
        )
    finally:
        stop_all()


def test_timers_fire_in_deadline_order_across_processes() -> None:
    order: list[float] = []
    lock = threading.Lock()

    class Napper(GenServer):
        def handle_cast(self, seconds: float) -> None:
            sleep(seconds)
            with lock:
                order.append(seconds)

        def handle_call(self, message: Any) -> Any:
            return message  # queued behind the cast: answered once the nap is over

    nappers = [Napper.start() for _ in range(6)]
    try:
        delays = [0.06, 0.01, 0.05, 0.02, 0.04, 0.03]
        for napper, delay in zip(nappers, delays, strict=True):
            napper.cast(delay)
        assert [napper.call("synced") for napper in nappers] == ["synced"] * len(nappers)
        assert order == sorted(delays)
    finally:
        stop_all()


def test_calls_among_processes_race_random_kills_without_hanging() -> None:
    """Threads call peers that relay to other peers while peers are killed at random.
    Every call ends with an answer or a documented error well within its timeout; the
    supervisor ends with all its children running and nothing is left behind."""
    n = 30
    sup = Supervisor.start_link(
        [ChildSpec(i, start=lambda: Peer.start_link()) for i in range(n)],
        intensity=10_000,
        period=1.0,
    )
    stop = threading.Event()
    unexpected: list[BaseException] = []
    answered = [0]

    def caller(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            children = [c.handle for c in sup.which_children() if c.handle is not None]
            if len(children) < 2:
                continue
            # Relays go up the children's order only: two relays the other way round would
            # wait on each other (the call deadlock OTP has too) until both time out.
            low, high = sorted(rng.sample(range(len(children)), 2))
            first, second = children[low], children[high]
            message = ("relay", (second, ("echo", seed))) if rng.random() < 0.5 else ("echo", 1)
            try:
                first.call(message, timeout=WAIT)
                answered[0] += 1
            except (NoProcess, ServerExited):
                pass
            except CallTimeout as exc:  # a hang: never expected
                unexpected.append(exc)
            except BaseException as exc:
                unexpected.append(exc)

    def killer() -> None:
        rng = random.Random(99)
        for _ in range(150):
            children = [c.handle for c in sup.which_children() if c.handle is not None]
            if children:
                with contextlib.suppress(NoProcess):
                    faults.kill(rng.choice(children))
        stop.set()

    threads = [threading.Thread(target=caller, args=(s,)) for s in range(6)]
    threads.append(threading.Thread(target=killer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 6)
    try:
        assert not any(t.is_alive() for t in threads)
        assert unexpected == []
        assert answered[0] > 0
        sup.sync()
        assert sum(1 for c in sup.which_children() if c.handle is not None) == n
    finally:
        sup.stop()
    assert [p for p in live_processes() if not p.dead] == []
