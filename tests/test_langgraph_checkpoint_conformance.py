"""OtpmemSaver passes LangGraph's own checkpointer suite (langgraph-checkpoint-conformance),
as shipped, over each of the three stores: every base capability and every extended one the
suite detects (delete_for_runs, copy_thread, prune)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    ALL_CAPABILITIES,
    BASE_CAPABILITIES,
    DetectedCapabilities,
)

from otpmem.integrations.langgraph import OtpmemSaver
from otpmem.stores import ChatMemory, LevelDBStore, MemoryStore, PostgresStore
from otpmem.supervisors import Supervisor


@pytest.fixture
def supervised_memory() -> Iterator[ChatMemory]:
    sup = Supervisor.start_link([MemoryStore.child_spec("conformance-checkpoints")])
    try:
        yield MemoryStore.named("conformance-checkpoints")
    finally:
        sup.stop()


@pytest.fixture
def leveldb(tmp_path: Path) -> Iterator[ChatMemory]:
    store = LevelDBStore.start_link(tmp_path / "checkpoints")
    yield store
    store.stop()


@pytest.fixture
def postgres(postgres_dsn: str, pg_namespace: str) -> Iterator[ChatMemory]:
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    yield store
    store.stop()


async def run_suite(store: ChatMemory, name: str) -> None:
    """validate() with a fresh saver per capability, as the suite drives it; all must pass."""
    made: list[OtpmemSaver] = []

    async def factory() -> AsyncIterator[OtpmemSaver]:
        saver = OtpmemSaver(store)
        made.append(saver)
        yield saver

    report = await validate(checkpointer_test(name=name)(factory))
    failures = {cap: r.failures for cap, r in report.results.items() if r.passed is not True}
    assert failures == {}, failures
    assert {c.value for c in ALL_CAPABILITIES} == set(report.results)
    assert all(report.results[c.value].detected for c in ALL_CAPABILITIES)  # none skipped
    assert report.passed_all_base() and report.conformance_level() == "FULL"
    assert sum(r.tests_passed for r in report.results.values()) >= 80
    assert len(made) == len(ALL_CAPABILITIES) and BASE_CAPABILITIES <= ALL_CAPABILITIES


async def test_conformance_over_a_supervised_memory_store(supervised_memory: ChatMemory) -> None:
    await run_suite(supervised_memory, "OtpmemSaver(MemoryStore)")


async def test_conformance_over_leveldb(leveldb: ChatMemory) -> None:
    await run_suite(leveldb, "OtpmemSaver(LevelDBStore)")


async def test_conformance_over_postgres(postgres: ChatMemory) -> None:
    await run_suite(postgres, "OtpmemSaver(PostgresStore)")


def test_the_suite_detects_every_capability_of_the_saver() -> None:
    store = MemoryStore.start_link()
    try:
        detected = DetectedCapabilities.from_instance(OtpmemSaver(store))
        assert detected.missing == frozenset() and detected.detected == ALL_CAPABILITIES
    finally:
        store.stop()
