"""Every provider keeps the MemoryProvider contract (otpmem.memory.testing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.memory import (
    DefaultProvider,
    MemoryProvider,
    Pipeline,
    PipelineProvider,
    SlidingWindow,
    Summarization,
    TokenTruncation,
)
from otpmem.memory.testing import MemoryProviderContract
from otpmem.stores import LevelDBStore, MemoryStore


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


def test_providers_satisfy_the_protocol() -> None:
    store = MemoryStore.start_link()
    try:
        assert isinstance(DefaultProvider(store), MemoryProvider)
        assert isinstance(PipelineProvider(store), MemoryProvider)
    finally:
        store.stop()
