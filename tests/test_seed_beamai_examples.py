"""Seed 000 (beamai, "Conversation Memory"): its examples as written, translated one for
one into Python. ``beamai_chat_memory_ets:start_link(my_mem)`` + ``handle(my_mem)`` is
``MemoryStore.start_link(name="my_mem")`` + ``MemoryStore.named("my_mem")``; ``mem_get /
mem_add / mem_clear`` are ``get / add / clear``; the provider dispatch API is the
provider's methods; ``beamai_agent:new(#{llm, memory})`` is ``Agent.start_link(llm=...,
memory=...)``; the LLM is a scripted model (no network)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.agents import Agent, AgentHandle
from otpmem.kernel import Context, Kernel, memory_filter
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider, PipelineProvider
from otpmem.messages import is_summary
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle
from tests.pipeline_support import CountingStore, exchanges


def echo_count(messages: list[dict[str, Any]], tools: Any) -> str:
    return f"saw {len(messages)}"


@pytest.fixture
def my_mem() -> Iterator[MemoryStoreHandle]:
    # 1. Start a conversation store (default ETS implementation)
    _pid = MemoryStore.start_link(name="my_mem")
    store = MemoryStore.named("my_mem")  # handle {beamai_chat_memory_ets, my_mem}
    yield store
    _pid.stop()


# -- Quick Start (Kernel-level) -----------------------------------------------------------


def test_quick_start_kernel_level(my_mem: MemoryStoreHandle) -> None:
    store = my_mem
    llm = ScriptedModel(["Nice to meet you, Alice.", "Your name is Alice."], record=True)
    # 2. Build the Kernel and enable memory
    kernel = Kernel(llm, filters=[memory_filter(store)])
    # 3. Identify the conversation with a conversation_id; pass only the latest message
    ctx = Context(conversation_id="session-1")

    r1, _ = kernel.invoke([{"role": "user", "content": "My name is Alice"}], context=ctx)
    # Same conversation_id: the second round's LLM sees the full history
    r2, _ = kernel.invoke([{"role": "user", "content": "What's my name?"}], context=ctx)

    assert (r1.content, r2.content) == ("Nice to meet you, Alice.", "Your name is Alice.")
    second_sent = llm.calls[1][0]
    assert [m["content"] for m in second_sent] == [
        "My name is Alice",
        "Nice to meet you, Alice.",
        "What's my name?",
    ]
    # 4. Read / clear conversation history
    history = store.get("session-1")
    assert len(history) == 4
    store.clear("session-1")
    assert store.get("session-1") == []


def test_no_conversation_id_is_a_one_off(my_mem: MemoryStoreHandle) -> None:
    kernel = Kernel(ScriptedModel(["once"]), filters=[memory_filter(my_mem)])
    response, _ = kernel.invoke([{"role": "user", "content": "hi"}], context=Context())
    assert response.content == "once"
    assert my_mem.conversations() == []  # the ephemeral id was cleared at the end


# -- ChatMemory Behaviour (storage layer) -------------------------------------------------


def test_chat_memory_dispatch_api(my_mem: MemoryStoreHandle) -> None:
    store, conv_id = my_mem, "session-2"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    store.add(conv_id, msgs)  # beamai_chat_memory:mem_add(Store, ConvId, Msgs)
    assert store.get(conv_id) == msgs  # mem_get(Store, ConvId)
    store.clear(conv_id)  # mem_clear(Store, ConvId)
    assert store.get(conv_id) == []


def test_persistent_backend_restores_history_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "data" / "chat.dets"
    first = LevelDBStore.start_link(path, name="my_mem")
    store = LevelDBStore.named("my_mem")
    store.add("session-1", [{"role": "user", "content": "remember me"}])
    first.stop()
    # restart with the same file to recover history
    again = LevelDBStore.start_link(path, name="my_mem")
    try:
        assert LevelDBStore.named("my_mem").get("session-1") == [
            {"role": "user", "content": "remember me"}
        ]
    finally:
        again.stop()


# -- Memory Provider (policy layer / Agent-level) ------------------------------------------


def test_memory_provider_dispatch_api(my_mem: MemoryStoreHandle) -> None:
    provider = DefaultProvider(my_mem)  # beamai_memory_provider:default(Store)
    conv_id = "session-3"
    provider.append(conv_id, [{"role": "user", "content": "q"}])
    assert provider.history(conv_id) == [{"role": "user", "content": "q"}]  # read-your-writes
    messages = [*provider.history(conv_id), {"role": "assistant", "content": "a"}]
    assert provider.prepare(conv_id, messages) == messages  # new/1: no window, identity
    provider.clear(conv_id)
    assert provider.history(conv_id) == []


def test_the_five_memory_forms_of_an_agent(
    my_mem: MemoryStoreHandle, agents: list[AgentHandle], tmp_path: Path
) -> None:
    llm = ScriptedModel(echo_count)
    with otpmem.running():
        # Simplest: default memory with a 50-message window
        agent = Agent.start_link(llm=llm, memory={"window": 50})
        agents.append(agent)
        for n in range(30):
            agent.run(f"q{n}")
        assert agent.run("and now?").content == "saw 50"
        agent.stop()
        # absent / "default": the shared default store, no window
        default = Agent.start_link(llm=llm, conversation_id="d")
        agents.append(default)
        default.run("hi")
        assert otpmem.default_store().get("d")[0] == {"role": "user", "content": "hi"}
        default.stop()
    # Bring your own store (e.g. DETS persistence)
    dets = LevelDBStore.start_link(tmp_path / "chat.dets", name="my_dets")
    try:
        agent2 = Agent.start_link(llm=llm, memory={"store": LevelDBStore.named("my_dets")})
        agents.append(agent2)
        agent2.run("stored on disk")
        assert len(agent2.messages()) == 2
        agent2.stop()
    finally:
        dets.stop()
    # Fully custom policy (summarization / RAG ...)
    agent3 = Agent.start_link(llm=llm, memory=PipelineProvider(my_mem, "summarize"))
    agents.append(agent3)
    for n in range(30):
        agent3.run(f"q{n}")
    assert any(is_summary(m) for m in agent3.messages())
    # false / none: no memory
    agent4 = Agent.start_link(llm=llm, memory=False)
    agents.append(agent4)
    agent4.run("one")
    assert agent4.run("two").content == "saw 1"


# -- Sliding Window ------------------------------------------------------------------------


def test_sliding_window_rules(my_mem: MemoryStoreHandle) -> None:
    provider = DefaultProvider(my_mem, 20)  # most recent 20 non-system messages
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "content": "42"}
    system = {"role": "system", "content": "be brief"}
    messages = [system, call, result, *exchanges(19)]
    sent = provider.prepare("w", messages)
    # system messages are always kept and placed at the head; the newest 20 others; the
    # tool result whose call fell out of the window is dropped
    assert sent == [system, *exchanges(19)]
    assert DefaultProvider(my_mem).prepare("w", messages) == messages  # new/1: infinity


# -- Data Flow (Agent-level: explicit provider orchestration) -----------------------------


def agent_tool_loop(provider: Any, conv_id: str, user_msg: Mapping[str, Any], llm: Any) -> Any:
    """beamai_agent:run(Agent, UserMsg): history, accumulate locally, prepare, invoke the
    LLM, append this turn's messages at the end."""
    history = provider.history(conv_id)  # load cross-run history
    messages: Sequence[Any] = history + [user_msg]  # noqa: RUF005 - beamai's new list
    response = llm.chat(provider.prepare(conv_id, messages))  # pre-send transform, LLM
    reply = response.to_message()
    provider.append(conv_id, [user_msg, reply])  # persist this turn's messages
    return reply


def test_agent_level_data_flow_with_a_summarising_provider(my_mem: MemoryStoreHandle) -> None:
    my_mem.add("s1", exchanges(10_000))
    store = CountingStore(my_mem)
    provider = PipelineProvider(store, "summarize")
    llm = ScriptedModel(echo_count, usage=False)
    reads = []
    for n in range(21):
        mark = len(store.reads)
        reply = agent_tool_loop(provider, "s1", {"role": "user", "content": f"turn {n}"}, llm)
        reads.append(store.read_since(mark))
        assert reply["content"].startswith("saw ")
    assert reads[0] >= 10_000 and max(reads[1:]) <= 64 + 8
    assert sum(1 for m in my_mem.get("s1") if is_summary(m)) == 5  # not 21
