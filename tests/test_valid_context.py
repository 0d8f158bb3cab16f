"""Every context sent to a model is valid: each tool call is followed by exactly its results,
each result follows its call (issue 10, part 2)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.agents import Agent
from otpmem.llm import ScriptedModel, tool_call
from otpmem.memory import valid_context
from otpmem.stores import MemoryStore, MemoryStoreHandle


def assert_valid(messages: Sequence[Any]) -> None:
    """The invariant an OpenAI-compatible server checks (it answers 400 otherwise)."""
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.get("role") != "tool", f"orphan tool result at {i}: {messages}"
        calls = message.get("tool_calls") or []
        i += 1
        answered = []
        while i < len(messages) and messages[i].get("role") == "tool":
            answered.append(messages[i].get("tool_call_id"))
            i += 1
        assert answered == [c["id"] for c in calls], f"call/results mismatch: {messages}"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def calling(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call(i, "f", "{}") for i in ids],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "r"}


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def test_a_dangling_call_followed_by_user_messages_is_healed_in_what_is_sent(
    store: MemoryStoreHandle,
) -> None:
    """The trial's case: a crashed turn left assistant(call1), then add_message(user); the
    model was sent assistant(call1), user, user, which servers reject."""
    store.add("c", [user("first"), calling("call1")])
    seen: list[list[dict[str, Any]]] = []
    model = ScriptedModel(lambda messages: seen.append(messages) or "ok")
    agent = Agent.start_link(llm=model, memory={"store": store}, conversation_id="c")
    try:
        agent.add_message(user("added"))
        assert agent.run("second").content == "ok"
    finally:
        agent.stop()
    assert_valid(seen[0])
    assert [m["role"] for m in seen[0]] == ["user", "assistant", "tool", "user", "user"]


def test_an_orphan_result_left_by_a_clear_is_not_sent(store: MemoryStoreHandle) -> None:
    store.add("c", [result("gone"), {"role": "assistant", "content": "after"}])
    seen: list[list[dict[str, Any]]] = []
    model = ScriptedModel(lambda messages: seen.append(messages) or "ok")
    agent = Agent.start_link(llm=model, memory={"store": store}, conversation_id="c")
    try:
        agent.run("next")
    finally:
        agent.stop()
    assert_valid(seen[0])
    assert [m["role"] for m in seen[0]] == ["assistant", "user"]


message = st.one_of(
    st.builds(user, st.sampled_from(["a", "b"])),
    st.builds(lambda: {"role": "assistant", "content": "x"}),
    st.builds(
        lambda ids: calling(*ids),
        st.lists(st.sampled_from("pqrs"), min_size=1, max_size=3, unique=True),
    ),
    st.builds(result, st.sampled_from("pqrsz")),
    st.builds(lambda: {"role": "system", "content": "sys"}),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(message, max_size=25))
def test_valid_context_makes_any_history_valid_and_keeps_what_was_valid(
    history: list[dict[str, Any]],
) -> None:
    repaired = valid_context(history)
    assert_valid(repaired)
    assert valid_context(repaired) == repaired  # nothing more to repair
    non_tool = [m for m in history if m["role"] != "tool"]
    assert [m for m in repaired if m["role"] != "tool"] == non_tool  # only tool traffic changes
