"""Agents over conversation memory: beamai's agent tests (§4 G/H) with a ScriptedModel.

Each test starts its own store (or the default one) and stops every agent and store it
started; agents that need the shared default store either run under ``otpmem.running()``
or stop the orphan store the library starts (with a UserWarning) afterwards.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import re
import threading
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import otpmem
from otpmem.actors import whereis
from otpmem.agents import (
    MEMORY_FORMS,
    Agent,
    AgentHandle,
    AgentOptions,
    Callbacks,
    ConversationBusy,
    TurnFailed,
    TurnResult,
)
from otpmem.kernel import memory_filter
from otpmem.llm import ChatResponse, ModelError, ScriptedModel, tool_call
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv, ConvLike, InvalidMessage, as_conv
from otpmem.stores import DEFAULT_STORE_NAME, MemoryStore, MemoryStoreHandle
from tests.support import WAIT

MOCK = "This is a mock response."


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    try:
        yield handle
    finally:
        handle.stop()


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def dangling_ids(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """Tool calls with no result, after checking every result follows its call."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        if message["role"] == "assistant":
            called.update(call["id"] for call in message.get("tool_calls") or ())
        elif message["role"] == "tool":
            assert message["tool_call_id"] in called, f"tool result without its call: {message}"
            assert message["tool_call_id"] not in answered, f"answered twice: {message}"
            answered.add(message["tool_call_id"])
    return called - answered


def echo(messages: list[dict[str, Any]], tools: Any) -> str:
    return f"echo:{messages[-1]['content']}"


# -- beamai §4 G: new, run, system prompt, multi-turn --------------------------------------


def test_new_agent_has_no_messages_and_turn_count_zero(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(llm=ScriptedModel([]), memory={"store": store})
    agents.append(agent)
    assert agent.messages() == []
    info = agent.info()
    assert info["turn_count"] == 0
    assert info["max_tool_iterations"] == 10
    assert info["agent_name"] == "agent"
    assert isinstance(info["conversation"], Conv)


def test_run_basic_stores_user_then_assistant(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(llm=ScriptedModel([MOCK], usage=False), memory={"store": store})
    agents.append(agent)
    result = agent.run("Hello")
    assert isinstance(result, TurnResult)
    assert result.content == MOCK
    assert result.messages == [user("Hello"), assistant(MOCK)]
    assert result.iterations == 1
    assert result.tool_calls == 0
    assert result.healed == []
    assert isinstance(result.response, ChatResponse)
    assert agent.info()["turn_count"] == 1
    assert agent.messages() == [user("Hello"), assistant(MOCK)]
    assert store.get(agent.info()["conversation"]) == [user("Hello"), assistant(MOCK)]


def test_run_with_system_prompt_sends_it_first_and_never_stores_it(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    model = ScriptedModel(["one", "two"], usage=False, record=True)
    agent = Agent.start_link(llm=model, memory={"store": store}, system_prompt="Test system")
    agents.append(agent)
    agent.run("first")
    agent.run("second")
    system = {"role": "system", "content": "Test system"}
    first_sent, second_sent = (messages for messages, _ in model.calls)
    assert first_sent == [system, user("first")]
    assert second_sent == [system, user("first"), assistant("one"), user("second")]
    stored = agent.messages()
    assert stored == [user("first"), assistant("one"), user("second"), assistant("two")]
    assert all(m["role"] != "system" for m in stored)


def test_multi_turn_messages_grow_by_two_per_turn(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(llm=ScriptedModel(["a", "b", "c"]), memory={"store": store})
    agents.append(agent)
    lengths = []
    for text in ("one", "two", "three"):
        agent.run(text)
        lengths.append(len(agent.messages()))
    assert lengths == [2, 4, 6]
    assert agent.info()["turn_count"] == 3


def test_multi_turn_history_accumulation_nth_call_gets_2n_minus_1_messages(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    model = ScriptedModel(lambda messages, tools: f"saw:{len(messages)}", record=True)
    agent = Agent.start_link(llm=model, memory={"store": store})
    agents.append(agent)
    answers = [agent.run(f"turn {n}").content for n in range(1, 6)]
    assert [len(messages) for messages, _ in model.calls] == [2 * (n - 1) + 1 for n in range(1, 6)]
    assert answers == [f"saw:{2 * (n - 1) + 1}" for n in range(1, 6)]
    for messages, _ in model.calls:
        assert all(m["role"] != "system" for m in messages)
        assert messages[-1]["role"] == "user"


# -- tools -------------------------------------------------------------------------------


def test_run_with_tool_calls_stores_call_with_text_result_with_name_and_final(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    ran: list[tuple[int, int]] = []

    def add_numbers(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append((a, b))
        return a + b

    call = tool_call("c1", "add_numbers", '{"a": 1, "b": 2}')
    model = ScriptedModel(
        [{"content": "Let me add.", "tool_calls": [call]}, "It is 3."], usage=False, record=True
    )
    agent = Agent.start_link(llm=model, memory={"store": store}, tools=[add_numbers])
    agents.append(agent)
    result = agent.run("What is 1 + 2?")
    assert result.content == "It is 3."
    assert result.tool_calls == 1
    assert result.iterations == 2
    assert ran == [(1, 2)]
    expected = [
        user("What is 1 + 2?"),
        {"role": "assistant", "content": "Let me add.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "add_numbers", "content": "3"},
        assistant("It is 3."),
    ]
    assert result.messages == expected
    assert agent.messages() == expected
    # The model saw the tool specs, and in round 2 the call and its result.
    (first, tools), (second, _) = model.calls
    assert first == [user("What is 1 + 2?")]
    assert [spec["function"]["name"] for spec in tools] == ["add_numbers"]
    assert second == expected[:3]
    assert dangling_ids(agent.messages()) == set()


def test_max_tool_iterations_fails_the_turn_and_leaves_a_valid_history(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    counter = iter(range(1000))

    def endless(messages: list[dict[str, Any]], tools: Any) -> Any:
        if messages[-1] == user("now answer"):
            return "answered"
        return {"tool_calls": [tool_call(f"c{next(counter)}", "add", '{"a": 1, "b": 1}')]}

    errors: list[BaseException] = []
    agent = Agent.start_link(
        llm=ScriptedModel(endless, usage=False),
        memory={"store": store},
        tools=[add],
        max_tool_iterations=3,
        callbacks={"on_turn_error": lambda meta, exc: errors.append(exc)},
    )
    agents.append(agent)
    with pytest.raises(TurnFailed, match="3 round"):
        agent.run("loop forever")
    assert agent.alive
    assert agent.info()["turn_count"] == 0
    assert len(errors) == 1
    stored = agent.messages()
    assert stored[0] == user("loop forever")
    assert [m["role"] for m in stored[1:]] == ["assistant", "tool"] * 3
    assert dangling_ids(stored) == set()
    # The agent goes on: the next turn works and the history stays valid.
    assert agent.run("now answer").content == "answered"
    assert agent.info()["turn_count"] == 1
    assert agent.messages()[-2:] == [user("now answer"), assistant("answered")]
    assert dangling_ids(agent.messages()) == set()


def test_model_error_fails_the_turn_calls_on_turn_error_and_the_agent_goes_on(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    failure = ModelError("connection_failed", status=503, retryable=True)
    errors: list[tuple[dict[str, Any], BaseException]] = []
    ends: list[Any] = []
    agent = Agent.start_link(
        llm=ScriptedModel([failure, "recovered"], usage=False),
        memory={"store": store},
        callbacks=Callbacks(
            on_turn_error=lambda meta, exc: errors.append((dict(meta), exc)),
            on_turn_end=lambda meta, result: ends.append(result),
        ),
    )
    agents.append(agent)
    with pytest.raises(TurnFailed, match="connection_failed"):
        agent.run("hello")
    assert agent.alive
    assert len(errors) == 1
    meta, exc = errors[0]
    assert exc is failure or (isinstance(exc, ModelError) and "connection_failed" in str(exc))
    assert meta["turn_count"] == 0
    assert ends == []
    assert agent.info()["turn_count"] == 0
    result = agent.run("again")
    assert result.content == "recovered"
    assert agent.info()["turn_count"] == 1
    assert [r.content for r in ends] == ["recovered"]
    assert agent.messages()[-2:] == [user("again"), assistant("recovered")]
    assert dangling_ids(agent.messages()) == set()


# -- callbacks ---------------------------------------------------------------------------


def test_callbacks_fire_in_turn_order_with_meta(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    seen: list[tuple[str, Any, Any]] = []

    def hook(name: str) -> Any:
        return lambda meta, *rest: seen.append((name, dict(meta), rest[0] if rest else None))

    names = [
        "on_turn_start",
        "on_model_call",
        "on_model_result",
        "on_tool_call",
        "on_tool_result",
        "on_turn_end",
    ]
    call = tool_call("c1", "add", '{"a": 2, "b": 3}')
    model = ScriptedModel(
        [
            {"tool_calls": [call], "usage": {"total_tokens": 11}},
            {"content": "5", "usage": {"total_tokens": 22}},
            "again",
        ]
    )
    agent = Agent.start_link(
        llm=model,
        memory={"store": store},
        conversation_id="cb-conv",
        user_id="u1",
        tools=[add],
        agent_name="cb-agent",
        callbacks={name: hook(name) for name in names},
    )
    agents.append(agent)
    result = agent.run("add 2 and 3")
    assert [name for name, _, _ in seen] == [
        "on_turn_start",
        "on_model_call",
        "on_model_result",
        "on_tool_call",
        "on_tool_result",
        "on_model_call",
        "on_model_result",
        "on_turn_end",
    ]
    metas = [meta for _, meta, _ in seen]
    first = metas[0]
    assert first["agent_name"] == "cb-agent"
    assert first["conversation"] == Conv("u1", "cb-conv")
    assert first["turn_count"] == 0
    assert isinstance(first["run_id"], str) and first["run_id"]
    assert all(meta["run_id"] == first["run_id"] for meta in metas)
    model_calls = [arg for name, _, arg in seen if name == "on_model_call"]
    assert len(model_calls[0]) == 1  # beamai callback_on_llm_call_test: 1 message
    assert model_calls[0][0] == user("add 2 and 3")
    usages = [arg.usage["total_tokens"] for name, _, arg in seen if name == "on_model_result"]
    assert usages == [11, 22]
    assert [arg for name, _, arg in seen if name == "on_tool_call"] == [call]
    tool_results = [arg for name, _, arg in seen if name == "on_tool_result"]
    assert [r["content"] for r in tool_results] == ["5"]
    assert tool_results[0]["tool_call_id"] == "c1"
    assert seen[-1][2] == result

    seen.clear()
    agent.run("once more")
    second = [meta for _, meta, _ in seen]
    assert all(meta["turn_count"] == 1 for meta in second)
    assert second[0]["run_id"] != first["run_id"]


def test_a_raising_callback_is_logged_and_ignored(
    store: MemoryStoreHandle, agents: list[AgentHandle], caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*args: Any) -> None:
        raise RuntimeError("callback boom")

    names = [
        "on_turn_start",
        "on_turn_end",
        "on_turn_error",
        "on_model_call",
        "on_model_result",
        "on_tool_call",
        "on_tool_result",
    ]
    call = tool_call("c1", "add", '{"a": 1, "b": 1}')
    model = ScriptedModel([{"tool_calls": [call]}, "2", ModelError("down")], usage=False)
    agent = Agent.start_link(
        llm=model,
        memory={"store": store},
        tools=[add],
        callbacks={name: boom for name in names},
    )
    agents.append(agent)
    with caplog.at_level(logging.ERROR, logger="otpmem.agents"):
        assert agent.run("one plus one").content == "2"
        # A raising on_turn_error does not replace the turn's own failure.
        with pytest.raises(TurnFailed, match="down"):
            agent.run("fail")
    assert agent.alive
    logged = [r for r in caplog.records if "callback" in r.getMessage()]
    # Turn 1: start, model call x2, model result x2, tool call, tool result, end;
    # turn 2: start, model call, turn error.
    assert len(logged) == 11
    assert all(r.exc_info and "callback boom" in str(r.exc_info[1]) for r in logged)
    assert agent.messages()[:4] == [
        user("one plus one"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "2"},
        assistant("2"),
    ]


def test_unknown_callback_names_raise_at_start() -> None:
    with pytest.raises(ValueError, match="on_llm_call"):
        Agent.start_link(llm=ScriptedModel([]), memory=False, callbacks={"on_llm_call": print})


# -- add_message, clear_messages, info ---------------------------------------------------


def test_add_message_then_messages(store: MemoryStoreHandle, agents: list[AgentHandle]) -> None:
    agent = Agent.start_link(llm=ScriptedModel([]), memory={"store": store})
    agents.append(agent)
    message = {"role": "user", "content": "remember this", "metadata": {"pinned": True}}
    agent.add_message(message)
    assert agent.messages() == [message]
    with pytest.raises(InvalidMessage):
        agent.add_message({"role": "wizard", "content": "x"})
    assert agent.alive
    assert agent.messages() == [message]


def test_clear_messages_forgets_the_conversation_but_not_the_turn_count(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    model = ScriptedModel(["hi", "fresh"], record=True)
    agent = Agent.start_link(llm=model, memory={"store": store})
    agents.append(agent)
    agent.run("hello")
    assert len(agent.messages()) == 2
    agent.clear_messages()
    assert agent.messages() == []
    assert store.get(agent.info()["conversation"]) == []
    assert agent.info()["turn_count"] == 1
    agent.run("again")
    assert model.calls[-1][0] == [user("again")]


def test_info_reports_conversation_turns_and_settings(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(
        llm=ScriptedModel(["ok"], usage=False),
        memory={"store": store},
        conversation_id="info-conv",
        user_id="alice",
        max_tool_iterations=4,
        agent_name="helper",
    )
    agents.append(agent)
    agent.run("hi")
    info = agent.info()
    assert info["agent_name"] == "helper"
    assert info["conversation"] == Conv("alice", "info-conv")
    assert info["turn_count"] == 1
    assert info["max_tool_iterations"] == 4
    assert "DefaultProvider" in info["memory"]
    assert store.get(Conv("alice", "info-conv")) == [user("hi"), assistant("ok")]


def test_each_new_agent_starts_a_fresh_conversation(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    first = Agent.start_link(llm=ScriptedModel(["a"]), memory={"store": store})
    second = Agent.start_link(llm=ScriptedModel(["b"]), memory={"store": store})
    agents.extend([first, second])
    first.run("one")
    assert first.info()["conversation"] != second.info()["conversation"]
    assert second.messages() == []


# -- memory forms (beamai §1.9) ------------------------------------------------------------


@pytest.mark.parametrize("form", [{}, {"memory": "default"}], ids=["omitted", "default"])
def test_default_memory_uses_the_shared_default_store(
    form: dict[str, Any], agents: list[AgentHandle]
) -> None:
    assert whereis(DEFAULT_STORE_NAME) is None
    try:
        with pytest.warns(UserWarning, match="no application is running"):
            first = Agent.start_link(llm=ScriptedModel(["hi"], usage=False), **form)
        agents.append(first)
        second = Agent.start_link(llm=ScriptedModel(["yo"], usage=False), **form)
        agents.append(second)
        first.run("hello")
        second.run("hey")
        shared = otpmem.default_store()
        assert shared.get(first.info()["conversation"]) == [user("hello"), assistant("hi")]
        assert shared.get(second.info()["conversation"]) == [user("hey"), assistant("yo")]
        assert first.messages() == [user("hello"), assistant("hi")]
    finally:
        for agent in agents:
            agent.stop()
        orphan = whereis(DEFAULT_STORE_NAME)
        if orphan is not None:
            orphan.stop()


def test_default_memory_under_the_app_uses_the_supervised_store_without_warning(
    agents: list[AgentHandle],
) -> None:
    with otpmem.running(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        agent = Agent.start_link(llm=ScriptedModel(["hi"], usage=False))
        agents.append(agent)
        agent.run("hello")
        conv = agent.info()["conversation"]
        assert otpmem.default_store().get(conv) == [user("hello"), assistant("hi")]
        agent.stop()
    assert [w for w in record if issubclass(w.category, UserWarning)] == []


def test_window_memory_keeps_everything_but_sends_a_window(agents: list[AgentHandle]) -> None:
    model = ScriptedModel(lambda messages, tools: f"saw:{len(messages)}", usage=False, record=True)
    with otpmem.running():
        agent = Agent.start_link(llm=model, memory={"window": 2})
        agents.append(agent)
        for n in range(4):
            agent.add_message(user(f"m{n}"))
        result = agent.run("question")
        # What the model receives is windowed ...
        assert model.calls[0][0] == [user("m3"), user("question")]
        assert result.content == "saw:2"
        everything = [*(user(f"m{n}") for n in range(4)), user("question"), assistant("saw:2")]
        # ... the store keeps everything ...
        assert otpmem.default_store().get(agent.info()["conversation"]) == everything
        # ... and so does messages() (beamai windowed_memory_test: "messages shows all 4").
        assert agent.messages() == everything
        agent.stop()


def test_store_memory_uses_the_given_store(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(llm=ScriptedModel(["hi"], usage=False), memory={"store": store})
    agents.append(agent)
    agent.run("hello")
    assert store.get(agent.info()["conversation"]) == [user("hello"), assistant("hi")]
    assert whereis(DEFAULT_STORE_NAME) is None


class CountingProvider:
    """beamai_agent_fake_memory: an in-memory provider that counts its calls."""

    def __init__(self) -> None:
        self.data: dict[Conv, list[dict[str, Any]]] = {}
        self.counts: Counter[str] = Counter()
        self.prepared: list[list[Mapping[str, Any]]] = []

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        self.counts["history"] += 1
        return list(self.data.get(as_conv(conv), []))

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        self.counts["append"] += 1
        self.data.setdefault(as_conv(conv), []).extend(dict(m) for m in messages)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        self.counts["prepare"] += 1
        self.prepared.append(list(messages))
        return list(messages)

    def clear(self, conv: ConvLike) -> None:
        self.counts["clear"] += 1
        self.data.pop(as_conv(conv), None)


def test_custom_memory_provider_is_used_as_passed(agents: list[AgentHandle]) -> None:
    provider = CountingProvider()
    model = ScriptedModel(["hi back", "again"], usage=False, record=True)
    agent = Agent.start_link(llm=model, memory=provider, conversation_id="custom")
    agents.append(agent)
    agent.run("hello")
    assert provider.counts["prepare"] == 1
    assert provider.counts["append"] >= 2
    assert agent.messages() == [user("hello"), assistant("hi back")]
    assert provider.data[Conv(None, "custom")] == [user("hello"), assistant("hi back")]
    assert model.calls[0][0] == provider.prepared[0] == [user("hello")]
    agent.run("more")
    assert provider.counts["prepare"] == 2
    assert provider.counts["append"] >= 4
    agent.clear_messages()
    assert provider.counts["clear"] == 1
    assert agent.info()["memory"] == repr(provider)
    assert whereis(DEFAULT_STORE_NAME) is None


@pytest.mark.parametrize("off", [False, None])
def test_memory_off_keeps_nothing(off: bool | None, agents: list[AgentHandle]) -> None:
    model = ScriptedModel(["one", "two"], record=True)
    agent = Agent.start_link(llm=model, memory=off)
    agents.append(agent)
    assert agent.run("first").content == "one"
    agent.add_message(user("ignored"))
    assert agent.run("second").content == "two"
    assert agent.messages() == []
    assert model.calls[1][0] == [user("second")]
    assert agent.info()["turn_count"] == 2
    assert whereis(DEFAULT_STORE_NAME) is None


@pytest.mark.parametrize(
    ("form", "accepted"),
    [
        ({"window": 0}, "n >= 1"),
        ({"window": -1}, "n >= 1"),
        ({"window": "x"}, "n >= 1"),
        ({"window": True}, "n >= 1"),
        ({"store": 42}, "ChatMemory"),
        ({"store": "otpmem.default_store"}, "ChatMemory"),
        ({"other": 1}, MEMORY_FORMS),
        ({"window": 2, "store": None}, MEMORY_FORMS),
        (42, MEMORY_FORMS),
        ("nope", MEMORY_FORMS),
        (True, MEMORY_FORMS),
        (("window", 2), MEMORY_FORMS),
    ],
    ids=repr,
)
def test_bad_memory_forms_raise_at_start_naming_what_is_accepted(form: Any, accepted: str) -> None:
    with pytest.raises((ValueError, TypeError), match=re.escape(accepted)):
        Agent.start_link(llm=ScriptedModel([]), memory=form)
    assert whereis(DEFAULT_STORE_NAME) is None


def test_memory_filter_together_with_memory_raises(store: MemoryStoreHandle) -> None:
    with pytest.raises(ValueError, match="memory_filter"):
        Agent.start_link(
            llm=ScriptedModel([]), memory={"store": store}, filters=[memory_filter(store)]
        )


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"on_busy": "queue"}, ValueError),
        ({"system_prompt": 42}, TypeError),
        ({"max_tool_iterations": 0}, ValueError),
        ({"llm": "not a model"}, TypeError),
        ({"user_id": 7}, (TypeError, ValueError)),
    ],
    ids=repr,
)
def test_bad_options_raise_at_start(options: dict[str, Any], error: Any) -> None:
    kwargs: dict[str, Any] = {"llm": ScriptedModel([]), "memory": False, **options}
    with pytest.raises(error):
        Agent.start_link(**kwargs)


def test_every_way_to_start_an_agent_takes_agent_options_parameters() -> None:
    """One definition: Agent.start_link, Agent.start, otpmem.start_agent and the aio face
    take AgentOptions' parameters (names, kinds, defaults), so none of them can drift."""
    from otpmem import aio

    options = inspect.signature(AgentOptions).parameters
    for start in (Agent.start_link, Agent.start, otpmem.start_agent, aio.start_agent):
        assert inspect.signature(start).parameters == options, start
    assert AgentOptions(llm=ScriptedModel([])).on_busy == "wait"
    with pytest.raises(dataclasses.FrozenInstanceError):
        AgentOptions(llm=ScriptedModel([])).memory = False  # type: ignore[misc]
    with pytest.raises(TypeError, match="bogus"):
        Agent.start_link(llm=ScriptedModel([]), bogus=1)  # type: ignore[call-arg]


def test_run_rejects_a_non_string_and_stays_alive(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    agent = Agent.start_link(llm=ScriptedModel(["ok"]), memory={"store": store})
    agents.append(agent)
    for bad in ("", None, 42):
        with pytest.raises(ValueError):
            agent.run(bad)  # type: ignore[arg-type]
    assert agent.messages() == []
    assert agent.run("fine").content == "ok"


# -- heal dangling tool calls (beamai heal_dangling_on_new_chat_test) ---------------------


def test_heal_dangling_tool_calls_before_the_new_user_message(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    calls = [tool_call("c1", "lookup", '{"q": "a"}'), tool_call("c2", "search", "{}")]
    crashed_turn = [user("look it up"), {"role": "assistant", "content": None, "tool_calls": calls}]
    store.add("heal", crashed_turn)  # what a turn that died mid-loop leaves behind
    model = ScriptedModel(["done"], usage=False, record=True)
    agent = Agent.start_link(llm=model, memory={"store": store}, conversation_id="heal")
    agents.append(agent)
    result = agent.run("next question")
    assert result.healed == ["c1", "c2"]
    stored = store.get("heal")
    assert stored[:2] == crashed_turn
    repairs = stored[2:4]
    assert [(m["role"], m["tool_call_id"], m["name"]) for m in repairs] == [
        ("tool", "c1", "lookup"),
        ("tool", "c2", "search"),
    ]
    for repair in repairs:
        assert json.loads(repair["content"])["error"]["type"] == "cancelled"
    assert stored[4:] == [user("next question"), assistant("done")]
    assert result.messages == stored[2:]
    assert dangling_ids(stored) == set()
    assert model.calls[0][0] == stored[:5]  # the model never sees a dangling call
    # Healed once: the next turn has nothing to heal.
    model2 = ScriptedModel(["again"], usage=False)
    later = Agent.start_link(
        llm=model2, memory={"store": store}, conversation_id="heal", name="heal-later"
    )
    agents.append(later)
    assert later.run("more").healed == []
    assert len(store.get("heal")) == len(stored) + 2


def test_heal_only_the_calls_left_unanswered(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    calls = [tool_call("c1", "add", '{"a": 1, "b": 1}'), tool_call("c2", "add", "{}")]
    answered = {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "2"}
    store.add(
        "half", [user("two sums"), {"role": "assistant", "content": "ok", "tool_calls": calls}]
    )
    store.add("half", [answered])
    agent = Agent.start_link(
        llm=ScriptedModel(["fine"], usage=False), memory={"store": store}, conversation_id="half"
    )
    agents.append(agent)
    result = agent.run("go on")
    assert result.healed == ["c2"]
    stored = store.get("half")
    assert stored[2] == answered
    assert stored[3]["tool_call_id"] == "c2"
    assert json.loads(stored[3]["content"])["error"]["type"] == "cancelled"
    assert stored[4:] == [user("go on"), assistant("fine")]
    assert dangling_ids(stored) == set()


def test_heal_dangling_with_a_window_smaller_than_the_tool_round(
    agents: list[AgentHandle],
) -> None:
    """The window limits what is sent, not what heal looks at: a call left unanswered
    behind more results than the window holds is still healed."""
    calls = [tool_call(f"c{i}", "lookup") for i in range(3)]
    results = [
        {"role": "tool", "tool_call_id": f"c{i}", "name": "lookup", "content": str(i)}
        for i in range(2)
    ]
    with otpmem.running():
        otpmem.default_store().add(
            "wheal",
            [user("three lookups"), {"role": "assistant", "content": None, "tool_calls": calls}],
        )
        otpmem.default_store().add("wheal", results)
        agent = Agent.start_link(
            llm=ScriptedModel(["ok"], usage=False), memory={"window": 2}, conversation_id="wheal"
        )
        agents.append(agent)
        result = agent.run("next")
        stored = otpmem.default_store().get("wheal")
        agent.stop()
    assert result.healed == ["c2"]
    assert stored[4]["tool_call_id"] == "c2"
    assert json.loads(stored[4]["content"])["error"]["type"] == "cancelled"
    assert stored[5:] == [user("next"), assistant("ok")]
    assert dangling_ids(stored) == set()


# -- one writer per conversation ---------------------------------------------------------


def test_one_writer_per_conversation_refuse_or_wait(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    in_model = threading.Event()
    release = threading.Event()

    def blocking(messages: list[dict[str, Any]], tools: Any) -> str:
        in_model.set()
        assert release.wait(WAIT)
        return "first done"

    waiting_started = threading.Event()
    first = Agent.start_link(
        llm=ScriptedModel(blocking, usage=False), memory={"store": store}, conversation_id="shared"
    )
    # Agents of one conversation beside each other: each needs a name (an identity) of its
    # own, since an agent without one is its conversation's.
    refuser = Agent.start_link(
        llm=ScriptedModel(["refuser later"], usage=False),
        memory={"store": store},
        conversation_id="shared",
        on_busy="refuse",
        name="refuser",
    )
    impatient = Agent.start_link(
        llm=ScriptedModel(["never"], usage=False),
        memory={"store": store},
        conversation_id="shared",
        busy_timeout=0.2,
        name="impatient",
    )
    second_model = ScriptedModel(["second done"], usage=False, record=True)
    waiter = Agent.start_link(
        llm=second_model,
        memory={"store": store},
        conversation_id="shared",
        on_busy="wait",
        callbacks={"on_turn_start": lambda meta: waiting_started.set()},
        name="waiter",
    )
    other = Agent.start_link(
        llm=ScriptedModel(["elsewhere"], usage=False),
        memory={"store": store},
        conversation_id="other",
    )
    agents.extend([first, refuser, impatient, waiter, other])
    results: dict[str, TurnResult] = {}
    runners = [
        threading.Thread(target=lambda: results.__setitem__("first", first.run("from first"))),
        threading.Thread(target=lambda: results.__setitem__("waiter", waiter.run("from waiter"))),
    ]
    runners[0].start()
    try:
        assert in_model.wait(WAIT)
        with pytest.raises(ConversationBusy):
            refuser.run("from refuser")
        with pytest.raises(ConversationBusy):
            impatient.run("from impatient")
        # Another conversation on the same store is not blocked.
        assert other.run("hi").content == "elsewhere"
        runners[1].start()
        assert waiting_started.wait(WAIT)
        assert store.get("shared") == [user("from first")]
    finally:
        release.set()
        for runner in runners:
            runner.join(WAIT)
    assert results["first"].content == "first done"
    assert results["waiter"].content == "second done"
    stored = store.get("shared")
    assert stored == [
        user("from first"),
        assistant("first done"),
        user("from waiter"),
        assistant("second done"),
    ]
    # The waiter loaded the history only after the first turn had finished writing it.
    assert second_model.calls[0][0] == stored[:3]
    assert refuser.alive and impatient.alive
    assert refuser.run("now").content == "refuser later"
    assert store.get("shared")[-2:] == [user("now"), assistant("refuser later")]


def test_fifty_agents_twenty_turns_each_on_the_default_store() -> None:
    n_agents, n_turns = 50, 20
    with otpmem.running():
        started = [
            Agent.start_link(llm=ScriptedModel(echo, usage=False), conversation_id=f"par-{i}")
            for i in range(n_agents)
        ]
        try:

            def drive(i: int) -> list[str | None]:
                return [started[i].run(f"a{i}-t{t}").content for t in range(n_turns)]

            with ThreadPoolExecutor(max_workers=n_agents) as pool:
                answers = list(pool.map(drive, range(n_agents)))
            shared = otpmem.default_store()
            for i in range(n_agents):
                assert answers[i] == [f"echo:a{i}-t{t}" for t in range(n_turns)]
                expected: list[dict[str, Any]] = []
                for t in range(n_turns):
                    expected += [user(f"a{i}-t{t}"), assistant(f"echo:a{i}-t{t}")]
                assert shared.get(f"par-{i}") == expected
                assert started[i].info()["turn_count"] == n_turns
        finally:
            for agent in started:
                agent.stop()


def test_agent_start_takes_the_same_arguments_as_start_link_without_the_link(
    store: MemoryStoreHandle,
) -> None:
    agent = Agent.start(llm=ScriptedModel(["unlinked"]), memory={"store": store})
    try:
        assert agent.run("hi").content == "unlinked"
        assert agent.resolve().parent is None
    finally:
        agent.stop()


def test_conversation_claims_are_dropped_once_released(store: MemoryStoreHandle) -> None:
    """One claim per conversation while a turn runs, none after: nothing grows with the
    number of conversations ever written (the old per-conversation locks were kept)."""
    from otpmem.agents._writers import writers

    before = writers.held()
    agents = [
        Agent.start_link(
            llm=ScriptedModel(["ok"]), memory={"store": store}, conversation_id=f"w{i}"
        )
        for i in range(50)
    ]
    try:
        for agent in agents:
            agent.run("hi")
        assert writers.held() == before
        assert not writers._waiters
    finally:
        for agent in agents:
            agent.stop()


class StorelessProvider:
    """A user's own MemoryProvider over a shared store, exposing no ``.store``."""

    def __init__(self, store: MemoryStoreHandle) -> None:
        self._inner = DefaultProvider(store)

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        return self._inner.history(conv)

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        self._inner.append(conv, messages)

    def prepare(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> list[Any]:
        return self._inner.prepare(conv, messages)

    def clear(self, conv: ConvLike) -> None:
        self._inner.clear(conv)


def test_one_writer_per_conversation_holds_for_providers_without_a_store(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    """Two agents on one conversation, each with its own provider object: the claim is the
    conversation's, not the provider's, so the second turn is refused while the first runs."""
    in_model, release = threading.Event(), threading.Event()

    def held(messages: list[dict[str, Any]], tools: Any) -> str:
        in_model.set()
        assert release.wait(WAIT)
        return "first"

    first = Agent.start_link(
        llm=ScriptedModel(held), memory=StorelessProvider(store), conversation_id="shared"
    )
    second = Agent.start_link(
        llm=ScriptedModel(["second"]),
        memory=StorelessProvider(store),
        conversation_id="shared",
        on_busy="refuse",
        name="second",
    )
    agents.extend([first, second])
    runner = threading.Thread(target=lambda: first.run("one"))
    runner.start()
    try:
        assert in_model.wait(WAIT)
        with pytest.raises(ConversationBusy):
            second.run("two")
    finally:
        release.set()
        runner.join(WAIT)
    assert [m["content"] for m in store.get("shared")] == ["one", "first"]


def test_a_new_incarnation_never_reuses_an_earlier_ones_turn_ids(
    store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    # Turn ids the agent makes are a per-incarnation prefix and a count: a restarted agent
    # counts from 0 again, so a shared prefix would make its first turn a "retry" of the
    # old first turn, and store nothing.
    run_ids: list[str] = []
    callbacks = {"on_turn_start": lambda meta: run_ids.append(meta["run_id"])}
    for incarnation in range(2):
        agent = Agent.start_link(
            llm=ScriptedModel([f"answer {incarnation}-{k}" for k in range(2)]),
            memory={"store": store},
            conversation_id="incarnations",
            callbacks=callbacks,
        )
        agents.append(agent)
        agent.run(f"question {incarnation}-0")
        agent.run(f"question {incarnation}-1")
        agent.stop()
    assert len(set(run_ids)) == 4
    assert [m["content"] for m in store.get(Conv(None, "incarnations"))] == [
        f"{kind} {i}-{k}" for i in range(2) for k in range(2) for kind in ("question", "answer")
    ]
