"""Each piece of a turn's work is done once (issue 32): counted, so it cannot creep back.

A windowed agent turn reads its window from the store, prepares it, checks it and sends
it. Counted per turn here, with wrappers around the functions that did the work more than
once before: the pinned scan (``is_pinned`` was called 43 times for a 20-message window,
by the store's window read, ``safe_window`` and the stores' writes), the one-pass split of
the window, the copy the model is sent (``thaw``, once per message sent) and the usage
accounting of the model's answer. No timing: call counts do not depend on the box's load.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from otpmem import messages as otpmem_messages
from otpmem.actors import GenServer
from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ScriptedModel, tool_call
from otpmem.memory import DefaultProvider, safe_window, valid_context
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle

WINDOW = 20
TEXT = "memory store actor supervisor restart message conversation user assistant"


def counting(monkeypatch: pytest.MonkeyPatch, name: str, owner: Any) -> Counter[str]:
    """Wrap function ``name`` of module ``owner`` wherever otpmem bound it by that name (a
    ``from x import f`` copies the binding); the counter counts its calls, by caller module."""
    original = getattr(owner, name)
    calls: Counter[str] = Counter()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[sys._getframe(1).f_globals.get("__name__", "?")] += 1
        return original(*args, **kwargs)

    for module in list(sys.modules.values()):
        module_name = getattr(module, "__name__", "")
        if module_name.startswith("otpmem") and getattr(module, name, None) is original:
            monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


@pytest.fixture
def agent(store: MemoryStoreHandle) -> Iterator[AgentHandle]:
    """An agent over a window of 20, its conversation already longer than the window."""
    model = ScriptedModel(lambda messages, tools: "ok", blocks=False)
    handle = Agent.start_link(
        llm=model, memory=DefaultProvider(store, window=WINDOW), conversation_id="work"
    )
    for _ in range(WINDOW):
        handle.run(TEXT)
    yield handle
    handle.stop()


def test_a_windowed_turn_scans_for_pinned_messages_only_in_the_messages_it_stores(
    monkeypatch: pytest.MonkeyPatch, agent: AgentHandle, store: MemoryStoreHandle
) -> None:
    """The store's window read counts the tail's pinned messages from its index, and the
    window is split in one inlined pass: ``is_pinned`` runs only as the store indexes the
    two messages the turn adds (the user's and the answer)."""
    calls = counting(monkeypatch, "is_pinned", otpmem_messages)
    agent.run(TEXT)
    assert sum(calls.values()) == 2, calls
    assert set(calls) == {"otpmem.stores.memory._server"}, calls
    assert store.count(Conv(None, "work")) == 2 * (WINDOW + 1)


def test_a_windowed_turn_splits_its_window_once_per_model_call(
    monkeypatch: pytest.MonkeyPatch, agent: AgentHandle
) -> None:
    """``safe_window`` (prepare) splits pinned from unpinned once; the kernel's context
    check runs once, just before the model."""
    split = counting(monkeypatch, "split_pinned", otpmem_messages)
    import otpmem.memory as memory

    checked = counting(monkeypatch, "valid_context", memory)
    agent.run(TEXT)
    assert sum(split.values()) == 1, split
    assert sum(checked.values()) == 1, checked


def test_the_model_is_sent_a_copy_of_the_window_made_once(
    monkeypatch: pytest.MonkeyPatch, agent: AgentHandle
) -> None:
    """One thaw per message sent (the scripted model's own copy), not one per step."""
    import otpmem.frozen as frozen

    top_level: list[int] = []
    original = frozen.thaw

    def thaw(value: Any) -> Any:
        top_level.append(1)
        return original(value)

    import otpmem.llm.scripted as scripted  # the model's module: the one caller per turn

    monkeypatch.setattr(scripted, "thaw", thaw)
    calls = counting(monkeypatch, "thaw", frozen)
    agent.run(TEXT)
    assert len(top_level) == WINDOW
    # Nobody else copies the window (thaw's own recursion into nested values aside).
    assert set(calls) <= {"otpmem.frozen"}, calls


def test_the_answers_usage_is_accounted_once_per_model_call(
    monkeypatch: pytest.MonkeyPatch, agent: AgentHandle
) -> None:
    """The answer's usage is normalised once: as the stored message is made, not again to
    estimate the completion tokens."""
    import otpmem.llm.pricing as pricing

    calls = counting(monkeypatch, "normalize_usage", pricing)
    result = agent.run(TEXT)
    assert sum(calls.values()) == 1, calls
    stored = agent.messages()[-1]
    assert stored["metadata"]["usage"]["completion_tokens"] == 4  # 3 + ceil(2 / 4)
    assert result.response.usage is not None
    assert result.response.usage["completion_tokens"] == 4


def test_the_store_window_counts_pinned_messages_exactly_without_reading_them(
    store: MemoryStoreHandle,
) -> None:
    """The indexed count agrees with a scan: pinned notes, system messages and a summary
    in the tail, and a superseded summary (then the window scans, as it must)."""
    conv = Conv(None, "pins")

    def summary(n: int) -> dict[str, Any]:
        return {"role": "system", "content": f"s{n}", "metadata": {"summary": {"upto": n}}}

    store.add(conv, [{"role": "system", "content": "rules"}])
    for i in range(10):
        store.add(conv, [{"role": "user", "content": f"u{i}"}])
        if i % 3 == 0:
            note = {"role": "user", "content": f"n{i}", "metadata": {"pinned": True}}
            store.add(conv, [note])
    for last in range(0, 20):
        window = store.window(conv, last)
        assert window.tail_pinned == sum(map(otpmem_messages.is_pinned, window.tail))
        assert [m for _, m in window.pinned] == [
            m for m in store.get(conv)[: window.start] if otpmem_messages.is_pinned(m)
        ]
    store.add(conv, [summary(1)])
    store.add(conv, [{"role": "user", "content": "after"}])
    store.add(conv, [summary(2)])
    for last in range(0, 20):
        window = store.window(conv, last)
        assert window.tail_pinned == sum(map(otpmem_messages.is_pinned, window.tail))
        before = store.get(conv)[: window.start]
        assert window.pinned_before == sum(map(otpmem_messages.is_pinned, before))


def test_safe_window_without_tool_results_in_the_window_keeps_it_whole() -> None:
    """The one-pass split skips the orphan scan only when no tool result is in the
    window; a result whose call fell out is still dropped."""
    call = {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "f")]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "r"}
    users = [{"role": "user", "content": f"u{i}"} for i in range(4)]
    history = [call, result, *users]
    assert safe_window(history, 4) == users  # the result is before the cut
    assert safe_window(history, 5) == users  # the result is in, its call is not: dropped
    assert safe_window(history, 6) == history
    assert valid_context(users) == users and valid_context(users) is not users


class Driver(GenServer):
    """Runs a function inside a process and answers its result."""

    def handle_call(self, message: Any) -> Any:
        fn: Callable[[], Any] = message
        return fn()


def test_concurrent_turns_from_threads_and_a_process_keep_one_writer_and_valid_windows(
    store: MemoryStoreHandle,
) -> None:
    """Four threads and a process drive two agents of one conversation: every turn's two
    messages are stored whole, in turn order, and every call the model got was a valid
    window of 20 (the work removed took no guarantee with it)."""
    sent: list[list[dict[str, Any]]] = []
    lock = threading.Lock()

    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        with lock:
            sent.append(messages)
        return "ok"

    model = ScriptedModel(reply, blocks=False)
    agents = [
        Agent.start_link(
            llm=model,
            memory=DefaultProvider(store, window=WINDOW),
            conversation_id="shared",
            name=f"shared-{i}",
            on_busy="wait",
        )
        for i in range(2)
    ]
    driver = Driver.start_link()
    errors: list[BaseException] = []
    turns = 15

    def drive(agent: AgentHandle) -> None:
        try:
            for _ in range(turns):
                agent.run(TEXT, timeout=30)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=drive, args=(agents[i % 2],)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        driver.call(lambda: drive(agents[0]), timeout=60)
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        driver.stop()
        for agent in agents:
            agent.stop()
    assert errors == []
    stored = store.get(Conv(None, "shared"))
    assert len(stored) == 2 * 5 * turns
    assert [m["role"] for m in stored] == ["user", "assistant"] * 5 * turns
    assert sorted(map(len, sent)) == [min(WINDOW, 2 * k + 1) for k in range(5 * turns)]
    assert all(m[-1]["role"] == "user" for m in sent)
