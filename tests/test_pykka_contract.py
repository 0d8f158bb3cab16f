"""The pykka behaviour the runtime is built on (otp_pykka.md §3), pinned so an upgrade that
changes it fails here first, with the reason, instead of somewhere deep in a supervisor."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pykka
import pytest
from pykka._envelope import Envelope

from otpmem.actors import GenServer
from tests.support import WAIT, Worker


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


def test_overridden_inbox_factory_is_used() -> None:
    worker = Worker.start()
    try:
        process = worker.resolve()
        assert isinstance(process._shell.actor_inbox, queue.SimpleQueue)
    finally:
        worker.stop()


def test_loop_exits_once_actor_stopped_is_set_and_an_envelope_wakes_it() -> None:
    """How kill works: set the flag, put an envelope straight into the inbox."""
    handled: list[Any] = []

    class Watcher(pykka.ThreadingActor):
        def on_receive(self, message: Any) -> Any:
            handled.append(message)
            self.actor_stopped.set()

    ref = Watcher.start()
    ref.actor_inbox.put(Envelope("wake"))  # type: ignore[attr-defined]
    ref.actor_inbox.put(Envelope("never handled"))  # type: ignore[attr-defined]
    ref.actor_stopped.wait(WAIT)
    pykka.ActorRegistry.unregister(ref)
    assert handled[0] == "wake"
    assert "never handled" not in handled


def test_processes_appear_in_the_pykka_registry_while_alive() -> None:
    class Server(GenServer):
        pass

    server = Server.start()
    process = server.resolve()
    assert process._shell.actor_ref in pykka.ActorRegistry.get_all()
    server.stop()
    assert process._shell.actor_ref not in pykka.ActorRegistry.get_all()
