"""The ChatMemory conformance suite: the contract every store must keep, as pytest tests.

A backend proves itself by subclassing ``ChatMemoryConformance`` and providing a ``store``
fixture that yields a fresh, empty store and stops it afterwards::

    import pytest
    from otpmem.stores.testing import ChatMemoryConformance

    class TestMyStore(ChatMemoryConformance):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore.start_link(tmp_path / "db")
            yield store
            store.stop()

Stores that also offer ``export``/``import_``/``search`` are checked on those too. The
suite covers the pinned index (``pinned``, ``window``) and idempotency keys (``add(...,
idempotency_key=, follows=)``, ``key_position``) as well. A store that also keeps long-term
records proves them with ``LongTermConformance`` (facts, profiles, usage, cursors) and
``FactsInTimeConformance`` (``valid_from``/``valid_to``, ``as_of``); one that forks
conversations and reads them as they were with ``ForkConformance``; and one
that holds budgets for calls in flight with ``ReservationConformance`` (reserve, release,
abandon), the same way. It needs pytest.
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

import pytest

from ..messages import Conv, InvalidMessage
from ._conformance import IdempotencyConformance, PinnedIndexConformance
from ._conformance_fork import ForkConformance
from ._conformance_holds import ReservationConformance
from ._conformance_longterm import FactsInTimeConformance, LongTermConformance
from ._conformance_scopes import ScopesConformance

WAIT = 10.0

__all__ = [
    "ChatMemoryConformance",
    "FactsInTimeConformance",
    "ForkConformance",
    "LongTermConformance",
    "ReservationConformance",
    "ScopesConformance",
]


def user(text: str, **extra: Any) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text, **extra}


def assistant(text: str | None, calls: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """An assistant message, with tool calls named by id."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
            for c in calls
        ]
    return message


def tool(call_id: str, text: str) -> dict[str, Any]:
    """A tool result."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


class ChatMemoryConformance(PinnedIndexConformance, IdempotencyConformance):
    """Subclass with a ``store`` fixture; every test here must pass for any ChatMemory."""

    def test_unknown_conversation_is_empty(self, store: Any) -> None:
        assert store.get("nobody") == []
        assert store.get("nobody", last=5) == []
        assert store.count("nobody") == 0

    def test_add_then_get_returns_equal_dicts_oldest_first(self, store: Any) -> None:
        batch = [user("one"), assistant("two"), user("three")]
        store.add("c", batch[:2])
        store.add("c", batch[2:])
        assert store.get("c") == batch
        assert store.count("c") == 3

    def test_rich_messages_round_trip_exactly(self, store: Any) -> None:
        batch = [
            {"role": "system", "content": "be brief", "name": "policy"},
            user("look it up", metadata={"pinned": True, "tags": ["a", "b"], "score": 0.5}),
            assistant(None, calls=["c1", "c2"]),
            tool("c1", "42"),
            tool("c2", "43"),
            {"role": "user", "content": [{"type": "text", "text": "héllo ✓ 𝄞"}]},
            {"role": "assistant", "content": "done", "metadata": {"nested": {"deep": [1, None]}}},
        ]
        store.add(Conv("u1", "rich"), batch)
        assert store.get(Conv("u1", "rich")) == batch
        assert json.loads(json.dumps(store.get(Conv("u1", "rich")))) == batch

    def test_empty_batch_is_a_no_op(self, store: Any) -> None:
        store.add("c", [])
        assert store.count("c") == 0
        assert Conv(None, "c") not in store.conversations()

    def test_last_returns_the_newest_n(self, store: Any) -> None:
        batch = [user(str(i)) for i in range(10)]
        store.add("c", batch)
        assert store.get("c", last=3) == batch[-3:]
        assert store.get("c", last=1) == batch[-1:]
        assert store.get("c", last=0) == []
        assert store.get("c", last=50) == batch

    def test_bad_last_is_refused(self, store: Any) -> None:
        store.add("c", [user("x")])
        for bad in (-1, 1.5, "3"):
            with pytest.raises(ValueError, match="last"):
                store.get("c", last=bad)

    def test_conversations_are_isolated(self, store: Any) -> None:
        store.add("a", [user("in a")])
        store.add("ab", [user("in ab")])
        store.add(Conv("alice", "a"), [user("alice's a")])
        store.add(Conv("bob", "a"), [user("bob's a")])
        assert store.get("a") == [user("in a")]
        assert store.get("ab") == [user("in ab")]
        assert store.get(Conv("alice", "a")) == [user("alice's a")]
        assert store.get(Conv("bob", "a")) == [user("bob's a")]
        assert store.get(Conv(None, "a")) == store.get("a")

    def test_conversations_lists_all_or_one_users(self, store: Any) -> None:
        store.add("x", [user("1")])
        store.add(Conv("alice", "x"), [user("2")])
        store.add(Conv("alice", "y"), [user("3")])
        store.add(Conv("bob", "x"), [user("4")])
        assert sorted(store.conversations(), key=repr) == sorted(
            [Conv(None, "x"), Conv("alice", "x"), Conv("alice", "y"), Conv("bob", "x")], key=repr
        )
        assert sorted(store.conversations("alice")) == [Conv("alice", "x"), Conv("alice", "y")]
        assert store.conversations("carol") == []

    def test_clear_removes_one_conversation_only(self, store: Any) -> None:
        store.add("a", [user("1")])
        store.add("ab", [user("2")])
        store.add(Conv("u", "a"), [user("3")])
        store.clear("a")
        assert store.get("a") == [] and store.count("a") == 0
        assert store.get("ab") == [user("2")]
        assert store.get(Conv("u", "a")) == [user("3")]
        store.add("a", [user("again")])
        assert store.get("a") == [user("again")]

    def test_forget_user_removes_only_that_user(self, store: Any) -> None:
        store.add(Conv("alice", "1"), [user("a1")])
        store.add(Conv("alice", "2"), [user("a2")])
        store.add(Conv("alicia", "1"), [user("other")])
        store.add("1", [user("anonymous")])
        store.forget_user("alice")
        assert store.conversations("alice") == []
        assert store.get(Conv("alice", "1")) == []
        assert store.get(Conv("alicia", "1")) == [user("other")]
        assert store.get("1") == [user("anonymous")]

    def test_invalid_batch_stores_nothing_and_names_the_message(self, store: Any) -> None:
        store.add("c", [user("kept")])
        bad_batch = [user("fine"), user("fine too"), {"role": "tool", "content": "no id"}]
        with pytest.raises(InvalidMessage) as info:
            store.add("c", bad_batch)
        assert info.value.index == 2 and info.value.field == "tool_call_id"
        assert store.get("c") == [user("kept")]
        assert store.count("c") == 1

    def test_bad_conversation_keys_are_refused(self, store: Any) -> None:
        for bad in ("", 42, None, Conv("", "c"), Conv(None, "")):
            with pytest.raises((TypeError, ValueError)):
                store.add(bad, [user("x")])
        assert store.conversations() == []

    def test_returned_messages_do_not_alias_the_store(self, store: Any) -> None:
        original = user("x", metadata={"k": [1]})
        store.add("c", [original])
        original["metadata"]["k"].append(2)  # the caller's dict is not the stored one
        got = store.get("c")
        with contextlib.suppress(TypeError):  # read-only snapshots are fine too
            got[0]["content"] = "changed"
        assert store.get("c") == [user("x", metadata={"k": [1]})]

    def test_read_your_writes_from_another_thread(self, store: Any) -> None:
        written = threading.Event()
        seen: list[Any] = []

        def reader() -> None:
            written.wait(WAIT)
            seen.append(store.get("c"))

        thread = threading.Thread(target=reader)
        thread.start()
        store.add("c", [user("visible")])
        written.set()
        thread.join(WAIT)
        assert seen == [[user("visible")]]

    def test_concurrent_writers_keep_their_order_and_lose_nothing(self, store: Any) -> None:
        writers, per_writer = 8, 25
        errors: list[BaseException] = []

        def write(w: int) -> None:
            try:
                for i in range(per_writer):
                    store.add("shared", [user(f"{w}:{i}"), assistant(f"{w}:{i}")])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 3)
        assert errors == []
        stored = store.get("shared")
        assert len(stored) == writers * per_writer * 2
        for pair in zip(stored[::2], stored[1::2], strict=True):
            assert pair[0]["content"] == pair[1]["content"]  # a batch is never interleaved
        for w in range(writers):
            mine = [m["content"] for m in stored[::2] if m["content"].startswith(f"{w}:")]
            assert mine == [f"{w}:{i}" for i in range(per_writer)]

    def test_export_import_round_trips_exactly(self, store: Any) -> None:
        if not hasattr(store, "export"):
            return
        store.add(Conv("alice", "c1"), [user("hi"), assistant(None, ["t1"]), tool("t1", "ok")])
        store.add(Conv("alice", "c2"), [user("second")])
        store.add(Conv("bob", "c1"), [user("bob's")])
        exported = store.export(user_id="alice")
        assert {c["conversation_id"] for c in exported["conversations"]} == {"c1", "c2"}
        document = json.loads(json.dumps(exported))
        store.forget_user("alice")
        assert store.import_(document) == 4
        assert store.export(user_id="alice") == exported
        assert store.get(Conv("bob", "c1")) == [user("bob's")]

    def test_bad_import_stores_nothing(self, store: Any) -> None:
        if not hasattr(store, "import_"):
            return
        document = store.export(user_id="nobody")
        document["conversations"] = [
            {"user_id": "u", "conversation_id": "ok", "messages": [user("fine")]},
            {"user_id": "u", "conversation_id": "bad", "messages": [{"role": "robot"}]},
        ]
        with pytest.raises(InvalidMessage, match="conversations\\[1\\]"):
            store.import_(document)
        assert store.conversations("u") == []
        with pytest.raises(InvalidMessage, match="format"):
            store.import_({"conversations": []})

    def test_search_is_case_insensitive_ranked_and_within_one_tenant(self, store: Any) -> None:
        if not hasattr(store, "search"):
            return
        store.add(Conv("alice", "c"), [user("Paris is nice"), assistant("paris, PARIS, paris!")])
        store.add(Conv("alice", "d"), [user("I like paris")])
        store.add(Conv("bob", "c"), [user("paris paris paris paris")])
        hits = store.search("PaRiS", user_id="alice")
        ranked = [(h.conv, h.index, h.score) for h in hits]
        assert ranked[0] == (Conv("alice", "c"), 1, 3)
        assert sorted(ranked[1:]) == [(Conv("alice", "c"), 0, 1), (Conv("alice", "d"), 0, 1)]
        assert hits[0].message == assistant("paris, PARIS, paris!")
        assert store.search("paris", user_id="alice", limit=1) == hits[:1]
        assert all(h.conv.user_id == "alice" for h in hits)
        assert store.search("paris") == []  # no user: only conversations of no user
        only = store.search("paris", conv=Conv("alice", "d"))
        assert [h.conv for h in only] == [Conv("alice", "d")]
        with pytest.raises(ValueError, match="belongs to"):
            store.search("paris", user_id="bob", conv=Conv("alice", "c"))
