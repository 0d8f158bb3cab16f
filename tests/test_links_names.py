"""Links, monitors and names: exit signals reach the right processes, names survive restarts."""

from __future__ import annotations

from typing import Any

import pytest

from otpmem.actors import (
    AlreadyStarted,
    Down,
    Exit,
    GenServer,
    Handle,
    NoProcess,
    NotInProcess,
    faults,
    link,
    monitor,
    register,
    registered,
    unregister,
    whereis,
)
from tests.support import WAIT, Trace, Worker


class Parent(GenServer):
    """Starts a linked Worker on request; traps exits when asked; records what it receives."""

    def init(self, trap: bool, trace: Trace) -> None:
        self.trace = trace
        self._process.trap_exits = trap

    def handle_call(self, message: Any) -> Any:
        kind, arg = message
        if kind == "spawn":
            return Worker.start_link(arg)
        if kind == "monitor":
            return monitor(arg)
        if kind == "link":
            link(arg)
            return None
        raise ValueError(message)

    def handle_info(self, message: Any) -> Any:
        self.trace(message)


def test_start_link_from_a_server_links_parent_and_child() -> None:
    trace = Trace()
    parent = Parent.start_link(True, trace)
    try:
        child = parent.call(("spawn", "c"))
        faults.crash(child, RuntimeError("child died"))
        (exit_msg,) = trace.wait_for(lambda items: len(items) == 1)
        assert isinstance(exit_msg, Exit) and exit_msg.pid == child.pid
        assert isinstance(exit_msg.reason, RuntimeError)
    finally:
        parent.stop()


def test_non_trapping_parent_dies_with_its_crashed_child() -> None:
    parent = Parent.start_link(False, Trace())
    child = parent.call(("spawn", "c"))
    faults.crash(child, "boom")
    assert parent.wait(WAIT) == "boom"


def test_normal_exit_of_a_child_does_not_kill_a_non_trapping_parent() -> None:
    parent = Parent.start_link(False, Trace())
    try:
        child = parent.call(("spawn", "c"))
        child.stop("normal")
        # A call after the exit is queued behind the (ignored) signal.
        assert parent.call(("monitor", child)) > 0
        assert parent.alive
    finally:
        parent.stop()


def test_parent_exit_kills_linked_child() -> None:
    parent = Parent.start_link(True, Trace())
    child = parent.call(("spawn", "c"))
    faults.crash(parent, "parent crashed")
    assert child.wait(WAIT) == "parent crashed"


def test_trapping_child_stops_when_its_parent_exits() -> None:
    class TrappingChild(GenServer):
        trap_exits = True

    class Starter(GenServer):
        def handle_call(self, message: Any) -> Any:
            return TrappingChild.start_link()

    parent = Starter.start_link()
    child = parent.call("spawn")
    parent.stop("shutdown")
    assert child.wait(WAIT) == "shutdown"


def test_monitor_delivers_down_with_reason() -> None:
    trace = Trace()
    watcher = Parent.start_link(False, trace)
    target = Worker.start()
    try:
        ref = watcher.call(("monitor", target))
        faults.kill(target)
        (down,) = trace.wait_for(lambda items: len(items) == 1)
        assert down == Down(ref, target.pid, "killed")
        assert watcher.alive  # a monitor is not a link
    finally:
        watcher.stop()


def test_monitor_of_a_dead_process_delivers_noproc_at_once() -> None:
    trace = Trace()
    watcher = Parent.start_link(False, trace)
    target = Worker.start()
    target.stop()
    try:
        ref = watcher.call(("monitor", target))
        (down,) = trace.wait_for(lambda items: len(items) == 1)
        assert down.ref == ref and down.reason == "noproc"
    finally:
        watcher.stop()


def test_link_to_a_dead_process_gives_noproc_exit() -> None:
    trace = Trace()
    parent = Parent.start_link(True, trace)
    target = Worker.start()
    target.stop()
    try:
        parent.call(("link", target))
        (exit_msg,) = trace.wait_for(lambda items: len(items) == 1)
        assert exit_msg == Exit(target.pid, "noproc")
    finally:
        parent.stop()


def test_link_outside_a_server_is_refused() -> None:
    worker = Worker.start()
    try:
        with pytest.raises(NotInProcess):
            link(worker)
    finally:
        worker.stop()


def test_name_is_taken_while_alive_and_freed_on_exit() -> None:
    first = Worker.start(name="unique")
    try:
        with pytest.raises(AlreadyStarted):
            Worker.start(name="unique")
        assert whereis("unique") == first
        assert "unique" in registered()
    finally:
        faults.kill(first)
    assert whereis("unique") is None
    second = Worker.start(name="unique")
    second.stop()


def test_named_handle_follows_the_name_to_a_new_incarnation() -> None:
    named = Handle.named("follow-me")
    first = Worker.start(name="follow-me")
    first_pid = named.call("pid")
    first.stop()
    with pytest.raises(NoProcess):
        named.call("pid")
    second = Worker.start(name="follow-me")
    try:
        assert named.call("pid") == second.pid != first_pid
    finally:
        second.stop()


def test_process_or_none_gives_the_process_behind_a_handle_without_raising() -> None:
    named = Handle.named("looked-up")
    assert named.process_or_none() is None
    worker = Worker.start(name="looked-up")
    process = worker.process_or_none()
    assert process is not None and named.process_or_none() is process
    worker.stop()
    assert named.process_or_none() is None  # the name is free again
    assert worker.process_or_none() is process and process.dead  # that incarnation, exited


def test_register_and_unregister_by_hand() -> None:
    worker = Worker.start()
    try:
        register("by-hand", worker)
        assert Handle.named("by-hand").call("ping") == "pong"
        unregister("by-hand")
        assert whereis("by-hand") is None
        with pytest.raises(KeyError, match="by-hand"):
            unregister("by-hand")
    finally:
        worker.stop()


def test_bad_names_are_rejected_with_clear_errors() -> None:
    with pytest.raises(TypeError, match="must be a str"):
        Worker.start(name=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        Handle.named("")


def test_unknown_name_call_raises_no_process_naming_it() -> None:
    with pytest.raises(NoProcess, match="never-registered"):
        Handle.named("never-registered").call("ping")


def test_exit_is_announced_after_the_name_is_released() -> None:
    """The restarted server can take the name the moment its parent hears of the exit."""
    names_at_exit: list[Any] = []

    class Watcher(GenServer):
        trap_exits = True

        def handle_call(self, message: Any) -> Any:
            return Worker.start_link(name="released-first")

        def handle_info(self, message: Any) -> Any:
            if message.reason == "killed":
                names_at_exit.append(whereis("released-first"))

    watcher = Watcher.start_link()
    try:
        child = watcher.call("spawn")
        faults.kill(child)
        watcher.call("spawn").stop()  # queued after the Exit, so it was handled
        assert names_at_exit == [None]
    finally:
        watcher.stop()


def test_start_timeout_does_not_kill_a_non_trapping_starter() -> None:
    from otpmem.actors import InitFailed
    from otpmem.actors.faults import FaultPlan

    class Starter(GenServer):
        def handle_call(self, message: Any) -> Any:
            try:
                Worker.start_link(faults=FaultPlan().slow_init(WAIT * 2), start_timeout=0.05)
            except InitFailed:
                return "start failed"
            return "started"

    starter = Starter.start()
    try:
        assert starter.call("go") == "start failed"
        assert starter.call("go") == "start failed"  # still alive: no exit signal reached it
    finally:
        starter.stop()


def test_on_exit_cleanups_run_on_kill_before_the_exit_is_announced() -> None:
    from otpmem.actors import on_exit

    order: list[str] = []

    class Holder(GenServer):
        def init(self) -> None:
            on_exit(lambda: order.append("first registered"))
            on_exit(lambda: order.append("second registered"))

    class Watcher(GenServer):
        trap_exits = True

        def handle_call(self, message: Any) -> Any:
            return Holder.start_link()

        def handle_info(self, message: Any) -> Any:
            order.append("exit announced")

    watcher = Watcher.start()
    try:
        holder = watcher.call("spawn")
        faults.kill(holder)
        watcher.call("spawn").stop()  # queued behind the Exit of the first holder
        assert order[:3] == ["second registered", "first registered", "exit announced"]
    finally:
        watcher.stop()
