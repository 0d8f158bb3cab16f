"""Every context a model is sent is valid, whatever interleaves with the turns: kills at
any point of a turn, clear and forget_user racing a turn mid-tool-call, add_message after a
crashed turn. Checked with a checker of its own, not with the repair under test."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.actors import ServerExited, faults
from otpmem.agents import Agent, AgentHandle, TurnCleared, TurnFailed
from otpmem.llm import ChatResponse, ScriptedModel, tool_call
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv
from otpmem.stores import MemoryStore

WAIT = 10.0
CONV = Conv("mallory", "interleaved")


def assert_valid(messages: Sequence[Mapping[str, Any]]) -> None:
    """Each assistant tool call followed by exactly its results; no other tool message."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message["role"] != "tool", f"orphan tool result at {i}: {messages}"
        calls = message.get("tool_calls") or []
        i += 1
        if calls:
            expected = {c["id"] for c in calls}
            results = [m["tool_call_id"] for m in messages[i : i + len(calls)]]
            assert all(m["role"] == "tool" for m in messages[i : i + len(calls)]), messages
            assert sorted(results) == sorted(expected), f"call {expected} answered {results}"
            i += len(calls)


class Scene:
    """One agent on one store, a model and a tool that can be held at will."""

    def __init__(self) -> None:
        self.store = MemoryStore.start_link()
        self.sent: list[list[dict[str, Any]]] = []
        self.hold_in: str | None = None
        self.entered = threading.Event()
        self.release = threading.Event()
        self.agents: list[AgentHandle] = []
        self.agent = self.start()

    def start(self) -> AgentHandle:
        def add(a: int, b: int) -> int:
            """Add two integers."""
            self.wait_if("tool")
            return a + b

        agent = Agent.start(
            llm=ScriptedModel(self.model),
            memory=DefaultProvider(self.store),
            conversation_id=CONV.conversation_id,
            user_id=CONV.user_id,
            tools=[add],
        )
        self.agents.append(agent)
        return agent

    def wait_if(self, place: str) -> None:
        if self.hold_in == place:
            self.hold_in = None
            self.entered.set()
            assert self.release.wait(WAIT)

    def model(self, messages: Sequence[Mapping[str, Any]]) -> Any:
        self.sent.append([dict(m) for m in messages])
        self.wait_if("model")
        last = messages[-1]
        if last["role"] == "user" and "tool" in str(last["content"]):
            calls = (tool_call(f"c{len(self.sent)}a", "add", '{"a": 1, "b": 2}'),)
            if "two" in str(last["content"]):
                calls += (tool_call(f"c{len(self.sent)}b", "add", '{"a": 3, "b": 4}'),)
            return ChatResponse(content=None, tool_calls=calls)
        return "done"

    def turn(self, text: str) -> None:
        with contextlib.suppress(TurnFailed, ServerExited):
            self.agent.run(text)

    def interrupted(self, text: str, place: str, action: str) -> None:
        self.entered.clear()
        self.release.clear()
        self.hold_in = place
        caller = threading.Thread(target=self.turn, args=(text,))
        caller.start()
        if not self.entered.wait(WAIT):
            self.hold_in = None  # the turn never reached that place (no tool asked)
        else:
            if action == "kill":
                faults.kill(self.agent, grace=0.5)
            elif action == "clear":
                self.store.clear(CONV)
            else:
                self.store.forget_user(CONV.user_id)
        self.release.set()
        caller.join(WAIT)
        assert not caller.is_alive()
        if not self.agent.alive:
            self.agent = self.start()

    def stop(self) -> None:
        self.release.set()
        for agent in self.agents:
            if agent.alive:
                agent.stop()
        self.store.stop()


TEXT = st.sampled_from(["hi", "use a tool", "use two tools"])
STEP = st.one_of(
    st.tuples(st.just("turn"), TEXT),
    st.tuples(
        st.just("interrupted"),
        st.sampled_from(["use a tool", "use two tools"]),
        st.sampled_from(["model", "tool"]),
        st.sampled_from(["kill", "clear", "forget"]),
    ),
    st.tuples(st.just("add_message"), st.sampled_from(["user", "assistant", "system"])),
    st.tuples(st.just("clear")),
    st.tuples(st.just("forget")),
)


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_no_interleaving_sends_an_invalid_context(steps: list[tuple[Any, ...]]) -> None:
    scene = Scene()
    try:
        for step in steps:
            kind = step[0]
            if kind == "turn":
                scene.turn(step[1])
            elif kind == "interrupted":
                scene.interrupted(step[1], step[2], step[3])
            elif kind == "add_message":
                scene.agent.add_message({"role": step[1], "content": f"a {step[1]} note"})
            elif kind == "clear":
                scene.store.clear(CONV)
            else:
                scene.store.forget_user(CONV.user_id)
        scene.turn("use two tools")  # whatever is stored now, the next context is valid
        assert scene.sent, "no model call was made"
        for context in scene.sent:
            assert_valid(context)
    finally:
        scene.stop()


def test_a_clear_during_a_tool_call_leaves_nothing_of_the_turn() -> None:
    scene = Scene()
    try:
        scene.turn("hi")
        failures: list[BaseException] = []
        scene.hold_in = "tool"

        def run() -> None:
            try:
                scene.agent.run("use a tool")
            except TurnCleared as exc:
                failures.append(exc)

        caller = threading.Thread(target=run)
        caller.start()
        assert scene.entered.wait(WAIT)
        scene.store.clear(CONV)
        scene.release.set()
        caller.join(WAIT)
        assert len(failures) == 1
        assert scene.store.get(CONV) == []
    finally:
        scene.stop()
