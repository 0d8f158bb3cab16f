"""Seed 004 (PhoenixAI.Store, "Memory & Guardrails"): its memory examples as written,
translated one for one into Python. ``{Mod, [k: v]}`` is ``(Mod, {"k": v})``, ``:atom``
is ``"atom"``, ``{:ok, x} = f(...)`` is ``x = f(...)`` (an error raises), ``store:
:my_store`` is a store registered as ``"my_store"``; ``Store.converse(..., memory_pipeline:
pipeline)`` is an agent over ``PipelineProvider(store, pipeline)``; ``AI.chat`` is a
``ChatModel``'s ``chat`` (a scripted one: no network)."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ScriptedModel
from otpmem.memory import (
    Pipeline,
    PipelineProvider,
    SlidingWindow,
    Summarization,
    TokenTruncation,
    apply_memory,
)
from otpmem.messages import is_summary
from otpmem.stores import Fact, MemoryStore, MemoryStoreHandle
from tests.pipeline_support import SYSTEM, RecordingModel, exchanges

AI = SimpleNamespace(chat=lambda messages, **options: MODEL.chat(messages, **options))
MODEL = ScriptedModel(lambda messages, tools: f"answered {len(messages)} messages")


@pytest.fixture
def my_store() -> Iterator[MemoryStoreHandle]:
    """``{PhoenixAI.Store, name: :my_store, adapter: PhoenixAI.Store.Adapters.ETS}``, with a
    conversation of 100 messages after a system prompt."""
    store = MemoryStore.start_link(name="my_store")
    store.add("conv-1", [SYSTEM, *exchanges(100)])
    yield store
    store.stop()


conv = SimpleNamespace(id="conv-1")


# -- Memory Strategies / Pipeline.new/1 ------------------------------------------------


def test_keep_last_30_messages(my_store: MemoryStoreHandle) -> None:
    # Keep last 30 messages
    pipeline = Pipeline.new([(SlidingWindow, {"last": 30})])

    messages = apply_memory(conv.id, pipeline, store="my_store")
    assert messages == [SYSTEM, *my_store.get("conv-1")[-30:]]


def test_trim_to_8000_tokens(my_store: MemoryStoreHandle) -> None:
    # Trim to 8000 tokens
    pipeline = Pipeline.new([(TokenTruncation, {"max_tokens": 8_000})])

    (strategy,) = pipeline.strategies
    assert isinstance(strategy, TokenTruncation) and strategy.max_tokens == 8_000
    assert apply_memory(conv.id, pipeline, store="my_store") == my_store.get("conv-1")
    small = apply_memory(conv.id, pipeline, store="my_store", max_tokens=100)
    assert small[0] == SYSTEM and 1 < len(small) < 20


def test_summarize_long_history_then_keep_last_20(my_store: MemoryStoreHandle) -> None:
    # Summarize long history, then keep last 20 messages
    pipeline = Pipeline.new(
        [
            (Summarization, {"threshold": 40, "provider": "openai", "model": "gpt-4o-mini"}),
            (SlidingWindow, {"last": 20}),
        ]
    )

    summarization, window = pipeline.strategies
    assert isinstance(summarization, Summarization) and isinstance(window, SlidingWindow)
    assert (summarization.threshold, summarization.provider, summarization.model) == (
        40,
        "openai",
        "gpt-4o-mini",
    )
    # The same pipeline with a model of the test's in place of OpenAI's (no network).
    offline = Pipeline.new(
        [
            (Summarization, {"threshold": 40, "provider": RecordingModel("openai")}),
            (SlidingWindow, {"last": 20}),
        ]
    )
    messages = apply_memory(conv.id, offline, store="my_store", model="gpt-4o-mini")
    assert messages[0] == SYSTEM and is_summary(messages[1])
    assert messages[1]["content"].endswith("a summary by openai/gpt-4o-mini")
    assert messages[2:] == my_store.get("conv-1")[-20:]


def test_presets() -> None:
    (default,) = Pipeline.preset("default").strategies  # SlidingWindow last: 50
    (aggressive,) = Pipeline.preset("aggressive").strategies  # TokenTruncation max_tokens: 4096
    summarize, then = Pipeline.preset("summarize").strategies  # Summarization, SlidingWindow
    assert isinstance(default, SlidingWindow) and default.last == 50
    assert isinstance(aggressive, TokenTruncation) and aggressive.max_tokens == 4096
    assert isinstance(summarize, Summarization) and summarize.threshold == 20
    assert isinstance(then, SlidingWindow) and then.last == 20


# -- Using Memory with converse/3 --------------------------------------------------------


def test_converse_with_a_memory_pipeline(
    my_store: MemoryStoreHandle, agents: list[AgentHandle]
) -> None:
    pipeline = Pipeline.new([(SlidingWindow, {"last": 20})])

    model = ScriptedModel(["We discussed your trip."], record=True)
    agent = Agent.start_link(
        llm=model, memory=PipelineProvider(my_store, pipeline), conversation_id=conv.id
    )
    agents.append(agent)
    response = agent.run("What did we discuss earlier?")

    assert response.content == "We discussed your trip."
    ((sent, _),) = model.calls
    assert sent[0] == SYSTEM and len(sent) == 1 + 20
    assert sent[-1] == {"role": "user", "content": "What did we discuss earlier?"}


# -- Applying Memory Manually ------------------------------------------------------------


def test_apply_memory_then_chat(my_store: MemoryStoreHandle) -> None:
    pipeline = Pipeline.preset("default")

    messages = apply_memory(conv.id, pipeline, store="my_store")
    # messages is a list of messages ready for AI.chat
    response = AI.chat(messages, provider="openai", model="gpt-4o")

    assert response.content == "answered 51 messages"
    assert len(my_store.get("conv-1")) == 101  # nothing stored


def test_apply_memory_options(my_store: MemoryStoreHandle) -> None:
    counted: list[int] = []

    class TokenCounter:  # a token counter module override
        def count(self, message: Any) -> int:
            counted.append(1)
            return 100

    pipeline = Pipeline.preset("aggressive")
    messages = apply_memory(
        conv.id,
        pipeline,
        store="my_store",
        model="gpt-4o-mini",
        provider=RecordingModel(),
        max_tokens=1_000,
        token_counter=TokenCounter(),
    )
    assert messages[0] == SYSTEM and len(messages) == 1 + 10 and counted


# -- Long-Term Memory Injection --------------------------------------------------------


def test_inject_long_term_memory(my_store: MemoryStoreHandle) -> None:
    pipeline = Pipeline.preset("default")
    fact = Fact(user_id="user-123", key="preferred_language", value="Elixir")
    saved_fact = my_store.save_fact(fact)
    assert saved_fact.value == "Elixir"

    messages = apply_memory(
        conv.id,
        pipeline,
        store="my_store",
        inject_long_term_memory=True,
        user_id="user-123",
    )

    assert messages[0]["content"] == "User context:\n- preferred_language: Elixir"
    assert messages[1:] == apply_memory(conv.id, pipeline, store="my_store")
    # save_fact is an upsert; get_facts and delete_fact, as in the guide
    my_store.save_fact(Fact(user_id="user-123", key="preferred_language", value="Erlang"))
    facts = my_store.get_facts("user-123")
    assert [(f.key, f.value) for f in facts] == [("preferred_language", "Erlang")]
    my_store.delete_fact("user-123", "preferred_language")
    assert apply_memory(
        conv.id, pipeline, store="my_store", inject_long_term_memory=True, user_id="user-123"
    ) == apply_memory(conv.id, pipeline, store="my_store")
