"""Every store passes the ChatMemory conformance suite shipped in otpmem.stores.testing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.stores import ChatMemory, LevelDBStore, MemoryStore
from otpmem.stores.postgres import PostgresStore
from otpmem.stores.testing import (
    ChatMemoryConformance,
    LongTermConformance,
    ReservationConformance,
)
from otpmem.supervisors import Supervisor


class TestMemoryStore(ChatMemoryConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestSupervisedMemoryStore(ChatMemoryConformance):
    """The same contract through a name, under its supervisor and heir."""

    @pytest.fixture
    def store(self) -> Iterator[Any]:
        sup = Supervisor.start_link([MemoryStore.child_spec("conformance-memory")])
        yield MemoryStore.named("conformance-memory")
        sup.stop()


class TestLevelDBStore(ChatMemoryConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestLevelDBStoreWithoutSync(ChatMemoryConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db", sync=False)
        yield store
        store.stop()


def test_every_store_handle_satisfies_the_protocol(tmp_path: Path) -> None:
    memory = MemoryStore.start_link()
    disk = LevelDBStore.start_link(tmp_path / "db")
    try:
        assert isinstance(memory, ChatMemory)
        assert isinstance(disk, ChatMemory)
    finally:
        memory.stop()
        disk.stop()


class TestMemoryStoreLongTerm(LongTermConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestSupervisedMemoryStoreLongTerm(LongTermConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        sup = Supervisor.start_link([MemoryStore.child_spec("conformance-longterm")])
        yield MemoryStore.named("conformance-longterm")
        sup.stop()


class TestLevelDBStoreLongTerm(LongTermConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestPostgresStore(ChatMemoryConformance):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()


class TestPostgresStoreLongTerm(LongTermConformance):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()


class TestMemoryStoreReservations(ReservationConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        store = MemoryStore.start_link()
        yield store
        store.stop()


class TestSupervisedMemoryStoreReservations(ReservationConformance):
    @pytest.fixture
    def store(self) -> Iterator[Any]:
        sup = Supervisor.start_link([MemoryStore.child_spec("conformance-holds")])
        yield MemoryStore.named("conformance-holds")
        sup.stop()


class TestLevelDBStoreReservations(ReservationConformance):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[Any]:
        store = LevelDBStore.start_link(tmp_path / "db")
        yield store
        store.stop()


class TestPostgresStoreReservations(ReservationConformance):
    @pytest.fixture
    def store(self, postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
        store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
        yield store
        store.stop()
