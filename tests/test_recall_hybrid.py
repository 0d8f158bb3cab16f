"""HybridProvider: pinned first, recalled older messages in order, the recent window, limits."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import Pipeline, TokenTruncation, drop_orphans, is_pinned, units
from otpmem.memory.recall import HybridProvider, RecallIndex, RecallIndexHandle
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, calls: tuple[str, ...] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "look", "arguments": "{}"}}
            for c in calls
        ]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


@pytest.fixture
def pair() -> Iterator[tuple[MemoryStoreHandle, RecallIndexHandle]]:
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store)
    yield store, index
    index.stop()
    store.stop()


def test_prepare_is_pinned_then_recalled_then_recent(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    conv = Conv("ann", "c")
    old = [
        {"role": "system", "content": "be brief"},
        user("my passport number ends in 4471"),
        assistant("noted"),
        user("I like jazz"),
        assistant("nice"),
    ]
    chat = [user(f"small talk {i}") if i % 2 == 0 else assistant(f"ok {i}") for i in range(12)]
    store.add(conv, old + chat + [user("what does my passport number end in?")])
    provider = HybridProvider(store, index, recent_limit=3, semantic_limit=2, total_limit=5)
    history = provider.history(conv)
    assert len(history) < store.count(conv)  # a tail read, not the whole conversation
    sent = provider.prepare(conv, history)
    assert sent[0] == {"role": "system", "content": "be brief"}  # older than the tail
    assert sent[1] == user("my passport number ends in 4471")  # recalled
    assert sent[-1] == user("what does my passport number end in?")
    assert len(sent) - 1 <= 5


def summary(end: int, text: str) -> dict[str, Any]:
    return {
        "role": "system",
        "content": text,
        "metadata": {"pinned": True, "summary": {"covers": [0, end], "summarizer": "t"}},
    }


def test_pinned_messages_come_from_the_stores_pinned_index_not_the_index() -> None:
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store)
    index.stop()  # prepare without recall must not need it: the store's index answers
    try:
        conv = Conv("ann", "pins")
        store.add(
            conv,
            [
                {"role": "system", "content": "be brief"},
                user("remember: blue", metadata={"pinned": True}),
                *[user(f"chat {i}") for i in range(20)],
                summary(20, "old summary"),
                user("b"),
                summary(21, "new summary"),
                user("question?"),
            ],
        )
        provider = HybridProvider(store, index, recent_limit=3, semantic_limit=0)
        history = provider.history(conv)
        assert len(history) < store.count(conv)  # one store.window read, not everything
        assert "old summary" in [m["content"] for m in history]  # superseded, in the tail
        sent = provider.prepare(conv, history)
        contents = [m["content"] for m in sent]
        # Every pinned message, oldest first; of the summaries only the newest stored one.
        assert contents[:3] == ["be brief", "remember: blue", "new summary"]
        assert contents[-1] == "question?" and "old summary" not in contents
    finally:
        store.stop()


def test_append_passes_idempotency_keys_so_a_retry_is_stored_once(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    conv = Conv("ann", "k")
    provider = HybridProvider(store, index)
    provider.append(conv, [user("once")], "turn-1:0")
    provider.append(conv, [user("once")], "turn-1:0")  # a retry
    provider.append(conv, [user("then")], "turn-1:1", follows="turn-1:0")
    assert [m["content"] for m in store.get(conv)] == ["once", "then"]
    assert store.key_position(conv, "turn-1:1") == 1


def test_recent_weight_splits_total_limit_when_both_limits_do_not_fit(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    assert HybridProvider(store, index, 5, 5, 10, 0.6).quotas() == (5, 5)
    assert HybridProvider(store, index, 8, 8, 10, 0.6).quotas() == (6, 4)
    assert HybridProvider(store, index, 8, 8, 10, 0.0).quotas() == (1, 8)
    assert HybridProvider(store, index, 2, 8, 10, 0.9).quotas() == (2, 8)


def test_a_recalled_tool_result_comes_with_its_call(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    conv = Conv("ann", "t")
    store.add(
        conv,
        [
            user("check the flight"),
            assistant(None, ("k1",)),
            tool("k1", "flight LH400 departs gate B22"),
            assistant("it leaves from B22"),
            *[user(f"filler {i}") for i in range(8)],
            user("which gate was the flight?"),
        ],
    )
    provider = HybridProvider(store, index, recent_limit=2, semantic_limit=4, total_limit=6)
    sent = provider.prepare(conv, provider.history(conv))
    assert drop_orphans(sent) == sent
    call = sent.index(assistant(None, ("k1",)))
    assert sent[call + 1] == tool("k1", "flight LH400 departs gate B22")


def test_clear_forgets_in_the_store_and_the_index(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    conv = Conv("ann", "x")
    provider = HybridProvider(store, index)
    provider.append(conv, [user("zebra facts")])
    assert index.get_relevant("zebra", user_id="ann")
    provider.clear(conv)
    assert store.count(conv) == 0
    assert index.stats()["documents"] == 0


def test_a_pipeline_runs_last_and_keeps_the_pinned(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    conv = Conv("ann", "p")
    store.add(conv, [{"role": "system", "content": "rules"}] + [user("x" * 400)] * 4)
    guard = Pipeline([TokenTruncation(max_tokens=150)])
    provider = HybridProvider(store, index, pipeline=guard)
    sent = provider.prepare(conv, provider.history(conv))
    assert sent[0]["role"] == "system"
    assert len(sent) == 2  # the newest question, over budget alone, is all that is kept


def test_an_agent_takes_a_hybrid_provider_as_its_memory(
    pair: tuple[MemoryStoreHandle, RecallIndexHandle],
) -> None:
    store, index = pair
    seen: list[list[Any]] = []

    def reply(messages: list[Any]) -> str:
        seen.append(messages)
        return "ok"

    provider = HybridProvider(store, index, recent_limit=2, semantic_limit=1, total_limit=3)
    agent = Agent.start_link(llm=ScriptedModel(reply), memory=provider, user_id="ann")
    try:
        agent.run("my locker code is 9182")
        for i in range(4):
            agent.run(f"chat {i}")
        agent.run("what is my locker code?")
    finally:
        agent.stop()
    last = [m.get("content") for m in seen[-1]]
    assert "my locker code is 9182" in last
    assert last[-1] == "what is my locker code?"
    assert len(seen[-1]) <= 3


def test_bad_limits_are_refused(pair: tuple[MemoryStoreHandle, RecallIndexHandle]) -> None:
    store, index = pair
    with pytest.raises(ValueError, match="recent_limit"):
        HybridProvider(store, index, recent_limit=0)
    with pytest.raises(ValueError, match="recent_weight"):
        HybridProvider(store, index, recent_weight=1.5)
    with pytest.raises(TypeError, match="index"):
        HybridProvider(store, store)  # type: ignore[arg-type]


# -- the invariants, for any conversation -------------------------------------------------------

WORDS = ["alpha", "bravo", "gate", "flight", "jazz", "passport", "lemon", "zebra"]
_ids = itertools.count()


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Conversations of user/assistant messages, whole tool groups, system and pinned ones;
    every content is unique, so an output message names its stored position."""
    messages: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 30))):
        n = next(_ids)
        words = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
        kind = draw(st.sampled_from(["user", "user", "assistant", "group", "system", "pinned"]))
        if kind == "group":
            calls = tuple(f"k{n}-{j}" for j in range(draw(st.integers(1, 3))))
            messages.append(assistant(f"{words} call {n}", calls))
            messages += [tool(c, f"{words} result {c}") for c in calls]
        elif kind == "system":
            messages.append({"role": "system", "content": f"{words} rule {n}"})
        elif kind == "pinned":
            messages.append(user(f"{words} pin {n}", metadata={"pinned": True}))
        else:
            messages.append({"role": kind, "content": f"{words} text {n}"})
    if draw(st.booleans()):
        messages.append(user(f"{draw(st.sampled_from(WORDS))} question {next(_ids)}"))
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    stored=conversations(),
    recent_limit=st.integers(1, 6),
    semantic_limit=st.integers(0, 6),
    total_limit=st.integers(1, 10),
    recent_weight=st.floats(0.0, 1.0),
)
def test_prepare_keeps_every_invariant(
    stored: list[dict[str, Any]],
    recent_limit: int,
    semantic_limit: int,
    total_limit: int,
    recent_weight: float,
) -> None:
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store)
    try:
        conv = Conv("prop", "c")
        store.add(conv, stored)
        provider = HybridProvider(
            store, index, recent_limit, semantic_limit, total_limit, recent_weight
        )
        history = provider.history(conv)
        sent = provider.prepare(conv, history)
    finally:
        index.stop()
        store.stop()
    position = {m["content"]: i for i, m in enumerate(stored)}
    pinned = [m for m in sent if is_pinned(m)]
    # Pinned first, every one of them, in conversation order.
    assert sent[: len(pinned)] == pinned
    assert pinned == [m for m in stored if is_pinned(m)]
    rest = sent[len(pinned) :]
    # Never a tool result without its call right before it, in conversation order.
    assert drop_orphans(rest) == rest
    order = [position[m["content"]] for m in rest]
    assert order == sorted(order) and len(set(order)) == len(order)
    # At most total_limit, unless the newest tool group alone is larger: then just it.
    body = [m for m in history if not is_pinned(m)]
    newest = units(body)[-1] if body else []
    if len(newest) > total_limit:
        assert rest == newest
    else:
        assert len(rest) <= total_limit
        # The newest message is always there: a turn sees what it answers.
        assert not body or rest[-1] == body[-1]
