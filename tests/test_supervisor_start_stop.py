"""supervisor_SUITE groups sup_start, sup_start_map and sup_stop (otp_pykka.md §2).

Starting: children start in order, ``ignore`` keeps a spec (except for temporary children),
a failing child at init stops the started ones in reverse order and fails ``start_link``.
Stopping: children exit with ``shutdown``; a child slower than its shutdown timeout, or a
brutal_kill child, exits with ``killed``; a child that exits by itself keeps its own reason.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import pytest

from otpmem.actors import (
    IGNORE,
    GenServer,
    Handle,
    InitFailed,
    StartIgnored,
    live_processes,
)
from otpmem.actors.faults import FaultPlan
from otpmem.supervisors import (
    ChildCounts,
    ChildNotFound,
    ChildSpec,
    InvalidSupervisorFlags,
    StartChildFailed,
    Supervisor,
    SupervisorEvent,
)
from tests.support import WAIT, Trace, Worker, worker_spec


class IgnoringSupervisor(Supervisor):
    """A supervisor whose init returns IGNORE (SUITE: ``init`` returning ``ignore``)."""

    def init(self, *args: Any) -> Any:
        return IGNORE


class FailingSupervisor(Supervisor):
    """A supervisor whose init raises (SUITE ``sup_start_fail``)."""

    def init(self, *args: Any) -> Any:
        raise RuntimeError("supervisor init failed")


class IgnoringServer(GenServer):
    """A server whose init returns IGNORE."""

    def init(self) -> Any:
        return IGNORE


class Nudger(GenServer):
    """On terminate, tells ``target`` to stop with ``reason``: it exits by itself mid-shutdown."""

    def init(self, target: Handle, reason: Any) -> None:
        self.target = target
        self.reason = reason

    def terminate(self, reason: Any) -> None:
        self.target.cast(("stop", self.reason))


def ignoring_spec(child_id: str, how: str, **kwargs: Any) -> ChildSpec:
    """A spec whose start means OTP's ``ignore``: returns None, or init returns IGNORE."""
    if how == "none":
        return ChildSpec(child_id, start=lambda: None, **kwargs)
    return ChildSpec(child_id, start=lambda: IgnoringServer.start_link(), **kwargs)


def events(trace: Trace, kind: str, child_id: Any = None) -> list[SupervisorEvent]:
    return [e for e in trace.kinds(kind) if child_id is None or e.child_id == child_id]


# -- sup_start ------------------------------------------------------------------------------


def test_sup_start_normal_no_children_terminates_with_shutdown() -> None:
    sup = Supervisor.start_link([])
    try:
        assert sup.alive
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)
    finally:
        sup.stop("shutdown")
    assert not sup.alive
    assert sup.exit_reason == "shutdown"


def test_start_link_and_start_take_the_same_parameters_positionally_or_by_name() -> None:
    assert inspect.signature(Supervisor.start_link) == inspect.signature(Supervisor.start)
    assert list(inspect.signature(Supervisor.start).parameters)[:6] == [
        "children",
        "strategy",
        "intensity",
        "period",
        "auto_shutdown",
        "name",
    ]
    root = Supervisor.start([worker_spec("w")], "one_for_all", 3, 2.0, "never", "sup.root")
    try:
        assert (root.name, root.info()["strategy"], root.info()["intensity"]) == (
            "sup.root",
            "one_for_all",
            3,
        )
        assert root.count_children().active == 1
    finally:
        root.stop()
    with pytest.raises(InvalidSupervisorFlags):
        Supervisor.start_link([], strategy="one_for_none")


def test_sup_start_normal_child_supervisor_terminated_by_parent_with_shutdown() -> None:
    trace = Trace()
    sub: dict[str, Handle] = {}

    def start_sub() -> Handle:
        sub["h"] = Supervisor.start_link([])
        return sub["h"]

    sup = Supervisor.start_link(
        [ChildSpec("sub", start=start_sub, type="supervisor")], listeners=[trace]
    )
    try:
        assert sup.count_children() == ChildCounts(1, 1, 1, 0)
    finally:
        sup.stop()
    assert sub["h"].exit_reason == "shutdown"
    assert [e.reason for e in events(trace, "terminated", "sub")] == ["shutdown"]


def test_sup_start_ignore_init_supervisor_returns_ignore() -> None:
    before = len(live_processes())
    with pytest.raises(StartIgnored):
        IgnoringSupervisor.start_link([worker_spec("never_started")])
    assert len(live_processes()) == before


def test_sup_start_ignore_init_genserver_returns_ignore() -> None:
    before = len(live_processes())
    with pytest.raises(StartIgnored):
        IgnoringServer.start_link()
    assert len(live_processes()) == before


@pytest.mark.parametrize("child", ["supervisor", "genserver"])
def test_sup_start_ignore_init_under_parent_sends_no_exit_signal(child: str) -> None:
    trace = Trace()
    if child == "supervisor":
        spec = ChildSpec("ign", start=lambda: IgnoringSupervisor.start_link([]), type="supervisor")
    else:
        spec = ChildSpec("ign", start=lambda: IgnoringServer.start_link())
    sup = Supervisor.start_link([spec], listeners=[trace])
    try:
        sup.sync()
        assert [(c.id, c.pid, c.status) for c in sup.which_children()] == [
            ("ign", None, "undefined")
        ]
        # An ignoring start leaves no process behind, so no EXIT and no restart follow.
        assert events(trace, "exited") == []
        assert events(trace, "restarted") == []
        assert sup.alive
    finally:
        sup.stop()


@pytest.mark.parametrize("how", ["none", "init_ignore"])
def test_sup_start_ignore_child(how: str) -> None:
    sup = Supervisor.start_link([])
    try:
        assert sup.start_child(ignoring_spec("child1", how)) is None
        h2 = sup.start_child(worker_spec("child2"))
        assert h2 is not None
        children = sup.which_children()
        assert [(c.id, c.pid, c.status) for c in children] == [
            ("child1", None, "undefined"),
            ("child2", h2.pid, "running"),
        ]
        assert sup.count_children() == ChildCounts(2, 1, 0, 2)
        assert sup.get_childspec("child1").id == "child1"
    finally:
        sup.stop()


@pytest.mark.parametrize("how", ["none", "init_ignore"])
def test_sup_start_ignore_child_at_init_keeps_spec(how: str) -> None:
    sup = Supervisor.start_link([ignoring_spec("child1", how), worker_spec("child2")])
    try:
        assert [(c.id, c.status) for c in sup.which_children()] == [
            ("child1", "undefined"),
            ("child2", "running"),
        ]
        assert sup.count_children() == ChildCounts(2, 1, 0, 2)
    finally:
        sup.stop()


@pytest.mark.parametrize("how", ["none", "init_ignore"])
def test_sup_start_ignore_temporary_child(how: str) -> None:
    sup = Supervisor.start_link(
        [ignoring_spec("child1", how, restart="temporary"), worker_spec("child2")]
    )
    try:
        assert [c.id for c in sup.which_children()] == ["child2"]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        with pytest.raises(ChildNotFound):
            sup.get_childspec("child1")
    finally:
        sup.stop()


@pytest.mark.parametrize("how", ["none", "init_ignore"])
def test_sup_start_ignore_temporary_child_start_child(how: str) -> None:
    sup = Supervisor.start_link([])
    try:
        assert sup.start_child(ignoring_spec("child1", how, restart="temporary")) is None
        assert sup.start_child(worker_spec("child2")) is not None
        assert [c.id for c in sup.which_children()] == ["child2"]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


def _maybe_ignoring_start(ignore: bool) -> Handle | None:
    return None if ignore else Worker.start_link("dyn")


@pytest.mark.parametrize("restart", ["temporary", "permanent"])
def test_sup_start_ignore_child_start_child_simple(restart: str) -> None:
    """Ports sup_start_ignore_temporary_child_start_child_simple and
    sup_start_ignore_permanent_child_start_child_simple: nothing is stored for ignore."""
    trace = Trace()
    spec = ChildSpec("dyn", start=_maybe_ignoring_start, restart=restart)  # type: ignore[arg-type]
    sup = Supervisor.start_link([spec], strategy="simple_one_for_one", listeners=[trace])
    stopped = False
    try:
        assert sup.start_child((True,)) is None
        h = sup.start_child((False,))
        assert h is not None
        assert [(c.id, c.pid) for c in sup.which_children()] == [(None, h.pid)]
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
        sup.stop()
        stopped = True
        assert not sup.alive
        assert h.exit_reason == "shutdown"
        assert events(trace, "shutdown_error") == []
    finally:
        if not stopped:
            sup.stop()


def test_sup_start_fail_supervisor_init_raises() -> None:
    with pytest.raises(InitFailed) as info:
        FailingSupervisor.start_link([])
    assert isinstance(info.value.reason, RuntimeError)
    assert str(info.value.reason) == "supervisor init failed"


@pytest.mark.parametrize("failure", ["init_raises", "start_raises", "bad_return"])
def test_sup_start_fail_child_stops_started_children_in_reverse(failure: str) -> None:
    trace = Trace()
    started: list[Handle] = []

    def start_worker(tag: str) -> Handle:
        h: Handle = Worker.start_link(tag, trace)
        started.append(h)
        return h

    def start_failing() -> Any:
        if failure == "init_raises":
            return Worker.start_link("c", trace, faults=FaultPlan().fail_init(None))
        if failure == "start_raises":
            raise RuntimeError("cannot start c")
        return "not a handle"

    specs = [
        ChildSpec("a", start=lambda: start_worker("a")),
        ChildSpec("b", start=lambda: start_worker("b")),
        ChildSpec("c", start=start_failing),
        ChildSpec("d", start=lambda: start_worker("d")),
    ]
    with pytest.raises(InitFailed) as info:
        Supervisor.start_link(specs)
    reason = info.value.reason
    assert isinstance(reason, StartChildFailed)
    assert reason.child_id == "c"
    assert [i for i in trace.items if i[0] == "init"] == [("init", "a"), ("init", "b")]
    assert [i for i in trace.items if i[0] == "terminate"] == [
        ("terminate", "b", "shutdown"),
        ("terminate", "a", "shutdown"),
    ]
    assert len(started) == 2
    assert all(h.exit_reason == "shutdown" for h in started)


@pytest.mark.parametrize("failure", ["raises", "junk_return", "init_raises"])
def test_sup_start_child_returns_error(failure: str) -> None:
    def start() -> Any:
        if failure == "raises":
            raise RuntimeError("start error")
        if failure == "junk_return":
            return ("error", "junk")
        return Worker.start_link("x", faults=FaultPlan().fail_init(None))

    sup = Supervisor.start_link([])
    try:
        with pytest.raises(StartChildFailed) as info:
            sup.start_child(ChildSpec("child1", start=start))
        assert info.value.child_id == "child1"
        assert sup.which_children() == []
        assert sup.count_children() == ChildCounts(0, 0, 0, 0)
        # The failed spec was discarded: the same id can be added again.
        assert sup.start_child(worker_spec("child1")) is not None
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


def test_sup_start_child_returns_error_simple() -> None:
    def start(fail: bool) -> Any:
        if fail:
            raise RuntimeError("start error")
        return Worker.start_link("dyn")

    sup = Supervisor.start_link([ChildSpec("dyn", start=start)], strategy="simple_one_for_one")
    try:
        with pytest.raises(StartChildFailed) as info:
            sup.start_child((True,))
        assert isinstance(info.value.reason, RuntimeError)
        assert sup.which_children() == []
        assert sup.start_child((False,)) is not None
        assert len(sup.which_children()) == 1
    finally:
        sup.stop()


def test_sup_start_restart_child_returns_error() -> None:
    plan = FaultPlan()
    sup = Supervisor.start_link(
        [ChildSpec("child1", start=lambda: Worker.start_link("child1", faults=plan))]
    )
    try:
        sup.terminate_child("child1")
        plan.fail_init(times=1)
        with pytest.raises(StartChildFailed) as info:
            sup.restart_child("child1")
        assert info.value.child_id == "child1"
        assert [(c.id, c.pid, c.status) for c in sup.which_children()] == [
            ("child1", None, "undefined")
        ]
        assert sup.count_children() == ChildCounts(1, 0, 0, 1)
        # The spec stayed: once the start works again, restart_child brings it back.
        h = sup.restart_child("child1")
        assert h is not None and h.call("ping") == "pong"
        assert sup.count_children() == ChildCounts(1, 1, 0, 1)
    finally:
        sup.stop()


# -- sup_start_map --------------------------------------------------------------------------


def test_sup_start_map_get_childspec_fills_defaults() -> None:
    worker_start = lambda: Worker.start_link("w")  # noqa: E731
    sup_start = lambda: Supervisor.start_link([])  # noqa: E731
    sup = Supervisor.start_link(
        [
            ChildSpec("w", start=worker_start),
            ChildSpec("s", start=sup_start, type="supervisor"),
            ChildSpec("t", start=worker_start, restart="transient", shutdown="brutal_kill"),
        ]
    )
    try:
        w = sup.get_childspec("w")
        assert (w.id, w.start, w.restart, w.shutdown, w.type, w.significant) == (
            "w",
            worker_start,
            "permanent",
            5.0,
            "worker",
            False,
        )
        s = sup.get_childspec("s")
        assert (s.restart, s.shutdown, s.type, s.significant) == (
            "permanent",
            None,
            "supervisor",
            False,
        )
        t = sup.get_childspec("t")
        assert (t.restart, t.shutdown) == ("transient", "brutal_kill")
        with pytest.raises(ChildNotFound):
            sup.get_childspec("unknown")
    finally:
        sup.stop()


def test_sup_start_map_simple_every_child_reports_the_template() -> None:
    template = ChildSpec("dyn", start=lambda: Worker.start_link("dyn"), restart="transient")
    sup = Supervisor.start_link([template], strategy="simple_one_for_one")
    try:
        h1 = sup.start_child(())
        h2 = sup.start_child(())
        assert h1 is not None and h2 is not None
        for key in (h1, h2, h1.pid, h2.pid):
            spec = sup.get_childspec(key)
            assert spec == template
            assert (spec.restart, spec.shutdown, spec.significant) == ("transient", 5.0, False)
    finally:
        sup.stop()


# -- sup_stop -------------------------------------------------------------------------------


def test_sup_stop_infinity() -> None:
    trace = Trace()
    grandchild: dict[str, Handle] = {}

    def start_sub() -> Handle:
        sub = Supervisor.start_link([worker_spec("grandchild", trace)])
        grandchild["h"] = sub.which_children()[0].handle  # type: ignore[assignment]
        return sub

    sup = Supervisor.start_link(
        [
            worker_spec("child1", trace, shutdown=None),
            ChildSpec("sub", start=start_sub, type="supervisor"),
            worker_spec("child3", trace, shutdown=None),
        ],
        listeners=[trace],
    )
    handles = [c.handle for c in sup.which_children()]
    sup.stop()
    assert all(h is not None and h.exit_reason == "shutdown" for h in handles)
    assert grandchild["h"].exit_reason == "shutdown"
    assert [i for i in trace.items if isinstance(i, tuple) and i[0] == "terminate"] == [
        ("terminate", "child3", "shutdown"),
        ("terminate", "grandchild", "shutdown"),
        ("terminate", "child1", "shutdown"),
    ]
    assert events(trace, "shutdown_error") == []


def test_sup_stop_timeout_kills_slow_child() -> None:
    trace = Trace()
    plan = FaultPlan().slow_terminate(10.0)
    sup = Supervisor.start_link(
        [
            worker_spec("child1", trace),
            ChildSpec(
                "slow",
                start=lambda: Worker.start_link("slow", trace, faults=plan),
                shutdown=0.2,
            ),
            worker_spec("child3", trace),
        ],
        listeners=[trace],
    )
    handles = {c.id: c.handle for c in sup.which_children()}
    t0 = time.monotonic()
    sup.stop()
    elapsed = time.monotonic() - t0
    assert handles["slow"] is not None and handles["slow"].exit_reason == "killed"
    assert handles["child1"] is not None and handles["child1"].exit_reason == "shutdown"
    assert handles["child3"] is not None and handles["child3"].exit_reason == "shutdown"
    assert elapsed < 3.0, f"shutdown waited {elapsed:.2f} s for a 0.2 s timeout"
    assert [e.reason for e in events(trace, "shutdown_error")] == ["killed"]
    assert [e.child_id for e in events(trace, "shutdown_error")] == ["slow"]


def test_sup_stop_timeout_dynamic_kills_slow_child() -> None:
    trace = Trace()
    plan = FaultPlan().slow_terminate(10.0)

    def start(slow: bool) -> Handle:
        return Worker.start_link("dyn", trace, faults=plan if slow else None)  # type: ignore[no-any-return]

    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=start, shutdown=0.2)],
        strategy="simple_one_for_one",
        listeners=[trace],
    )
    fast1 = sup.start_child((False,))
    slow = sup.start_child((True,))
    fast2 = sup.start_child((False,))
    t0 = time.monotonic()
    sup.stop()
    elapsed = time.monotonic() - t0
    assert slow is not None and slow.exit_reason == "killed"
    assert fast1 is not None and fast1.exit_reason == "shutdown"
    assert fast2 is not None and fast2.exit_reason == "shutdown"
    assert elapsed < 3.0, f"shutdown waited {elapsed:.2f} s for a 0.2 s timeout"
    assert [e.reason for e in events(trace, "shutdown_error")] == ["killed"]


def test_sup_stop_brutal_kill() -> None:
    trace = Trace()
    sup = Supervisor.start_link(
        [
            worker_spec("child1", trace),
            worker_spec("brutal", trace, shutdown="brutal_kill"),
        ],
        listeners=[trace],
    )
    handles = {c.id: c.handle for c in sup.which_children()}
    sup.stop()
    assert handles["brutal"] is not None and handles["brutal"].exit_reason == "killed"
    assert handles["child1"] is not None and handles["child1"].exit_reason == "shutdown"
    terminated = [i for i in trace.items if isinstance(i, tuple) and i[0] == "terminate"]
    # A brutal kill runs no terminate callback.
    assert terminated == [("terminate", "child1", "shutdown")]
    assert [e.reason for e in events(trace, "terminated", "brutal")] == ["killed"]
    assert events(trace, "shutdown_error") == []


def test_sup_stop_brutal_kill_dynamic() -> None:
    trace = Trace()
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=lambda: Worker.start_link("dyn", trace), shutdown="brutal_kill")],
        strategy="simple_one_for_one",
        listeners=[trace],
    )
    children = [sup.start_child(()) for _ in range(3)]
    sup.stop()
    assert all(h is not None and h.exit_reason == "killed" for h in children)
    assert [i for i in trace.items if isinstance(i, tuple) and i[0] == "terminate"] == []
    assert events(trace, "shutdown_error") == []


@pytest.mark.parametrize(
    ("own_reason", "is_error"),
    [("normal", True), (("shutdown", "own"), False), ("gone_away", True)],
)
def test_sup_stop_race_child_exit_keeps_own_reason(own_reason: Any, is_error: bool) -> None:
    """A child exiting by itself while the supervisor shuts down keeps its own reason.

    "nudger" is stopped first (reverse order); its terminate makes "racer" exit on its own
    before the supervisor gets to it.
    """
    trace = Trace()
    sup = Supervisor.start_link(
        [
            ChildSpec("racer", start=lambda: Worker.start_link("racer", trace, name="race_racer")),
            ChildSpec(
                "nudger",
                start=lambda: Nudger.start_link(Handle.named("race_racer"), own_reason),
            ),
        ],
        listeners=[trace],
    )
    racer = sup.child("racer")
    nudger = sup.child("nudger")
    sup.stop()
    assert not sup.alive
    assert nudger is not None and nudger.exit_reason == "shutdown"
    assert racer is not None and racer.exit_reason == own_reason
    assert [e.reason for e in events(trace, "terminated", "racer")] == [own_reason]
    # OTP reports a permanent child's non-shutdown reason as a shutdown_error, nothing more.
    assert [e.reason for e in events(trace, "shutdown_error")] == ([own_reason] if is_error else [])
    assert events(trace, "restarted") == []


@pytest.mark.parametrize("own_reason", ["normal", ("shutdown", "own"), "gone_away"])
def test_sup_stop_non_shutdown_exit_dynamic(own_reason: Any) -> None:
    trace = Trace()
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=lambda: Worker.start_link("dyn", trace), restart="temporary")],
        strategy="simple_one_for_one",
        listeners=[trace],
    )
    racer = sup.start_child(())
    other = sup.start_child(())
    assert racer is not None and other is not None
    # Exit signals do not queue behind messages, so a stop queued in the child could lose
    # to the supervisor's shutdown: let the child exit first; its Exit is queued ahead of
    # the supervisor's stop request.
    racer.cast(("stop", own_reason))
    racer.wait(WAIT)
    sup.stop()
    assert not sup.alive
    assert racer.exit_reason == own_reason
    assert other.exit_reason == "shutdown"
    assert events(trace, "restarted") == []
