"""bx-ai's memory API: the Memory facade, the memory() factory, its errors; token summaries."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.memory import Pipeline, PipelineProvider, PrepareContext, Summarization
from otpmem.memory.facade import InvalidConfiguration, InvalidMemoryType, Memory, memory
from otpmem.memory.sessions import session_scope
from otpmem.memory.token_summary import TokenSummarization
from otpmem.messages import Conv, InvalidMessage
from otpmem.stores import MemoryStore


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    "kind",
    [
        "window",
        "Buffer",
        "buffered",
        "cache",
        "session",
        "summary",
        "vector",
        "boxvector",
        "hybrid",
    ],
)
def test_every_kind_stores_and_reads_back(kind: str) -> None:
    # cache and session memories live in the application's shared store
    shared = kind in ("cache", "session")
    with (
        otpmem.running() if shared else contextlib.nullcontext(),
        session_scope("visitor-1"),
        memory(kind, user_id="ann", conversation_id="c") as mem,
    ):
        assert mem.is_empty()
        mem.add("hello").add({"content": "hi there", "role": "assistant"}).add(["a", ["b"]])
        assert mem.count() == 4
        assert [m["content"] for m in mem.get_all()] == ["hello", "hi there", "a", "b"]
        assert mem.get_recent(2) == [user("a"), user("b")]
        assert [m["content"] for m in mem.get_by_role("assistant")] == ["hi there"]
        assert mem.context()[-1] == user("b")


def test_a_bad_add_stores_nothing() -> None:
    with memory("window") as mem:
        with pytest.raises(InvalidMessage):
            mem.add(["fine", {"role": "user"}])  # the second has no content
        with pytest.raises(InvalidMessage):
            mem.add(42)  # type: ignore[arg-type]
        assert mem.is_empty()


def test_unknown_kinds_and_bad_configurations_are_refused_by_name() -> None:
    with pytest.raises(InvalidMemoryType, match="hybrid"):  # the message lists the kinds
        memory("windowed")
    with pytest.raises(InvalidConfiguration, match="jdbc"):
        memory("pgvector")
    with pytest.raises(InvalidConfiguration, match="does not take path; it takes data_dir, dsn"):
        memory("jdbc", path="x")
    with pytest.raises(InvalidConfiguration, match="not both"):
        memory("summary", max_tokens=1000, max_messages=20)
    with pytest.raises(InvalidConfiguration, match="summary_threshold"):
        memory("summary", max_messages=10, summary_threshold=10)
    with pytest.raises(InvalidConfiguration, match="cache_timeout"):
        memory("cache", cache_timeout=5)  # a key nothing reads is refused, not ignored
    with pytest.raises(InvalidConfiguration, match="path"):
        memory("file")
    with pytest.raises(InvalidConfiguration, match="recent_limit"):
        memory("hybrid", recent_limit=0)  # and nothing it started is left running


def test_set_system_message_replaces_and_comes_first() -> None:
    with memory("window") as mem:
        mem.add("question")
        mem.set_system_message("be brief")
        before = mem.set_system_message("be very brief")
        assert [m["content"] for m in before["conversations"][0]["messages"]] == [
            "be brief",
            "question",
        ]
        assert mem.get_all() == [{"role": "system", "content": "be very brief"}, user("question")]
        assert mem.get_system_message() == "be very brief"


def test_search_is_a_substring_search_and_get_relevant_needs_an_index() -> None:
    with memory("window", conversation_id="s") as mem:
        mem.add(["Hello world", "shellfish", "nothing"])
        assert [h.index for h in mem.search("ELL")] == [1, 0]
        with pytest.raises(InvalidConfiguration, match="recall index"):
            mem.get_relevant("hello")
    with memory("vector", user_id="ann") as mem:
        mem.add(["my bike is green", "the train was late", "I like tea"])
        assert mem.get_relevant("what colour is my bike?", limit=1)[0].position == 0
        assert [h.index for h in mem.search("ell", substring=True)] == []
        assert [h.index for h in mem.search("train", substring=False)] == [1]


def test_two_users_with_the_same_conversation_id_never_meet() -> None:
    store = MemoryStore.start_link()
    try:
        ann = memory("vector", user_id="ann", conversation_id="c", store=store)
        bob = memory("vector", user_id="bob", conversation_id="c", store=store)
        ann.add("ann's secret: blue whale")
        bob.add("bob's note")
        assert bob.get_all() == [user("bob's note")]
        hits = bob.get_relevant("ann's secret: blue whale", limit=10)
        assert [h.message for h in hits] == [user("bob's note")] or hits == []
        assert ann.get_relevant("blue whale", limit=1)[0].message["content"].startswith("ann")
        ann.close()
        bob.close()
        assert store.alive  # a store given to memory() is not the memory's to stop
    finally:
        store.stop()


def test_clear_export_and_import() -> None:
    with memory("hybrid", user_id="ann") as first, memory("window") as second:
        first.add(["one", "two"])
        document = first.export()
        assert second.import_(document) == 2
        assert second.import_([user("three")]) == 1
        assert [m["content"] for m in second.get_all()] == ["one", "two", "three"]
        with pytest.raises(InvalidMessage, match="not an otpmem export"):
            second.import_({"format": "bx-ai", "messages": []})
        with pytest.raises(InvalidMessage):
            second.import_({**document, "conversations": [{"messages": [{"role": "x"}]}]})
        assert second.count() == 3  # a bad document stores nothing
        first.clear()
        assert first.is_empty()
        assert first.index is not None and first.index.stats()["documents"] == 0


def test_summarize_on_demand_keeps_the_recent_and_stores_a_pinned_summary() -> None:
    with memory("window") as mem:
        mem.add([f"fact number {i}. more words" for i in range(8)])
        assert mem.summarize(keep_recent=20) is None  # nothing old enough to fold
        summary = mem.summarize(keep_recent=3)
        assert summary is not None
        assert summary["metadata"]["summary"]["covers"] == [0, 5]
        assert "fact number 0" in summary["content"] and "fact number 6" not in summary["content"]
        assert mem.get_all()[-1] == summary  # the history stays; the summary is added
        assert mem.count() == 9


def test_the_summary_kind_rolls_by_message_count() -> None:
    with memory("summary", max_messages=4, summary_threshold=2) as mem:
        mem.add([f"message {i}" for i in range(6)])
        sent = mem.context()
        assert sent[0]["role"] == "system" and sent[0]["metadata"]["pinned"] is True
        assert [m["content"] for m in sent[1:]] == ["message 4", "message 5"]


def test_file_memory_survives_a_reopen(tmp_path: Path) -> None:
    with memory("file", path=tmp_path / "db", user_id="ann", conversation_id="c") as mem:
        mem.add("kept on disk")
    with memory("file", path=tmp_path / "db", user_id="ann", conversation_id="c") as mem:
        assert mem.get_all() == [user("kept on disk")]


@pytest.mark.parametrize("kind", ["jdbc", "postgres", "DB"])
def test_jdbc_memory_is_a_postgres_store_two_processes_could_share(
    kind: str, postgres_dsn: str, pg_namespace: str
) -> None:
    options: dict[str, Any] = {"dsn": postgres_dsn, "namespace": pg_namespace}
    with memory(kind, user_id="ann", conversation_id="c", **options) as mem:
        assert type(mem.store).__name__ == "PostgresStoreHandle"
        mem.add("kept in PostgreSQL")
        writer = mem.store
    assert not writer.alive  # memory() started it, close() stopped it
    with memory("jdbc", user_id="ann", conversation_id="c", **options) as mem:
        assert mem.get_all() == [user("kept in PostgreSQL")]


def test_memory_over_a_store_and_provider_of_ones_own() -> None:
    store = MemoryStore.start_link()
    try:
        mem = Memory(store, Conv("ann", "own"))
        mem.add("hi")
        assert store.get(Conv("ann", "own")) == [user("hi")]
    finally:
        store.stop()


# -- the token trigger ---------------------------------------------------------------------------


def words(n: int, tag: str) -> dict[str, Any]:
    return user(f"{tag} " + "word " * n)


def test_token_summarization_rolls_only_over_the_budget() -> None:
    step = TokenSummarization(max_tokens=150, keep_recent=2)
    under = [words(20, f"m{i}") for i in range(3)]
    context = PrepareContext()
    assert step.apply(list(under), context) == under
    assert context.summary is None
    over = [words(40, f"m{i}") for i in range(5)]
    saved: list[dict[str, Any]] = []
    sent = Pipeline([step]).run(over, Conv(None, "t"), saved.append)
    assert len(saved) == 1 and saved[0]["metadata"]["summary"]["covers"] == [0, 3]
    assert sent[1:] == over[3:]
    # Reused on the next turn while the unsummarized part stays under the budget.
    again = Pipeline([step]).run([saved[0], *over, words(5, "new")], Conv(None, "t"), saved.append)
    assert len(saved) == 1 and again[0] == saved[0]


def test_the_summary_kind_rolls_by_tokens() -> None:
    with memory("summary", max_tokens=60, max_messages=0, summary_threshold=1) as mem:
        mem.add([f"{i} " + "word " * 30 for i in range(3)])
        sent = mem.context()
        assert sent[0]["role"] == "system"
        assert len(sent) == 2


def test_summarization_takes_a_token_trigger_beside_the_count() -> None:
    by_tokens = Summarization(threshold=20, keep_recent=2, max_tokens=150)
    saved: list[dict[str, Any]] = []
    Pipeline([by_tokens]).run([words(40, f"m{i}") for i in range(5)], Conv(None, "t"), saved.append)
    assert saved and saved[0]["metadata"]["summary"]["covers"] == [0, 3]  # 5 < 20: tokens
    by_count = Summarization(threshold=3, keep_recent=1, max_tokens=10**6)
    saved.clear()
    Pipeline([by_count]).run([words(1, f"m{i}") for i in range(4)], Conv(None, "t"), saved.append)
    assert saved and saved[0]["metadata"]["summary"]["covers"] == [0, 3]  # cheap: the count
    neither = Summarization(threshold=None, keep_recent=1, max_tokens=10**6)
    saved.clear()
    Pipeline([neither]).run([words(1, f"m{i}") for i in range(40)], Conv(None, "t"), saved.append)
    assert saved == []
    with pytest.raises(ValueError, match="threshold, a max_tokens"):
        Summarization(threshold=None)
    with pytest.raises(ValueError, match="max_tokens"):
        Summarization(max_tokens=0)


def test_a_token_triggered_summary_reads_every_uncovered_message_and_no_more() -> None:
    store = MemoryStore.start_link()
    try:
        conv = Conv("ann", "long")
        store.add(conv, [words(30, f"m{i}") for i in range(400)])
        pipeline = Pipeline([Summarization(threshold=None, keep_recent=5, max_tokens=4000)])
        provider = PipelineProvider(store, pipeline)
        history = provider.history(conv)
        # No summary yet: all 400 are uncovered, so the tail read must reach the start.
        assert len(history) == 400
        sent = provider.prepare(conv, history)
        assert sent == pipeline.run(store.get(conv), conv)
        provider.append(conv, [user("next")])  # stores the rolled summary with it
        assert len(provider.history(conv)) <= 64  # the first read is enough: it is covered
    finally:
        store.stop()


EXPORTED = [
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "RecallIndex",
    "RecallIndexHandle",
    "Hit",
    "HybridProvider",
    "ranked_search",
    "Memory",
    "memory",
    "InvalidMemoryType",
    "InvalidConfiguration",
    "TokenSummarization",
]


def test_the_public_names_come_from_otpmem_memory_and_numpy_only_when_asked() -> None:
    code = (
        "import sys, otpmem, otpmem.agents, otpmem.memory as m\n"
        "assert 'numpy' not in sys.modules, 'import otpmem brought numpy'\n"
        f"names = {EXPORTED!r}\n"
        "assert set(names) <= set(m.__all__) and set(names) <= set(dir(m))\n"
        "from otpmem.memory import *\n"
        "from otpmem.memory.recall import HybridProvider as H\n"
        "assert m.HybridProvider is H and callable(memory) and 'numpy' in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60.0, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
