"""The MemoryProvider contract, as pytest tests any provider can run.

Subclass ``MemoryProviderContract`` and provide a ``provider`` fixture (fresh, over an
empty store)::

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

from ..messages import Conv

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


class MemoryProviderContract:
    """What every provider must do; subclass with a ``provider`` fixture."""

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
