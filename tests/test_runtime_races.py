"""Races found by the benchmarks, pinned: names during start, children dying at birth."""

from __future__ import annotations

import threading
from typing import Any

from otpmem.actors import GenServer, Handle, NoProcess, ServerExited, faults
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, Trace, Worker


class Echo(GenServer):
    def handle_call(self, message: Any) -> Any:
        return message


def test_calls_by_name_during_start_and_stop_only_see_runtime_errors() -> None:
    """A name becomes visible only once its mailbox exists: no AttributeError in the gap."""
    stop = threading.Event()
    unexpected: list[BaseException] = []
    answered = [0]

    def caller() -> None:
        named = Handle.named("racing")
        while not stop.is_set():
            try:
                named.call(1, timeout=WAIT)
                answered[0] += 1
            except (NoProcess, ServerExited):
                pass
            except BaseException as exc:  # anything else is the bug
                unexpected.append(exc)
            stop.wait(0)  # yield the GIL so start/stop get to run

    thread = threading.Thread(target=caller)
    thread.start()
    try:
        for _ in range(200):
            Echo.start(name="racing").stop()
    finally:
        stop.set()
        thread.join(WAIT)
    assert unexpected == []


def test_child_that_dies_right_after_start_counts_as_started() -> None:
    """OTP returns {ok, Pid} and then handles the EXIT; it is not a start failure."""
    trace = Trace()

    def start_then_die() -> Handle:
        handle = Worker.start_link()
        faults.kill(handle)
        return handle

    sup = Supervisor.start_link(listeners=[trace])
    try:
        handle = sup.start_child(ChildSpec("t", start=start_then_die, restart="temporary"))
        assert handle is not None and not handle.alive
        sup.sync()
        assert [e.kind for e in trace.items] == ["started", "exited"]
        assert sup.count_children() == (0, 0, 0, 0)  # temporary: its spec is gone
    finally:
        sup.stop()


def test_unlinked_child_that_died_before_the_supervisor_linked_it_is_restarted() -> None:
    trace = Trace()
    incarnations: list[Handle] = []

    def start_unlinked() -> Handle:
        handle = Worker.start()  # not linked: the supervisor links it, too late
        incarnations.append(handle)
        if len(incarnations) == 1:
            faults.kill(handle)
        return handle

    sup = Supervisor.start_link([ChildSpec("w", start=start_unlinked)], listeners=[trace])
    try:
        sup.sync()
        exited = trace.kinds("exited")
        assert len(exited) == 1 and exited[0].reason == "noproc"
        assert len(incarnations) == 2 and incarnations[1].alive
        assert sup.child("w") == incarnations[1]
    finally:
        sup.stop()


def test_supervisor_answers_garbage_requests_with_an_error_and_stays_up() -> None:
    from otpmem.supervisors import SupervisorError

    sup = Supervisor.start_link()
    try:
        for bad in (42, ("no_such_op",), (), "which_children"):
            try:
                sup.call(bad)
            except SupervisorError:
                pass
            else:
                raise AssertionError(f"{bad!r} was accepted")
        assert sup.alive and sup.which_children() == []
    finally:
        sup.stop()
