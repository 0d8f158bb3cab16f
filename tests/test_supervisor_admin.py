"""supervisor_SUITE API administration: child_adm, child_adm_simple, which_children,
count_children, child_specs, sup_flags (otp_pykka.md §1.3, §1.6, §2).

Differences from OTP kept on purpose: ``which_children`` lists children in start order
(OTP lists the most recent first), and refusals are exceptions instead of ``{error, _}``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from otpmem.actors import NoProcess
from otpmem.supervisors import (
    ChildAlreadyPresent,
    ChildAlreadyStarted,
    ChildCounts,
    ChildInfo,
    ChildNotFound,
    ChildRunning,
    ChildSpec,
    InvalidChildSpec,
    InvalidSupervisorFlags,
    SimpleOneForOneOnly,
    Supervisor,
    SupervisorHandle,
)
from tests.support import Worker, worker_spec


def _start_worker() -> Any:
    return Worker.start_link("w")


# -- child_adm ------------------------------------------------------------------------------


def test_child_adm() -> None:
    child1 = worker_spec("child1")
    sup = Supervisor.start_link([child1])
    try:
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        [info] = sup.which_children()
        pid1 = info.pid
        assert pid1 is not None

        with pytest.raises(ChildAlreadyStarted) as started:
            sup.start_child(child1)
        assert started.value.pid == pid1
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)

        # Terminating keeps the spec; terminating again is fine.
        sup.terminate_child("child1")
        assert not info.handle.alive  # type: ignore[union-attr]
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)
        sup.terminate_child("child1")
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)

        with pytest.raises(ChildAlreadyPresent):
            sup.start_child(child1)
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)

        restarted = sup.restart_child("child1")
        assert restarted is not None and restarted.pid != pid1
        assert restarted.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)

        with pytest.raises(ChildRunning):
            sup.restart_child("child1")
        with pytest.raises(ChildRunning):
            sup.delete_child("child1")
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)

        # A pid (or handle) is not a key outside simple_one_for_one.
        with pytest.raises(ChildNotFound):
            sup.terminate_child(restarted.pid)
        with pytest.raises(ChildNotFound):
            sup.terminate_child(restarted)
        assert restarted.alive

        sup.terminate_child("child1")
        sup.delete_child("child1")
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)

        for op in (sup.delete_child, sup.restart_child, sup.terminate_child, sup.get_childspec):
            with pytest.raises(ChildNotFound):
                op("child1")
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)

        # A deleted spec can be added again.
        again = sup.start_child(child1)
        assert again is not None and again.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


def test_child_adm_bad_supervisor_name_raises_noproc() -> None:
    nowhere = SupervisorHandle(name="no_such_supervisor")
    with pytest.raises(NoProcess):
        nowhere.which_children()
    with pytest.raises(NoProcess):
        nowhere.start_child(worker_spec("child1"))


def test_child_adm_simple() -> None:
    template = ChildSpec("dyn", start=_start_worker)
    sup = Supervisor.start_link([template], strategy="simple_one_for_one")
    outsider = Worker.start_link("outsider")
    try:
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(1, 0, 0, 0)

        h1 = sup.start_child(())
        assert h1 is not None
        assert [(c.id, c.pid) for c in sup.which_children()] == [(None, h1.pid)]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)

        h2 = sup.start_child(())
        assert h2 is not None and h2.pid != h1.pid
        assert [c.pid for c in sup.which_children()] == [h1.pid, h2.pid]
        assert sup.count_children() == ChildCounts(1, 2, 0, 2)

        # A process that is no child: not_found, and it is left alone.
        with pytest.raises(ChildNotFound):
            sup.terminate_child(outsider.pid)
        with pytest.raises(ChildNotFound):
            sup.terminate_child(outsider)
        assert outsider.alive
        assert sup.count_children() == ChildCounts(1, 2, 0, 2)

        sup.terminate_child(h1.pid)
        assert not h1.alive
        assert h1.exit_reason == "shutdown"
        assert [c.pid for c in sup.which_children()] == [h2.pid]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)

        sup.terminate_child(h2)  # by handle as well
        assert not h2.alive
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(1, 0, 0, 0)

        # Ids mean nothing under simple_one_for_one.
        with pytest.raises(SimpleOneForOneOnly):
            sup.restart_child("dyn")
        with pytest.raises(SimpleOneForOneOnly):
            sup.delete_child("dyn")
        with pytest.raises(SimpleOneForOneOnly):
            sup.terminate_child("dyn")
        assert sup.alive
    finally:
        sup.stop()
        outsider.stop()


def test_child_adm_simple_terminated_child_pid_is_not_found() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=_start_worker)], strategy="simple_one_for_one"
    )
    try:
        h = sup.start_child(())
        assert h is not None
        pid = h.pid
        sup.terminate_child(pid)
        with pytest.raises(ChildNotFound):
            sup.terminate_child(pid)
        with pytest.raises(ChildNotFound):
            sup.get_childspec(pid)
    finally:
        sup.stop()


# -- which_children / count_children --------------------------------------------------------


def test_which_children() -> None:
    sup = Supervisor.start_link(
        [
            worker_spec("a"),
            ChildSpec("sub", start=lambda: Supervisor.start_link([]), type="supervisor"),
            worker_spec("c"),
        ]
    )
    try:
        children = sup.which_children()
        assert all(isinstance(c, ChildInfo) for c in children)
        assert [(c.id, c.type, c.status) for c in children] == [
            ("a", "worker", "running"),
            ("sub", "supervisor", "running"),
            ("c", "worker", "running"),
        ]
        for c in children:
            assert c.handle is not None and c.pid == c.handle.pid and c.handle.alive
        assert children[0].handle.call("ping") == "pong"  # type: ignore[union-attr]
        assert isinstance(children[1].handle, SupervisorHandle)
        assert children[1].handle.which_children() == []
        assert len({c.pid for c in children}) == 3
        assert sup.child("c") == children[2].handle

        sup.terminate_child("sub")
        after = sup.which_children()
        assert [(c.id, c.pid, c.handle, c.status) for c in after] == [
            ("a", children[0].pid, children[0].handle, "running"),
            ("sub", None, None, "undefined"),
            ("c", children[2].pid, children[2].handle, "running"),
        ]
        assert sup.child("sub") is None
        assert sup.count_children() == ChildCounts(3, 2, 1, 2)

        sup.delete_child("sub")
        assert [c.id for c in sup.which_children()] == ["a", "c"]
        assert sup.count_children() == ChildCounts(2, 2, 0, 2)

        sup.start_child(worker_spec("d"))
        assert [c.id for c in sup.which_children()] == ["a", "c", "d"]
    finally:
        sup.stop()


def test_which_children_simple_one_for_one() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=lambda: Supervisor.start_link([]), type="supervisor")],
        strategy="simple_one_for_one",
    )
    try:
        handles = [sup.start_child(()) for _ in range(3)]
        children = sup.which_children()
        assert [(c.id, c.type, c.status) for c in children] == [(None, "supervisor", "running")] * 3
        assert [c.pid for c in children] == [h.pid for h in handles if h is not None]
        assert sup.count_children() == ChildCounts(1, 3, 3, 0)

        sup.terminate_child(handles[1])
        assert [c.pid for c in sup.which_children()] == [handles[0].pid, handles[2].pid]  # type: ignore[union-attr]
        assert sup.count_children() == ChildCounts(1, 2, 2, 0)
    finally:
        sup.stop()


def test_count_children_mixed_types() -> None:
    sup = Supervisor.start_link(
        [
            worker_spec("w1"),
            ChildSpec("s1", start=lambda: Supervisor.start_link([]), type="supervisor"),
            worker_spec("w2"),
            ChildSpec("ignored", start=lambda: None),
        ]
    )
    try:
        assert sup.count_children() == ChildCounts(4, 3, 1, 3)
        counts = sup.count_children()
        assert (counts.specs, counts.active, counts.supervisors, counts.workers) == (4, 3, 1, 3)
    finally:
        sup.stop()


# -- child_specs / child_specs_map ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": None}, "id"),
        ({"id": ["unhashable"]}, "id"),
        ({"start": "not callable"}, "start"),
        ({"start": None}, "start"),
        ({"restart": "sometimes"}, "restart"),
        ({"shutdown": -10}, "shutdown"),
        ({"shutdown": "later"}, "shutdown"),
        ({"shutdown": True}, "shutdown"),
        ({"type": "manager"}, "type"),
        ({"significant": "yes"}, "significant"),
        ({"significant": True, "restart": "permanent"}, "significant"),
    ],
)
def test_child_specs_invalid(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"id": "child", "start": _start_worker}
    args.update(kwargs)
    with pytest.raises(InvalidChildSpec) as info:
        ChildSpec(**args)
    assert info.value.field == field


def test_child_specs_valid_combinations() -> None:
    for restart in ("transient", "temporary"):
        spec = ChildSpec("c", start=_start_worker, restart=restart, significant=True)
        assert spec.significant is True
    assert ChildSpec("c", start=_start_worker, shutdown=0).shutdown == 0
    assert ChildSpec("c", start=_start_worker, shutdown=None).shutdown is None


def test_child_specs_duplicate_ids_rejected_before_any_start() -> None:
    started: list[str] = []

    def start() -> Any:
        started.append("x")
        return Worker.start_link("x")

    with pytest.raises(InvalidChildSpec) as info:
        Supervisor.start_link(
            [ChildSpec("a", start=start), ChildSpec("b", start=start), ChildSpec("a", start=start)]
        )
    assert info.value.field == "id"
    assert started == []


def test_child_specs_significant_needs_auto_shutdown() -> None:
    auto_shutdown = "never"
    significant = ChildSpec("sig", start=_start_worker, restart="transient", significant=True)
    with pytest.raises(InvalidChildSpec) as info:
        Supervisor.start_link([significant], auto_shutdown=auto_shutdown)
    assert info.value.field == "significant"

    sup = Supervisor.start_link([], auto_shutdown=auto_shutdown)
    try:
        with pytest.raises(InvalidChildSpec) as info:
            sup.start_child(significant)
        assert info.value.field == "significant"
        assert sup.alive
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)
    finally:
        sup.stop()

    ok = Supervisor.start_link([significant], auto_shutdown="any_significant")
    try:
        assert ok.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        ok.stop()


@pytest.mark.parametrize("count", [0, 2])
def test_child_specs_simple_one_for_one_needs_exactly_one_spec(count: int) -> None:
    specs = [worker_spec(f"c{i}") for i in range(count)]
    with pytest.raises(InvalidChildSpec) as info:
        Supervisor.start_link(specs, strategy="simple_one_for_one")
    assert info.value.field == "children"


@pytest.mark.parametrize("children", ["child", 42, worker_spec("single")])
def test_child_specs_not_a_list(children: Any) -> None:
    with pytest.raises(InvalidChildSpec) as info:
        Supervisor.start_link(children)
    assert info.value.field == "children"


def test_child_specs_start_child_rejects_non_spec_and_keeps_running() -> None:
    sup = Supervisor.start_link([])
    try:
        with pytest.raises(InvalidChildSpec) as info:
            sup.start_child(("child", _start_worker))
        assert info.value.field == "spec"
        assert sup.alive
        assert sup.which_children() == []
    finally:
        sup.stop()


# -- sup_flags ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ({"strategy": "one_for_some"}, "strategy"),
        ({"intensity": -1}, "intensity"),
        ({"intensity": 1.5}, "intensity"),
        ({"intensity": float("inf")}, "intensity"),
        ({"intensity": "infinity"}, "intensity"),
        ({"period": 0}, "period"),
        ({"period": -1}, "period"),
        ({"period": float("inf")}, "period"),
        ({"period": "5"}, "period"),
        ({"auto_shutdown": "sometimes"}, "auto_shutdown"),
        ({"strategy": "simple_one_for_one", "auto_shutdown": "any_significant"}, "auto_shutdown"),
        ({"strategy": "simple_one_for_one", "auto_shutdown": "all_significant"}, "auto_shutdown"),
    ],
)
def test_sup_flags_invalid(flags: dict[str, Any], flag: str) -> None:
    children = [worker_spec("only")]
    with pytest.raises(InvalidSupervisorFlags) as info:
        Supervisor.start_link(children, **flags)
    assert info.value.flag == flag


def test_sup_flags_valid_edges() -> None:
    for flags in (
        {"intensity": 0, "period": 1},
        {"intensity": 1000, "period": 0.5},
        {"strategy": "rest_for_one", "auto_shutdown": "all_significant"},
    ):
        sup = Supervisor.start_link([], **flags)
        try:
            assert sup.alive
        finally:
            sup.stop()


# -- a stopped supervisor -------------------------------------------------------------------


def test_calls_on_stopped_supervisor_raise_noproc() -> None:
    sup = Supervisor.start_link([worker_spec("child1")])
    child = sup.child("child1")
    sup.stop()
    assert child is not None and not child.alive
    calls: list[Callable[[], object]] = [
        lambda: sup.which_children(),
        lambda: sup.count_children(),
        lambda: sup.start_child(worker_spec("child2")),
        lambda: sup.terminate_child("child1"),
        lambda: sup.restart_child("child1"),
        lambda: sup.delete_child("child1"),
        lambda: sup.get_childspec("child1"),
        lambda: sup.sync(),
        lambda: sup.child("child1"),
    ]
    for call in calls:
        with pytest.raises(NoProcess):
            call()


def test_stopping_supervisor_twice_raises_noproc() -> None:
    sup = Supervisor.start_link([])
    sup.stop()
    with pytest.raises(NoProcess):
        sup.stop()


def test_unknown_child_ids_raise_child_not_found() -> None:
    sup = Supervisor.start_link([worker_spec("known")])
    try:
        for op in (sup.terminate_child, sup.restart_child, sup.delete_child, sup.get_childspec):
            with pytest.raises(ChildNotFound) as info:
                op("unknown")
            assert info.value.child == "unknown"
        assert sup.child("unknown") is None
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()
