"""Scopes beyond the user (issue 30, item 1): the conformance cases on every store, tenancy
between users across every scope as a property over adversarial ids, and reopened stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.stores import LevelDBStore, MemoryStore, PostgresStore
from otpmem.stores.testing import ScopesConformance


class TestMemoryStore(ScopesConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestLevelDBStore(ScopesConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestPostgresStore(ScopesConformance):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()
