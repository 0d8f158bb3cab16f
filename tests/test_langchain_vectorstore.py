"""OtpmemVectorStore: LangChain's own standard VectorStore suite, unchanged, sync and async,
over both stores; then what the suite does not ask (tenancy, sharing, durability)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from otpmem.integrations.langchain import LangChainEmbedder, OtpmemVectorStore
from otpmem.memory.recall import RecallIndex
from otpmem.stores import LevelDBStore, MemoryStore


class TestOtpmemVectorStoreOnMemoryStore(VectorStoreIntegrationTests):
    """The standard suite over a MemoryStore and an index ranked with the suite's embeddings."""

    @pytest.fixture
    def vectorstore(self) -> Iterator[OtpmemVectorStore]:
        store = MemoryStore.start_link()
        index = RecallIndex.start_link(store, LangChainEmbedder(self.get_embeddings()))
        try:
            yield OtpmemVectorStore(store, index, user_id="ann", embedding=self.get_embeddings())
        finally:
            index.stop()
            store.stop()


class TestOtpmemVectorStoreOnLevelDB(VectorStoreIntegrationTests):
    """The same suite over a LevelDB store, with an index the adapter starts itself."""

    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Iterator[OtpmemVectorStore]:
        store = LevelDBStore.start_link(tmp_path / "db")
        vectors = OtpmemVectorStore(store, user_id="ann", embedding=self.get_embeddings())
        try:
            yield vectors
        finally:
            vectors.close()
            store.stop()


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def test_tenants_never_see_each_others_documents(store: MemoryStore) -> None:
    ann = OtpmemVectorStore(store, user_id="ann")
    bob = OtpmemVectorStore(store, user_id="bob")
    try:
        ann.add_documents([Document("ann's secret peanut allergy")], ids=["1"])
        bob.add_documents([Document("bob likes peanut butter")], ids=["1"])
        assert [d.page_content for d in ann.similarity_search("peanut", k=5)] == [
            "ann's secret peanut allergy"
        ]
        assert [d.page_content for d in bob.get_by_ids(["1"])] == ["bob likes peanut butter"]
    finally:
        ann.close()
        bob.close()


def test_two_instances_over_one_collection_agree(store: MemoryStore) -> None:
    index = RecallIndex.start_link(store)
    one = OtpmemVectorStore(store, index, user_id="ann", collection="notes")
    two = OtpmemVectorStore(store, index, user_id="ann", collection="notes")
    try:
        one.add_documents([Document("rivers of Lyon")], ids=["lyon"])
        assert [d.id for d in two.similarity_search("rivers", k=1)] == ["lyon"]
        two.delete(["lyon"])
        assert one.get_by_ids(["lyon"]) == []
        two.add_documents([Document("Paris")], ids=["paris"])
        one.delete()  # the whole collection
        assert two.similarity_search("Paris", k=3) == []
    finally:
        index.stop()


def test_metadata_filters_and_relevance_scores(store: MemoryStore) -> None:
    vectors = OtpmemVectorStore(store, user_id="ann")
    try:
        vectors.add_texts(
            ["peanut allergy", "peanut farm", "lyon"],
            [{"kind": "health"}, {"kind": "travel"}, {"kind": "travel"}],
            ids=["a", "b", "c"],
        )
        found = vectors.similarity_search("peanut", k=3, filter={"kind": "travel"})
        assert [d.id for d in found] == ["b", "c"]  # lyon pads the k: it matches nothing
        scored = vectors.similarity_search_with_relevance_scores("peanut allergy", k=1)
        assert scored[0][0].id == "a" and 0.0 < scored[0][1] <= 1.0
    finally:
        vectors.close()


def test_documents_survive_a_reopen_of_the_leveldb_store(tmp_path: Path) -> None:
    store = LevelDBStore.start_link(tmp_path / "db")
    vectors = OtpmemVectorStore(store, user_id="ann")
    vectors.add_documents([Document("kept", metadata={"n": 1})], ids=["k"])
    vectors.add_documents([Document("gone")], ids=["g"])
    vectors.delete(["g"])
    vectors.close()
    store.stop()
    store = LevelDBStore.start_link(tmp_path / "db")
    vectors = OtpmemVectorStore(store, user_id="ann")
    try:
        assert vectors.get_by_ids(["k", "g"]) == [Document("kept", metadata={"n": 1}, id="k")]
        assert [d.id for d in vectors.similarity_search("kept", k=4)] == ["k"]
    finally:
        vectors.close()
        store.stop()


def test_from_texts_needs_a_store() -> None:
    with pytest.raises(ValueError, match="store="):
        OtpmemVectorStore.from_texts(["x"], DeterministicFakeEmbedding(size=6))
