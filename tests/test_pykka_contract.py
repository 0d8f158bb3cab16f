"""The pykka behaviour the runtime is built on (otp_pykka.md §3), pinned so an upgrade that
changes it fails here first, with the reason, instead of somewhere deep in a supervisor."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pykka
import pytest

from otpmem.actors import GenServer, GreenletActor, live_processes
from otpmem.actors._scheduler import in_runner
from tests.support import WAIT


class Echo(pykka.ThreadingActor):
    def __init__(self, started: threading.Event | None = None) -> None:
        super().__init__()
        self.init_thread = threading.current_thread()
        self.started = started

    def on_start(self) -> None:
        self.start_thread = threading.current_thread()
        if self.started is not None:
            self.started.set()

    def on_receive(self, message: Any) -> Any:
        if message == "raise":
            raise ValueError("in ask")
        if message == "exit":
            raise SystemExit(1)
        if message == "threads":
            return (self.init_thread, self.start_thread, threading.current_thread())
        return message


def test_init_runs_in_caller_thread_and_on_start_in_the_actor_thread() -> None:
    ref = Echo.start()
    try:
        init_thread, start_thread, handler_thread = ref.ask("threads")
        assert init_thread is threading.current_thread()
        assert start_thread is handler_thread is not threading.current_thread()
    finally:
        ref.stop()


def test_exception_in_ask_leaves_a_pykka_actor_alive() -> None:
    """The opposite of OTP's rule: GenServer must catch and crash on its own."""
    ref = Echo.start()
    try:
        with pytest.raises(ValueError):
            ref.ask("raise")
        assert ref.is_alive() and ref.ask("ping") == "ping"
    finally:
        ref.stop()


def test_system_exit_in_a_pykka_actor_stops_every_actor() -> None:
    """Why every GenServer handler catches BaseException itself."""
    bystander = Echo.start()
    victim = Echo.start()
    victim.tell("exit")
    assert bystander.actor_stopped.wait(WAIT)
    assert not victim.is_alive() and not bystander.is_alive()


def test_tell_to_a_stopped_actor_raises_actor_dead_error() -> None:
    ref = Echo.start()
    ref.stop()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("late")


def test_messages_from_one_sender_arrive_in_order() -> None:
    received: list[int] = []

    class Recorder(pykka.ThreadingActor):
        def on_receive(self, message: Any) -> Any:
            received.append(message)

    ref = Recorder.start()
    for i in range(2000):
        ref.tell(i)
    ref.stop()  # a poison pill: queued behind the tells
    assert received == list(range(2000))


def test_actor_threads_are_not_daemons_by_default() -> None:
    """Non-daemon threads let terminate run at exit; the runtime stops them before the join."""
    started = threading.Event()
    ref = Echo.start(started)
    try:
        assert started.wait(WAIT)
        _, thread, _ = ref.ask("threads")
        assert thread.daemon is False
    finally:
        ref.stop()


def test_pykka_actor_init_fields_are_what_greenlet_actor_sets() -> None:
    """GreenletActor skips pykka's __init__ (a uuid and a threading.Event, ~5 KB each) and sets
    the fields pykka documents; ActorRef reads exactly these."""
    ref = pykka.ActorRef(_Bare())
    assert ref.actor_urn == "urn:bare"
    assert ref.actor_inbox is _Bare.inbox_marker
    assert ref.is_alive()


class _Bare(pykka.Actor):
    inbox_marker: Any = object()

    def __init__(self) -> None:  # no super().__init__(): only the documented fields
        self.actor_urn = "urn:bare"
        self.actor_inbox = self.inbox_marker
        self.actor_stopped = threading.Event()

    @staticmethod
    def _create_actor_inbox() -> Any:
        raise AssertionError("not called")

    @staticmethod
    def _create_future() -> Any:
        raise AssertionError("not called")

    def _start_actor_loop(self) -> None:
        raise AssertionError("not called")


class GreenEcho(GreenletActor):
    def on_start(self) -> None:
        self.started = True

    def on_receive(self, message: Any) -> Any:
        if message == "where":
            return (threading.current_thread().name, in_runner())
        if message == "boom":
            raise ValueError("boom")
        return message


def test_greenlet_actor_runs_pykka_loop_on_a_scheduler() -> None:
    ref = GreenEcho.start()
    try:
        assert ref.ask("hi", timeout=WAIT) == "hi"
        thread_name, on_runner = ref.ask("where", timeout=WAIT)
        assert thread_name.startswith("otpmem-scheduler-")
        assert on_runner
        assert ref.proxy().started.get(timeout=WAIT) is True
        with pytest.raises(ValueError, match="boom"):
            ref.ask("boom", timeout=WAIT)
        assert ref.ask("still alive", timeout=WAIT) == "still alive"
    finally:
        assert ref.stop(timeout=WAIT)
    assert not ref.is_alive()
    with pytest.raises(pykka.ActorDeadError):
        ref.tell("late")


def test_greenlet_future_suspends_a_process_instead_of_blocking_its_thread() -> None:
    """A process asking a pykka actor that lives on the same scheduler must not deadlock."""
    echo = GreenEcho.start()

    class Asker(GenServer):
        def handle_call(self, message: Any) -> Any:
            return echo.ask(message, timeout=WAIT)

    asker = Asker.start()
    try:
        assert [asker.call(i) for i in range(100)] == list(range(100))
    finally:
        asker.stop()
        echo.stop(timeout=WAIT)


def test_greenlet_future_times_out_like_pykka() -> None:
    future = GreenletActor._create_future()
    with pytest.raises(pykka.Timeout):
        future.get(timeout=0.01)
    future.set(1)
    assert future.get(timeout=0) == 1
    with pytest.raises(queue.Full):
        future.set(2)


def test_processes_are_not_in_pykka_registry() -> None:
    """pykka's registry is a list (unregister is O(n)): a million processes could never stop.
    The runtime keeps its own table; ``otpmem.actors.stop_all`` is the way to stop them all."""

    class Server(GenServer):
        pass

    server = Server.start()
    process = server.resolve()
    assert process in live_processes()
    assert not any(ref.actor_urn == str(process.pid) for ref in pykka.ActorRegistry.get_all())
    server.stop()
    assert process not in live_processes()
