"""Every provider keeps the MemoryProvider contract (otpmem.memory.testing)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from otpmem.memory import (
    BasicMemoryProvider,
    DefaultProvider,
    HybridProvider,
    MemoryProvider,
    Pipeline,
    PipelineProvider,
    RecallIndex,
    SlidingWindow,
    Summarization,
    TokenTruncation,
)
from otpmem.memory.testing import BasicMemoryProviderContract, MemoryProviderContract
from otpmem.messages import ConvLike
from otpmem.protocols import signature_mismatches
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle


class TestDefaultProvider(MemoryProviderContract):
    @pytest.fixture
    def provider(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield DefaultProvider(store)
        store.stop()


class TestWindowedDefaultProviderOnLevelDB(MemoryProviderContract):
    @pytest.fixture
    def provider(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db", sync=False)
        yield DefaultProvider(store, window=7)
        store.stop()


@pytest.mark.parametrize("preset", ["default", "aggressive", "summarize"])
class TestPipelineProviderPresets(MemoryProviderContract):
    @pytest.fixture
    def provider(self, preset: str) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield PipelineProvider(store, preset)
        store.stop()


class TestPipelineProviderEverything(MemoryProviderContract):
    @pytest.fixture
    def provider(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        pipeline = Pipeline([Summarization(9, 3), SlidingWindow(6), TokenTruncation(120)])
        yield PipelineProvider(store, pipeline)
        store.stop()


class TestHybridProvider(MemoryProviderContract):
    @pytest.fixture
    def provider(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        index = RecallIndex.start_link(store)
        yield HybridProvider(store, index, recent_limit=6, semantic_limit=4)
        index.stop()
        store.stop()


class Bare:
    """A user's provider of the bare shape: history, append, prepare, clear."""

    def __init__(self, store: MemoryStoreHandle) -> None:
        self.inner = DefaultProvider(store, window=10)

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        return self.inner.history(conv)

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        self.inner.append(conv, messages)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        return self.inner.prepare(conv, messages)

    def clear(self, conv: ConvLike) -> None:
        self.inner.clear(conv)


class TestBasicMemoryProvider(BasicMemoryProviderContract):
    @pytest.fixture
    def provider(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield Bare(store)
        store.stop()


def test_providers_satisfy_the_protocol() -> None:
    store = MemoryStore.start_link()
    try:
        assert isinstance(DefaultProvider(store), MemoryProvider)
        assert isinstance(PipelineProvider(store), MemoryProvider)
        assert signature_mismatches(DefaultProvider(store), MemoryProvider) == []
        assert signature_mismatches(PipelineProvider(store), MemoryProvider) == []
        assert isinstance(Bare(store), BasicMemoryProvider)
        assert not isinstance(Bare(store), MemoryProvider)
    finally:
        store.stop()
