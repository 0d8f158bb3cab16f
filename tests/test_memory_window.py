"""The id-safe window: beamai's two window cases, id matching beyond beamai, and
DefaultProvider (validation, tail reads, explain)."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from otpmem.memory import DefaultProvider, drop_orphans, is_pinned, safe_window, units
from otpmem.messages import Conv
from otpmem.stores import ChatMemory, MemoryStore, MemoryStoreHandle, StoredWindow
from tests.support import assert_pair_safe

CONV = Conv("alice", "window")


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> dict[str, Any]:
    """An assistant message asking for one tool call per id."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": f"f_{i}", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": f"result of {call_id}"}


class SpyStore:
    """A ChatMemory that forwards to a real store and records every read's ``last``."""

    def __init__(self, inner: MemoryStoreHandle) -> None:
        self.inner = inner
        self.gets: list[int | None] = []

    def add(
        self,
        conv: Any,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        self.inner.add(conv, messages, idempotency_key, follows=follows)

    def pinned(self, conv: Any) -> list[tuple[int, dict[str, Any]]]:
        return self.inner.pinned(conv)

    def window(self, conv: Any, last: int) -> StoredWindow:
        self.gets.append(last)
        return self.inner.window(conv, last)

    def key_position(self, conv: Any, idempotency_key: str) -> int | None:
        return self.inner.key_position(conv, idempotency_key)

    def get(self, conv: Any, last: int | None = None) -> list[dict[str, Any]]:
        self.gets.append(last)
        return self.inner.get(conv, last=last)

    def clear(self, conv: Any) -> None:
        self.inner.clear(conv)

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        return self.inner.conversations(user_id)

    def count(self, conv: Any) -> int:
        return self.inner.count(conv)

    def forget_user(self, user_id: str) -> None:
        self.inner.forget_user(user_id)


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    try:
        yield handle
    finally:
        handle.stop()


# --- beamai's window cases (beamai_memory_filter_tests.erl) -------------------------------


def test_window_provider_test(store: MemoryStoreHandle) -> None:
    sys_, u1, a1, u2 = system("Sys"), user("U1"), assistant("A1"), user("U2")
    provider = DefaultProvider(store, window=2)
    provider.append(CONV, [sys_, u1, a1, u2])
    history = DefaultProvider(store).history(CONV)
    assert history == [sys_, u1, a1, u2]
    assert provider.prepare(CONV, history) == [sys_, a1, u2]
    # The full history is always persisted, whatever the window.
    assert store.get(CONV) == [sys_, u1, a1, u2]


def test_window_provider_drops_orphan_tool_test(store: MemoryStoreHandle) -> None:
    a1, t1, u2 = calls("c1"), result("c1"), user("U2")
    provider = DefaultProvider(store, window=2)
    provider.append(CONV, [a1, t1, u2])
    history = DefaultProvider(store).history(CONV)
    assert history == [a1, t1, u2]
    assert provider.prepare(CONV, history) == [u2]
    assert store.count(CONV) == 3


# --- id matching, beyond beamai's leading-tool rule ---------------------------------------


def test_tool_result_after_the_head_whose_call_fell_out_is_dropped() -> None:
    # Window of 3 is [calls(c2), result(c2), result(c1)]: result(c1) is not at the head
    # (beamai would keep it), but its call fell out of the window.
    messages = [user("U"), calls("c1"), calls("c2"), result("c2"), result("c1")]
    assert safe_window(messages, 3) == [calls("c2"), result("c2")]


def test_window_starting_at_assistant_tool_calls_with_results_is_kept() -> None:
    messages = [user("U"), calls("c1", "c2"), result("c1"), result("c2"), assistant("done")]
    window = safe_window(messages, 4)
    assert window == messages[1:]
    assert window[0] is messages[1]


def test_results_of_a_kept_call_are_never_dropped() -> None:
    conversation: list[dict[str, Any]] = [system("rules")]
    for i in range(6):
        conversation += [
            user(f"q{i}"),
            calls(f"a{i}", f"b{i}"),
            result(f"a{i}"),
            assistant(f"thinking {i}"),  # a late result after an unrelated message
            result(f"b{i}"),
            assistant(f"answer {i}"),
        ]
    body = [m for m in conversation if m["role"] != "system"]
    for n in range(len(body) + 2):
        window = safe_window(conversation, n)
        assert window[0] is conversation[0]
        rest = window[1:]
        assert_pair_safe(rest)
        raw = body[-n:] if n else []
        kept_calls = {c["id"] for m in raw for c in m.get("tool_calls") or ()}
        expected = [m for m in raw if m["role"] != "tool" or m["tool_call_id"] in kept_calls]
        assert rest == expected, f"n={n}"
        assert all(any(m is r for r in raw) for m in rest)


def test_window_does_not_force_keep_the_newest_user_message() -> None:
    # beamai semantics: a long tool loop can window out the question.
    messages = [user("Q"), calls("c1"), result("c1")]
    assert safe_window(messages, 2) == [calls("c1"), result("c1")]


def test_system_messages_are_hoisted_in_order() -> None:
    s1, s2, s3 = system("S1"), system("S2"), system("S3")
    messages = [user("U1"), s1, assistant("A1"), s2, user("U2"), s3, assistant("A2")]
    window = safe_window(messages, 2)
    assert window == [s1, s2, s3, user("U2"), assistant("A2")]
    assert [m is s for m, s in zip(window, (s1, s2, s3), strict=False)] == [True] * 3
    # Systems are never counted in the window.
    assert safe_window(messages, 0) == [s1, s2, s3]
    assert safe_window(messages, 10) == [
        s1,
        s2,
        s3,
        *[m for m in messages if m not in (s1, s2, s3)],
    ]


def test_safe_window_rejects_bad_sizes() -> None:
    for bad in (-1, 1.5, "2", None, True):
        with pytest.raises(ValueError):
            safe_window([user("x")], bad)  # type: ignore[arg-type]


def test_drop_orphans_and_units_keep_tool_groups_together() -> None:
    messages = [
        result("gone"),
        user("U"),
        calls("c1", "c2"),
        result("c1"),
        result("c2"),
        result("x"),
    ]
    assert drop_orphans(messages) == messages[1:5]
    assert units(messages[1:5]) == [[messages[1]], messages[2:5]]


def test_is_pinned_covers_system_and_metadata_pinned_but_never_tool_traffic() -> None:
    assert is_pinned(system("S"))
    assert is_pinned({"role": "user", "content": "x", "metadata": {"pinned": True}})
    assert not is_pinned({"role": "user", "content": "x", "metadata": {"pinned": "yes"}})
    assert not is_pinned(user("x"))
    assert not is_pinned({**result("c1"), "metadata": {"pinned": True}})
    assert not is_pinned({**calls("c1"), "metadata": {"pinned": True}})
    # Metadata that is a Mapping but not a dict counts the same.
    proxy = types.MappingProxyType({"pinned": True})
    assert is_pinned({"role": "user", "content": "x", "metadata": proxy})
    assert not is_pinned({"role": "user", "content": "x", "metadata": ["pinned"]})


# --- DefaultProvider --------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3"])
def test_default_provider_rejects_a_bad_window(store: MemoryStoreHandle, bad: Any) -> None:
    with pytest.raises(ValueError, match="window"):
        DefaultProvider(store, window=bad)


@pytest.mark.parametrize("not_a_store", [object(), {}, None, "store"])
def test_default_provider_rejects_a_non_store(not_a_store: Any) -> None:
    with pytest.raises(TypeError):
        DefaultProvider(not_a_store)


def test_spy_store_is_a_chat_memory(store: MemoryStoreHandle) -> None:
    assert isinstance(SpyStore(store), ChatMemory)


def test_windowed_history_reads_only_the_tail(store: MemoryStoreHandle) -> None:
    spy = SpyStore(store)
    messages = [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(200)]
    store.add(CONV, messages)
    provider = DefaultProvider(spy, window=5)
    history = provider.history(CONV)
    assert history == messages[-5:]
    assert spy.gets, "history did not read the store"
    assert all(last is not None and last <= 5 for last in spy.gets), spy.gets


def test_windowed_history_includes_system_messages_found_in_the_tail(
    store: MemoryStoreHandle,
) -> None:
    spy = SpyStore(store)
    older = [user(f"old {i}") for i in range(50)]
    tail = [user("U1"), system("from RAG"), assistant("A1"), user("U2")]
    store.add(CONV, [*older, *tail])
    provider = DefaultProvider(spy, window=3)
    history = provider.history(CONV)
    assert history == tail
    assert all(last is not None for last in spy.gets), spy.gets
    assert provider.prepare(CONV, history) == [
        system("from RAG"),
        user("U1"),
        assistant("A1"),
        user("U2"),
    ]


def test_windowed_history_holds_the_newest_window_non_system_messages(
    store: MemoryStoreHandle,
) -> None:
    # Two system messages next to each other in the tail: the first tail read of 2 finds
    # one system, the re-read of 3 finds another; the window must still hold 2 others.
    messages = [user("U0"), user("U1"), system("S1"), system("S2"), user("U2")]
    store.add(CONV, messages)
    spy = SpyStore(store)
    provider = DefaultProvider(spy, window=2)
    history = provider.history(CONV)
    assert [m for m in history if m["role"] != "system"] == [user("U1"), user("U2")]
    assert provider.prepare(CONV, history) == safe_window(messages, 2)
    assert all(last is not None for last in spy.gets), spy.gets


class UncountingStore(SpyStore):
    """A store whose windows leave ``tail_pinned`` uncounted, as a third-party one may."""

    def window(self, conv: Any, last: int) -> StoredWindow:
        stored = super().window(conv, last)
        return dataclasses.replace(stored, tail_pinned=None)


def test_windowed_history_counts_the_tail_itself_when_the_store_does_not(
    store: MemoryStoreHandle,
) -> None:
    summary = {"role": "system", "content": "S", "metadata": {"summary": {"covers": [0, 1]}}}
    messages = [user("U0"), user("U1"), system("S1"), summary, summary, user("U2"), user("U3")]
    store.add(CONV, messages)
    for window in (1, 2, 3):
        counted = DefaultProvider(store, window=window).history(CONV)
        uncounted = DefaultProvider(UncountingStore(store), window=window).history(CONV)
        assert uncounted == counted
        assert len([m for m in counted if not is_pinned(m)]) == window


def test_history_without_a_window_is_everything(store: MemoryStoreHandle) -> None:
    spy = SpyStore(store)
    messages = [system("S"), *[user(f"u{i}") for i in range(30)]]
    store.add(CONV, messages)
    provider = DefaultProvider(spy)
    assert provider.history(CONV) == messages
    assert provider.prepare(CONV, messages) == messages
    provider.clear(CONV)
    assert provider.history(CONV) == []


def test_prepare_does_not_touch_the_store(store: MemoryStoreHandle) -> None:
    spy = SpyStore(store)
    provider = DefaultProvider(spy, window=1)
    assert provider.prepare(CONV, [user("a"), user("b")]) == [user("b")]
    assert spy.gets == []
    assert store.count(CONV) == 0


def test_explain_reports_what_the_window_did(store: MemoryStoreHandle) -> None:
    provider = DefaultProvider(store, window=2)
    messages = [system("Sys"), user("U1"), calls("c1"), result("c1"), user("U2")]
    report = provider.explain(CONV, messages)
    assert report.messages == [messages[0], messages[4]]
    assert report.messages == provider.prepare(CONV, messages)
    assert report.pinned == [0]
    assert report.kept == [4]
    assert report.dropped == [1, 2, 3]
    assert report.fallback is False
    assert report.summarized is None
    assert any("safe_window(n=2)" in reason for reason in report.reasons)
    counter = provider.counter
    assert report.tokens["pinned"] == counter.count(messages[0])
    assert report.tokens["kept"] == counter.count(messages[4])
    assert report.tokens["dropped"] == sum(counter.count(messages[i]) for i in (1, 2, 3))
    assert report.tokens["sent"] == report.tokens["pinned"] + report.tokens["kept"]
    assert "dropped" in report.describe()


def test_explain_without_a_window_keeps_everything_and_gives_no_reason(
    store: MemoryStoreHandle,
) -> None:
    provider = DefaultProvider(store)
    messages = [system("Sys"), user("U1"), calls("c1"), result("c1"), user("U2")]
    report = provider.explain(CONV, messages)
    assert report.messages == messages
    assert report.pinned == [0]
    assert report.kept == [1, 2, 3, 4]
    assert report.dropped == []
    assert report.reasons == []
    assert report.tokens["dropped"] == 0
