"""supervisor_SUITE restart types: permanent, transient, temporary (otp_pykka.md §1.5, §2).

| child \\ reason | normal        | shutdown / (shutdown, x) | crash, killed |
|----------------|---------------|--------------------------|---------------|
| permanent      | restart       | restart                  | restart       |
| transient      | keep the spec | keep the spec            | restart       |
| temporary      | delete spec   | delete spec              | delete spec   |
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otpmem.actors import Handle
from otpmem.actors import faults as fault
from otpmem.supervisors import (
    ChildAlreadyPresent,
    ChildAlreadyStarted,
    ChildCounts,
    ChildNotFound,
    Supervisor,
    SupervisorHandle,
)
from tests.support import Trace, worker_spec


class Boom(Exception):
    """An abnormal exit reason."""


def stop_with(reason: Any) -> Callable[[SupervisorHandle, Handle], None]:
    """The child stops itself with ``reason`` (SUITE: normal / shutdown / {shutdown, info})."""

    def run(sup: SupervisorHandle, child: Handle) -> None:
        assert child.call(("stop", reason)) == "stopping"
        child.wait()
        sup.sync()

    return run


def crash(sup: SupervisorHandle, child: Handle) -> None:
    """The child crashes (SUITE: abnormal)."""
    fault.crash(child, Boom("abnormal"))
    sup.sync()


def kill(sup: SupervisorHandle, child: Handle) -> None:
    """The child is killed brutally (SUITE: kill)."""
    fault.kill(child)
    sup.sync()


def cast_stop(reason: Any) -> Callable[[SupervisorHandle, Handle], None]:
    """The child stops itself on a cast."""

    def run(sup: SupervisorHandle, child: Handle) -> None:
        child.cast(("stop", reason))
        child.wait()
        sup.sync()

    return run


CLEAN_EXITS = {
    "normal": stop_with("normal"),
    "shutdown": stop_with("shutdown"),
    "shutdown_info": stop_with(("shutdown", "info")),
    "cast_normal": cast_stop("normal"),
}
ABNORMAL_EXITS = {
    "abnormal": crash,
    "killed": kill,
    "other_reason": stop_with("other_reason"),
}
ALL_EXITS = {**CLEAN_EXITS, **ABNORMAL_EXITS}


def only_child(sup: SupervisorHandle) -> Handle:
    [info] = sup.which_children()
    assert info.handle is not None
    return info.handle


# -- permanent ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", list(ALL_EXITS))
def test_permanent_child_is_restarted(how: str) -> None:
    """Ports permanent_normal, permanent_shutdown and permanent_abnormal."""
    trace = Trace()
    sup = Supervisor.start_link([worker_spec("child1", restart="permanent")], listeners=[trace])
    try:
        old = only_child(sup)
        ALL_EXITS[how](sup, old)
        assert not old.alive
        new = only_child(sup)
        assert new.pid != old.pid
        assert new.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        assert [e.pid for e in trace.kinds("restarted")] == [new.pid]
        assert sup.alive
    finally:
        sup.stop()


# -- transient ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", list(CLEAN_EXITS))
def test_transient_clean_exit_is_not_restarted_and_spec_kept(how: str) -> None:
    """Ports transient_normal and transient_shutdown."""
    trace = Trace()
    sup = Supervisor.start_link([worker_spec("child1", restart="transient")], listeners=[trace])
    try:
        old = only_child(sup)
        CLEAN_EXITS[how](sup, old)
        assert [(c.id, c.pid, c.status) for c in sup.which_children()] == [
            ("child1", None, "undefined")
        ]
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)
        assert trace.kinds("restarted") == []
        assert sup.get_childspec("child1").restart == "transient"

        new = sup.restart_child("child1")
        assert new is not None and new.pid != old.pid
        assert new.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


@pytest.mark.parametrize("how", list(ABNORMAL_EXITS))
def test_transient_abnormal_exit_is_restarted(how: str) -> None:
    trace = Trace()
    sup = Supervisor.start_link([worker_spec("child1", restart="transient")], listeners=[trace])
    try:
        old = only_child(sup)
        ABNORMAL_EXITS[how](sup, old)
        new = only_child(sup)
        assert new.pid != old.pid
        assert new.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        assert [e.pid for e in trace.kinds("restarted")] == [new.pid]
    finally:
        sup.stop()


# -- temporary ------------------------------------------------------------------------------


@pytest.mark.parametrize("how", list(ALL_EXITS))
def test_temporary_child_spec_is_deleted(how: str) -> None:
    """Ports temporary_normal, temporary_shutdown and temporary_abnormal."""
    trace = Trace()
    spec = worker_spec("child1", restart="temporary")
    sup = Supervisor.start_link([spec], listeners=[trace])
    try:
        old = only_child(sup)
        ALL_EXITS[how](sup, old)
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)
        assert trace.kinds("restarted") == []
        with pytest.raises(ChildNotFound):
            sup.restart_child("child1")
        with pytest.raises(ChildNotFound):
            sup.get_childspec("child1")

        # The same spec can be started again: nothing of it was kept.
        new = sup.start_child(spec)
        assert new is not None and new.pid != old.pid
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


def test_temporary_child_terminated_via_api_is_deleted() -> None:
    spec = worker_spec("child1", restart="temporary")
    sup = Supervisor.start_link([spec])
    try:
        old = only_child(sup)
        sup.terminate_child("child1")
        assert old.exit_reason == "shutdown"
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)
        assert sup.start_child(spec) is not None
    finally:
        sup.stop()


# -- temporary_bystander --------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["one_for_all", "rest_for_one"])
def test_temporary_bystander(strategy: str) -> None:
    """A temporary sibling taken down by a restart round is dropped, not restarted, and its
    exit does not count against the intensity (1 here: a second restart would kill the sup)."""
    trace = Trace()
    sup = Supervisor.start_link(
        [worker_spec("child1", restart="permanent"), worker_spec("child2", restart="temporary")],
        strategy=strategy,
        intensity=1,
        listeners=[trace],
    )
    try:
        child1 = sup.child("child1")
        child2 = sup.child("child2")
        assert child1 is not None and child2 is not None
        stop_with("normal")(sup, child1)
        assert child2.exit_reason == "shutdown"
        assert [c.id for c in sup.which_children()] == ["child1"]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        new1 = sup.child("child1")
        assert new1 is not None and new1.pid != child1.pid
        sup.sync()  # the bystander's exit signal, if any, has been handled by now
        assert sup.alive
        assert [e.child_id for e in trace.kinds("restarted")] == ["child1"]
        assert trace.kinds("max_intensity") == []
    finally:
        sup.stop()


def test_temporary_bystander_not_affected_under_rest_for_one_when_started_before() -> None:
    """rest_for_one only takes down the children started after the crashed one."""
    sup = Supervisor.start_link(
        [worker_spec("temp", restart="temporary"), worker_spec("child1")],
        strategy="rest_for_one",
    )
    try:
        temp = sup.child("temp")
        child1 = sup.child("child1")
        assert temp is not None and child1 is not None
        crash(sup, child1)
        assert temp.alive
        assert [c.id for c in sup.which_children()] == ["temp", "child1"]
        assert sup.count_children() == ChildCounts(2, 2, 0, 2)
    finally:
        sup.stop()


# -- do_not_save_child_specs_for_temporary_children -----------------------------------------


def _terminate_via_api(sup: SupervisorHandle, child: Handle) -> None:
    sup.terminate_child("child")


@pytest.mark.parametrize(
    "how",
    ["supervisor", "abnormal", "normal", "shutdown", "shutdown_info", "killed"],
)
def test_do_not_save_child_specs_for_temporary_children(how: str) -> None:
    ways: dict[str, Callable[[SupervisorHandle, Handle], None]] = {
        "supervisor": _terminate_via_api,
        "abnormal": crash,
        "normal": stop_with("normal"),
        "shutdown": stop_with("shutdown"),
        "shutdown_info": stop_with(("shutdown", "some_info")),
        "killed": kill,
    }
    spec = worker_spec("child", restart="temporary")
    sup = Supervisor.start_link([])
    try:
        first = sup.start_child(spec)
        assert first is not None
        with pytest.raises(ChildAlreadyStarted) as info:
            sup.start_child(spec)
        assert info.value.pid == first.pid

        ways[how](sup, first)
        assert sup.which_children() == []

        # Never already_present: the spec went with the child.
        second = sup.start_child(spec)
        assert second is not None and second.pid != first.pid
        with pytest.raises(ChildAlreadyStarted):
            sup.start_child(spec)
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


def test_non_temporary_specs_are_saved_after_clean_exit() -> None:
    """The contrast case: a transient child's spec stays (already_present), per OTP."""
    spec = worker_spec("child", restart="transient")
    sup = Supervisor.start_link([])
    try:
        first = sup.start_child(spec)
        assert first is not None
        stop_with("normal")(sup, first)
        with pytest.raises(ChildAlreadyPresent):
            sup.start_child(spec)
        sup.terminate_child("child")
        with pytest.raises(ChildAlreadyPresent):
            sup.start_child(spec)
    finally:
        sup.stop()
