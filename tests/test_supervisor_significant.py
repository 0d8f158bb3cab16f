"""Significant children and auto_shutdown: supervisor_SUITE's nonsignificant_*, significant_*
groups (otp_pykka.md §1.4, §2).

A supervisor that survives a child's exit is checked with ``sup.sync()``: the exit signal is
queued before the child's death is announced, so a sync that returns means the supervisor has
handled it and chose to live on.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from otpmem.actors import Handle, faults
from otpmem.supervisors import (
    ChildSpec,
    InvalidSupervisorFlags,
    Supervisor,
    SupervisorHandle,
)
from tests.support import WAIT, Trace, worker_spec

AUTO_SHUTDOWNS = ["never", "any_significant", "all_significant"]


def running(sup: SupervisorHandle, child_id: Hashable) -> Handle:
    child = sup.child(child_id)
    assert child is not None, f"{child_id!r} is not running: {sup.which_children()}"
    return child


def stop_if_alive(sup: SupervisorHandle) -> None:
    if sup.alive:
        sup.stop()


def end_child(sup: SupervisorHandle, child_id: Hashable, how: str) -> Handle:
    """supervisor_SUITE's terminate/4: end a child one way and return its old handle."""
    child = running(sup, child_id)
    if how == "supervisor":
        sup.terminate_child(child_id)
    elif how == "kill":
        faults.kill(child)
    elif how == "abnormal":
        faults.crash(child)
    elif how == "normal":
        child.call(("stop", "normal"))
        assert child.wait(WAIT) == "normal"
    else:
        child.call(("stop", how))
        assert child.wait(WAIT) == how
    return child


def three_children(restart: str) -> list[ChildSpec]:
    """child1 and child2 significant, child3 not (the SUITE's significant_* layout)."""
    return [
        worker_spec("child1", restart=restart, significant=True),
        worker_spec("child2", restart=restart, significant=True),
        worker_spec("child3", restart=restart, significant=False),
    ]


# -- nonsignificant ------------------------------------------------------------------------


@pytest.mark.parametrize("auto_shutdown", AUTO_SHUTDOWNS)
def test_nonsignificant_temporary_child_exit_never_shuts_the_supervisor_down(
    auto_shutdown: str,
) -> None:
    spec = worker_spec("child1", restart="temporary")
    sup = Supervisor.start_link([], auto_shutdown=auto_shutdown)
    try:
        for how in ("supervisor", "kill", "abnormal", "normal"):
            sup.start_child(spec)
            old = end_child(sup, "child1", how)
            assert not old.alive
            sup.sync()
            assert sup.alive, how
            assert sup.which_children() == [], how
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("auto_shutdown", AUTO_SHUTDOWNS)
def test_nonsignificant_transient_child_exit_never_shuts_the_supervisor_down(
    auto_shutdown: str,
) -> None:
    sup = Supervisor.start_link(
        [worker_spec("child1", restart="transient")], intensity=5, auto_shutdown=auto_shutdown
    )
    try:
        end_child(sup, "child1", "supervisor")
        sup.sync()
        assert sup.which_children()[0].pid is None
        sup.restart_child("child1")

        for how in ("kill", "abnormal"):  # restarted
            old = end_child(sup, "child1", how)
            sup.sync()
            assert sup.alive, how
            assert sup.which_children()[0].pid not in (None, old.pid), how

        end_child(sup, "child1", "normal")  # kept, not restarted
        sup.sync()
        assert sup.alive
        info = sup.which_children()[0]
        assert (info.pid, info.status) == (None, "undefined")
    finally:
        stop_if_alive(sup)


# -- significant_temporary -----------------------------------------------------------------


def test_significant_temporary_terminate_child_does_not_trigger_auto_shutdown() -> None:
    sup = Supervisor.start_link(
        three_children("temporary"), intensity=5, auto_shutdown="any_significant"
    )
    try:
        others = [running(sup, "child2"), running(sup, "child3")]
        end_child(sup, "child1", "supervisor")
        sup.sync()
        assert sup.alive
        assert all(other.alive for other in others)
        assert [info.id for info in sup.which_children()] == ["child2", "child3"]
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("how", ["kill", "abnormal", "normal"])
def test_significant_temporary_any_significant_exit_shuts_the_supervisor_down(how: str) -> None:
    events = Trace()
    sup = Supervisor.start_link(
        three_children("temporary"),
        intensity=5,
        auto_shutdown="any_significant",
        listeners=[events],
    )
    try:
        others = [running(sup, "child2"), running(sup, "child3")]
        end_child(sup, "child1", how)
        assert sup.wait(WAIT) == "shutdown"
        assert [other.wait(WAIT) for other in others] == ["shutdown", "shutdown"]
        assert [e.child_id for e in events.kinds("auto_shutdown")] == ["child1"]
        assert not events.kinds("restarted")
    finally:
        stop_if_alive(sup)


def test_significant_temporary_all_significant_only_the_last_exit_shuts_down() -> None:
    sup = Supervisor.start_link(
        three_children("temporary"), intensity=5, auto_shutdown="all_significant"
    )
    try:
        child2, child3 = running(sup, "child2"), running(sup, "child3")
        end_child(sup, "child1", "normal")
        sup.sync()
        assert sup.alive
        assert child2.alive and child3.alive
        end_child(sup, "child2", "normal")
        assert sup.wait(WAIT) == "shutdown"
        assert child3.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


# -- significant_transient -----------------------------------------------------------------


def test_significant_transient_terminate_kill_or_crash_do_not_trigger_auto_shutdown() -> None:
    sup = Supervisor.start_link(
        three_children("transient"), intensity=5, auto_shutdown="any_significant"
    )
    try:
        others = [running(sup, "child2"), running(sup, "child3")]
        end_child(sup, "child1", "supervisor")
        sup.sync()
        assert sup.alive
        assert sup.which_children()[0].pid is None
        sup.restart_child("child1")

        for how in ("kill", "abnormal"):  # a transient child that crashes is restarted
            old = end_child(sup, "child1", how)
            sup.sync()
            assert sup.alive, how
            assert sup.which_children()[0].pid not in (None, old.pid), how
        assert all(other.alive for other in others)
    finally:
        stop_if_alive(sup)


@pytest.mark.parametrize("reason", ["normal", "shutdown", ("shutdown", "some_info")])
def test_significant_transient_any_significant_clean_exit_shuts_the_supervisor_down(
    reason: Any,
) -> None:
    sup = Supervisor.start_link(
        three_children("transient"), intensity=5, auto_shutdown="any_significant"
    )
    try:
        others = [running(sup, "child2"), running(sup, "child3")]
        end_child(sup, "child1", reason)
        assert sup.wait(WAIT) == "shutdown"
        assert [other.wait(WAIT) for other in others] == ["shutdown", "shutdown"]
    finally:
        stop_if_alive(sup)


def test_significant_transient_all_significant_only_the_last_exit_shuts_down() -> None:
    sup = Supervisor.start_link(
        three_children("transient"), intensity=5, auto_shutdown="all_significant"
    )
    try:
        child2, child3 = running(sup, "child2"), running(sup, "child3")
        end_child(sup, "child1", "normal")
        sup.sync()
        assert sup.alive
        assert child2.alive and child3.alive
        end_child(sup, "child2", "normal")
        assert sup.wait(WAIT) == "shutdown"
        assert child3.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup)


# -- significant_bystander -----------------------------------------------------------------


@pytest.mark.parametrize("auto_shutdown", ["any_significant", "all_significant"])
@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
def test_significant_bystander_terminated_by_a_sibling_restart_does_not_auto_shutdown(
    strategy: str, auto_shutdown: str
) -> None:
    specs = [
        worker_spec("child1", restart="transient", significant=True),
        worker_spec("child2", restart="transient", significant=False),
        worker_spec("child3", restart="transient", significant=True),
    ]
    sup = Supervisor.start_link(specs, strategy=strategy, intensity=5, auto_shutdown=auto_shutdown)
    try:
        old: dict[Hashable, Handle] = {c: running(sup, c) for c in ("child1", "child2", "child3")}
        faults.kill(old["child2"])
        bystanders = {"one_for_one": [], "one_for_all": ["child1", "child3"]}.get(
            strategy, ["child3"]
        )
        for child_id in bystanders:
            assert old[child_id].wait(WAIT) == "shutdown"
        sup.sync()
        assert sup.alive
        children = sup.which_children()
        assert [c.status for c in children] == ["running"] * 3
        for info in children:
            replaced = info.id == "child2" or info.id in bystanders
            assert (info.pid != old[info.id].pid) == replaced, info.id
    finally:
        stop_if_alive(sup)


# -- significant_escalation ----------------------------------------------------------------


def _sub_supervisor(significant: bool) -> ChildSpec:
    return ChildSpec(
        "sup1",
        start=lambda: Supervisor.start_link(auto_shutdown="any_significant"),
        restart="transient",
        type="supervisor",
        significant=significant,
    )


def test_significant_escalation_cascades_through_significant_supervisors() -> None:
    # A has B as a significant child, B has C as a significant child: C's exit shuts B
    # down, and B's exit shuts A down.
    sup_a = Supervisor.start_link(auto_shutdown="any_significant")
    try:
        sup_b = sup_a.start_child(_sub_supervisor(significant=True))
        assert isinstance(sup_b, SupervisorHandle)
        worker_c = sup_b.start_child(worker_spec("child1", restart="transient", significant=True))
        assert worker_c is not None
        worker_c.call(("stop", "normal"))
        assert worker_c.wait(WAIT) == "normal"
        assert sup_b.wait(WAIT) == "shutdown"
        assert sup_a.wait(WAIT) == "shutdown"
    finally:
        stop_if_alive(sup_a)


def test_significant_escalation_stops_at_a_non_significant_supervisor() -> None:
    sup_a = Supervisor.start_link(auto_shutdown="any_significant")
    try:
        sup_b = sup_a.start_child(_sub_supervisor(significant=False))
        assert isinstance(sup_b, SupervisorHandle)
        worker_c = sup_b.start_child(worker_spec("child1", restart="transient", significant=True))
        assert worker_c is not None
        worker_c.call(("stop", "normal"))
        assert worker_c.wait(WAIT) == "normal"
        assert sup_b.wait(WAIT) == "shutdown"
        sup_a.sync()
        assert sup_a.alive
        info = sup_a.which_children()[0]
        assert (info.id, info.pid, info.status) == ("sup1", None, "undefined")
    finally:
        stop_if_alive(sup_a)


# -- significant_simple --------------------------------------------------------------------


@pytest.mark.parametrize("auto_shutdown", ["any_significant", "all_significant"])
def test_significant_simple_auto_shutdown_is_rejected_for_simple_one_for_one(
    auto_shutdown: str,
) -> None:
    with pytest.raises(InvalidSupervisorFlags) as error:
        Supervisor.start_link(
            [worker_spec("child1")], strategy="simple_one_for_one", auto_shutdown=auto_shutdown
        )
    assert error.value.flag == "auto_shutdown"


def test_significant_simple_auto_shutdown_never_is_accepted_for_simple_one_for_one() -> None:
    sup = Supervisor.start_link(
        [worker_spec("child1")], strategy="simple_one_for_one", auto_shutdown="never"
    )
    try:
        assert sup.alive
    finally:
        sup.stop()
    assert sup.exit_reason == "normal"
