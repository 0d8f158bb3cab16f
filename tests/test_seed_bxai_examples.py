"""bx-ai's memory API (seed 003) through ``memory()``: every example of the seed as it is
written (BoxLang translated to Python one for one: ``aiMemory(type, key: k, config: {...})``
is ``memory(type, key=k, config={...})``, camelCase keys kept), then the gaps that running
them found, one section each: import twice, agents over a Memory, summarize then context,
the vector keys, the key, class paths, the session kind, bad values.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

import otpmem
from otpmem import aio
from otpmem.actors import faults, whereis
from otpmem.agents import Agent, AgentAlreadyStarted, AgentHandle
from otpmem.llm import ScriptedModel
from otpmem.memory import HashingEmbedder, ModelSummarizer
from otpmem.memory.facade import InvalidConfiguration, InvalidMemoryType, Memory, memory
from otpmem.memory.recall.cached_embedder import embedding_cache
from otpmem.memory.sessions import current_session, session_scope
from otpmem.messages import Conv, is_summary
from otpmem.stores import DEFAULT_STORE_NAME, default_store
from otpmem.supervisors import SupervisorEvent
from tests.support import Trace

WAIT = 10.0


def create_uuid() -> str:
    """BoxLang's createUUID()."""
    return str(uuid.uuid4())


@pytest.fixture
def app() -> Iterator[None]:
    """The application: cache, session and keyed memories live in its shared store."""
    with otpmem.running():
        yield


def contents(messages: Sequence[Any]) -> list[Any]:
    return [m["content"] for m in messages]


class Seen:
    """A scripted model that records what each call was sent."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []
        self.model = ScriptedModel(self.answer, usage=False)

    def answer(self, messages: list[dict[str, Any]], tools: Any) -> str:
        self.calls.append([dict(m) for m in messages])
        return f"noted ({len(messages)} sent)"

    def users(self, call: int = -1) -> list[Any]:
        return [m["content"] for m in self.calls[call] if m["role"] == "user"]


def fake_openai(dim: int = 1536, bodies: list[dict[str, Any]] | None = None) -> httpx.MockTransport:
    """An OpenAI ``/embeddings`` endpoint, offline: hashing vectors of ``dim``."""
    hashing = HashingEmbedder(dim=dim)

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if bodies is not None:
            bodies.append(body)
        vectors = hashing.embed(body["input"])
        data = [{"index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vectors)]
        return httpx.Response(200, json={"data": data})

    return httpx.MockTransport(handle)


# == the seed's examples, as written ============================================================


def test_seed_window_keeps_the_last_n_messages() -> None:
    # memory = aiMemory( "window", config: { maxMessages: 20 } )
    with memory("window", config={"maxMessages": 20}) as mem:
        mem.add([f"message {i}" for i in range(30)])
        assert contents(mem.context()) == [f"message {i}" for i in range(10, 30)]
        assert mem.count() == 30  # what is stored is never trimmed; the window is what is sent


def test_seed_summary_memory_with_its_provider_and_model() -> None:
    # aiMemory( "summary", config: { maxMessages: 20, summaryThreshold: 10,
    #                                summaryProvider: "openai", summaryModel: "gpt-4o-mini" } )
    config = {
        "maxMessages": 20,
        "summaryThreshold": 10,
        "summaryProvider": "openai",
        "summaryModel": "gpt-4o-mini",
    }
    with memory("summary", config=config) as mem:
        assert isinstance(mem.summarizer, ModelSummarizer)
        client = mem.summarizer.model
        assert client.model == "gpt-4o-mini" and client.url.startswith("https://api.openai.com")
        assert mem.keep_recent == 10
        mem.add([f"message {i}" for i in range(5)])  # under the trigger: no model call
        assert contents(mem.context()) == [f"message {i}" for i in range(5)]


def test_seed_summary_memory_by_tokens() -> None:
    # aiMemory( "summary", config: { maxTokens: 4000, maxMessages: 0 } )
    with memory("summary", config={"maxTokens": 4000, "maxMessages": 0}) as mem:
        mem.add([f"note {i}: " + "word " * 400 for i in range(12)])
        sent = mem.context()
        assert is_summary(sent[0]) and len(sent) < 12


def test_seed_session_memory_is_the_sessions(app: None) -> None:
    # memory = aiMemory( "session" ): stored in the session scope
    with session_scope("sid-1"):
        memory("session").add("hello from the first request")
    with session_scope("sid-1"):
        assert contents(memory("session").get_all()) == ["hello from the first request"]
    with session_scope("sid-2"):
        assert memory("session").is_empty()


def test_seed_file_memory_persists_in_a_directory(tmp_path: Path) -> None:
    # aiMemory( "file", config: { directoryPath: expandPath( "./data/conversations" ) } )
    where = str(tmp_path / "data" / "conversations")
    with memory("file", config={"directoryPath": where}) as mem:
        mem.add("kept on disk")
        key = mem.key
    with memory("file", key=key, config={"directoryPath": where}) as again:
        assert contents(again.get_all()) == ["kept on disk"]


def test_seed_jdbc_memory(postgres_dsn: str, pg_namespace: str) -> None:
    # aiMemory( "jdbc", config: { datasource: "myApp", table: "ai_conversations" } ): a
    # datasource is a DSN in Python; the table, the schema otpmem's tables go in
    with memory("jdbc", key="k", config={"datasource": postgres_dsn, "table": pg_namespace}) as mem:
        mem.add("kept in PostgreSQL")
    with memory("jdbc", key="k", dsn=postgres_dsn, namespace=pg_namespace) as mem:
        assert contents(mem.get_all()) == ["kept in PostgreSQL"]


def test_seed_cache_memory_lives_in_the_shared_store(app: None) -> None:
    # memory = aiMemory( "cache", config: { cacheName: "default" } )
    mem = memory("cache", config={"cacheName": "default"})
    mem.add("cached")
    assert mem.store == default_store()
    assert default_store().get(mem.conv) == [{"role": "user", "content": "cached"}]
    mem.close()
    assert contents(memory("cache", key=mem.key).get_all()) == ["cached"]


def test_seed_multi_tenant_isolation(app: None) -> None:
    key = create_uuid()
    alice = memory(
        "window",
        key=key,
        user_id="user-alice",
        conversation_id="support-ticket-456",
        config={"maxMessages": 20},
    )
    alice.add("my card was charged twice")
    # bx-ai's key:userId:conversationId, as otpmem's conversation key
    assert alice.conv == Conv("user-alice", f"{key}:support-ticket-456")
    bob = memory("window", key=key, user_id="user-bob", conversation_id="support-ticket-456")
    assert bob.is_empty() and contents(alice.get_all()) == ["my card was charged twice"]


def test_seed_agent_remembers_both_earlier_messages(app: None) -> None:
    session_id = "s-3f9"
    memory_ = memory(
        "window",
        key=f"chat-{session_id}",
        user_id="user-42",  # auth.getCurrentUserId()
        config={"maxMessages": 30},
    )
    seen = Seen()
    agent = Agent.start_link(
        llm=seen.model,
        agent_name="SupportBot",
        system_prompt="You are a helpful support agent. Remember the user's context.",
        memory=memory_,
    )
    agent.run("I'm having trouble with my subscription.")
    agent.run("It's been broken for 3 days.")
    agent.run("Can you summarize my issue?")
    assert seen.users() == [
        "I'm having trouble with my subscription.",
        "It's been broken for 3 days.",
        "Can you summarize my issue?",
    ]
    assert seen.calls[-1][0]["content"].startswith("You are a helpful support agent")
    # Each run() used and updated the memory: the same conversation, from either side.
    assert agent.messages() == memory_.get_all() and memory_.count() == 6
    agent.stop()


def test_seed_memory_api_as_written() -> None:
    with memory("window") as mem:
        mem.add("My name is Alice")
        mem.add({"role": "assistant", "content": "Hello Alice, how can I help?"})
        messages = mem.get_all()
        recent = mem.get_recent(5)
        users = mem.get_by_role("user")
        hits = mem.search("Alice")
        count = mem.count()
        assert contents(messages) == ["My name is Alice", "Hello Alice, how can I help?"]
        assert recent == messages and contents(users) == ["My name is Alice"]
        assert [h.index for h in hits] == [1, 0] and count == 2 and not mem.is_empty()
        mem.set_system_message("You are concise.")
        assert mem.get_system_message() == "You are concise."
        mem.clear()
        assert mem.summarize({"keepRecent": 5}) is None  # cleared: nothing to fold
        data = mem.export()
        assert mem.import_(data) == 0 and mem.is_empty()


def test_seed_memory_api_on_a_full_conversation() -> None:
    with memory("window") as mem:
        mem.set_system_message("You are concise.")
        mem.add([f"fact {i}. more words" for i in range(12)])
        summary = mem.summarize({"keepRecent": 5})
        assert summary is not None and summary["metadata"]["summary"]["covers"] == [0, 7]
        data = mem.export()
        assert mem.import_(data) == 0
        assert mem.export() == data
        with memory("window") as fresh:
            assert fresh.import_(data) == 14
            assert fresh.get_all() == mem.get_all()
            assert fresh.context() == mem.context()


def test_seed_boxvector_memory_with_openai_embeddings() -> None:
    # aiMemory( "boxvector", config: { embeddingProvider: "openai",
    #                                  embeddingModel: "text-embedding-3-small" } ),
    # with the endpoint faked offline (embeddingOptions: its HTTP transport)
    bodies: list[dict[str, Any]] = []
    config = {
        "embeddingProvider": "openai",
        "embeddingModel": "text-embedding-3-small",
        "embeddingOptions": {"transport": fake_openai(bodies=bodies)},
    }
    with memory("boxvector", config=config) as vector_mem:
        vector_mem.add("BoxLang is a modern JVM language")
        vector_mem.add("Bananas are rich in potassium")
        results = vector_mem.get_relevant("What language runs on the JVM?", 5)
        assert results[0].message["content"] == "BoxLang is a modern JVM language"
        assert {b["model"] for b in bodies} == {"text-embedding-3-small"}


def test_seed_chroma_is_refused_by_name_and_its_keys_work_on_vector() -> None:
    chroma = {
        "collection": "knowledge_base",
        "embeddingProvider": "openai",
        "host": "localhost",
        "port": 8000,
    }
    with pytest.raises(InvalidConfiguration, match=r"'chroma' is a vector database.*'vector'"):
        memory("chroma", config=chroma)
    config = {k: v for k, v in chroma.items() if k not in ("host", "port")}
    config["embeddingOptions"] = {"transport": fake_openai()}
    with otpmem.running(), memory("vector", config=config) as vector_mem:
        vector_mem.add("BoxLang is a modern JVM language")
        results = vector_mem.get_relevant("What language runs on the JVM?", 5)
        assert contents(h.message for h in results) == ["BoxLang is a modern JVM language"]
        assert vector_mem.collection == "knowledge_base"


def test_seed_hybrid_memory() -> None:
    chroma = {
        "vectorProvider": "chroma",
        "vectorConfig": {"collection": "chat", "embeddingProvider": "openai"},
    }
    with pytest.raises(InvalidConfiguration, match="vector_provider 'chroma' is an external"):
        memory("hybrid", config=chroma)
    config = {
        "vectorProvider": "boxvector",
        "vectorConfig": {
            "collection": "chat",
            "embeddingProvider": "openai",
            "embeddingOptions": {"transport": fake_openai()},
        },
    }
    with otpmem.running(), memory("hybrid", config=config) as mem:
        mem.add(["we decided the pricing is 20 dollars a seat", "lunch was good", "ok"])
        hits = mem.get_relevant("what did we decide about pricing?", 5)
        assert hits[0].message["content"].startswith("we decided the pricing")


def test_seed_pitfall_both_triggers_is_invalid_configuration() -> None:
    with pytest.raises(InvalidConfiguration, match="not both"):
        memory("summary", config={"maxTokens": 4000, "maxMessages": 20})


# == 1. import is idempotent ====================================================================


def test_import_into_the_memory_it_came_from_leaves_one_copy() -> None:
    with memory("window") as mem:
        mem.add(["one", "two", "three"])
        data = mem.export()
        assert mem.import_(data) == 0
        mem.add("four")
        assert mem.import_(data) == 0  # an older export of it: still held
        assert contents(mem.get_all()) == ["one", "two", "three", "four"]


def test_importing_an_export_twice_keeps_one_copy_and_restores_it() -> None:
    with memory("hybrid", user_id="ann") as first, memory("summary") as second:
        first.add(["one", "two"])
        data = first.export()
        assert second.import_(data) == 2
        assert second.import_(data) == 0
        assert second.get_all() == first.get_all()
        second.add("three")
        assert second.import_(data) == 0 and second.count() == 3
        assert second.import_([{"role": "user", "content": "four"}]) == 1
        assert second.import_([{"role": "user", "content": "four"}]) == 0  # a list too


def test_racing_imports_of_one_export_store_it_once() -> None:
    with memory("window") as source, memory("window") as target:
        source.add([f"m{i}" for i in range(20)])
        data = source.export()
        start = threading.Barrier(4)
        errors: list[BaseException] = []

        def load() -> None:
            try:
                start.wait(WAIT)
                target.import_(data)
            except BaseException as exc:  # reported below, not lost in the thread
                errors.append(exc)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert not errors and not any(t.is_alive() for t in threads)
        assert target.get_all() == source.get_all()


def test_a_bad_import_stores_nothing() -> None:
    with memory("window") as mem:
        mem.add("kept")
        good = mem.export()
        bad = {**good, "conversations": [*good["conversations"], {"messages": [{"role": "x"}]}]}
        with memory("window") as other:
            with pytest.raises(ValueError):
                other.import_(bad)
            assert other.is_empty()


# == 2. an agent over a Memory ==================================================================


def test_an_agent_uses_the_memorys_store_policy_and_conversation() -> None:
    seen = Seen()
    with memory("window", user_id="ann", config={"maxMessages": 3}) as mem:
        mem.set_system_message("be brief")
        agent = Agent.start_link(llm=seen.model, memory=mem)
        for text in ("one", "two", "three"):
            agent.run(text)
        assert agent.info()["conversation"] == mem.conv
        assert agent == AgentHandle.of(mem.conv)  # the agent is the memory's conversation's
        # the memory's window of 3 after its system message
        assert contents(seen.calls[-1]) == ["be brief", "two", "noted (4 sent)", "three"]
        assert agent.messages() == mem.get_all() and mem.count() == 7
        agent.stop()


def test_an_agent_over_a_summary_memory_sends_the_summary() -> None:
    seen = Seen()
    with memory("summary", maxMessages=4, summaryThreshold=2) as mem:
        agent = Agent.start_link(llm=seen.model, memory=mem)
        for i in range(4):
            agent.run(f"question {i}. more words")
        assert is_summary(seen.calls[-1][0])
        assert seen.users()[-1] == "question 3. more words"
        assert any(is_summary(m) for m in mem.get_all())  # the roll is stored
        agent.stop()


def test_an_agent_over_a_memory_comes_back_after_a_kill(app: None) -> None:
    seen = Seen()
    mem = memory("window", key="chat-kill", user_id="u1", config={"maxMessages": 30})
    agent = otpmem.start_agent(llm=seen.model, memory=mem)
    agent.run("one")
    agent.run("two")
    first = agent.pid
    faults.kill(agent)
    agent.run("three")  # the application restarts it; its history is the memory's
    assert agent.pid != first
    assert seen.users() == ["one", "two", "three"]
    assert agent.messages() == mem.get_all()


def test_a_started_agent_killed_and_started_again_over_its_memory_remembers() -> None:
    seen = Seen()
    with memory("hybrid", user_id="ann") as mem:
        agent = Agent.start_link(llm=seen.model, memory=mem)
        agent.run("my bike is green")
        faults.kill(agent)
        again = Agent.start_link(llm=seen.model, memory=mem)
        again.run("what colour is my bike?")
        assert seen.users() == ["my bike is green", "what colour is my bike?"]
        again.stop()


def test_a_memory_bound_agent_keeps_the_identity_rules() -> None:
    seen = Seen()
    with memory("window", user_id="ann", conversation_id="c") as mem:
        agent = Agent.start_link(llm=seen.model, memory=mem, user_id="ann")  # repeating: fine
        with pytest.raises(AgentAlreadyStarted):
            Agent.start_link(llm=seen.model, memory=mem)  # one agent per conversation
        agent.stop()
        with pytest.raises(ValueError, match="bound to"):
            Agent.start_link(llm=seen.model, memory=mem, conversation_id="other")
        with pytest.raises(ValueError, match="bound to"):
            Agent.start_link(llm=seen.model, memory=mem, user_id="bob")
    with pytest.raises(ValueError, match="closed"):
        Agent.start_link(llm=seen.model, memory=mem)
    with memory("window") as one, memory("window") as two:
        a = Agent.start_link(llm=seen.model, memory=one)
        b = Agent.start_link(llm=seen.model, memory=two)
        assert a != b  # two unnamed memories: two conversations, two agents
        a.stop()
        b.stop()


async def test_the_aio_face_takes_a_memory() -> None:
    seen = Seen()
    with otpmem.running():
        mem = memory("window", key="aio-chat")
        agent = await aio.start_agent(llm=seen.model, memory=mem)
        await agent.run("hello")
        await agent.run("again")
        assert seen.users() == ["hello", "again"]
        assert contents(mem.get_all())[::2] == ["hello", "again"]


# == 3. summarize, then the context is the summary and the recent messages ======================

CONVERSATION_KINDS = ["window", "cache", "session", "summary", "file", "vector", "hybrid", "jdbc"]


def open_kind(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Memory:
    """A memory of ``kind`` for the test (the application and a session are running)."""
    if kind == "file":
        return memory(kind, path=tmp_path / "db")
    if kind == "jdbc":
        dsn = request.getfixturevalue("postgres_dsn")
        return memory(kind, dsn=dsn, namespace=request.getfixturevalue("pg_namespace"))
    return memory(kind)


def exchange(n: int) -> list[dict[str, Any]]:
    """``n`` messages, user and assistant in turn, each about its own topic."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about topic{i}"}
        for i in range(n)
    ]


@pytest.mark.parametrize("kind", CONVERSATION_KINDS)
def test_summarize_shrinks_the_context_on_every_kind(
    kind: str, app: None, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with session_scope("summarizing"), open_kind(kind, request, tmp_path) as mem:
        mem.set_system_message("be brief")
        history = exchange(20)
        mem.add(history)
        summary = mem.summarize({"keepRecent": 5})
        assert summary is not None and summary["metadata"]["summary"]["covers"] == [0, 15]
        system = {"role": "system", "content": "be brief"}
        assert mem.context() == [system, summary, *history[15:]]
        assert mem.count() == 22  # the history stays: the summary stands in for 15 of it
        seen = Seen()
        agent = Agent.start_link(llm=seen.model, memory=mem)
        agent.run("and now?")
        sent = seen.calls[-1]
        assert sent[:2] == [system, summary] and sent[-1]["content"] == "and now?"
        assert not [m for m in history[:15] if m in sent]  # nothing it covers is sent
        if kind != "hybrid":  # hybrid's recent window is 5 and may recall history[15]
            assert sent[2:-1] == history[15:]
        agent.stop()


def test_a_second_summary_rolls_the_first_and_the_context_follows() -> None:
    with memory("hybrid") as mem:
        history = exchange(30)
        mem.add(history[:20])
        first = mem.summarize(keep_recent=5)
        mem.add(history[20:])
        second = mem.summarize(keep_recent=4)
        assert first is not None and second is not None
        assert second["metadata"]["summary"]["covers"] == [0, 26]
        assert mem.context() == [second, *history[26:]]


def test_hybrid_still_recalls_what_the_summary_does_not_cover() -> None:
    with memory("hybrid", recentLimit=2) as mem:
        history = exchange(20)
        mem.add(history)
        summary = mem.summarize(keep_recent=8)
        assert summary is not None and summary["metadata"]["summary"]["covers"] == [0, 12]
        mem.add("what about topic13 and topic3?")
        sent = mem.context()
        assert history[13] in sent  # older than the recent window, after the summary
        assert history[3] not in sent  # as relevant, but the summary stands in for it
        assert sent[0] == summary and sent[-1]["content"] == "what about topic13 and topic3?"


# == 4. the vector keys =========================================================================


class Counting:
    """An embedder that counts the texts it is asked to embed."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.dim = self.inner.dim
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.texts += texts
        return self.inner.embed(texts)


def test_collections_keep_their_documents_apart(app: None) -> None:
    kb = memory("vector", collection="knowledge_base")
    notes = memory("vector", config={"collection": "notes"})
    kb.add("the launch is on friday")
    notes.add("buy milk")
    assert notes.get_relevant("when is the launch?") == []
    assert contents(h.message for h in kb.get_relevant("when is the launch?")) == [
        "the launch is on friday"
    ]
    again = memory("vector", collection="knowledge_base")  # the same name: the same documents
    assert contents(again.get_all()) == ["the launch is on friday"]
    keyed_a = memory("hybrid", key="k", collection="a")
    keyed_b = memory("hybrid", key="k", collection="b")
    keyed_a.add("alpha secret")
    assert keyed_b.is_empty() and keyed_b.get_relevant("alpha secret") == []


def test_the_embedding_cache_embeds_a_text_once(app: None) -> None:
    counting = Counting()
    name = f"cache-{uuid.uuid4().hex}"
    texts = ["my bike is green", "the train was late", "I like tea"]
    with memory("vector", embedder=counting, cache=True, cacheName=name) as first:
        first.add(texts)
        assert first.get_relevant("what colour is my bike?", limit=1)[0].position == 0
    assert sorted(counting.texts) == sorted([*texts, "what colour is my bike?"])
    with memory("vector", config={"embedder": counting, "cacheName": name}) as second:
        second.add(texts)  # another memory, another index: the same texts
        assert second.get_relevant("what colour is my bike?", limit=1)[0].position == 0
    assert len(counting.texts) == 4  # nothing embedded twice
    assert embedding_cache(name).stats() == {"hits": 4, "misses": 4, "entries": 4}


def test_the_cache_keeps_two_embedders_apart() -> None:
    name = f"cache-{uuid.uuid4().hex}"
    small = memory("vector", embeddingProvider="hashing", dimensions=64, cache=True, cacheName=name)
    large = memory("vector", embeddingProvider="hashing", dimensions=128, cacheName=name)
    with small, large:
        small.add("the same text")
        large.add("the same text")
        assert small.get_relevant("the same text") and large.get_relevant("the same text")
    assert embedding_cache(name).stats()["entries"] == 2  # one per embedder


def test_openai_embedding_keys_reach_the_endpoint() -> None:
    bodies: list[dict[str, Any]] = []
    config = {
        "embeddingProvider": "openai",
        "embeddingModel": "text-embedding-3-large",
        "dimensions": 256,
        "embeddingOptions": {"transport": fake_openai(256, bodies), "batchSize": 2},
        "cache": True,
        "cacheName": f"cache-{uuid.uuid4().hex}",
    }
    with memory("vector", config=config) as mem:
        mem.add(["one fish", "two fish", "red fish"])
        mem.get_relevant("blue fish")
        mem.get_relevant("blue fish")  # the query again: from the cache
    assert all(b["model"] == "text-embedding-3-large" and b["dimensions"] == 256 for b in bodies)
    assert sorted(t for b in bodies for t in b["input"]) == sorted(
        ["one fish", "two fish", "red fish", "blue fish"]
    )
    assert max(len(b["input"]) for b in bodies) == 2  # batchSize, camelCase in the options


def test_every_metric_ranks_unit_vectors_alike() -> None:
    texts = ["my bike is green", "the train was late", "green tea is nice", "a green door"]
    results = {}
    for metric in ("cosine", "euclidean", "dot_product"):
        with memory("vector", metric=metric) as mem:
            mem.add(texts)
            assert mem.metric == metric
            results[metric] = [(h.position, h.score) for h in mem.get_relevant("green bike")]
    assert results["cosine"] == results["euclidean"] == results["dot_product"]
    assert results["cosine"][0][0] == 0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"metric": "manhattan"}, "metric must be one of cosine, euclidean, dot_product"),
        ({"metric": 3}, "metric must be one of"),
        ({"collection": ""}, "collection must be a non-empty str"),
        ({"cache": "yes"}, "cache must be True or False"),
        ({"cache": False, "cacheName": "x"}, "cache=False"),
        ({"cacheName": ""}, "cache_name must be a non-empty str"),
        ({"embeddingProvider": "voyage"}, "embedding_provider must be one of hashing, openai"),
        ({"embeddingModel": "x"}, "the hashing embedder has no embedding_model"),
        ({"dimensions": 0}, "dimensions must be an int >= 1"),
        ({"embeddingProvider": "openai", "embeddingModel": "mine"}, "dimensions is needed"),
        ({"embeddingProvider": "openai", "embeddingOptions": {"colour": 1}}, "colour"),
        ({"embeddingOptions": []}, "embedding_options must be a dict"),
        ({"embedder": "hashing"}, "embedder must be an Embedder"),
        ({"embedder": HashingEmbedder(), "dimensions": 8}, "drop dimensions"),
        (
            {"embeddingProvider": "sentence-transformers", "embeddingModel": "/nowhere"},
            "no model directory",
        ),
    ],
)
def test_bad_vector_keys_are_refused_by_name(config: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfiguration, match=message):
        memory("vector", config=config)
    with pytest.raises(InvalidConfiguration, match=message):
        memory("hybrid", vectorConfig=config)


# == 5. the key =================================================================================


def test_one_key_reaches_one_conversation_in_the_process(app: None) -> None:
    memory("window", key="chat-sid-9").add("first request")
    with memory("summary", config={"key": "chat-sid-9"}) as later:  # closed: the data stays
        assert contents(later.get_all()) == ["first request"]
        later.add("second request")
    assert contents(memory("hybrid", key="chat-sid-9").get_all()) == [
        "first request",
        "second request",
    ]
    assert memory("window", key="chat-sid-10").is_empty()
    assert memory("window", key="chat-sid-9", user_id="ann").is_empty()  # a user's own
    with memory("window") as one, memory("window") as two:
        assert one.key != two.key and uuid.UUID(one.key)  # a fresh uuid each
        one.add("mine")
        assert two.is_empty()


def test_a_keyed_memory_outlives_a_crash_of_the_shared_store() -> None:
    trace = Trace()
    with otpmem.running(listeners=[trace]):
        mem = memory("hybrid", key="survivor", user_id="ann")
        mem.add("kept across the crash")
        first = whereis(DEFAULT_STORE_NAME)
        assert first is not None
        faults.kill(first)
        trace.wait_for(
            lambda items: any(
                isinstance(e, SupervisorEvent) and e.kind == "restarted" and e.pid != first.pid
                for e in items
            )
        )
        again = memory("window", key="survivor", user_id="ann")
        assert contents(again.get_all()) == ["kept across the crash"]  # the table's heir
        mem.add("and after it")  # the first memory's handle follows the restart
        assert contents(again.get_all()) == ["kept across the crash", "and after it"]
        assert mem.get_relevant("crash")[0].message["content"] == "kept across the crash"


def test_threads_adding_under_one_key_share_the_conversation(app: None) -> None:
    start = threading.Barrier(4)

    def add(n: int) -> None:
        start.wait(WAIT)
        for i in range(10):
            memory("window", key="busy").add(f"{n}-{i}")

    threads = [threading.Thread(target=add, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert memory("window", key="busy").count() == 40


def test_two_file_memories_open_on_one_directory_share_it(tmp_path: Path) -> None:
    first = memory("file", key="k", path=tmp_path / "db")
    second = memory("file", key="k", directoryPath=str(tmp_path / "db"))
    first.add("from the first")
    assert contents(second.get_all()) == ["from the first"]
    first.close()
    second.add("from the second")  # the store stays open for the memory still holding it
    store = second.store
    second.close()
    assert not store.alive  # the last one closed it
    with memory("file", key="k", path=tmp_path / "db") as third:
        assert contents(third.get_all()) == ["from the first", "from the second"]
        with pytest.raises(InvalidConfiguration, match="sync"):
            memory("file", key="k", path=tmp_path / "db", sync=False)


# == 6. a full class path =======================================================================


class TaggedMemory(Memory):
    """A memory of one's own: a window whose messages carry a tag."""

    base_kind = "window"
    config_keys = frozenset({"tag"})

    def configure(self, config: dict[str, Any]) -> None:
        self.tag = config.get("tag", "none")

    def add(self, item: Any) -> TaggedMemory:
        super().add({"content": item, "metadata": {"tag": self.tag}})
        return self


def test_a_full_class_path_is_a_memory_type() -> None:
    path = f"{__name__}.TaggedMemory"
    with memory(path, config={"tag": "urgent", "maxMessages": 2}) as mem:
        assert type(mem) is TaggedMemory
        mem.add("one").add("two").add("three")
        assert contents(mem.context()) == ["two", "three"]  # the window kind's max_messages
        assert mem.get_all()[0]["metadata"] == {"tag": "urgent"}


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("mypackage.module.MyMemory", r"'mypackage.module.MyMemory': cannot import 'mypackage"),
        (f"{__name__}.NoSuchMemory", "has no 'NoSuchMemory'"),
        ("collections.OrderedDict", "not a subclass of otpmem.memory.Memory"),
        (".Memory", "not a full class path"),
    ],
)
def test_an_unknown_class_path_is_an_invalid_memory_type(path: str, message: str) -> None:
    with pytest.raises(InvalidMemoryType, match=message):
        memory(path)
    with pytest.raises(InvalidConfiguration, match="does not take colour"):
        memory(f"{__name__}.TaggedMemory", colour="red")


# == 7. the session kind ========================================================================


def test_a_session_memory_needs_a_session_and_keeps_sessions_apart(app: None) -> None:
    with pytest.raises(InvalidConfiguration, match="needs a session"):
        memory("session")
    assert current_session() is None
    with session_scope("alice-session"):
        memory("session", user_id="alice").add("alice's question")
        with session_scope("inner"):
            assert current_session() == "inner" and memory("session", user_id="alice").is_empty()
        assert current_session() == "alice-session"
    assert contents(memory("session", key="alice-session", user_id="alice").get_all()) == [
        "alice's question"
    ]
    assert default_store().conversations("alice") == [Conv("alice", "alice-session")]


async def test_each_asyncio_task_has_its_own_session() -> None:
    async def request(session_id: str, text: str) -> list[Any]:
        with session_scope(session_id):
            await asyncio.sleep(0)  # the other request runs in between
            memory("session").add(text)
            await asyncio.sleep(0)
            return contents(memory("session").get_all())

    with otpmem.running():
        got = await asyncio.gather(
            request("s1", "one"), request("s2", "two"), request("s1", "three")
        )
        assert got[1] == ["two"]
        assert sorted(contents(memory("session", key="s1").get_all())) == ["one", "three"]


# == bad values =================================================================================


@pytest.mark.parametrize(
    ("kind", "config", "error", "message"),
    [
        ("window", {"maxMessages": "20"}, InvalidConfiguration, "max_messages must be an int"),
        ("window", {"maxMessages": -1}, InvalidConfiguration, "max_messages must be an int >= 0"),
        ("window", {"maxMessages": 5, "max_messages": 5}, InvalidConfiguration, "twice"),
        ("window", {"maxTokens": 5}, InvalidConfiguration, "does not take max_tokens"),
        ("window", {"key": ""}, InvalidConfiguration, "key must be a non-empty str"),
        ("window", {"userId": 7}, InvalidConfiguration, "user_id must be None or"),
        ("window", {1: 2}, InvalidConfiguration, "keys are non-empty str"),
        ("file", {"directoryPath": "a", "path": "b"}, InvalidConfiguration, "one key"),
        ("cache", {"cacheName": "redis"}, InvalidConfiguration, "otpmem has one, 'default'"),
        ("summary", {"summaryProvider": "anthropic"}, InvalidConfiguration, "not built in"),
        ("summary", {"summarizer": 3}, InvalidConfiguration, "a summarizer is"),
        ("hybrid", {"vectorConfig": {"recentLimit": 2}}, InvalidConfiguration, "recent_limit"),
        ("hybrid", {"vectorProvider": "faiss"}, InvalidConfiguration, "vector_provider must be"),
        ("pinecone", {}, InvalidConfiguration, "'pinecone' is a vector database"),
        ("windowed", {}, InvalidMemoryType, "unknown memory kind 'windowed'"),
    ],
)
def test_bad_values_are_refused_by_name_and_start_nothing(
    kind: str, config: dict[Any, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        memory(kind, config=config)


def test_config_and_arguments_are_one_configuration() -> None:
    with pytest.raises(InvalidConfiguration, match="max_messages given in config and as an"):
        memory("window", config={"maxMessages": 3}, max_messages=3)
    with pytest.raises(InvalidConfiguration, match="user_id given as an argument and in config"):
        memory("window", user_id="ann", config={"userId": "bob"})
    with pytest.raises(InvalidConfiguration, match="config must be a dict"):
        memory("window", config=[("maxMessages", 3)])  # type: ignore[arg-type]
    with (
        pytest.raises(InvalidConfiguration, match="summarize\\(\\) does not take colour"),
        memory("window") as mem,
    ):
        mem.summarize({"keepRecent": 1, "colour": "red"})
    with memory("window", config={"userId": "ann", "conversationId": "c"}) as mem:
        assert mem.conv == Conv("ann", "c")


def test_the_shared_store_is_the_applications(app: None) -> None:
    mem = memory("window", key="named")
    mem.add("kept")
    assert mem.store.name == DEFAULT_STORE_NAME  # type: ignore[attr-defined]
