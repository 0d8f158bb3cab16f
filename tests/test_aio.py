"""otpmem.aio: every face awaited without blocking the loop, and cancelled turns retried exactly."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem import aio
from otpmem.actors import CallTimeout, GenServer, NoProcess, ServerExited
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.memory.recall import RecallIndex
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, MemoryStore

ANN = Conv("ann", "trip")


class Slow(GenServer):
    """Answers a call after a threading.Event is set (or a crash on request)."""

    def init(self, gate: threading.Event) -> None:
        self.gate = gate

    def handle_call(self, message: Any) -> Any:
        if message == "crash":
            raise RuntimeError("asked to")
        if message == "wait":
            from otpmem.actors import blocking

            blocking(self.gate.wait, 10.0)
        return ("echo", message)


async def test_call_completes_from_the_server_thread_and_raises_what_call_raises() -> None:
    gate = threading.Event()
    server = Slow.start(gate)
    try:
        assert await aio.call(server, "hello") == ("echo", "hello")
        with pytest.raises(CallTimeout):
            await aio.call(server, "wait", timeout=0.05)
        gate.set()
        with pytest.raises(ServerExited):
            await aio.call(server, "crash")
        with pytest.raises(NoProcess):
            await aio.call(server, "hello")
    finally:
        gate.set()
        if server.alive:
            server.stop()


async def test_the_loop_keeps_running_while_a_call_waits() -> None:
    gate = threading.Event()
    server = Slow.start(gate)
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks == 50:
                gate.set()  # released only once the loop has run 50 times meanwhile
            await asyncio.sleep(0)

    beat = asyncio.create_task(heartbeat())
    try:
        assert await aio.call(server, "wait", timeout=10.0) == ("echo", "wait")
        assert ticks >= 50
    finally:
        beat.cancel()
        gate.set()
        server.stop()


@pytest.mark.parametrize("kind", ["memory", "leveldb"])
async def test_every_store_method_is_awaitable(kind: str, tmp_path: Path) -> None:
    sync = (
        MemoryStore.start_link() if kind == "memory" else LevelDBStore.start_link(tmp_path / "db")
    )
    store = aio.wrap(sync)
    assert isinstance(store, aio.AsyncStore)
    try:
        await store.add(ANN, [{"role": "system", "content": "be brief"}])
        await store.add(ANN, [{"role": "user", "content": "Paris"}], "k1")
        await store.add(ANN, [{"role": "user", "content": "Paris"}], "k1")  # keyed: once
        assert [m["content"] for m in await store.get(ANN)] == ["be brief", "Paris"]
        assert await store.count(ANN) == 2
        assert (await store.window(ANN, 1)).messages()[0]["content"] == "be brief"
        assert [p for p, _ in await store.pinned(ANN)] == [0]
        assert await store.conversations("ann") == [ANN]
        assert (await store.search("paris", user_id="ann"))[0].message["content"] == "Paris"
        saved = await store.save_fact(Fact("ann", "city", "Lyon"))
        assert saved.version == 1
        assert (await store.get_fact("ann", "city")).value == "Lyon"  # type: ignore[union-attr]
        assert [f.key for f in await store.get_facts("ann")] == ["city"]
        assert await store.delete_fact("ann", "city") is True
        exported = await store.export(ANN)  # not typed on the face: awaited all the same
        assert exported["conversations"][0]["messages"][1]["content"] == "Paris"
        await store.clear(ANN)
        assert await store.get(ANN) == []
        await store.add(ANN, [{"role": "user", "content": "again"}])
        await store.forget_user("ann")
        assert await store.conversations("ann") == []
    finally:
        sync.stop()


async def test_many_awaited_adds_share_the_schedulers_not_a_thread_each() -> None:
    sync = MemoryStore.start_link()
    store = aio.AsyncStore(sync)
    try:
        await store.add(ANN, [{"role": "user", "content": "warm up"}])
        threads = threading.active_count()
        await asyncio.gather(
            *(store.add(ANN, [{"role": "user", "content": str(i)}]) for i in range(300))
        )
        assert threading.active_count() == threads
        assert await store.count(ANN) == 301
    finally:
        sync.stop()


async def test_providers_and_indexes_are_awaitable() -> None:
    sync = MemoryStore.start_link()
    index_handle = RecallIndex.start_link(sync)
    try:
        provider = aio.wrap(DefaultProvider(sync, window=2))
        assert isinstance(provider, aio.AsyncProvider)
        await provider.append(ANN, [{"role": "user", "content": "I'm allergic to peanuts"}])
        await provider.append(ANN, [{"role": "assistant", "content": "noted"}])
        assert len(await provider.history(ANN)) == 2
        assert len(await provider.prepare(ANN, [{"role": "user", "content": "x"}] * 3)) == 2
        index = aio.wrap(index_handle)
        assert isinstance(index, aio.AsyncIndex)
        hits = await index.get_relevant("peanuts", user_id="ann")
        assert hits[0].message["content"] == "I'm allergic to peanuts"
        await provider.clear(ANN)
        assert await provider.history(ANN) == []
    finally:
        index_handle.stop()
        sync.stop()


async def test_the_application_starts_serves_and_stops_awaited(tmp_path: Path) -> None:
    async with aio.running(tmp_path / "data") as root:
        model = ScriptedModel(lambda messages, tools: f"saw {len(messages)}")
        agent = await aio.start_agent(llm=model, conversation_id="trip", user_id="ann")
        assert (await agent.run("hello")).content == "saw 1"
        assert [a.sync for a in await aio.running_agents()] == [agent.sync]
        store = await aio.default_store()
        assert [m["content"] for m in await store.get(ANN)] == ["hello", "saw 1"]
        assert (await agent.info())["turn_count"] == 1
        await agent.add_message({"role": "user", "content": "noted"})
        assert len(await agent.messages()) == 3
        await agent.clear_messages()
        assert await agent.messages() == []
    assert not root.alive
    root = await aio.start()
    assert root.alive
    await aio.stop()
    assert not root.alive


class GatedModel:
    """A model whose first answer waits for ``release``; it says when it was entered."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.entered = asyncio.Event()
        self.release = threading.Event()
        self.calls = 0
        self.model = ScriptedModel(self.answer)

    def answer(self, messages: list[dict[str, Any]], tools: Any) -> str:
        self.calls += 1
        self.loop.call_soon_threadsafe(self.entered.set)
        assert self.release.wait(10.0), "the test never released the model"
        return f"answer {self.calls}"


async def test_a_turn_cancelled_midway_is_finished_by_its_agent_and_retried_exactly() -> None:
    gated = GatedModel(asyncio.get_running_loop())
    store = MemoryStore.start_link()
    agent = aio.AsyncAgent(Agent.start(llm=gated.model, memory={"store": store}))
    try:
        turn = asyncio.create_task(agent.run("book Paris", turn_id="req-1"))
        await asyncio.wait_for(gated.entered.wait(), 10.0)  # the user message is stored
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        gated.release.set()
        retried = await agent.run("book Paris", turn_id="req-1")
        assert retried.content == "answer 1"
        assert gated.calls == 1  # the retry answered from what the first attempt stored
        stored = await aio.AsyncStore(store).get(agent.sync.info()["conversation"])
        assert [(m["role"], m["content"]) for m in stored] == [
            ("user", "book Paris"),
            ("assistant", "answer 1"),
        ]
    finally:
        gated.release.set()
        agent.sync.stop()
        store.stop()


async def test_a_cancelled_turn_without_retry_still_completes_whole() -> None:
    gated = GatedModel(asyncio.get_running_loop())
    store = MemoryStore.start_link()
    agent = aio.AsyncAgent(Agent.start(llm=gated.model, memory={"store": store}))
    try:
        turn = asyncio.create_task(agent.run("hello"))  # a fresh turn id is given to it
        await asyncio.wait_for(gated.entered.wait(), 10.0)
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        gated.release.set()
        # Queued behind the turn in the agent's mailbox: it sees the turn finished.
        assert [m["role"] for m in await agent.messages()] == ["user", "assistant"]
    finally:
        gated.release.set()
        agent.sync.stop()
        store.stop()


async def test_run_reraises_the_jobs_error_and_awaitable_wraps_a_function() -> None:
    def boom() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await aio.run(boom)
    assert await aio.awaitable(sum)([1, 2, 3]) == 6
    assert otpmem.aio is aio
