"""The MemoryProvider contract, as pytest tests any provider can run.

Subclass ``MemoryProviderContract`` and provide a ``provider`` fixture (fresh, over an
empty store). Its members must take what the protocol says (names, kinds and defaults of
their parameters: ``otpmem.protocols.signature_mismatches``), and it is held to the
exactly-once contract; a ``BasicMemoryProvider`` (no keys) subclasses
``BasicMemoryProviderContract``, the same tests without that contract::

    class TestMyProvider(MemoryProviderContract):
        @pytest.fixture
        def provider(self):
            store = MemoryStore.start_link()
            yield MyProvider(store)
            store.stop()
"""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from ..messages import Conv
from ..protocols import conforms, signature_mismatches
from ..stores import ConversationCleared
from .provider import BasicMemoryProvider, MemoryProvider

WAIT = 10.0


def _turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"t{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": f"t{i}", "content": f"result {i}"},
        {"role": "assistant", "content": f"answer {i}"},
    ]


class BasicMemoryProviderContract:
    """What every provider must do, keys or none; subclass with a ``provider`` fixture."""

    protocol: Any = BasicMemoryProvider

    def test_history_reads_its_own_writes(self, provider: Any) -> None:
        conv = Conv("contract", "ryw")
        for i in range(3):
            provider.append(conv, _turn(i))
            newest = provider.history(conv)[-4:]
            assert newest == _turn(i)

    def test_history_reads_writes_made_on_another_thread(self, provider: Any) -> None:
        conv = Conv("contract", "threads")
        done = threading.Event()

        def writer() -> None:
            provider.append(conv, _turn(0))
            done.set()

        thread = threading.Thread(target=writer)
        thread.start()
        assert done.wait(WAIT)
        thread.join(WAIT)
        assert provider.history(conv)[-4:] == _turn(0)

    def test_prepare_does_not_change_its_input(self, provider: Any) -> None:
        conv = Conv("contract", "pure")
        messages = [m for i in range(30) for m in _turn(i)]
        provider.append(conv, messages)
        before = copy.deepcopy(messages)
        provider.prepare(conv, messages)
        assert messages == before

    def test_prepare_never_sends_a_tool_result_without_its_call(self, provider: Any) -> None:
        conv = Conv("contract", "pairs")
        messages = [m for i in range(40) for m in _turn(i)]
        provider.append(conv, messages)
        prepared = provider.prepare(conv, provider.history(conv))
        asked: set[str] = set()
        for message in prepared:
            for call in message.get("tool_calls") or ():
                asked.add(call["id"])
            if message.get("role") == "tool":
                assert message["tool_call_id"] in asked

    def test_prepare_keeps_the_newest_message(self, provider: Any) -> None:
        conv = Conv("contract", "newest")
        messages = [m for i in range(40) for m in _turn(i)]
        provider.append(conv, messages)
        prepared = provider.prepare(conv, provider.history(conv))
        assert prepared[-1] == messages[-1]

    def test_clear_forgets_the_conversation_only(self, provider: Any) -> None:
        provider.append(Conv("contract", "a"), _turn(0))
        provider.append(Conv("contract", "b"), _turn(1))
        provider.clear(Conv("contract", "a"))
        assert provider.history(Conv("contract", "a")) == []
        assert provider.history(Conv("contract", "b"))[-4:] == _turn(1)

    def test_members_take_what_the_protocol_says(self, provider: Any) -> None:
        assert conforms(provider, self.protocol)
        assert signature_mismatches(provider, self.protocol) == []


class MemoryProviderContract(BasicMemoryProviderContract):
    """What a ``MemoryProvider`` must do: the basic contract, and exactly-once writes."""

    protocol: Any = MemoryProvider

    def test_a_batch_sent_again_with_its_key_is_stored_once(self, provider: Any) -> None:
        conv = Conv("contract", "once")
        provider.append(conv, _turn(0))
        for _ in range(2):
            provider.append(conv, _turn(1), "turn-1")
        assert provider.count(conv) == 8
        assert provider.key_position(conv, "turn-1") == 4
        assert provider.key_position(conv, "turn-2") is None
        assert provider.history(conv)[-4:] == _turn(1)

    def test_a_batch_following_a_cleared_one_is_refused(self, provider: Any) -> None:
        conv = Conv("contract", "follows")
        provider.append(conv, _turn(0)[:1], "turn:t:0")
        provider.append(conv, _turn(0)[1:], "turn:t:1", follows="turn:t:0")
        provider.clear(conv)
        with pytest.raises(ConversationCleared):
            provider.append(conv, _turn(1), "turn:t:2", follows="turn:t:0")
        assert provider.count(conv) == 0

    def test_window_and_count_read_the_whole_stored_conversation(self, provider: Any) -> None:
        conv = Conv("contract", "reads")
        stored = [m for i in range(10) for m in _turn(i)]
        provider.append(conv, stored)
        assert provider.count(conv) == len(stored)
        whole = provider.window(conv, len(stored))
        assert (whole.start, whole.total, whole.tail) == (0, len(stored), stored)
        newest = provider.window(conv, 3)
        assert (newest.start, newest.tail) == (len(stored) - 3, stored[-3:])

