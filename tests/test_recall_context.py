"""Recall finds a message by its context: the turns around it, its speaker, its date."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.memory.recall import STANDALONE, HashingEmbedder, RecallIndex, RecallIndexHandle
from otpmem.memory.recall.partition import document_meta, message_time
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle


def turn(role: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


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


def found(index: RecallIndexHandle, query: str, **scope: Any) -> list[str]:
    return [h.message["content"] for h in index.get_relevant(query, limit=10, **scope)]


def test_an_answer_is_found_by_the_question_it_answers(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "dogs")
    store.add(
        conv,
        [
            turn("assistant", "Leo got a dog! What breed is he?"),
            turn("user", "A whippet, rescued in March."),
            turn("assistant", "Lovely. How is work?"),
        ],
    )
    hits = found(index, "which breed is Leo's dog?", user_id="ann")
    assert "A whippet, rescued in March." in hits  # none of its own words were asked
    without = RecallIndex.start_link(store, context=(0.0, 0.0, 0.0))
    try:
        assert "A whippet, rescued in March." not in found(without, "which breed?", user_id="ann")
    finally:
        without.stop()


def test_the_next_messages_arrival_is_the_previous_ones_new_context(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "trip")
    store.add(conv, [turn("assistant", "So, did you go anywhere nice?")])
    assert found(index, "holiday in Lisbon", user_id="ann") == []  # indexed: nothing matches
    store.add(conv, [turn("user", "Lisbon! Best holiday ever.")])
    hits = index.get_relevant("holiday in Lisbon", user_id="ann", limit=10)
    assert [h.position for h in hits] == [1, 0]  # the question rides on its answer's words
    assert hits[0].score > hits[1].score


def test_context_stays_inside_its_conversation_and_its_tenant(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    store.add(Conv("ann", "a"), [turn("user", "the kayak is blue")])
    store.add(Conv("ann", "b"), [turn("user", "good morning")])
    store.add(Conv("bob", "a"), [turn("user", "hello there")])
    store.add(Conv("bob", "a"), [turn("user", "my kayak is red")])
    assert found(index, "kayak", user_id="ann") == ["the kayak is blue"]
    assert found(index, "kayak", user_id="bob") == ["my kayak is red", "hello there"]
    assert found(index, "kayak", conversation=Conv("ann", "b")) == []


def test_a_speaker_and_a_date_are_evidence_of_their_own(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "diary")
    store.add(
        conv,
        [
            turn("user", "we went to the coast", name="Priya", metadata={"date": "2024-03-09"}),
            turn("user", "we went to the hills", name="Tom", metadata={"date": "2024-05-11T10:00"}),
            turn("user", "we went to the lake", name="Tom", metadata={"timestamp": 1717200000}),
        ],
    )
    assert found(index, "where did we go in March?", user_id="ann")[0] == "we went to the coast"
    assert found(index, "where did Priya go?", user_id="ann")[0] == "we went to the coast"
    assert found(index, "trip in June 2024", user_id="ann")[0] == "we went to the lake"
    assert document_meta(store.get(conv)[0]) == "Priya Saturday 9 March 2024"
    bad = {"role": "user", "content": "x", "metadata": {"date": "not a date", "time": 12}}
    assert message_time(bad) is not None  # the first key that parses wins
    assert message_time({"role": "user", "content": "x", "metadata": {"date": "soon"}}) is None


def test_standalone_documents_are_scored_by_their_own_text(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    conv = Conv("ann", "docs")
    store.add(
        conv,
        [
            turn("user", "Pricing: the plan costs ten euros", metadata={STANDALONE: True}),
            turn("user", "Support hours are nine to five", metadata={STANDALONE: True}),
        ],
    )
    assert found(index, "pricing plan", user_id="ann") == ["Pricing: the plan costs ten euros"]


def test_context_survives_a_compaction_of_dropped_conversations(
    store: MemoryStoreHandle, index: RecallIndexHandle
) -> None:
    doomed = [Conv("ann", f"old{n}") for n in range(80)]
    for conv in doomed:
        store.add(conv, [turn("user", "filler words here"), turn("user", "more filler")])
    assert index.refresh(user_id="ann") == 160
    keep = Conv("ann", "keep")  # numbered after the doomed: renumbered by the compaction
    store.add(keep, [turn("assistant", "What did the vet say?"), turn("user", "All clear.")])
    assert index.refresh(user_id="ann") == 162
    for conv in doomed:
        store.clear(conv)
    index.refresh(user_id="ann")
    stats = index.stats()
    assert stats["documents"] == 2 and stats["dead"] < 64  # compacted: documents renumbered
    store.add(keep, [turn("assistant", "Good news about the vet.")])
    hits = index.get_relevant("what did the vet say", user_id="ann", limit=10)
    assert {h.position for h in hits} == {0, 1, 2}
    assert next(h for h in hits if h.position == 1).message["content"] == "All clear."


def test_without_an_embedder_no_vector_is_held_and_with_one_it_is_fused(
    store: MemoryStoreHandle,
) -> None:
    store.add(Conv("ann", "c"), [turn("user", "I'm allergic to shellfish")])
    plain = RecallIndex.start_link(store)
    fused = RecallIndex.start_link(store, HashingEmbedder(dim=64))
    try:
        assert found(plain, "which allergies do I have?", user_id="ann")
        assert plain.stats()["embedder"] == "None"
        # Character n-grams: a vector ranking finds what no stem shares.
        assert found(fused, "shellfishes", user_id="ann") == ["I'm allergic to shellfish"]
        assert "HashingEmbedder" in fused.stats()["embedder"]
    finally:
        plain.stop()
        fused.stop()
    with pytest.raises(ValueError, match="context"):
        RecallIndex.start_link(store, context=(1.0, -1.0, 0.0))
    with pytest.raises(ValueError, match="context"):
        RecallIndex.start_link(store, context=(True, 0.0, 0.0))  # type: ignore[arg-type]


def test_a_reopened_leveldb_store_gives_the_same_context(tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = LevelDBStore.start_link(path)
    conv = Conv("ann", "c")
    store.add(conv, [turn("assistant", "What breed is he?"), turn("user", "A whippet.")])
    store.stop()
    store = LevelDBStore.start_link(path)
    index = RecallIndex.start_link(store)
    try:
        assert "A whippet." in found(index, "which breed", user_id="ann")
        store.add(conv, [turn("assistant", "Whippets are fast.")])
        assert found(index, "whippet", user_id="ann")[:2] == ["Whippets are fast.", "A whippet."]
    finally:
        index.stop()
        store.stop()


@pytest.mark.parametrize(
    "when",
    ["2024-13-45", "soon", 1e20, -1e18, True, ["2024-01-01"], "", "2024-03-02+99:00"],
)
def test_a_garbage_time_in_metadata_is_no_time_and_the_message_still_found(
    store: MemoryStoreHandle, index: RecallIndexHandle, when: Any
) -> None:
    conv = Conv("ann", "garbage")
    store.add(conv, [turn("user", "the kayak is blue", metadata={"date": when})])
    assert message_time(store.get(conv)[0]) is None  # NaN never gets this far: the store refuses it
    assert found(index, "kayak", user_id="ann") == ["the kayak is blue"]
