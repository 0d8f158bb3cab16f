"""GenServer: start handshake, OTP's crash rule, calls, casts, stop, deferred replies."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otpmem.actors import (
    IGNORE,
    NO_REPLY,
    CallingSelf,
    CallTimeout,
    GenServer,
    InitFailed,
    NoProcess,
    ReplyTo,
    ServerExited,
    StartIgnored,
    Stop,
    faults,
    live_processes,
    reply,
)
from tests.support import WAIT, Trace, Worker


class Failing(GenServer):
    def init(self, error: BaseException) -> None:
        raise error


class Ignoring(GenServer):
    def init(self) -> Any:
        return IGNORE


class Strict(GenServer):
    """Treats ValueError as the caller's mistake, anything else as its own crash."""

    caller_errors = (ValueError,)

    def init(self) -> None:
        self.count = 0

    def handle_call(self, message: Any) -> Any:
        self.count += 1
        if message == "bad":
            raise ValueError("bad request")
        if message == "bug":
            raise KeyError("internal")
        return self.count


def test_start_link_returns_after_init_finished() -> None:
    trace = Trace()
    worker = Worker.start_link("w", trace)
    try:
        assert trace.items == [("init", "w")]
        assert worker.alive
    finally:
        worker.stop()


def test_init_raising_fails_start_and_leaves_nothing_running() -> None:
    with pytest.raises(InitFailed) as info:
        Failing.start_link(RuntimeError("no disk"))
    assert isinstance(info.value.reason, RuntimeError)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_init_returning_ignore_raises_start_ignored() -> None:
    with pytest.raises(StartIgnored):
        Ignoring.start_link()


def test_init_failure_frees_the_name_for_the_next_start() -> None:
    with pytest.raises(InitFailed):
        Failing.start_link(RuntimeError("first"), name="retry-me")
    worker = Worker.start_link(name="retry-me")
    try:
        assert worker.call("ping") == "pong"
    finally:
        worker.stop()


def test_slow_init_times_out_and_the_process_is_killed() -> None:
    plan = faults.FaultPlan().slow_init(WAIT * 2)
    with pytest.raises(InitFailed, match=r"within 0\.2 s"):
        Worker.start_link(faults=plan, start_timeout=0.2)


def test_call_roundtrip_and_state_kept_between_calls() -> None:
    server = Strict.start_link()
    try:
        assert [server.call("x") for _ in range(3)] == [1, 2, 3]
    finally:
        server.stop()


def test_exception_in_handle_call_crashes_server_and_caller_gets_reason() -> None:
    server = Strict.start_link()
    with pytest.raises(ServerExited) as info:
        server.call("bug")
    assert isinstance(info.value.reason, KeyError)
    assert not server.alive
    assert isinstance(server.exit_reason, KeyError)


def test_declared_caller_error_is_returned_and_server_keeps_running() -> None:
    server = Strict.start_link()
    try:
        with pytest.raises(ValueError, match="bad request"):
            server.call("bad")
        assert server.alive
        assert server.call("ok") == 2
    finally:
        server.stop()


def test_exception_in_cast_crashes_server() -> None:
    worker = Worker.start_link()
    worker.cast(("raise", RuntimeError("cast failed")))
    reason = worker.wait(WAIT)
    assert isinstance(reason, RuntimeError)


def test_pending_calls_fail_with_exit_reason_when_server_crashes() -> None:
    worker = Worker.start_link()
    gate = threading.Event()
    results: list[Any] = []

    def blocked_call() -> None:
        results.append(worker.call(("block", gate)))

    first = threading.Thread(target=blocked_call)
    first.start()
    worker.cast(("raise", RuntimeError("crash while busy")))
    errors: list[BaseException] = []

    def queued_call() -> None:
        try:
            worker.call("ping")
        except ServerExited as exc:
            errors.append(exc)

    second = threading.Thread(target=queued_call)
    second.start()
    gate.set()
    first.join(WAIT)
    second.join(WAIT)
    assert results == ["unblocked"]
    assert len(errors) == 1 and isinstance(errors[0].reason, RuntimeError)


def test_call_timeout_leaves_server_running_and_late_reply_is_dropped() -> None:
    worker = Worker.start_link()
    gate = threading.Event()
    try:
        with pytest.raises(CallTimeout):
            worker.call(("block", gate), timeout=0.05)
        gate.set()
        assert worker.call("ping") == "pong"
    finally:
        worker.stop()


def test_call_to_self_raises_at_once() -> None:
    seen: list[BaseException] = []

    class SelfCaller(GenServer):
        def handle_call(self, message: Any) -> Any:
            try:
                self.handle.call("again")
            except CallingSelf as exc:
                seen.append(exc)
            return "done"

    server = SelfCaller.start_link()
    try:
        assert server.call("go") == "done"
        assert len(seen) == 1
    finally:
        server.stop()


def test_stop_runs_terminate_with_reason_and_stopping_twice_raises() -> None:
    trace = Trace()
    worker = Worker.start_link("w", trace)
    worker.stop("shutdown")
    assert trace.items[-1] == ("terminate", "w", "shutdown")
    assert worker.exit_reason == "shutdown"
    with pytest.raises(NoProcess):
        worker.stop()


def test_calls_to_a_dead_server_raise_no_process() -> None:
    worker = Worker.start_link()
    worker.stop()
    with pytest.raises(NoProcess):
        worker.call("ping")
    worker.cast("ignored")  # casts to the dead are dropped, as in OTP


def test_stop_return_value_replies_then_exits_with_reason() -> None:
    trace = Trace()
    worker = Worker.start_link("w", trace)
    assert worker.call(("stop", ("shutdown", "done"))) == "stopping"
    assert worker.wait(WAIT) == ("shutdown", "done")
    assert trace.items[-1] == ("terminate", "w", ("shutdown", "done"))


def test_system_exit_in_one_server_does_not_stop_the_others() -> None:
    victim = Worker.start_link()
    bystander = Worker.start_link()
    try:
        with pytest.raises(ServerExited) as info:
            victim.call(("raise", SystemExit(3)))
        assert isinstance(info.value.reason, SystemExit)
        assert bystander.call("ping") == "pong"
    finally:
        bystander.stop()


def test_keyboard_interrupt_in_a_server_crashes_only_that_server() -> None:
    victim = Worker.start_link()
    bystander = Worker.start_link()
    try:
        victim.cast(("raise", KeyboardInterrupt()))
        assert isinstance(victim.wait(WAIT), KeyboardInterrupt)
        assert bystander.alive and bystander.call("ping") == "pong"
    finally:
        bystander.stop()


def test_deferred_reply_answers_from_another_thread() -> None:
    class Deferring(GenServer):
        def handle_call(self, message: Any) -> Any:
            to: ReplyTo = self.caller()
            threading.Thread(target=reply, args=(to, message * 2)).start()
            return NO_REPLY

    server = Deferring.start_link()
    try:
        assert server.call(21) == 42
    finally:
        server.stop()


def test_each_incarnation_has_a_new_pid() -> None:
    first = Worker.start_link()
    pid = first.call("pid")
    first.stop()
    second = Worker.start_link()
    try:
        assert second.pid != pid and second.call("pid") == second.pid
    finally:
        second.stop()


def test_sixteen_threads_calling_one_server_all_get_their_own_answers() -> None:
    class Echo(GenServer):
        def handle_call(self, message: Any) -> Any:
            return message

    server = Echo.start_link()
    wrong: list[tuple[int, int]] = []

    def caller(n: int) -> None:
        for i in range(200):
            got = server.call((n, i))
            if got != (n, i):
                wrong.append((n, i))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
    server.stop()
    assert wrong == []


def test_unhandled_call_crashes_with_not_implemented() -> None:
    class Bare(GenServer):
        pass

    server = Bare.start_link()
    with pytest.raises(ServerExited) as info:
        server.call("anything")
    assert isinstance(info.value.reason, NotImplementedError)


def test_handler_returning_stop_from_cast_exits_normally() -> None:
    worker = Worker.start_link()
    worker.cast(("stop", "normal"))
    assert worker.wait(WAIT) == "normal"


def test_stop_is_queued_behind_earlier_messages() -> None:
    received: list[Any] = []

    class Recorder(GenServer):
        def handle_cast(self, message: Any) -> Any:
            received.append(message)

    server = Recorder.start_link()
    for i in range(100):
        server.cast(i)
    server.stop()
    assert received == list(range(100))


def test_stop_from_inside_the_server_is_refused() -> None:
    errors: list[BaseException] = []

    class SelfStopper(GenServer):
        def handle_call(self, message: Any) -> Any:
            try:
                self.handle.stop()
            except CallingSelf as exc:
                errors.append(exc)
            return Stop("normal", reply="ok")

    server = SelfStopper.start_link()
    assert server.call("go") == "ok"
    assert server.wait(WAIT) == "normal"
    assert len(errors) == 1


class Spawner(GenServer):
    """Spawns a Worker from inside itself, linked or not, and reports whether it is linked."""

    def handle_call(self, link: bool) -> Any:
        child = Worker.spawn((), {}, link=link)
        process = child.process_or_none()
        linked = process in self._process.links
        child.stop()
        return linked


def test_spawn_links_the_new_server_to_its_caller_only_when_asked() -> None:
    spawner = Spawner.start_link()
    try:
        assert spawner.call(True) is True
        assert spawner.call(False) is False
    finally:
        spawner.stop()
    named = Worker.spawn(("w",), {}, link=False, name="genserver.spawned")
    try:
        assert Worker.named("genserver.spawned").call("ping") == "pong"
    finally:
        named.stop()


class Agentish(GenServer):
    kind = "agent"


def test_a_process_reports_its_servers_kind_or_else_its_class_name() -> None:
    worker = Worker.start_link()
    agent = Agentish.start_link()
    try:
        assert [p.kind for p in live_processes() if p.pid in (worker.pid, agent.pid)] == [
            "worker",
            "agent",
        ]
        assert [p.pid for p in live_processes("agent")] == [agent.pid]
    finally:
        worker.stop()
        agent.stop()
