"""Ordering and supervision trees: supervisor_SUITE's order_of_children, tree, child_unlink,
simple_global_supervisor and already_started_outside_supervisor (otp_pykka.md §2)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from otpmem.actors import AlreadyStarted, Handle, Pid, faults, whereis
from otpmem.actors.faults import FaultPlan
from otpmem.supervisors import (
    ChildCounts,
    ChildSpec,
    StartChildFailed,
    Supervisor,
    SupervisorHandle,
)
from tests.support import WAIT, Trace, Worker, worker_spec


def pids(sup: SupervisorHandle) -> dict[Hashable, Pid | None]:
    return {info.id: info.pid for info in sup.which_children()}


def running(sup: SupervisorHandle, child_id: Hashable) -> Handle:
    child = sup.child(child_id)
    assert child is not None, f"{child_id!r} is not running: {sup.which_children()}"
    return child


def sub(sup: SupervisorHandle, child_id: Hashable) -> SupervisorHandle:
    child = running(sup, child_id)
    assert isinstance(child, SupervisorHandle)
    return child


def stop_if_alive(sup: SupervisorHandle) -> None:
    if sup.alive:
        sup.stop()


def sub_spec(
    child_id: str, children: list[ChildSpec], restart: str = "permanent", **flags: Any
) -> ChildSpec:
    """A ChildSpec for a child supervisor (its children are started anew at each start)."""
    return ChildSpec(
        child_id,
        start=lambda: Supervisor.start_link(list(children), **flags),
        restart=restart,  # type: ignore[arg-type]
        type="supervisor",
    )


# -- order_of_children ---------------------------------------------------------------------


def test_order_of_children_start_in_order_and_terminate_in_reverse() -> None:
    ids = ["ch7", "ch3", "ch10", "ch2", "ch5"]  # not sorted on purpose, as in the SUITE
    trace = Trace()
    sup = Supervisor.start_link(
        [worker_spec(i, trace) for i in ids], strategy="rest_for_one", intensity=2, period=3600
    )
    try:
        assert trace.items == [("init", i) for i in ids]
        assert [info.id for info in sup.which_children()] == ids
        before = pids(sup)

        mark = len(trace.items)
        faults.kill(running(sup, "ch10"))
        sup.sync()
        assert trace.items[mark:] == [
            ("terminate", "ch5", "shutdown"),
            ("terminate", "ch2", "shutdown"),
            ("init", "ch10"),
            ("init", "ch2"),
            ("init", "ch5"),
        ]
        after = pids(sup)
        assert [after[i] == before[i] for i in ids] == [True, True, False, False, False]
        assert [info.id for info in sup.which_children()] == ids

        mark = len(trace.items)
        sup.stop()
        assert trace.items[mark:] == [("terminate", i, "shutdown") for i in reversed(ids)]
    finally:
        stop_if_alive(sup)


# -- tree ----------------------------------------------------------------------------------


def test_tree_grandchild_crash_restarts_only_it_and_restart_failure_restarts_the_subtree() -> None:
    trace = Trace()
    plan3 = FaultPlan()
    child3 = ChildSpec("child3", start=lambda: Worker.start_link("child3", trace, faults=plan3))
    child4 = worker_spec("child4", trace)
    top = Supervisor.start_link([], strategy="one_for_all", intensity=4, period=3600)
    try:
        top.start_child(
            sub_spec(
                "supchild1",
                [worker_spec("child1", trace), worker_spec("child2", trace)],
                intensity=4,
                period=3600,
            )
        )
        top.start_child(sub_spec("supchild2", [], intensity=4, period=3600))
        top.start_child(sub_spec("supchild3", [], "transient", intensity=4, period=3600))
        top.terminate_child("supchild3")
        assert top.count_children() == ChildCounts(3, 2, 3, 0)

        sup1, sup2 = sub(top, "supchild1"), sub(top, "supchild2")
        assert sup1.count_children() == ChildCounts(2, 2, 0, 2)
        assert sup2.count_children() == ChildCounts(0, 0, 0, 0)
        sup2.start_child(child3)
        sup2.start_child(child4)
        assert sup2.count_children() == ChildCounts(2, 2, 0, 2)
        top_before, sup1_before, sup2_before = pids(top), pids(sup1), pids(sup2)

        # A grandchild's crash restarts only that grandchild.
        faults.crash(running(sup2, "child4"))
        sup2.sync()
        top.sync()
        assert pids(top) == top_before
        assert pids(sup1) == sup1_before
        sup2_after = pids(sup2)
        assert sup2_after["child3"] == sup2_before["child3"]
        assert sup2_after["child4"] not in (None, sup2_before["child4"])
        assert sup2.count_children() == ChildCounts(2, 2, 0, 2)
        assert [info.status for info in top.which_children()] == [
            "running",
            "running",
            "undefined",
        ]

        # child3 cannot restart: supchild2 gives up, and the one_for_all top restarts
        # every child supervisor, which start from their init specs only.
        old_children1 = [running(sup1, "child1"), running(sup1, "child2")]
        plan3.fail_init(times=None)
        faults.crash(running(sup2, "child3"))
        assert sup2.wait(WAIT) == "shutdown"
        assert sup1.wait(WAIT) == "shutdown"
        assert [child.wait(WAIT) for child in old_children1] == ["shutdown", "shutdown"]
        top.sync()
        assert top.alive
        assert [info.status for info in top.which_children()] == ["running"] * 3
        assert top.count_children() == ChildCounts(3, 3, 3, 0)
        top_after = pids(top)
        assert top_after["supchild1"] != top_before["supchild1"]
        assert top_after["supchild2"] != top_before["supchild2"]
        new_sup1 = sub(top, "supchild1")
        assert [info.id for info in new_sup1.which_children()] == ["child1", "child2"]
        assert new_sup1.count_children() == ChildCounts(2, 2, 0, 2)
        assert not set(pids(new_sup1).values()) & set(sup1_before.values())
        assert sub(top, "supchild2").which_children() == []
        assert sub(top, "supchild3").count_children() == ChildCounts(0, 0, 0, 0)
    finally:
        stop_if_alive(top)


@pytest.mark.parametrize(("restart", "restarted"), [("transient", False), ("permanent", True)])
def test_tree_sub_supervisor_that_gives_up_exits_shutdown(restart: str, restarted: bool) -> None:
    """A child supervisor past its intensity exits with shutdown: a transient one stays down,
    a permanent one is restarted by its parent."""
    top = Supervisor.start_link(
        [sub_spec("sub", [worker_spec("worker")], restart, intensity=0), worker_spec("other")],
        intensity=1,
        period=3600,
    )
    try:
        middle = sub(top, "sub")
        other_pid = pids(top)["other"]
        faults.crash(running(middle, "worker"))
        assert middle.wait(WAIT) == "shutdown"
        top.sync()
        assert top.alive
        info = top.which_children()[0]
        if restarted:
            assert info.status == "running"
            assert info.pid not in (None, middle.pid)
        else:
            assert (info.status, info.pid) == ("undefined", None)
        assert pids(top)["other"] == other_pid
    finally:
        stop_if_alive(top)


def test_tree_transient_sub_supervisor_terminated_via_the_api_stays_down() -> None:
    trace = Trace()
    top = Supervisor.start_link(
        [sub_spec("sub", [worker_spec("w1", trace), worker_spec("w2", trace)], "transient")]
    )
    try:
        middle = sub(top, "sub")
        top.terminate_child("sub")
        assert middle.wait(WAIT) == "shutdown"
        assert [i for i in trace.items if i[0] == "terminate"] == [
            ("terminate", "w2", "shutdown"),
            ("terminate", "w1", "shutdown"),
        ]
        top.sync()
        info = top.which_children()[0]
        assert (info.id, info.pid, info.status) == ("sub", None, "undefined")
        assert top.count_children() == ChildCounts(1, 0, 1, 0)
    finally:
        stop_if_alive(top)


# -- child_unlink --------------------------------------------------------------------------


def test_child_unlink_a_child_slower_than_its_shutdown_is_killed_and_terminate_returns() -> None:
    events = Trace()
    plan = FaultPlan().slow_terminate(30.0)
    spec = ChildSpec(
        "naughty_child", start=lambda: Worker.start_link("naughty", faults=plan), shutdown=0.2
    )
    sup = Supervisor.start_link([spec], intensity=2, period=3600, listeners=[events])
    try:
        child = running(sup, "naughty_child")
        sup.terminate_child("naughty_child")
        assert child.wait(0) == "killed"
        assert [(e.child_id, e.reason) for e in events.kinds("shutdown_error")] == [
            ("naughty_child", "killed")
        ]
        # The supervisor is not stuck: it answers, and the child stays terminated.
        sup.sync()
        info = sup.which_children()[0]
        assert (info.pid, info.status) == (None, "undefined")
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)
    finally:
        stop_if_alive(sup)


# -- simple_global_supervisor --------------------------------------------------------------


def test_simple_global_supervisor_named_children_get_their_names_back() -> None:
    """OTP-9212: after kill, exit or restart, the names resolve to the new incarnations."""
    server_name, middle_name = "server9212", "sup2_9212"
    middle_spec = ChildSpec(
        "middle",
        start=lambda: Supervisor.start_link(
            [ChildSpec("child", start=lambda: Worker.start_link("server", name=server_name))],
            strategy="one_for_all",
            intensity=3,
            period=60,
            name=middle_name,
        ),
        type="supervisor",
    )
    # Killing a supervisor signals its children asynchronously, so the first restart of the
    # middle one may find the old server still holding its name and be retried: hence the
    # intensity headroom and the wait for the "restarted" event rather than a sync.
    events = Trace()
    top = Supervisor.start_link(
        [middle_spec], strategy="one_for_all", intensity=10, period=60, listeners=[events]
    )
    try:
        server = Handle.named(server_name)
        middle = SupervisorHandle(name=middle_name)
        seen_servers = [server.call("pid")]
        seen_middles = [middle.pid]

        # kill_supervisor: the middle supervisor and its server come back under their names.
        faults.kill(middle)
        events.wait_kind("restarted")
        top.sync()
        seen_servers.append(server.call("pid"))
        seen_middles.append(middle.pid)

        # kill_worker
        faults.kill(server)
        middle.sync()
        seen_servers.append(server.call("pid"))

        # exit_worker: a normal exit of a permanent child is restarted too.
        incarnation = whereis(server_name)
        assert incarnation is not None
        incarnation.call(("stop", "normal"))
        assert incarnation.wait(WAIT) == "normal"
        middle.sync()
        seen_servers.append(server.call("pid"))

        # restart_worker: through the API.
        middle.terminate_child("child")
        assert whereis(server_name) is None
        middle.restart_child("child")
        seen_servers.append(server.call("pid"))

        assert len(set(seen_servers)) == 5
        assert None not in seen_middles and len(set(seen_middles)) == 2
        assert middle.which_children()[0].pid == seen_servers[-1]

        top.stop()
        assert whereis(server_name) is None
        assert whereis(middle_name) is None
    finally:
        stop_if_alive(top)


# -- already_started_outside_supervisor ----------------------------------------------------


def test_already_started_outside_supervisor_start_child_fails_with_already_started() -> None:
    name = "registered_name_outside"
    outsider = Worker.start_link("outsider", name=name)
    sup = Supervisor.start_link([])
    try:
        spec = ChildSpec(
            "child", start=lambda: Worker.start_link("child", name=name), restart="transient"
        )
        with pytest.raises(StartChildFailed) as failure:
            sup.start_child(spec)
        reason = failure.value.reason
        assert isinstance(reason, AlreadyStarted)
        holder: Any = reason.holder
        assert holder.pid == outsider.pid
        assert sup.which_children() == []
        assert outsider.alive
        registered = whereis(name)
        assert registered is not None and registered.pid == outsider.pid
    finally:
        stop_if_alive(sup)
        if outsider.alive:
            outsider.stop()


def test_sync_tree_returns_once_restarts_below_are_done_escalations_included() -> None:
    events = Trace()
    root = Supervisor.start_link(
        [
            ChildSpec(
                "mid",
                start=lambda: Supervisor.start_link([worker_spec("w")], intensity=1),
                type="supervisor",
            )
        ],
        listeners=[events],
    )
    try:
        mid, first = sub(root, "mid"), running(sub(root, "mid"), "w")
        faults.kill(first)
        root.sync_tree()  # mid restarts w: done before sync_tree returns
        second = running(sub(root, "mid"), "w")
        assert second.pid != first.pid and sub(root, "mid").pid == mid.pid
        faults.kill(second)
        root.sync_tree()  # one restart too many: mid gives up, the root restarts it
        assert [e.child_id for e in events.kinds("restarted")] == ["mid"]
        assert sub(root, "mid").pid != mid.pid
        assert running(sub(root, "mid"), "w").call("ping") == "pong"
    finally:
        root.stop()
