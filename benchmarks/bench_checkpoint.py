"""OtpmemSaver (LangGraph checkpointer) over each store, beside LangGraph's own savers.

In one run, in rotated chunks (the box swings up to 2x within seconds, alike for all):

1. writes per second: ``put`` of a realistic checkpoint (a chat state of 20 messages of
   ~200 characters and a step counter: ~6 KB in the serializer's bytes), each chained to
   the one before, as a graph's super-steps are;
2. ``get_tuple`` latency (p50/p99) of the newest checkpoint of a thread that holds
   ``DEPTH`` of them (what a graph reads on every invoke) and of one that holds
   ``DEEP``.

Pairs, each of a like durability: OtpmemSaver(MemoryStore) and ``InMemorySaver`` (memory
only), OtpmemSaver(LevelDBStore, ``sync=True``) and ``SqliteSaver`` (a file database in WAL
mode, ``synchronous=FULL``: both fsync each put), OtpmemSaver(PostgresStore) and
``PostgresSaver`` on one embedded PostgreSQL 16 (``synchronous_commit = on``).
"""

from __future__ import annotations

import shutil
import sqlite3
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

from _common import latency_race, ratio_summary, scratch
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

from otpmem.integrations.langgraph import OtpmemSaver
from otpmem.stores import LevelDBStore, MemoryStore, PostgresStore

DEPTH = 20
DEEP = 200
PAIRS = [
    ("OtpmemSaver(MemoryStore)", "InMemorySaver"),
    ("OtpmemSaver(LevelDBStore)", "SqliteSaver"),
    ("OtpmemSaver(PostgresStore)", "PostgresSaver"),
]


def state(step: int) -> dict[str, Any]:
    """A chat graph's channel values after ``step`` turns: 20 messages and a counter."""
    words = "the quick brown fox jumps over the lazy dog and keeps running far away "
    messages = [
        {"role": "user" if i % 2 else "assistant", "content": f"{step}:{i} " + words * 3}
        for i in range(20)
    ]
    return {"messages": messages, "step": step}


class Thread:
    """One thread of one saver: puts chained to the one before, as a graph makes them."""

    def __init__(self, saver: BaseCheckpointSaver[Any], thread_id: str) -> None:
        self.saver = saver
        self.config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
        }
        self.versions: dict[str, Any] = {}

    def put(self, step: int) -> None:
        """Store the checkpoint of super-step ``step``; the next put is its child."""
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = state(step)
        for channel in ("messages", "step"):
            self.versions[channel] = self.saver.get_next_version(self.versions.get(channel), None)
        checkpoint["channel_versions"] = dict(self.versions)
        metadata: Any = {"source": "loop", "step": step, "parents": {}}
        self.config = self.saver.put(self.config, checkpoint, metadata, dict(self.versions))

    def latest(self, _: int) -> None:
        """Read the newest checkpoint, as a graph does on invoke."""
        configurable = {
            k: v for k, v in self.config["configurable"].items() if k != "checkpoint_id"
        }
        found = self.saver.get_tuple({"configurable": configurable})
        assert found is not None
        found.checkpoint["channel_values"]["messages"]


def savers(
    directory: Any, dsn: str
) -> tuple[dict[str, BaseCheckpointSaver[Any]], Callable[[], None]]:
    """Every contender, and what closes them all."""
    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.sqlite import SqliteSaver
    from psycopg.rows import dict_row

    memory = MemoryStore.start_link()
    leveldb = LevelDBStore.start_link(directory / "leveldb")
    postgres = PostgresStore.start_link(dsn, namespace="bench_checkpoint")
    lite = sqlite3.connect(directory / "sqlite.db", check_same_thread=False)
    conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    peer = PostgresSaver(conn)  # type: ignore[arg-type]
    peer.setup()
    contenders: dict[str, BaseCheckpointSaver[Any]] = {
        "OtpmemSaver(MemoryStore)": OtpmemSaver(memory),
        "InMemorySaver": InMemorySaver(),
        "OtpmemSaver(LevelDBStore)": OtpmemSaver(leveldb),
        "SqliteSaver": SqliteSaver(lite),
        "OtpmemSaver(PostgresStore)": OtpmemSaver(postgres),
        "PostgresSaver": peer,
    }

    def close() -> None:
        for store in (memory, leveldb, postgres):
            store.stop()
        lite.close()
        conn.close()

    return contenders, close


def paired(
    runs: dict[str, list[tuple[float, float, float]]], field: int, ours: str, peer: str
) -> str:
    """Ours against the peer, per repeat (higher is better for rates, lower for latency)."""
    ratios = [a[field] / b[field] for a, b in zip(runs[ours], runs[peer], strict=True)]
    return ratio_summary(ratios)


def median_of(runs: list[tuple[float, float, float]], field: int) -> float:
    return statistics.median(r[field] for r in runs)


def main(quick: bool) -> list[str]:
    """Run the checkpointer benchmark on a throwaway embedded PostgreSQL and a scratch dir."""
    import pgserver

    where = tempfile.mkdtemp(prefix="otpmem-bench-pg-")
    server = pgserver.get_server(where, cleanup_mode="stop")
    lines: list[str] = []
    try:
        with scratch("checkpoint-") as directory:
            contenders, close = savers(directory, server.get_uri())
            try:
                lines = race(contenders, quick)
            finally:
                close()
    finally:
        server.cleanup()
        shutil.rmtree(where, ignore_errors=True)
    return lines


def race(contenders: dict[str, BaseCheckpointSaver[Any]], quick: bool) -> list[str]:
    """The three measurements, as result lines."""
    n, chunk, repeats = (60, 10, 2) if quick else (300, 20, 3)
    writers = {name: Thread(saver, "writes") for name, saver in contenders.items()}
    puts = latency_race({name: t.put for name, t in writers.items()}, n, chunk, repeats)
    size = len(contenders["InMemorySaver"].serde.dumps_typed(state(1))[1])
    lines = [f"put of a {size / 1024:.1f} KB checkpoint, chained; {n} per repeat x {repeats}:"]
    for ours, peer in PAIRS:
        lines.append(
            f"  {ours} {median_of(puts[ours], 2):,.0f}/s (p50 {median_of(puts[ours], 0):,.0f} us)"
            f" | {peer} {median_of(puts[peer], 2):,.0f}/s (p50 {median_of(puts[peer], 0):,.0f}"
            f" us) | {paired(puts, 2, ours, peer)} the peer's rate"
        )
    for depth in (DEPTH, DEEP if not quick else DEPTH * 3):
        readers = {}
        for name, saver in contenders.items():
            reader = Thread(saver, f"reads-{depth}")
            for step in range(depth):
                reader.put(step)
            readers[name] = reader
        gets = latency_race({name: r.latest for name, r in readers.items()}, n, chunk, repeats)
        lines.append(f"get_tuple of the newest of {depth} checkpoints; p50 / p99:")
        for ours, peer in PAIRS:
            lines.append(
                f"  {ours} {median_of(gets[ours], 0):,.0f} / {median_of(gets[ours], 1):,.0f} us"
                f" | {peer} {median_of(gets[peer], 0):,.0f} / {median_of(gets[peer], 1):,.0f} us"
                f" | p50 {paired(gets, 0, ours, peer)} the peer's"
            )
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line)
