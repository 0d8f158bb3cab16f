"""A process declared dead does nothing more; exit signals do not queue behind messages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from otpmem.actors import (
    SHUTDOWN,
    GenServer,
    Killed,
    ServerExited,
    faults,
    new_table,
    sleep,
    stop_all,
)
from otpmem.agents import Agent, ConversationBusy
from otpmem.kernel import Tool
from otpmem.llm import ScriptedModel
from otpmem.stores import MemoryStore, MemoryStoreHandle
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, Trace


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    yield handle
    stop_all()


class Stuck(GenServer):
    """Blocks its thread in a handler (native code Python cannot pre-empt), then writes."""

    def init(self, store: MemoryStoreHandle, entered: threading.Event, release: threading.Event):
        self.store, self.entered, self.release = store, entered, release
        self.outcome: list[Any] = []
        self.table = new_table("stuck")

    def handle_call(self, message: Any) -> Any:
        self.entered.set()
        self.release.wait(WAIT)  # holds the thread, not just the process
        for attempt in (
            lambda: self.store.add("c", [{"role": "user", "content": "from a zombie"}]),
            lambda: self.store.cast("anything"),
            lambda: self.table.__setitem__("k", "v"),
            lambda: Stuck.start_link(self.store, self.entered, self.release),
        ):
            try:
                attempt()
                self.outcome.append("done")
            except Killed:
                self.outcome.append("killed")
        return "late answer"


def test_a_server_declared_dead_writes_nothing_when_its_thread_returns(
    store: MemoryStoreHandle,
) -> None:
    entered, release = threading.Event(), threading.Event()
    stuck = Stuck.start(store, entered, release, name="stuck")
    server: Stuck = stuck.resolve().server
    answers: list[Any] = []

    def call() -> None:
        try:
            answers.append(stuck.call("go", timeout=WAIT))
        except ServerExited as exc:
            answers.append(exc.reason)

    caller = threading.Thread(target=call)
    caller.start()
    assert entered.wait(WAIT)
    faults.kill(stuck, grace=0.05)
    # Declared dead: its name is free, its caller was answered with the reason, and a new
    # incarnation can take the name at once.
    assert not stuck.alive
    caller.join(WAIT)
    assert answers == ["killed"]
    again = Stuck.start(store, threading.Event(), threading.Event(), name="stuck")
    assert again.alive
    release.set()
    assert _wait_for(lambda: len(server.outcome) == 4)
    assert server.outcome == ["killed"] * 4
    assert store.get("c") == []


def _wait_for(predicate: Any) -> bool:
    done = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if predicate():
            return True
        done.wait(0.01)
    return bool(predicate())


def test_an_agent_killed_in_a_tool_frees_its_conversation_and_writes_nothing(
    store: MemoryStoreHandle,
) -> None:
    in_tool, release = threading.Event(), threading.Event()

    def slow_lookup() -> str:
        """A tool stuck on a remote service."""
        in_tool.set()
        release.wait(WAIT)
        return "late result"

    tool = Tool("slow_lookup", "stuck", {"type": "object", "properties": {}}, slow_lookup)
    call = {"id": "c1", "type": "function", "function": {"name": "slow_lookup", "arguments": "{}"}}
    model = ScriptedModel([{"tool_calls": [call]}, "answer after the tool"])
    first = Agent.start_link(
        llm=model, memory={"store": store}, conversation_id="conv", tools=[tool]
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            first.run("look it up")
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert in_tool.wait(WAIT)
    faults.kill(first, grace=0.05)
    runner.join(WAIT)
    assert isinstance(errors[0], ServerExited)
    before = store.get("conv")
    # The restarted agent takes the conversation at once: no ConversationBusy.
    second = Agent.start_link(
        llm=ScriptedModel(["fresh"]),
        memory={"store": store},
        conversation_id="conv",
        on_busy="refuse",
    )
    try:
        assert second.run("again").content == "fresh"
    except ConversationBusy:  # pragma: no cover - the defect this test guards against
        pytest.fail("the killed agent still holds the conversation")
    release.set()
    second.stop()
    stored = store.get("conv")
    assert stored[: len(before)] == before
    assert not any(m.get("content") == "late result" for m in stored)
    assert not any(m.get("content") == "answer after the tool" for m in stored)


class Backlog(GenServer):
    def init(self, trace: Trace) -> None:
        self.trace = trace

    def handle_cast(self, message: Any) -> Any:
        self.trace(("handled", message))
        sleep(0.01)

    def terminate(self, reason: Any) -> None:
        self.trace(("terminate", reason))


def test_terminate_child_does_not_wait_behind_the_queue() -> None:
    """400 queued casts of 10 ms each (4 s) against a 1 s shutdown: queued, the child would
    be killed; as an exit signal it stops after the message in hand, with terminate."""
    trace, events = Trace(), Trace()
    spec = ChildSpec("busy", start=lambda: Backlog.start_link(trace), shutdown=1.0)
    sup = Supervisor.start_link([spec], listeners=[events])
    try:
        child = sup.child("busy")
        assert child is not None
        for i in range(400):
            child.cast(i)
        trace.wait_for(lambda items: ("handled", 0) in items)
        sup.terminate_child("busy")
        handled = sum(1 for kind, _ in trace.items if kind == "handled")
        assert handled < 100
        assert ("terminate", SHUTDOWN) in trace.items
        assert child.exit_reason == SHUTDOWN
        assert events.kinds("shutdown_error") == []
    finally:
        sup.stop()


def test_supervisor_stop_of_busy_workers_stops_each_after_one_message() -> None:
    traces = [Trace() for _ in range(4)]
    specs = [
        ChildSpec(i, start=lambda t=t: Backlog.start_link(t), shutdown=1.0)
        for i, t in enumerate(traces)
    ]
    sup = Supervisor.start_link(specs)
    children = [sup.child(i) for i in range(4)]
    for child in children:
        assert child is not None
        for n in range(300):
            child.cast(n)
    sup.stop()
    for child, trace in zip(children, traces, strict=True):
        assert child is not None and child.exit_reason == SHUTDOWN
        assert ("terminate", SHUTDOWN) in trace.items


def test_a_killed_process_raises_killed_not_exception() -> None:
    """``Killed`` is a BaseException: ``except Exception`` in user code cannot swallow it."""
    assert not issubclass(Killed, Exception)
    assert issubclass(Killed, BaseException)


class SlowTerminate(GenServer):
    """A terminate that holds its thread past the shutdown timeout, then tries to write."""

    def init(self, store: MemoryStoreHandle, entered: threading.Event, release: threading.Event):
        self.store, self.entered, self.release = store, entered, release
        self.outcome: list[str] = []

    def terminate(self, reason: Any) -> None:
        self.entered.set()
        self.release.wait(WAIT)
        try:
            self.store.add("c", [{"role": "user", "content": "after the kill"}])
            self.outcome.append("written")
        except Killed:
            self.outcome.append("killed")


def test_a_terminate_stuck_past_its_shutdown_is_killed_and_then_writes_nothing(
    store: MemoryStoreHandle,
) -> None:
    """The supervisor enforces the shutdown timeout even though the child holds a thread
    (supervisors run on threads of their own), and the late terminate reaches nothing."""
    entered, release = threading.Event(), threading.Event()
    spec = ChildSpec(
        "slow", start=lambda: SlowTerminate.start_link(store, entered, release), shutdown=0.1
    )
    sup = Supervisor.start_link([spec])
    try:
        child = sup.child("slow")
        assert child is not None
        server: SlowTerminate = child.resolve().server
        sup.terminate_child("slow", timeout=WAIT)  # returns while terminate is still stuck
        assert entered.is_set()
        assert child.exit_reason == "killed"
        release.set()
        assert _wait_for(lambda: server.outcome == ["killed"])
        assert store.get("c") == []
    finally:
        release.set()
        sup.stop()
