"""Long-term memory in agents and pipelines: the profile and facts go in front of every
context (pinned, capped, never stored), and extraction runs per the trigger."""

from __future__ import annotations

from typing import Any

import pytest

from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ScriptedModel, tool_call
from otpmem.memory import (
    HeuristicCounter,
    LongTermMemory,
    Pipeline,
    PipelineProvider,
    RuleFactExtractor,
    SlidingWindow,
    valid_context,
)
from otpmem.memory.longterm import is_injected
from otpmem.messages import Conv
from otpmem.stores import Fact, MemoryStore, Profile
from tests.longterm_support import both_stores, user

store_fixture = both_stores()
ANN = Conv("ann", "chat")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def start(store: Any, model: ScriptedModel, ltm: LongTermMemory, **options: Any) -> AgentHandle:
    return Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                            conversation_id="chat", long_term_memory=ltm, **options)  # fmt: skip


def test_per_turn_facts_reach_the_next_turn_pinned_first_and_are_never_stored(store: Any) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), trigger="per_turn")
    store.save_profile(Profile("ann", "Ann is a developer."))
    model = ScriptedModel(["Nice to meet you.", "You live in Lyon."], record=True)
    agent = start(store, model, ltm, system_prompt="Be brief.")
    try:
        agent.run("My name is Ann and I live in Lyon.")
        agent.run("Where do I live?")
    finally:
        agent.stop()
    first, second = (sent for sent, _ in model.calls)
    assert [m["content"] for m in first[:2]] == ["Be brief.", "User profile:\nAnn is a developer."]
    assert [m["content"] for m in second[:3]] == [
        "Be brief.",
        "User profile:\nAnn is a developer.",
        "User context:\n- location: Lyon\n- name: Ann",
    ]
    assert second[3:] == store.get(ANN)[:3], "then the history, as stored"
    assert valid_context(second) == second
    assert not any(is_injected(m) for m in store.get(ANN)), "injected context is never stored"
    assert not any(m["role"] == "system" for m in store.get(ANN))


def test_injection_is_capped_newest_facts_first(store: Any) -> None:
    for i in range(30):
        store.save_fact(Fact("ann", f"k{i:02d}", f"value number {i}"))  # k29 updated last
    counter = HeuristicCounter()
    ltm = LongTermMemory(store, inject_max_tokens=40, counter=counter)
    injected = ltm.context("ann")
    assert len(injected) == 1 and sum(counter.count(m) for m in injected) <= 40
    lines = injected[0]["content"].splitlines()
    assert lines[0] == "User context:"
    kept = [line.split(":")[0][2:] for line in lines[1:]]
    assert kept == [f"k{i:02d}" for i in range(29, 29 - len(kept), -1)] and 3 <= len(kept) < 30
    # A profile too big for the cap is left out; the facts still get what is left.
    store.save_profile(Profile("ann", "word " * 400))
    assert [m["metadata"]["long_term_memory"] for m in ltm.context("ann")] == ["facts"]
    assert LongTermMemory(store, inject=False).context("ann") == []
    assert ltm.context(None) == []


def test_on_close_extracts_when_the_agent_stops_and_not_before(store: Any) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), trigger="on_close")
    agent = start(store, ScriptedModel(["ok", "ok"], record=True), ltm)
    agent.run("I prefer green tea.")
    agent.run("And I work at Acme.")
    assert store.get_facts("ann") == []
    agent.stop()
    assert {f.key: f.value for f in store.get_facts("ann")} == {
        "preference": "green tea",
        "employer": "Acme",
    }
    assert store.extraction_cursor(ANN) == 4


def test_manual_trigger_extracts_only_when_asked(store: Any) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor())
    agent = start(store, ScriptedModel(["ok"], record=True), ltm)
    try:
        agent.run("My name is Ann.")
        assert store.get_facts("ann") == []
        assert ltm.extract(ANN).saved[0].value == "Ann"
    finally:
        agent.stop()


def test_injection_across_tool_rounds_and_a_refused_extraction_never_fail_a_turn(
    store: Any,
) -> None:
    class Broken:
        blocks = False

        def extract(self, messages: Any, known: Any) -> Any:
            raise RuntimeError("extractor bug")

    store.save_fact(Fact("ann", "name", "Ann"))
    call = tool_call("c1", "add", '{"a": 1, "b": 2}')
    model = ScriptedModel([{"content": None, "tool_calls": [call]}, "3"], record=True)
    ltm = LongTermMemory(store, Broken(), trigger="per_turn")  # type: ignore[arg-type]
    agent = start(store, model, ltm, tools=[add])
    try:
        assert agent.run("1+2?").content == "3"
    finally:
        agent.stop()
    for sent, _ in model.calls:  # every call of the turn carries it, first
        assert sent[0]["content"] == "User context:\n- name: Ann"
        assert valid_context(sent) == sent
    assert store.extraction_cursor(ANN) == 0


def test_pipeline_provider_injects_long_term_memory_in_prepare(store: Any) -> None:
    store.save_fact(Fact("ann", "city", "Lyon"))
    ltm = LongTermMemory(store)
    provider = PipelineProvider(store, Pipeline([SlidingWindow(last=2)]), long_term_memory=ltm)
    history = [user("a"), {"role": "assistant", "content": "b"}, user("c")]
    prepared = provider.prepare(ANN, history)
    assert prepared[0]["content"] == "User context:\n- city: Lyon"
    assert prepared[1:] == history[1:]
    # An agent over that provider, given the same memory, does not inject it twice.
    model = ScriptedModel(["ok"], record=True)
    agent = Agent.start_link(llm=model, memory=provider, user_id="ann", conversation_id="chat",
                             long_term_memory=ltm)  # fmt: skip
    try:
        agent.run("hello")
    finally:
        agent.stop()
    assert sum(1 for m in model.calls[0][0] if is_injected(m)) == 1
    assert not any(is_injected(m) for m in store.get(ANN))
    assert PipelineProvider(store).prepare(ANN, history) == history  # none given: none injected


def test_long_term_memory_config_is_checked_at_start(store: Any) -> None:
    ltm = LongTermMemory(store)
    with pytest.raises(ValueError, match="give the agent a user_id"):
        Agent.start_link(
            llm=ScriptedModel([], record=True), memory={"store": store}, long_term_memory=ltm
        )
    other = MemoryStore.start_link()
    try:
        with pytest.raises(ValueError, match="another store"):
            Agent.start_link(llm=ScriptedModel([]), memory={"store": other}, user_id="ann",
                             long_term_memory=ltm)  # fmt: skip
    finally:
        other.stop()
    with pytest.raises(TypeError, match="must be a LongTermMemory"):
        Agent.start_link(llm=ScriptedModel([], record=True), memory={"store": store}, user_id="ann",
                         long_term_memory={"facts": True})  # fmt: skip
    with pytest.raises(ValueError, match="give the agent memory"):
        Agent.start_link(
            llm=ScriptedModel([], record=True), memory=None, user_id="ann", long_term_memory=ltm
        )
    with pytest.raises(TypeError, match="LongTermMemory"):
        PipelineProvider(store, long_term_memory="yes")


def test_the_injected_context_follows_every_write(store: Any) -> None:
    ltm = LongTermMemory(store)
    store.save_fact(Fact("ann", "city", "Lyon"))
    assert ltm.context("ann")[0]["content"] == "User context:\n- city: Lyon"
    ltm.context("ann")[0]["content"] = "mutated"  # a caller's copy, not the cache
    store.save_fact(Fact("ann", "city", "Paris"))
    assert ltm.context("ann")[0]["content"] == "User context:\n- city: Paris"
    store.delete_fact("ann", "city")
    store.save_fact(Fact("ann", "city", "Paris"))  # deleted and written again: version 1
    assert ltm.context("ann")[0]["content"] == "User context:\n- city: Paris"
    store.save_profile(Profile("ann", "Ann."))
    assert ltm.context("ann")[0]["content"] == "User profile:\nAnn."
    store.delete_profile("ann")
    store.delete_fact("ann", "city")
    assert ltm.context("ann") == []
