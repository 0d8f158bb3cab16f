"""RecallIndex: ranking, read-your-writes, clears, tenancy, crashes, restarts and reopens."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import pytest

from otpmem.actors import HogReport, add_hog_listener, faults, remove_hog_listener
from otpmem.actors import _scheduler as scheduler
from otpmem.memory.recall import HashingEmbedder, Hit, RecallIndex, RecallIndexHandle
from otpmem.memory.recall.lexical import (
    LUCENE_STOPWORDS,
    LexicalIndex,
    query_terms,
    stem,
    tokenize,
)
from otpmem.memory.recall.partition import LENGTH_NORMALISATION
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle, MemoryStore, MemoryStoreHandle
from otpmem.supervisors import Supervisor

WAIT = 10.0

try:  # bm25s reports progress with tqdm when it is installed: its monitor thread would
    import tqdm  # outlive the test

    tqdm.tqdm.monitor_interval = 0
except ImportError:
    pass


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


@pytest.fixture
def index(store: MemoryStoreHandle) -> Iterator[RecallIndexHandle]:
    handle = RecallIndex.start_link(store)
    yield handle
    if handle.alive:
        handle.stop()


def texts(hits: list[Hit]) -> list[str]:
    return [h.message["content"] for h in hits]


# -- the scores ---------------------------------------------------------------------------


def test_incremental_bm25_equals_bm25s_on_the_same_tokens_also_after_deletes() -> None:
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(40)]
    docs = [[rng.choice(vocabulary) for _ in range(rng.randrange(1, 12))] for _ in range(300)]
    lexical = LexicalIndex()
    for doc in docs:
        lexical.add(doc)
    alive = np.ones(len(docs), dtype=bool)
    for gone in rng.sample(range(len(docs)), 90):
        lexical.remove(docs[gone])
        alive[gone] = False
    survivors = [i for i in range(len(docs)) if alive[i]]
    reference = bm25s.BM25()  # method="lucene", k1=1.5, b=0.75: the same formula
    reference.index([docs[i] for i in survivors], show_progress=False)
    for _ in range(20):
        query = [rng.choice(vocabulary) for _ in range(3)]
        ours = lexical.scores(query, alive)
        theirs = reference.get_scores(query)
        np.testing.assert_allclose(ours[survivors], theirs, rtol=1e-5, atol=1e-6)
        assert not ours[~alive].any()  # a deleted document scores nothing


def test_documents_keep_every_word_and_queries_drop_function_words() -> None:
    text = "What do I do for a living? I'm a nurse"
    assert tokenize(text) == ["what", "do", "do", "for", "live", "im", "nurs"]
    assert query_terms(text) == ["live", "nurs"]
    assert query_terms("who are you?") == ["who", "are", "you"]  # nothing else: all kept
    assert tokenize("a living nurse", stemmed=False) == ["living", "nurse"]
    assert tokenize("the cat", LUCENE_STOPWORDS - {"the"}) == ["the", "cat"]


def test_hashing_embedder_is_deterministic_and_unit_length() -> None:
    a = HashingEmbedder(dim=64).embed(["peanut allergy", ""])
    b = HashingEmbedder(dim=64).embed(["peanut allergy", ""])
    assert np.array_equal(a[0], b[0])
    assert abs(float(np.linalg.norm(a[0])) - 1.0) < 1e-5
    assert not a[1].any()  # no words: the zero vector, matching nothing


# -- ranking and its options ----------------------------------------------------------------


def test_the_message_that_states_the_fact_ranks_first(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "c1")
    store.add(
        conv,
        [
            user("My sister lives in Lyon."),
            assistant("Nice city."),
            user("I have a severe peanut allergy."),
            assistant("Noted."),
            user("The weather is nice today."),
        ],
    )
    hits = index.get_relevant("which allergy do I have?", user_id="ann")
    assert hits[0].message == user("I have a severe peanut allergy.")
    assert (hits[0].conv, hits[0].position) == (conv, 2)
    assert hits[0].score == 1.0  # first in both rankings: the best possible fused score
    assert all(0 < h.score <= 1 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_limit_min_score_filter_and_conversation_scope(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    a, b = Conv("ann", "a"), Conv("ann", "b")
    store.add(a, [user("tea with lemon"), assistant("lemon tea, noted", metadata={"topic": "x"})])
    store.add(b, [user("lemon cake recipe", metadata={"topic": "y"}), user("lemon sorbet")])
    assert len(index.get_relevant("lemon", user_id="ann", limit=2)) == 2
    everything = index.get_relevant("lemon", user_id="ann", limit=10)
    assert len(everything) == 4
    floor = everything[1].score
    assert all(
        h.score >= floor for h in index.get_relevant("lemon", user_id="ann", min_score=floor)
    )
    roles = index.get_relevant("lemon", user_id="ann", limit=10, filter={"role": "assistant"})
    assert texts(roles) == ["lemon tea, noted"]
    topic = index.get_relevant("lemon", user_id="ann", limit=10, filter={"topic": ["y", "z"]})
    assert texts(topic) == ["lemon cake recipe"]
    only_b = index.get_relevant("lemon", conversation=b, limit=10)
    assert {h.conv for h in only_b} == {b}
    custom = index.get_relevant(
        "lemon", user_id="ann", limit=10, filter=lambda m: "cake" in m["content"]
    )
    assert texts(custom) == ["lemon cake recipe"]


def test_snowball_stems_let_bm25_match_other_forms_of_a_word(store: MemoryStoreHandle) -> None:
    assert [stem(w) for w in ["living", "lives", "lived"]] == ["live"] * 3
    assert stem("allergies") == stem("allergy")
    conv = Conv("ann", "s")
    store.add(conv, [user("My allergy to shellfish is serious"), user("the weather")])
    index = RecallIndex.start_link(store, weights=(1.0, 0.0), context=(0.0, 0.0, 0.0))
    try:
        hits = index.get_relevant("which allergies do I have?", user_id="ann")
        assert texts(hits) == ["My allergy to shellfish is serious"]
    finally:
        index.stop()


def test_copies_of_one_message_count_once_unless_asked(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "d")
    store.add(conv, [user("remember the bank"), assistant("ok")] * 6 + [user("bank holiday")])
    distinct = index.get_relevant("remember the bank", user_id="ann", limit=5)
    assert texts(distinct)[0] == "remember the bank"
    assert texts(distinct).count("remember the bank") == 1
    assert "bank holiday" in texts(distinct)
    assert distinct[0].position == 10  # the newest copy stands for the others
    copies = index.get_relevant("remember the bank", user_id="ann", limit=5, distinct=False)
    assert texts(copies) == ["remember the bank"] * 5
    with pytest.raises(ValueError, match="distinct"):
        index.get_relevant("bank", user_id="ann", distinct=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"min_score": 1.5}, "min_score"),
        ({"min_score": "high"}, "min_score"),
        ({"filter": {"role": "robot"}}, "role"),
        ({"filter": 3}, "filter"),
        ({"user_id": "bob", "conversation": Conv("ann", "a")}, "belongs to"),
        ({"user_id": ""}, "user_id"),
    ],
)
def test_bad_arguments_are_refused_with_the_field_named(
    index: RecallIndexHandle, kwargs: dict[str, Any], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        index.get_relevant("q", **kwargs)
    assert index.alive


def test_ranked_search_and_substring_search(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "s")
    store.add(conv, [user("hello world"), user("world peace, world cup"), user("shellfish")])
    ranked = index.search("world", user_id="ann")
    assert [h.index for h in ranked] == [1, 0]  # more occurrences, shorter: BM25 order
    # The score is the BM25 score itself (a float, best first), as bm25s computes it.
    reference = bm25s.BM25(b=LENGTH_NORMALISATION)
    corpus = [["hello", "world"], ["world", "peace", "world", "cup"], ["shellfish"]]
    reference.index(corpus, show_progress=False)
    expected = reference.get_scores(["world"])
    assert [h.score for h in ranked] == pytest.approx([expected[1], expected[0]], rel=1e-5)
    assert all(type(h.score) is float for h in ranked)
    substring = index.search("ell", user_id="ann", mode="substring")
    assert [(h.index, h.score) for h in substring] == [(2, 1), (0, 1)]  # newest first on ties
    with pytest.raises(ValueError, match="mode"):
        index.search("ell", user_id="ann", mode="fuzzy")


# -- read-your-writes, clears ------------------------------------------------------------------


def test_every_add_that_returned_is_seen_by_the_next_query(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    misses: list[str] = []

    def writer(user_id: str) -> None:
        for i in range(60):
            word = f"token{user_id}x{i}"
            store.add(Conv(user_id, f"c{i % 3}"), [user(f"note {word}")])
            hits = index.get_relevant(word, user_id=user_id, limit=1)
            if not hits or word not in hits[0].message["content"]:
                misses.append(word)

    threads = [threading.Thread(target=writer, args=(u,)) for u in ("u1", "u2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    assert misses == []
    assert index.refresh(user_id="u1") == 60


def test_clear_forget_user_and_a_rewrite_of_the_same_length_are_all_seen(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "c")
    store.add(conv, [user("apples"), user("pears")])
    assert texts(index.get_relevant("apples", user_id="ann", limit=1)) == ["apples"]
    store.clear(conv)
    store.add(conv, [user("plums"), user("cherries")])  # same count, other messages
    assert "apples" not in texts(index.get_relevant("apples", user_id="ann"))
    assert texts(index.get_relevant("plums", conversation=conv, limit=1)) == ["plums"]
    store.clear(conv)
    store.add(conv, [user("figs")])  # fewer than indexed
    assert texts(index.get_relevant("plums figs", user_id="ann")) == ["figs"]  # one left
    store.add(Conv("ann", "other"), [user("figs again")])
    store.forget_user("ann")
    assert index.get_relevant("figs", user_id="ann") == []
    assert index.stats()["documents"] == 0


def test_forget_drops_a_conversation_from_the_index_at_once(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "c")
    store.add(conv, [user("kiwi")])
    index.refresh(user_id="ann")
    store.clear(conv)
    index.forget(conv)
    assert index.stats()["documents"] == 0
    # Rewritten with the same newest message: only forget makes this visible in time.
    store.add(conv, [user("kiwi")])
    assert index.get_relevant("kiwi", user_id="ann")[0].position == 0


# -- tenancy ------------------------------------------------------------------------------------


class SpyStore:
    """A ChatMemory that records which conversations were read (and counted)."""

    def __init__(self, inner: MemoryStoreHandle) -> None:
        self.inner = inner
        self.touched: list[Conv] = []
        self.listed: list[str | None] = []

    def add(self, conv: Any, messages: Any) -> None:
        self.inner.add(conv, messages)

    def get(self, conv: Any, last: int | None = None) -> list[dict[str, Any]]:
        self.touched.append(conv)
        return self.inner.get(conv, last)

    def count(self, conv: Any) -> int:
        self.touched.append(conv)
        return self.inner.count(conv)

    def clear(self, conv: Any) -> None:
        self.inner.clear(conv)

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        self.listed.append(user_id)
        return self.inner.conversations(user_id)

    def forget_user(self, user_id: str) -> None:
        self.inner.forget_user(user_id)

    def __getattr__(self, name: str) -> Any:
        # Whatever else a store offers (and the ChatMemory protocol asks for) is the inner
        # store's: only the reads above are watched.
        return getattr(self.inner, name)


ADVERSARIAL_IDS = ["a", "a:b", "a\x00", "A", "\uff41", "a b", "../a", "a" * 300, "'; DROP", "null"]


def test_a_query_never_reads_returns_or_scores_another_users_messages(
    store: MemoryStoreHandle,
) -> None:
    spy = SpyStore(store)
    for uid in ADVERSARIAL_IDS:
        # Same conversation ids for everyone, and text that matches every query.
        spy.add(Conv(uid, "c"), [user(f"secret shared word of {uid!r}")])
        spy.add(Conv(uid, "b"), [user("shared word")])
    spy.add(Conv(None, "c"), [user("anonymous shared word")])
    index = RecallIndex.start_link(spy)
    try:
        for uid in ADVERSARIAL_IDS:
            spy.touched.clear()
            spy.listed.clear()
            hits = index.get_relevant("secret shared word", user_id=uid, limit=50)
            assert {h.conv.user_id for h in hits} == {uid}
            assert len(hits) == 2
            assert {c.user_id for c in spy.touched} == {uid}
            assert spy.listed == [uid]
            # The index holds one partition per tenant: nobody else's statistics either.
            assert index.stats()["tenants"] == ADVERSARIAL_IDS.index(uid) + 1
        anonymous = index.get_relevant("shared word", limit=50)
        assert texts(anonymous) == ["anonymous shared word"]
    finally:
        index.stop()


# -- crashes, restarts, reopens -----------------------------------------------------------------


def test_a_killed_index_restarts_under_its_supervisor_and_misses_nothing() -> None:
    sup = Supervisor.start_link(
        [
            MemoryStore.child_spec("recall-store"),
            RecallIndex.child_spec(MemoryStore.named("recall-store"), "recall-index"),
        ],
        strategy="rest_for_one",
    )
    store: MemoryStoreHandle = MemoryStore.named("recall-store")
    index: RecallIndexHandle = RecallIndex.named("recall-index")
    try:
        conv = Conv("ann", "c")
        store.add(conv, [user("before the kill: walrus")])
        assert texts(index.get_relevant("walrus", user_id="ann"))[0] == "before the kill: walrus"
        old = index.pid
        faults.kill(index)
        store.add(conv, [user("while it was down: narwhal")])
        sup.sync()
        assert index.pid != old
        assert (
            texts(index.get_relevant("narwhal", user_id="ann"))[0] == "while it was down: narwhal"
        )
        assert index.get_relevant("walrus", user_id="ann")[0].position == 0
        # The store crashes and adopts its table: the index's view stays right.
        faults.crash(store, RuntimeError("injected"))
        pair = sup.child("recall-store")
        assert pair is not None
        pair.sync()
        store.add(conv, [user("after the store crash: beluga")])
        assert index.get_relevant("beluga", user_id="ann")[0].position == 2
    finally:
        sup.stop()


def test_after_a_leveldb_reopen_the_index_sees_the_reopened_store(
    tmp_path: Path, opened: Callable[..., LevelDBStoreHandle]
) -> None:
    path = tmp_path / "db"
    first = opened(path, name="recall-ldb")
    named: LevelDBStoreHandle = LevelDBStore.named("recall-ldb")
    index = RecallIndex.start_link(named)
    try:
        conv = Conv("ann", "c")
        named.add(conv, [user("otters hold hands"), user("seals")])
        assert index.get_relevant("otters", user_id="ann")[0].position == 0
        first.stop()
        second = opened(path, name="recall-ldb")
        second.clear(conv)
        second.add(conv, [user("seals"), user("penguins"), user("puffins")])
        hits = index.get_relevant("otters penguins", user_id="ann")
        assert "otters hold hands" not in texts(hits)
        assert (texts(hits)[0], hits[0].position) == ("penguins", 1)
    finally:
        index.stop()


def test_a_big_catch_up_runs_off_the_schedulers(
    store: MemoryStoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduler, "HOG_THRESHOLD", 0.2)
    reports: list[HogReport] = []
    add_hog_listener(reports.append)
    index = RecallIndex.start_link(store)
    try:
        conv = Conv("big", "c")
        store.add(conv, [user(f"message {i} about topic {i % 97}") for i in range(20_000)])
        assert index.refresh(user_id="big", timeout=60.0) == 20_000
        assert [r for r in reports if r.process is index.resolve()] == []
    finally:
        remove_hog_listener(reports.append)
        index.stop()


class _FakeModel:
    """Stands in for a sentence-transformers model: 3-d vectors from text lengths."""

    def get_sentence_embedding_dimension(self) -> int:
        return 3

    def encode(self, texts: list[str], batch_size: int, normalize_embeddings: bool) -> Any:
        assert normalize_embeddings
        return [[len(t), 1.0, 0.0] for t in texts]


def test_a_local_model_loads_only_from_a_directory_that_exists(tmp_path: Path) -> None:
    from otpmem.memory.recall import EmbedderError, SentenceTransformerEmbedder

    with pytest.raises(EmbedderError, match="never downloads"):
        SentenceTransformerEmbedder(tmp_path / "missing")
    loaded: list[str] = []

    def loader(path: str) -> _FakeModel:
        loaded.append(path)
        return _FakeModel()

    embedder = SentenceTransformerEmbedder(tmp_path, loader=loader)
    assert loaded == [str(tmp_path)] and embedder.dim == 3
    assert [v.tolist() for v in embedder.embed(["ab"])] == [[2.0, 1.0, 0.0]]
