"""The conformance tests of the pinned index and of idempotency keys (see ``testing``)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ..messages import Conv
from ._base import KEYS_KEPT, ConversationCleared
from ._documents import export_document

WAIT = 10.0


def _user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def _system(text: str, **metadata: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "system", "content": text}
    if metadata:
        message["metadata"] = metadata
    return message


def _summary(text: str, end: int) -> dict[str, Any]:
    return _system(text, pinned=True, summary={"covers": [0, end]})


class PinnedIndexConformance:
    """The pinned index and ``window``: pinned messages survive every window."""

    def test_pinned_lists_system_and_pinned_messages_with_positions(self, store: Any) -> None:
        note = _user("remember me", metadata={"pinned": True})
        pinned_call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            "metadata": {"pinned": True},
        }
        store.add("p", [_system("rules"), _user("a"), note, pinned_call])
        store.add("p", [{"role": "tool", "tool_call_id": "c1", "content": "r"}, _user("b")])
        # Tool traffic is never pinned: moving it first would cut a result from its call.
        assert store.pinned("p") == [(0, _system("rules")), (2, note)]
        assert store.pinned("nobody") == []

    def test_a_new_summary_replaces_the_indexed_one(self, store: Any) -> None:
        first, second = _summary("S1", 2), _summary("S2", 4)
        store.add("s", [_system("rules"), _user("a"), _user("b"), first])
        store.add("s", [_user("c"), _user("d"), second, _user("e")])
        assert store.pinned("s") == [(0, _system("rules")), (6, second)]
        assert store.get("s")[3] == first, "the full history keeps every summary"

    def test_window_is_the_tail_and_the_pinned_messages_before_it(self, store: Any) -> None:
        batch = [_system("rules"), *(_user(f"m{i}") for i in range(10))]
        store.add("w", batch)
        store.add("w", [_summary("S", 5), _user("last")])
        stored = store.window("w", 3)
        assert stored.tail == [_user("m9"), _summary("S", 5), _user("last")]
        assert stored.pinned == [(0, _system("rules"))]
        assert (stored.start, stored.total, stored.pinned_before) == (10, 13, 1)
        assert stored.tail_pinned in (1, None), "the summary is the tail's one pinned message"
        assert stored.messages() == [_system("rules"), *stored.tail]

    def test_window_counts_superseded_summaries_as_pinned(self, store: Any) -> None:
        store.add("w", [_user("a"), _summary("S1", 1), _user("b"), _summary("S2", 2)])
        store.add("w", [_user("c"), _user("d")])
        stored = store.window("w", 2)
        assert stored.pinned == [(3, _summary("S2", 2))]
        # Two summaries precede the tail: 4 - 2 unpinned messages come before it.
        assert (stored.start, stored.pinned_before) == (4, 2)
        store.add("w", [_summary("S3", 6), _summary("S4", 7), _user("e")])
        stored = store.window("w", 3)
        # A superseded summary in the tail is pinned too: a provider counting the tail's
        # unpinned messages must not take it for one.
        assert stored.tail == [_summary("S3", 6), _summary("S4", 7), _user("e")]
        assert stored.tail_pinned in (2, None)

    def test_window_of_a_short_or_unknown_conversation(self, store: Any) -> None:
        store.add("short", [_system("rules"), _user("a")])
        stored = store.window("short", 10)
        assert (stored.pinned, stored.tail, stored.start, stored.total) == (
            [],
            [_system("rules"), _user("a")],
            0,
            2,
        )
        empty = store.window("nobody", 5)
        assert (empty.pinned, empty.tail, empty.start, empty.total) == ([], [], 0, 0)
        zero = store.window("short", 0)
        assert (zero.tail, zero.start, zero.pinned) == ([], 2, [(0, _system("rules"))])

    def test_bad_window_sizes_are_refused(self, store: Any) -> None:
        for bad in (-1, None, 1.5, "3", True):
            with pytest.raises((ValueError, TypeError)):
                store.window("w", bad)

    def test_clear_and_forget_user_empty_the_index(self, store: Any) -> None:
        alice, bob = Conv("alice", "c"), Conv("bob", "c")
        for conv in (alice, bob, "anon"):
            store.add(conv, [_system("rules"), _user("x")])
        store.clear("anon")
        store.forget_user("alice")
        assert store.pinned("anon") == [] and store.pinned(alice) == []
        assert store.window(alice, 1).total == 0
        assert store.pinned(bob) == [(0, _system("rules"))]
        store.add(alice, [_user("again")])
        assert store.pinned(alice) == [], "a forgotten index must not come back"


class IdempotencyConformance:
    """``add(..., idempotency_key=)`` stores a batch once; ``follows`` refuses a write that
    continues a cleared batch."""

    def test_a_key_stores_its_batch_once(self, store: Any) -> None:
        store.add("k", [_user("a"), _user("b")], idempotency_key="t1:0")
        store.add("k", [_user("a"), _user("b")], idempotency_key="t1:0")
        store.add("k", [_user("other")], idempotency_key="t1:0")  # same key: still nothing
        assert store.get("k") == [_user("a"), _user("b")]
        store.add("k", [_user("c")], idempotency_key="t1:1")
        assert store.count("k") == 3
        assert store.key_position("k", "t1:0") == 0
        assert store.key_position("k", "t1:1") == 2
        assert store.key_position("k", "t9:0") is None

    def test_keys_belong_to_one_conversation(self, store: Any) -> None:
        store.add(Conv("alice", "c"), [_user("a")], idempotency_key="k")
        store.add(Conv("bob", "c"), [_user("b")], idempotency_key="k")
        store.add("c", [_user("anon")], idempotency_key="k")
        assert store.count(Conv("alice", "c")) == store.count(Conv("bob", "c")) == 1
        assert store.count("c") == 1

    def test_clear_forgets_the_keys(self, store: Any) -> None:
        store.add("k", [_user("a")], idempotency_key="t:0")
        store.clear("k")
        assert store.key_position("k", "t:0") is None
        store.add("k", [_user("a")], idempotency_key="t:0")
        assert store.get("k") == [_user("a")]

    def test_follows_needs_the_batch_it_continues(self, store: Any) -> None:
        store.add("f", [_user("q")], idempotency_key="t:0")
        store.add("f", [_user("step 1")], idempotency_key="t:1", follows="t:0")
        store.clear("f")
        with pytest.raises(ConversationCleared):
            store.add("f", [_user("step 2")], idempotency_key="t:2", follows="t:0")
        assert store.count("f") == 0, "a refused write must not resurrect the conversation"
        with pytest.raises(ConversationCleared):
            store.add("never", [_user("x")], follows="t:0")
        assert store.get("never") == []

    def test_forget_user_refuses_the_turns_still_running(self, store: Any) -> None:
        conv = Conv("alice", "f")
        store.add(conv, [_user("q")], idempotency_key="t:0")
        store.forget_user("alice")
        with pytest.raises(ConversationCleared):
            store.add(conv, [_user("late")], idempotency_key="t:1", follows="t:0")
        assert store.conversations("alice") == []

    def test_bad_keys_are_refused_and_store_nothing(self, store: Any) -> None:
        for bad in ("", 7, b"k", "x" * 257, ["k"]):
            with pytest.raises((ValueError, TypeError)):
                store.add("bad", [_user("a")], idempotency_key=bad)
            with pytest.raises((ValueError, TypeError)):
                store.add("bad", [_user("a")], follows=bad)
        assert store.count("bad") == 0

    def test_racing_retries_with_one_key_store_once(self, store: Any) -> None:
        start = threading.Barrier(8)

        def retry(i: int) -> None:
            start.wait(WAIT)
            store.add("race", [_user("once"), _user("twice?")], idempotency_key="turn:0")
            store.add("race", [_user(f"own {i}")], idempotency_key=f"own:{i}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(retry, range(8)))
        stored = store.get("race")
        assert stored[:2] == [_user("once"), _user("twice?")]
        assert sorted(m["content"] for m in stored[2:]) == sorted(f"own {i}" for i in range(8))

    def test_the_newest_keys_are_remembered(self, store: Any) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: store.add("many", [_user(f"m{i}")], idempotency_key=f"k{i}"),
                    range(KEYS_KEPT + 1),
                )
            )
        assert store.count("many") == KEYS_KEPT + 1
        positions = [store.key_position("many", f"k{i}") for i in range(KEYS_KEPT + 1)]
        forgotten = [i for i, p in enumerate(positions) if p is None]
        assert len(forgotten) == 1, "exactly the oldest key is forgotten"
        kept = [i for i, p in enumerate(positions) if p is not None]
        store.add("many", [_user("again")], idempotency_key=f"k{kept[0]}")
        assert store.count("many") == KEYS_KEPT + 1

    def test_importing_a_document_twice_stores_it_once(self, store: Any) -> None:
        if not hasattr(store, "import_"):
            return
        alice = Conv("alice", "imported")
        document = export_document([(alice, [_user("a"), _user("b")]), (Conv(None, "x"), [])])
        assert store.import_(document) == 2
        assert store.import_(document) == 2
        assert store.get(alice) == [_user("a"), _user("b")]
        store.add(alice, [_user("c")])
        store.import_(document)
        assert store.count(alice) == 3
