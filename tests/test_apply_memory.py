"""``apply_memory`` (PhoenixAI.Store's ``Store.apply_memory/3``): the messages a pipeline
makes of a stored conversation, nothing stored; each per-call option changes the result
for that call only, and calls with different options at once on one pipeline (threads)
never see each other's."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from otpmem.memory import (
    HeuristicCounter,
    LongTermMemory,
    Pipeline,
    SlidingWindow,
    Summarization,
    TokenTruncation,
    apply_memory,
    count_all,
)
from otpmem.messages import Conv, is_summary
from otpmem.stores import Fact, MemoryStore, MemoryStoreHandle
from tests.pipeline_support import SYSTEM, CountingStore, RecordingModel, exchanges, user
from tests.support import run_threads

CONV = Conv("user-123", "apply")


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    handle.add(CONV, [SYSTEM, *exchanges(120)])
    yield handle
    handle.stop()


def unpinned(messages: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [m for m in messages if m.get("role") != "system"]


def test_it_is_the_pipeline_over_the_stored_conversation_and_stores_nothing(
    store: MemoryStoreHandle,
) -> None:
    before = store.get(CONV)
    for pipeline in ("default", "aggressive", "summarize"):
        expected = Pipeline.preset(pipeline).run(before)
        assert apply_memory(CONV, pipeline, store=store) == expected
        assert apply_memory(CONV, Pipeline.preset(pipeline), store=store) == expected
    sent = apply_memory(CONV, [(SlidingWindow, {"last": 20})], store=store)
    assert sent == [SYSTEM, *before[-20:]]
    # the summarize preset rolled a summary: returned, never stored
    assert is_summary(apply_memory(CONV, "summarize", store=store)[1])
    assert store.get(CONV) == before


def test_max_tokens_is_the_calls_budget(store: MemoryStoreHandle) -> None:
    pipeline = Pipeline([TokenTruncation(4000)])
    whole = apply_memory(CONV, pipeline, store=store)
    tight = apply_memory(CONV, pipeline, store=store, max_tokens=300)
    assert len(tight) < len(whole)
    assert count_all(HeuristicCounter(), unpinned(tight)) <= 300
    assert tight[-len(unpinned(tight)) :] == whole[-len(unpinned(tight)) :]
    # a pipeline with no token step gets one for the call: a budget is never ignored
    window = Pipeline([SlidingWindow(100)])
    capped = apply_memory(CONV, window, store=store, max_tokens=300)
    assert unpinned(capped) == unpinned(tight)
    assert [type(s) for s in window.strategies] == [SlidingWindow]
    (step,) = pipeline.strategies
    assert isinstance(step, TokenTruncation) and step.max_tokens == 4000  # unchanged
    assert apply_memory(CONV, pipeline, store=store) == whole


def test_token_counter_is_the_calls_counter(store: MemoryStoreHandle) -> None:
    pipeline = Pipeline([TokenTruncation(600)])
    plain = apply_memory(CONV, pipeline, store=store)
    dear = HeuristicCounter(chars_per_token=1.0)  # four times the tokens of the default
    fewer = apply_memory(CONV, pipeline, store=store, token_counter=dear)
    assert 0 < len(unpinned(fewer)) < len(unpinned(plain))
    assert count_all(dear, unpinned(fewer)) <= 600
    assert pipeline.counter is not dear
    assert apply_memory(CONV, pipeline, store=store) == plain
    with pytest.raises(TypeError, match="token_counter must be a TokenCounter"):
        apply_memory(CONV, pipeline, store=store, token_counter=42)  # type: ignore[arg-type]


def test_model_and_provider_are_the_summarys_when_the_strategy_has_none(
    store: MemoryStoreHandle,
) -> None:
    offline = apply_memory(CONV, "summarize", store=store)
    assert offline[1]["metadata"]["summary"]["summarizer"] == "extractive"
    model = RecordingModel("fake")
    asked = apply_memory(CONV, "summarize", store=store, provider=model, model="gpt-4o-mini")
    summary = asked[1]
    assert summary["metadata"]["summary"]["summarizer"] == "model:fake/gpt-4o-mini"
    assert summary["content"].endswith("a summary by fake/gpt-4o-mini")
    assert model.options == [{"model": "gpt-4o-mini"}]
    by_provider = apply_memory(CONV, "summarize", store=store, provider=model)
    assert by_provider[1]["metadata"]["summary"]["summarizer"] == "model:fake"
    assert asked[2:] == offline[2:]  # the same messages kept
    # the strategy's own provider wins over the call's, the call's model fills its gap
    own = RecordingModel("own")
    pipeline = Pipeline([(Summarization, {"threshold": 20, "provider": own})])
    mixed = apply_memory(CONV, pipeline, store=store, provider=model, model="m2")
    assert mixed[1]["metadata"]["summary"]["summarizer"] == "model:own/m2"
    assert len(model.options) == 2 and own.options == [{"model": "m2"}]


def test_a_model_with_nothing_to_call_it_is_an_error(store: MemoryStoreHandle) -> None:
    with pytest.raises(ValueError, match="model 'gpt-4o-mini' but has no provider"):
        apply_memory(CONV, "summarize", store=store, model="gpt-4o-mini")
    with pytest.raises(ValueError, match="'anthropic' is not a provider"):
        apply_memory(CONV, "summarize", store=store, provider="anthropic")
    with pytest.raises(ValueError, match="max_tokens must be None or an int >= 1"):
        apply_memory(CONV, "default", store=store, max_tokens=0)


def test_long_term_memory_is_put_in_front_for_the_user(store: MemoryStoreHandle) -> None:
    store.save_fact(Fact(user_id="user-123", key="preferred_language", value="Elixir"))
    plain = apply_memory(CONV, "default", store=store)
    injected = apply_memory(
        CONV, "default", store=store, inject_long_term_memory=True, user_id="user-123"
    )
    assert injected[0]["content"] == "User context:\n- preferred_language: Elixir"
    assert injected[0]["metadata"]["long_term_memory"] == "facts"
    assert injected[1:] == plain
    # the conversation's own user by default, and a LongTermMemory of the caller's
    assert apply_memory(CONV, "default", store=store, inject_long_term_memory=True) == injected
    ltm = LongTermMemory(store, inject_max_tokens=5)  # too small for the facts
    capped = apply_memory(
        CONV, "default", store=store, inject_long_term_memory=True, long_term_memory=ltm
    )
    assert capped == plain
    assert all("long_term_memory" not in (m.get("metadata") or {}) for m in store.get(CONV))


def test_long_term_memory_refuses_what_cannot_be_right(store: MemoryStoreHandle) -> None:
    with pytest.raises(ValueError, match="not the conversation's user 'user-123'"):
        apply_memory(CONV, "default", store=store, inject_long_term_memory=True, user_id="eve")
    store.add("anonymous", [user("hi")])
    with pytest.raises(ValueError, match="needs a user"):
        apply_memory("anonymous", "default", store=store, inject_long_term_memory=True)
    with pytest.raises(ValueError, match="inject_long_term_memory is False"):
        apply_memory(CONV, "default", store=store, long_term_memory=LongTermMemory(store))
    other = MemoryStore.start_link()
    try:
        with pytest.raises(ValueError, match="reads another store"):
            apply_memory(
                CONV,
                "default",
                store=store,
                inject_long_term_memory=True,
                long_term_memory=LongTermMemory(other),
            )
    finally:
        other.stop()
    # a conversation of no user takes the facts of the user named
    store.save_fact(Fact(user_id="ann", key="city", value="Lyon"))
    sent = apply_memory(
        "anonymous", "default", store=store, inject_long_term_memory=True, user_id="ann"
    )
    assert sent[0]["content"] == "User context:\n- city: Lyon" and sent[1:] == [user("hi")]


def test_the_store_by_its_name_and_a_bad_one() -> None:
    named = MemoryStore.start_link(name="my_store")
    try:
        named.add(CONV, [SYSTEM, *exchanges(60)])
        sent = apply_memory(CONV, Pipeline.preset("default"), store="my_store")
        assert sent == [SYSTEM, *named.get(CONV)[-50:]]
    finally:
        named.stop()
    with pytest.raises(ValueError, match="no store is registered as 'my_store'"):
        apply_memory(CONV, "default", store="my_store")
    with pytest.raises(TypeError, match="store must implement ChatMemory"):
        apply_memory(CONV, "default", store=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pipeline must be a Pipeline"):
        apply_memory(CONV, 42, store=named)  # type: ignore[arg-type]


def test_it_reads_a_bounded_tail_of_a_long_conversation() -> None:
    memory = MemoryStore.start_link()
    try:
        memory.add(CONV, [SYSTEM, *exchanges(20_000)])
        counting = CountingStore(memory)
        sent = apply_memory(CONV, "default", store=counting, max_tokens=500)
        assert sent[0] == SYSTEM and len(sent) > 5
        assert counting.read_since(0) <= 1 + 64
    finally:
        memory.stop()


def test_concurrent_calls_with_other_options_never_see_each_others(
    store: MemoryStoreHandle,
) -> None:
    pipeline = Pipeline.new(
        [
            (Summarization, {"threshold": 100, "keep_recent": 60}),
            (TokenTruncation, {"max_tokens": 5000}),
        ]
    )
    models = [RecordingModel(f"m{t}") for t in range(4)]
    calls: list[dict[str, Any]] = [
        {"max_tokens": 200 + 150 * t, "provider": models[t], "model": f"model-{t}"}
        for t in range(4)
    ]
    calls[3]["token_counter"] = HeuristicCounter(chars_per_token=1.0)
    expected = [apply_memory(CONV, pipeline, store=store, **call) for call in calls]
    assert len({len(e) for e in expected}) == 4  # each option set gives its own answer
    for m in models:
        m.options.clear()
    start = threading.Barrier(4, timeout=30.0)
    wrong: list[tuple[int, int]] = []

    def caller(t: int) -> None:
        start.wait()
        for i in range(40):
            if apply_memory(CONV, pipeline, store=store, **calls[t]) != expected[t]:
                wrong.append((t, i))

    assert run_threads(4, caller, timeout=60.0) == []
    assert wrong == []
    assert [len(m.options) for m in models] == [40] * 4
    assert all(o == {"model": f"model-{t}"} for t, m in enumerate(models) for o in m.options)
    (summary, truncation) = pipeline.strategies
    assert isinstance(truncation, TokenTruncation) and truncation.max_tokens == 5000
    assert isinstance(summary, Summarization) and summary.provider is None
