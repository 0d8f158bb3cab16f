"""Restart strategies and intensity: supervisor_SUITE's strategy groups (otp_pykka.md §2).

Ports multiple_restarts, one_for_one[_escalation], one_for_all[_escalation],
one_for_all_other_child_fails_restart, rest_for_one[_escalation],
rest_for_one_other_child_fails_restart, simple_one_for_one[_extra|_escalation|_shutdown|
_restart_ignore], hanging_restart_loop[_rest_for_one|_simple] and count_restarting_children.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

import pytest

from otpmem.actors import IGNORE, GenServer, Handle, Pid, blocking, faults
from otpmem.actors.faults import FaultPlan
from otpmem.supervisors import (
    ChildAlreadyPresent,
    ChildCounts,
    ChildRestarting,
    ChildSpec,
    SimpleOneForOneOnly,
    Supervisor,
    SupervisorEvent,
    SupervisorHandle,
)
from tests.support import WAIT, Trace, Worker, worker_spec


class FakeClock:
    """An injectable supervisor clock that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Flaky:
    """A start function whose child fails ``init`` while ``failing`` is set.

    The analogue of supervisor_SUITE's ``supervisor_deadlock`` ETS flag ``fail_start``. A
    short slow_init paces the restart loop so it does not hog the CPU while the test looks.
    """

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.failing = threading.Event()
        self.plan = FaultPlan().slow_init(0.005).fail_init(times=None)

    def __call__(self) -> Handle:
        plan = self.plan if self.failing.is_set() else None
        handle: Handle = Worker.start_link(self.tag, None, faults=plan)
        return handle

    @property
    def attempts(self) -> int:
        """How many starts have failed so far."""
        return self.plan.count("fail_init")


class RendezvousWorker(Worker):
    """A worker whose ``terminate`` only finishes once all its siblings are terminating too."""

    def init(self, tag: Any = None, trace: Trace | None = None, barrier: Any = None) -> None:
        super().init(tag, trace)
        self.barrier = barrier

    def terminate(self, reason: Any) -> None:
        # A thread barrier blocks its thread: waited on the blocking pool, so siblings that
        # share a scheduler can all reach it.
        blocking(self.barrier.wait, 1.5)
        super().terminate(reason)


class IgnoreOnRestart(GenServer):
    """Starts once per tag; every later incarnation's ``init`` returns IGNORE."""

    def init(self, tag: str, starts: list[str]) -> Any:
        starts.append(tag)
        return IGNORE if starts.count(tag) > 1 else None

    def handle_call(self, message: Any) -> Any:
        return "pong"


def pids(sup: SupervisorHandle) -> dict[Hashable, Pid | None]:
    return {info.id: info.pid for info in sup.which_children()}


def statuses(sup: SupervisorHandle) -> list[str]:
    return [info.status for info in sup.which_children()]


def running(sup: SupervisorHandle, child_id: Hashable) -> Handle:
    child = sup.child(child_id)
    assert child is not None, f"{child_id!r} is not running: {sup.which_children()}"
    return child


def restarted(child_id: Hashable) -> Callable[[list[Any]], bool]:
    """A Trace predicate: ``child_id`` has been restarted."""
    return lambda items: any(
        isinstance(e, SupervisorEvent) and e.kind == "restarted" and e.child_id == child_id
        for e in items
    )


def stop_if_alive(sup: SupervisorHandle) -> None:
    if sup.alive:
        sup.stop()


def shutdown_order(trace: Trace) -> list[Any]:
    """Tags of the workers whose terminate ran with reason shutdown, in order."""
    return [item[1] for item in trace.items if item[0] == "terminate" and item[2] == "shutdown"]


# -- multiple_restarts ---------------------------------------------------------------------


def test_multiple_restarts_spaced_beyond_the_period_never_exceed_intensity() -> None:
    clock = FakeClock()
    sup = Supervisor.start_link(
        [worker_spec("child1", shutdown="brutal_kill")], intensity=1, period=1.0, clock=clock
    )
    try:
        seen = {pids(sup)["child1"]}
        for _ in range(4):
            faults.crash(running(sup, "child1"))
            sup.sync()
            clock.advance(2.1)
            assert sup.alive
            assert statuses(sup) == ["running"]
            seen.add(pids(sup)["child1"])
        assert len(seen) == 5
        sup.terminate_child("child1")
        sup.delete_child("child1")
        assert sup.which_children() == []
    finally:
        stop_if_alive(sup)


def test_multiple_restarts_within_the_period_exceed_intensity() -> None:
    clock = FakeClock()
    sup = Supervisor.start_link(
        [worker_spec("child1", shutdown="brutal_kill")], intensity=1, period=1.0, clock=clock
    )
    try:
        faults.crash(running(sup, "child1"))
        sup.sync()
        clock.advance(0.5)
        assert sup.alive
        faults.crash(running(sup, "child1"))
        assert sup.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


# -- one_for_one ---------------------------------------------------------------------------


def test_one_for_one_restarts_only_the_crashed_child() -> None:
    sup = Supervisor.start_link(
        [worker_spec("child1"), worker_spec("child2")], intensity=2, period=3600
    )
    try:
        before = pids(sup)
        faults.crash(running(sup, "child1"))
        sup.sync()
        after = pids(sup)
        assert after["child1"] not in (None, before["child1"])
        assert after["child2"] == before["child2"]
        assert statuses(sup) == ["running", "running"]
        assert sup.count_children() == ChildCounts(2, 2, 0, 2)
    finally:
        stop_if_alive(sup)


def test_one_for_one_third_crash_within_period_shuts_the_supervisor_down() -> None:
    trace = Trace()
    sup = Supervisor.start_link(
        [worker_spec(c, trace) for c in ("child1", "child2", "child3")], intensity=2, period=3600
    )
    try:
        faults.kill(running(sup, "child1"))
        sup.sync()
        faults.kill(running(sup, "child2"))
        sup.sync()
        assert sup.alive
        assert sup.count_children() == ChildCounts(3, 3, 0, 3)
        survivors = [running(sup, "child2"), running(sup, "child3")]
        faults.kill(running(sup, "child1"))
        assert sup.wait(WAIT) == "shutdown"
        assert [child.wait(WAIT) for child in survivors] == ["shutdown", "shutdown"]
        # The crashed child is dropped; the rest go down newest first.
        assert shutdown_order(trace) == ["child3", "child2"]
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
def test_escalation_child_failing_on_restart_brings_the_supervisor_down(strategy: str) -> None:
    """one_for_one_escalation, one_for_all_escalation, rest_for_one_escalation."""
    plan = FaultPlan()
    specs = [
        ChildSpec("child1", start=lambda: Worker.start_link("child1", faults=plan)),
        worker_spec("child2"),
    ]
    events = Trace()
    sup = Supervisor.start_link(
        specs, strategy=strategy, intensity=4, period=3600, listeners=[events]
    )
    try:
        sibling = running(sup, "child2")
        plan.fail_init(times=None)
        faults.crash(running(sup, "child1"))
        assert sup.wait(WAIT) == "shutdown"
        assert sibling.wait(WAIT) == "shutdown"
        # Every attempt counted against intensity 4: four failed starts, the fifth refused.
        assert plan.count("fail_init") == 4
        assert len(events.kinds("max_intensity")) == 1
    finally:
        stop_if_alive(sup)


# -- one_for_all ---------------------------------------------------------------------------


def test_one_for_all_restarts_all_children_and_no_old_pid_remains() -> None:
    sup = Supervisor.start_link(
        [worker_spec("child1"), worker_spec("child2")],
        strategy="one_for_all",
        intensity=2,
        period=3600,
    )
    try:
        old = {info.id: info.handle for info in sup.which_children()}
        assert old["child1"] is not None and old["child2"] is not None
        faults.crash(old["child1"])
        assert old["child2"].wait(WAIT) == "shutdown"
        sup.sync()
        children = sup.which_children()
        assert [c.id for c in children] == ["child1", "child2"]
        assert [c.status for c in children] == ["running", "running"]
        new_pids = {c.pid for c in children}
        assert None not in new_pids
        assert not new_pids & {old["child1"].pid, old["child2"].pid}
        assert sup.count_children() == ChildCounts(2, 2, 0, 2)

        faults.crash(running(sup, "child1"))
        sup.sync()
        assert sup.alive
        faults.crash(running(sup, "child2"))
        assert sup.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


def test_one_for_all_other_child_fails_restart_terminates_the_fresh_sibling_and_retries() -> None:
    plan2 = FaultPlan()
    specs = [
        worker_spec("child1"),
        ChildSpec("child2", start=lambda: Worker.start_link("child2", faults=plan2)),
    ]
    events = Trace()
    sup = Supervisor.start_link(
        specs, strategy="one_for_all", intensity=3, period=3600, listeners=[events]
    )
    try:
        old = set(pids(sup).values())
        plan2.fail_init(times=1)
        faults.kill(running(sup, "child1"))
        events.wait_for(restarted("child2"))
        sup.sync()
        assert plan2.count("fail_init") == 1
        restarted1 = [e.pid for e in events.kinds("restarted") if e.child_id == "child1"]
        assert len(restarted1) == 2, "child1 is started again in the retried round"
        # The child1 started in the failed round was terminated with shutdown.
        terminated = [(e.child_id, e.pid, e.reason) for e in events.kinds("terminated")]
        assert ("child1", restarted1[0], "shutdown") in terminated
        children = sup.which_children()
        assert [c.status for c in children] == ["running", "running"]
        assert children[0].pid == restarted1[1]
        assert not {c.pid for c in children} & old
        assert sup.alive
    finally:
        stop_if_alive(sup)


# -- rest_for_one --------------------------------------------------------------------------


def test_rest_for_one_restarts_the_crashed_child_and_those_started_after_it() -> None:
    sup = Supervisor.start_link(
        [worker_spec("child1"), worker_spec("child2"), worker_spec("child3")],
        strategy="rest_for_one",
        intensity=2,
        period=3600,
    )
    try:
        before = pids(sup)
        old3 = running(sup, "child3")
        faults.crash(running(sup, "child2"))
        assert old3.wait(WAIT) == "shutdown"
        sup.sync()
        after = pids(sup)
        assert after["child1"] == before["child1"]
        assert after["child2"] not in (None, before["child2"])
        assert after["child3"] not in (None, before["child3"])
        assert statuses(sup) == ["running"] * 3
        assert sup.count_children() == ChildCounts(3, 3, 0, 3)

        faults.crash(running(sup, "child3"))
        sup.sync()
        assert pids(sup)["child1"] == before["child1"]
        faults.crash(running(sup, "child2"))
        assert sup.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


def test_rest_for_one_other_child_fails_restart_retries_only_the_failed_child() -> None:
    plan2 = FaultPlan()
    specs = [
        worker_spec("child1"),
        ChildSpec("child2", start=lambda: Worker.start_link("child2", faults=plan2)),
    ]
    events = Trace()
    sup = Supervisor.start_link(
        specs, strategy="rest_for_one", intensity=3, period=3600, listeners=[events]
    )
    try:
        plan2.fail_init(times=1)
        faults.kill(running(sup, "child1"))
        events.wait_for(restarted("child2"))
        sup.sync()
        assert plan2.count("fail_init") == 1
        restarted1 = [e.pid for e in events.kinds("restarted") if e.child_id == "child1"]
        assert len(restarted1) == 1, "the already restarted child1 is not restarted again"
        assert not [e for e in events.kinds("terminated") if e.child_id == "child1"]
        assert pids(sup)["child1"] == restarted1[0]
        assert statuses(sup) == ["running", "running"]
    finally:
        stop_if_alive(sup)


# -- simple_one_for_one --------------------------------------------------------------------


def test_simple_one_for_one_start_child_appends_extra_args_and_restart_reuses_them() -> None:
    trace = Trace()
    template = ChildSpec("child", start=lambda tag: Worker.start_link(tag, trace))
    sup = Supervisor.start_link([template], strategy="simple_one_for_one", intensity=2, period=3600)
    try:
        assert sup.which_children() == []
        a = sup.start_child(("a",))
        b = sup.start_child(("b",))
        assert a is not None and b is not None
        assert a.call("ping") == "pong"
        faults.crash(a)
        sup.sync()
        assert [item[1] for item in trace.items if item[0] == "init"] == ["a", "b", "a"]
        children = sup.which_children()
        assert [c.id for c in children] == [None, None]
        assert [c.status for c in children] == ["running", "running"]
        assert b.pid in {c.pid for c in children}
        assert a.pid not in {c.pid for c in children}
        counts = sup.count_children()
        assert (counts.active, counts.supervisors, counts.workers) == (2, 0, 2)

        faults.crash(b)
        sup.sync()
        assert sup.alive
        newest = sup.which_children()[0].handle
        assert newest is not None
        faults.crash(newest)
        assert sup.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


def test_simple_one_for_one_escalation_child_failing_on_restart_brings_it_down() -> None:
    template = ChildSpec(
        "child", start=lambda tag, plan: Worker.start_link(tag, faults=plan), shutdown=1.0
    )
    sup = Supervisor.start_link([template], strategy="simple_one_for_one", intensity=4, period=3600)
    try:
        failing = FaultPlan()
        first = sup.start_child(("failing", failing))
        other = sup.start_child(("other", None))
        assert first is not None and other is not None
        failing.fail_init(times=None)
        faults.crash(first)
        assert sup.wait(WAIT) == "shutdown"
        assert other.wait(WAIT) == "shutdown"
        assert failing.count("fail_init") == 4
    finally:
        stop_if_alive(sup)


def test_simple_one_for_one_shutdown_stops_children_in_parallel() -> None:
    """Each child's terminate waits until all of them are terminating: only a parallel
    shutdown (one shared deadline, OTP's terminate_dynamic_children) lets them all finish
    with reason shutdown instead of being killed one after another."""
    n = 4
    trace = Trace()
    barrier = threading.Barrier(n)
    template = ChildSpec(
        "child",
        start=lambda tag: RendezvousWorker.start_link(tag, trace, barrier),
        shutdown=1.0,
    )
    sup = Supervisor.start_link([template], strategy="simple_one_for_one")
    try:
        children = [sup.start_child((f"c{i}",)) for i in range(n)]
        sup.stop()
        reasons = [child.wait(WAIT) for child in children if child is not None]
        assert reasons == ["shutdown"] * n
        assert not barrier.broken
        assert sorted(shutdown_order(trace)) == [f"c{i}" for i in range(n)]
    finally:
        stop_if_alive(sup)


def test_simple_one_for_one_shutdown_kills_a_child_that_outlasts_its_shutdown() -> None:
    events = Trace()
    template = ChildSpec(
        "child", start=lambda tag, plan: Worker.start_link(tag, faults=plan), shutdown=0.3
    )
    sup = Supervisor.start_link([template], strategy="simple_one_for_one", listeners=[events])
    try:
        quick = [sup.start_child((f"quick{i}", None)) for i in range(3)]
        slow = sup.start_child(("slow", FaultPlan().slow_terminate(30.0)))
        assert slow is not None
        sup.stop()
        assert [child.wait(WAIT) for child in quick if child is not None] == ["shutdown"] * 3
        assert slow.wait(WAIT) == "killed"
        killed = [e.pid for e in events.kinds("terminated") if e.reason == "killed"]
        assert killed == [slow.pid]
        assert [e.pid for e in events.kinds("shutdown_error")] == [slow.pid]
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("restart", ["permanent", "transient"])
def test_simple_one_for_one_restart_ignore_removes_the_child(restart: str) -> None:
    starts: list[str] = []
    template = ChildSpec(
        "child",
        start=lambda tag: IgnoreOnRestart.start_link(tag, starts),
        restart=restart,  # type: ignore[arg-type]
    )
    sup = Supervisor.start_link(
        [template], strategy="simple_one_for_one", intensity=10, period=3600
    )
    try:
        child = sup.start_child(("child1",))
        assert child is not None
        assert [c.pid for c in sup.which_children()] == [child.pid]
        faults.kill(child)
        sup.sync()
        assert starts == ["child1", "child1"]
        assert sup.which_children() == []
        counts = sup.count_children()
        assert (counts.active, counts.workers) == (0, 0)
        assert sup.alive
        again = sup.start_child(("child2",))
        assert again is not None and again.call("ping") == "pong"
    finally:
        stop_if_alive(sup)


# -- hanging_restart_loop ------------------------------------------------------------------


def test_hanging_restart_loop_child_can_be_inspected_and_terminated() -> None:
    flaky = Flaky("child1")
    spec = ChildSpec("child1", start=flaky, shutdown="brutal_kill")
    events = Trace()
    sup = Supervisor.start_link([spec], intensity=100_000, period=3600, listeners=[events])
    try:
        flaky.failing.set()
        faults.kill(running(sup, "child1"))
        events.wait_kind("start_failed", 2)

        (info,) = sup.which_children()
        assert (info.id, info.pid, info.status) == ("child1", None, "restarting")
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)
        with pytest.raises(ChildAlreadyPresent):
            sup.start_child(spec)
        with pytest.raises(ChildRestarting):
            sup.restart_child("child1")
        with pytest.raises(ChildRestarting):
            sup.delete_child("child1")

        sup.terminate_child("child1")
        (info,) = sup.which_children()
        assert (info.pid, info.status) == (None, "undefined")
        attempts = flaky.attempts
        sup.sync()
        sup.sync()
        assert flaky.attempts == attempts, "terminate_child ends the restart loop"

        flaky.failing.clear()
        child = sup.restart_child("child1")
        assert child is not None and child.call("ping") == "pong"
        assert statuses(sup) == ["running"]
        assert sup.alive
    finally:
        stop_if_alive(sup)


def test_hanging_restart_loop_rest_for_one_child_can_be_inspected_and_terminated() -> None:
    flaky = Flaky("child2")
    spec2 = ChildSpec("child2", start=flaky, shutdown="brutal_kill")
    specs = [
        worker_spec("child1", shutdown="brutal_kill"),
        spec2,
        worker_spec("child3", shutdown="brutal_kill"),
    ]
    events = Trace()
    sup = Supervisor.start_link(
        specs, strategy="rest_for_one", intensity=100_000, period=3600, listeners=[events]
    )
    try:
        pid1 = pids(sup)["child1"]
        flaky.failing.set()
        faults.kill(running(sup, "child2"))
        events.wait_kind("start_failed", 2)

        children = sup.which_children()
        assert [(c.id, c.status) for c in children] == [
            ("child1", "running"),
            ("child2", "restarting"),
            ("child3", "undefined"),
        ]
        assert children[0].pid == pid1
        assert sup.count_children() == ChildCounts(3, 1, 0, 3)
        with pytest.raises(ChildAlreadyPresent):
            sup.start_child(spec2)
        with pytest.raises(ChildRestarting):
            sup.restart_child("child2")
        with pytest.raises(ChildRestarting):
            sup.delete_child("child2")

        sup.terminate_child("child2")
        assert statuses(sup) == ["running", "undefined", "undefined"]
        attempts = flaky.attempts
        sup.sync()
        sup.sync()
        assert flaky.attempts == attempts, "terminate_child ends the restart loop"

        flaky.failing.clear()
        child2 = sup.restart_child("child2")
        assert child2 is not None and child2.call("ping") == "pong"
        assert statuses(sup) == ["running", "running", "undefined"]
        assert pids(sup)["child1"] == pid1
    finally:
        stop_if_alive(sup)


def test_hanging_restart_loop_simple_child_can_be_inspected_and_terminated() -> None:
    flaky = Flaky("child")
    template = ChildSpec("child1", start=flaky, shutdown="brutal_kill")
    events = Trace()
    sup = Supervisor.start_link(
        [template],
        strategy="simple_one_for_one",
        intensity=100_000,
        period=3600,
        listeners=[events],
    )
    try:
        child = sup.start_child(())
        assert child is not None
        flaky.failing.set()
        faults.kill(child)
        events.wait_kind("start_failed", 2)

        (info,) = sup.which_children()
        assert (info.id, info.pid, info.status) == (None, None, "restarting")
        counts = sup.count_children()
        assert (counts.active, counts.workers) == (0, 1)
        with pytest.raises(SimpleOneForOneOnly):
            sup.restart_child("child1")
        with pytest.raises(SimpleOneForOneOnly):
            sup.delete_child("child1")

        # OTP finds a restarting dynamic child by its old pid.
        sup.terminate_child(child)
        assert sup.which_children() == []
        attempts = flaky.attempts
        sup.sync()
        sup.sync()
        assert flaky.attempts == attempts, "terminate_child ends the restart loop"

        flaky.failing.clear()
        again = sup.start_child(())
        assert again is not None and again.call("ping") == "pong"
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("strategy", ["one_for_one", "rest_for_one", "simple_one_for_one"])
def test_hanging_restart_loop_supervisor_can_still_be_stopped(strategy: str) -> None:
    flaky = Flaky("looping")
    events = Trace()
    specs = [ChildSpec("looping", start=flaky, shutdown="brutal_kill")]
    if strategy != "simple_one_for_one":
        specs.append(worker_spec("bystander"))
    sup = Supervisor.start_link(
        specs, strategy=strategy, intensity=100_000, period=3600, listeners=[events]
    )
    try:
        if strategy == "simple_one_for_one":
            looping = sup.start_child(())
            others: list[Handle] = []
        else:
            looping = sup.child("looping")
            others = [running(sup, "bystander")]
        assert looping is not None
        flaky.failing.set()
        faults.kill(looping)
        events.wait_kind("start_failed", 3)
        sup.stop()
        assert not sup.alive
        assert sup.exit_reason == "normal"
        assert [other.wait(WAIT) for other in others] == ["shutdown"] * len(others)
    finally:
        stop_if_alive(sup)


# -- count_restarting_children -------------------------------------------------------------


def test_count_restarting_children_active_excludes_restarting() -> None:
    flaky = Flaky("child")
    template = ChildSpec("child", start=flaky, shutdown="brutal_kill")
    events = Trace()
    sup = Supervisor.start_link(
        [template],
        strategy="simple_one_for_one",
        intensity=100_000,
        period=3600,
        listeners=[events],
    )
    try:
        observed = [sup.count_children()]
        children = [sup.start_child(()) for _ in range(3)]
        observed.append(sup.count_children())
        flaky.failing.set()
        for child in children[:2]:
            assert child is not None
            faults.kill(child)
        observed.append(sup.count_children())
        assert [c.status for c in sup.which_children()].count("restarting") == 2
        flaky.failing.clear()
        events.wait_kind("restarted", 2)
        sup.sync()
        observed.append(sup.count_children())
        for info in sup.which_children():
            sup.terminate_child(info.pid)
            observed.append(sup.count_children())

        expected = [
            ChildCounts(1, 0, 0, 0),
            ChildCounts(1, 3, 0, 3),
            ChildCounts(1, 1, 0, 3),
            ChildCounts(1, 3, 0, 3),
            ChildCounts(1, 2, 0, 2),
            ChildCounts(1, 1, 0, 1),
            ChildCounts(1, 0, 0, 0),
        ]
        # active/supervisors/workers first: restarting children are not active.
        assert [c[1:] for c in observed] == [c[1:] for c in expected]
        # OTP counts the one template spec of a simple_one_for_one supervisor.
        assert observed == expected
    finally:
        stop_if_alive(sup)
