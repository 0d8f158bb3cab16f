"""Fault injection: kill, crash, and plans that outlive an incarnation."""

from __future__ import annotations

import threading

import pytest

from otpmem.actors import NoProcess, ServerExited, faults
from otpmem.actors.faults import FaultPlan, InjectedCrash
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, Trace, Worker


def test_kill_skips_terminate_and_reports_killed() -> None:
    trace = Trace()
    worker = Worker.start("w", trace)
    faults.kill(worker)
    assert not worker.alive and worker.exit_reason == "killed"
    assert ("terminate", "w", "killed") not in trace.items


def test_kill_of_a_dead_process_raises_no_process() -> None:
    worker = Worker.start()
    worker.stop()
    with pytest.raises(NoProcess):
        faults.kill(worker)


def test_kill_fails_queued_calls_with_killed() -> None:
    worker = Worker.start()
    gate = threading.Event()
    errors: list[ServerExited] = []

    def blocked() -> None:
        try:
            worker.call(("block", gate))
        except ServerExited as exc:
            errors.append(exc)

    def queued() -> None:
        try:
            worker.call("ping")
        except ServerExited as exc:
            errors.append(exc)

    first = threading.Thread(target=blocked)
    first.start()
    second = threading.Thread(target=queued)
    second.start()
    killer = threading.Thread(target=faults.kill, args=(worker, WAIT))
    killer.start()
    gate.set()
    for thread in (first, second, killer):
        thread.join(WAIT)
    assert sorted(e.reason for e in errors) == ["killed", "killed"]


def test_kill_of_a_stuck_handler_declares_it_dead_after_the_grace() -> None:
    worker = Worker.start(name="stuck")
    gate = threading.Event()
    outcome: list[BaseException] = []

    def stuck_call() -> None:
        try:
            worker.call(("block", gate))
        except ServerExited as exc:
            outcome.append(exc)

    caller = threading.Thread(target=stuck_call)
    caller.start()
    try:
        faults.kill(worker, grace=0.05)
        assert not worker.alive and worker.exit_reason == "killed"
        replacement = Worker.start(name="stuck")  # the name was freed from outside
        replacement.stop()
    finally:
        gate.set()
        caller.join(WAIT)
    assert len(outcome) == 1  # the caller learnt of the kill, it was not left waiting


def test_crash_runs_terminate_with_the_reason() -> None:
    trace = Trace()
    worker = Worker.start("w", trace)
    faults.crash(worker, ("disk", "full"))
    assert trace.items[-1] == ("terminate", "w", ("disk", "full"))
    assert worker.exit_reason == ("disk", "full")


def test_crash_default_reason_is_an_injected_crash() -> None:
    worker = Worker.start()
    faults.crash(worker)
    assert isinstance(worker.exit_reason, InjectedCrash)


def test_crash_on_nth_message_counts_per_incarnation() -> None:
    plan = FaultPlan().crash_on_message(3, times=2)
    first = Worker.start(faults=plan)
    assert first.call("ping") == "pong"
    assert first.call("ping") == "pong"
    with pytest.raises(ServerExited) as info:
        first.call("ping")
    assert isinstance(info.value.reason, InjectedCrash)
    second = Worker.start(faults=plan)
    for _ in range(2):
        second.call("ping")
    with pytest.raises(ServerExited):
        second.call("ping")
    third = Worker.start(faults=plan)  # times=2 is used up
    for _ in range(5):
        assert third.call("ping") == "pong"
    third.stop()
    assert plan.count("crash_on_message") == 2


def test_crash_when_predicate_holds_with_custom_exception() -> None:
    plan = FaultPlan().crash_when(lambda m: m == "poison", exc=OSError("poisoned"))
    worker = Worker.start(faults=plan)
    assert worker.call("ping") == "pong"
    with pytest.raises(ServerExited) as info:
        worker.call("poison")
    assert isinstance(info.value.reason, OSError)


def test_fail_init_k_times_spans_restarts_under_a_supervisor() -> None:
    plan = FaultPlan().fail_init(times=2)
    trace = Trace()
    spec = ChildSpec("w", start=lambda: Worker.start_link(faults=plan))
    with pytest.raises(Exception, match="failed to start"):
        Supervisor.start_link([spec])
    with pytest.raises(Exception, match="failed to start"):
        Supervisor.start_link([spec])
    sup = Supervisor.start_link([spec], listeners=[trace])
    try:
        child = sup.child("w")
        assert child is not None and child.call("ping") == "pong"
        assert plan.count("fail_init") == 2
    finally:
        sup.stop()


def test_slow_terminate_is_cut_short_by_the_supervisor_kill() -> None:
    plan = FaultPlan().slow_terminate(WAIT * 4)
    trace = Trace()
    sup = Supervisor.start_link(
        [ChildSpec("slow", start=lambda: Worker.start_link(faults=plan), shutdown=0.05)],
        listeners=[trace],
    )
    sup.stop()
    (terminated,) = trace.kinds("terminated")
    assert terminated.reason == "killed"


def test_inject_attaches_a_plan_to_a_running_server() -> None:
    worker = Worker.start()
    faults.inject(worker, FaultPlan().crash_on_message(1))
    with pytest.raises(ServerExited):
        worker.call("ping")


def test_plan_rejects_a_non_positive_message_number() -> None:
    with pytest.raises(ValueError, match="n must be >= 1"):
        FaultPlan().crash_on_message(0)
