"""Dead processes are released: their servers, greenlets and threads go, however they died.

A long run kills and restarts processes by the thousand; anything that keeps a dead one
reachable (a runner's stack, a dedicated thread's idle runner, a plain thread's guest
scheduler) grows the process for good. Counted with gc, after every exit was waited on.
"""

from __future__ import annotations

import gc
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
from greenlet import greenlet

from otpmem.actors import Event, GenServer, faults
from otpmem.actors.faults import FaultPlan
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorHandle
from tests.support import WAIT

ROUNDS = 12
WORKERS = ("killed", "crashed", "planned")


@pytest.fixture(autouse=True)
def crash_logs_not_kept() -> Iterator[None]:
    """pytest keeps a test's log records, and a crash's record holds its traceback, and
    through it the dead process: otpmem makes no records in these tests."""
    logger = logging.getLogger("otpmem")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    yield
    logger.setLevel(level)


class Parker(GenServer):
    """Parks on a cast (its runner suspends) until the gate opens; records itself weakly."""

    def init(self, servers: list[weakref.ref[Any]]) -> None:
        servers.append(weakref.ref(self))

    def handle_cast(self, message: Any) -> None:
        parked, gate = message
        parked.set()
        gate.wait(WAIT)

    def handle_call(self, message: Any) -> Any:
        return message


def greenlets() -> tuple[int, int]:
    """(greenlet objects alive, of them dead), after a full collection."""
    gc.collect()
    found = [o for o in gc.get_objects() if isinstance(o, greenlet)]
    return len(found), sum(1 for g in found if g.dead)


def join_dedicated_threads(before: set[threading.Thread]) -> None:
    """Wait until every dedicated scheduler thread started since ``before`` has ended."""
    for thread in threading.enumerate():
        if thread not in before and thread.name.startswith("otpmem-dedicated-"):
            thread.join(WAIT)
            assert not thread.is_alive(), f"{thread.name} did not end"


def fill_runner_pools() -> None:
    """Park many processes at once, then let them go: every scheduler's pool of idle
    runners is then full, so later rounds cannot grow it and counts compare exactly."""
    gate = Event()
    servers: list[weakref.ref[Any]] = []
    parkers = [Parker.start(servers) for _ in range(200)]
    parked = [threading.Event() for _ in parkers]
    for parker, flag in zip(parkers, parked, strict=True):
        parker.cast((flag, gate))
    assert all(flag.wait(WAIT) for flag in parked)
    gate.set()
    for parker in parkers:
        parker.stop(timeout=WAIT)


def park(handle: Any, gate: Event) -> None:
    """Make ``handle``'s process suspend in a wait, and return once it does."""
    parked = threading.Event()
    handle.cast((parked, gate))
    assert parked.wait(WAIT), f"{handle} did not park"


def one_round(servers: list[weakref.ref[Any]]) -> None:
    """A supervisor (a dedicated thread) whose workers are killed while parked, crashed
    and crashed by a fault plan, each restarted, then the whole tree stopped."""
    before = set(threading.enumerate())
    specs = [
        ChildSpec(kind, start=lambda: Parker.start_link(servers), shutdown="brutal_kill")
        for kind in WORKERS
    ]
    sup: SupervisorHandle = Supervisor.start(specs, intensity=100, period=1.0)
    try:
        gate = Event()  # never opened: the kill or the crash ends each wait
        for kind in WORKERS:
            child = sup.child(kind)
            assert child is not None
            if kind == "killed":
                park(child, gate)
                faults.kill(child)
            elif kind == "crashed":
                faults.crash(child)
            else:
                faults.inject(child, FaultPlan().crash_on_message(1))
                child.cast("boom")
                assert child.wait(WAIT) is not None
            sup.sync()  # queued behind the exit: the restart is done
            restarted = sup.child(kind)
            assert restarted is not None and restarted != child
            assert restarted.call("up", timeout=WAIT) == "up"
    finally:
        sup.stop(timeout=WAIT)
    join_dedicated_threads(before)


def test_killed_and_crashed_processes_release_their_servers_and_greenlets() -> None:
    fill_runner_pools()
    warm: list[weakref.ref[Any]] = []
    one_round(warm)  # imports, caches, the first dedicated thread
    del warm
    baseline, dead_before = greenlets()
    servers: list[weakref.ref[Any]] = []
    for _ in range(ROUNDS):
        one_round(servers)
    count, dead = greenlets()
    assert len(servers) == ROUNDS * 2 * len(WORKERS)  # each worker started, then restarted
    alive = [ref() for ref in servers if ref() is not None]
    assert alive == [], f"{len(alive)} servers of dead processes are still reachable"
    assert dead == dead_before == 0, f"{dead} dead greenlets are still reachable"
    assert count == baseline, f"greenlets: {baseline} before {ROUNDS} rounds, {count} after"


def test_threads_that_spawned_and_ended_leave_no_greenlets_behind() -> None:
    """A plain thread that starts a process runs its init itself, on runners of its own:
    they end with the thread instead of staying suspended for good."""
    servers: list[weakref.ref[Any]] = []

    def spawn_and_stop() -> None:
        server = Parker.start(servers)
        assert server.call("up", timeout=WAIT) == "up"
        server.stop(timeout=WAIT)

    fill_runner_pools()
    baseline, _ = greenlets()
    for _ in range(20):
        thread = threading.Thread(target=spawn_and_stop, name="spawner")
        thread.start()
        thread.join(WAIT)
        assert not thread.is_alive()
    count, dead = greenlets()
    assert len(servers) == 20 and all(ref() is None for ref in servers)
    assert dead == 0, f"{dead} dead greenlets of ended threads are still reachable"
    assert count == baseline, f"greenlets: {baseline} before, {count} after 20 threads"
