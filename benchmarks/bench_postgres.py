"""PostgresStore against raw psycopg and LangChain's PostgresChatMessageHistory, one server.

All on one embedded PostgreSQL 16 (pgserver) with its defaults (``synchronous_commit =
on``: every commit is fsynced, so every acknowledged add is durable):

1. durable adds of one message, 1 writer and 16 writer threads (one conversation each), in
   rounds that run every contender once, the order rotated per round (the box's load
   swings hit all alike; each line is the median [range] of the per-round ratios):
   PostgresStore ``add``; raw psycopg, one ``INSERT`` + commit per add of the same rows
   (into a bare heap, and into a table keyed as the store's ``messages``: the floor of a
   store that can read its last 50), from as many threads, each with its own connection;
   LangChain's ``PostgresChatMessageHistory`` (langchain-postgres) ``add_messages``;
2. ``get(last=50)`` of a 1,000-message and a 1,000,000-message conversation (100,000 with
   ``--quick``): flat;
3. reading a 50-message session: ``get(last=50)`` against the peer's ``.messages``.

Goals (issue 32): one writer >= 0.9x raw INSERT + commit and >= 1.0x langchain-postgres;
16 writers >= 2x langchain-postgres.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack
import psycopg
from _common import ratio_summary, rotated, verdict

from otpmem.messages import Conv
from otpmem.stores.postgres import PostgresStore

WRITERS = 16
RAW_GOAL = 0.9  # one writer against raw INSERT + commit
PEER_GOALS = {1: 1.0, WRITERS: 2.0}  # against langchain-postgres, by writers
READ_GOAL = 2.0
FLAT_GOAL = 1.5
ROUNDS = 5


def message(i: int) -> dict[str, Any]:
    """A ~160-character chat message."""
    return {"role": "user" if i % 2 else "assistant", "content": f"{i:09d} " + "word " * 30}


def threaded(n_threads: int, per_thread: int, work: Callable[[int, int], None]) -> float:
    """Seconds for ``n_threads`` threads to each call ``work(thread, i)`` ``per_thread`` times."""
    start = threading.Barrier(n_threads + 1)
    errors: list[BaseException] = []

    def run(t: int) -> None:
        start.wait()
        try:
            for i in range(per_thread):
                work(t, i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - began


def raw_adds(dsn: str, n_threads: int, per_thread: int, keyed: bool = False) -> float:
    """Adds per second of bare INSERT + commit of the same rows, one connection per thread
    (``keyed``: into a table with the store's ``messages`` primary key)."""
    table = "raw_keyed" if keyed else "raw"
    key = ", PRIMARY KEY (u, c, seq)" if keyed else ""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (u text, c text, seq bigint, body bytea{key})"
        )
        conn.execute(f"TRUNCATE {table}")
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(n_threads)]
    body = msgpack.packb(message(1))
    statement = f"INSERT INTO {table} VALUES (%s, %s, %s, %s)"
    try:
        seconds = threaded(
            n_threads,
            per_thread,
            lambda t, i: conns[t].execute(statement, ("bench", f"c{t}", i, body)),
        )
    finally:
        for conn in conns:
            conn.close()
    return n_threads * per_thread / seconds


def store_adds(store: Any, n_threads: int, per_thread: int, tag: str) -> float:
    """Adds per second of PostgresStore.add, one conversation per thread."""
    batch = [message(1)]
    seconds = threaded(
        n_threads, per_thread, lambda t, i: store.add(Conv("bench", f"{tag}-{t}"), batch)
    )
    return n_threads * per_thread / seconds


def fill(dsn: str, namespace: str, conv: Conv, n: int) -> None:
    """Write n messages straight into the store's tables (COPY), and its row."""
    packed = [msgpack.packb(message(i)) for i in range(1000)]
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        with cur.copy(
            f"COPY {namespace}.messages (user_key, conversation_id, seq, body) FROM STDIN"
        ) as copy:
            for seq in range(n):
                copy.write_row((conv.user_id, conv.conversation_id, seq, packed[seq % 1000]))
        cur.execute(
            f"INSERT INTO {namespace}.conversations (user_key, conversation_id, next_seq, count) "
            "VALUES (%s, %s, %s, %s)",
            (conv.user_id, conv.conversation_id, n, n),
        )
        conn.commit()
        conn.execute(f"ANALYZE {namespace}.messages")


def per_call(fn: Callable[[], Any], calls: int) -> float:
    """Median seconds per call over 5 rounds."""
    rounds = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - began) / calls)
    return statistics.median(rounds)


def peer_adds(dsn: str, n_threads: int, per_thread: int) -> float:
    """Adds per second of LangChain's PostgresChatMessageHistory.add_messages of one message,
    one session and one connection per thread."""
    import uuid

    from langchain_core.messages import HumanMessage
    from langchain_postgres import PostgresChatMessageHistory

    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(n_threads)]
    try:
        PostgresChatMessageHistory.create_tables(conns[0], "lc_history")
        histories = [
            PostgresChatMessageHistory("lc_history", str(uuid.uuid4()), sync_connection=conn)
            for conn in conns
        ]
        text = message(1)["content"]
        seconds = threaded(
            n_threads, per_thread, lambda t, i: histories[t].add_messages([HumanMessage(text)])
        )
    finally:
        for conn in conns:
            conn.close()
    return n_threads * per_thread / seconds


def _has_peer() -> bool:
    try:
        import langchain_postgres  # noqa: F401
    except ImportError:
        return False
    return True


def add_lines(dsn: str, store: Any, quick: bool) -> list[str]:
    """The durable-add goal lines, 1 and 16 writers: each round runs every contender once,
    in an order rotated per round; a line gives the median rates and the median [range] of
    the per-round ratios."""
    lines = []
    peer = _has_peer()
    for writers in (1, WRITERS):
        per = (150 if quick else 500) if writers == 1 else (40 if quick else 120)
        contenders: dict[str, Callable[[int], float]] = {
            "store": lambda r, w=writers, n=per: store_adds(store, w, n, f"w{w}-{r}"),
            "raw": lambda r, w=writers, n=per: raw_adds(dsn, w, n),
            "keyed": lambda r, w=writers, n=per: raw_adds(dsn, w, n, keyed=True),
        }
        if peer:
            contenders["peer"] = lambda r, w=writers, n=per: peer_adds(dsn, w, n)
        store_adds(store, writers, 20, f"w{writers}-warm")  # prepared statements, connections
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        for round_ in range(ROUNDS):
            for name in rotated(list(contenders), round_):
                rates[name].append(contenders[name](round_))
        med = {name: statistics.median(values) for name, values in rates.items()}

        label = f"{writers} writer{'s' if writers > 1 else ''}"
        vs_raw, vs_keyed = _ratios(rates, "raw"), _ratios(rates, "keyed")
        raw_goal = (
            f" (goal >= {RAW_GOAL}) -> {verdict(statistics.median(vs_raw) >= RAW_GOAL)}"
            if writers == 1
            else ""
        )
        lines.append(
            f"PostgresStore durable add, 1 message, {label}: {med['store']:,.0f}/s | raw "
            f"psycopg INSERT+commit {med['raw']:,.0f}/s | {ratio_summary(vs_raw)}{raw_goal} | "
            f"raw INSERT into the store's primary key {med['keyed']:,.0f}/s | "
            f"{ratio_summary(vs_keyed)} ({ROUNDS} rounds, rotated)"
        )
        if peer:
            goal = PEER_GOALS[writers]
            vs_peer = _ratios(rates, "peer")
            lines.append(
                f"durable add, {label}: PostgresStore {med['store']:,.0f}/s | "
                f"langchain-postgres PostgresChatMessageHistory {med['peer']:,.0f}/s | "
                f"{ratio_summary(vs_peer)} (goal >= {goal}) -> "
                f"{verdict(statistics.median(vs_peer) >= goal)}"
            )
    if not peer:
        lines.append("langchain-postgres is not installed: pip install langchain-postgres")
    return lines


def _ratios(rates: dict[str, list[float]], base: str) -> list[float]:
    return [o / b for o, b in zip(rates["store"], rates[base], strict=True)]


def read_line(dsn: str, store: Any) -> str:
    """Reading a 50-message session: ours against LangChain's PostgresChatMessageHistory."""
    import uuid

    from langchain_core.messages import HumanMessage
    from langchain_postgres import PostgresChatMessageHistory

    with psycopg.connect(dsn, autocommit=True) as conn:
        reader = PostgresChatMessageHistory("lc_history", str(uuid.uuid4()), sync_connection=conn)
        reader.add_messages([HumanMessage(message(i)["content"]) for i in range(50)])
        lc_read = per_call(lambda: reader.messages, 50)
    reading = Conv("bench", "peer-read")
    store.add(reading, [message(i) for i in range(50)])
    ours_read = per_call(lambda: store.get(reading, last=50), 50)
    read_ratio = lc_read / ours_read
    return (
        f"read 50: PostgresStore get(last=50) {ours_read * 1e6:,.0f} us | langchain-postgres "
        f".messages {lc_read * 1e6:,.0f} us | {read_ratio:.2f}x (goal >= {READ_GOAL}) -> "
        f"{verdict(read_ratio >= READ_GOAL)}"
    )


def main(quick: bool) -> list[str]:
    """Run the PostgreSQL benchmark on a throwaway embedded server."""
    import pgserver

    where = tempfile.mkdtemp(prefix="otpmem-bench-pg-")
    server = pgserver.get_server(where, cleanup_mode="stop")
    dsn = server.get_uri()
    lines: list[str] = []
    store = PostgresStore.start_link(dsn, namespace="bench", pool_size=WRITERS)
    try:
        lines += add_lines(dsn, store, quick)
        small, big = Conv("bench", "n1k"), Conv("bench", "nbig")
        n_big = 100_000 if quick else 1_000_000
        fill(dsn, "bench", small, 1_000)
        fill(dsn, "bench", big, n_big)
        # Paired rounds, who goes first alternating: the server does the same work for both
        # (six buffers, one backward index scan); one round's ratio is the client's noise.
        pairs = []
        for round_ in range(5):
            sides = [small, big] if round_ % 2 else [big, small]
            timed = {c: per_call(lambda c=c: store.get(c, last=50), 100) for c in sides}
            pairs.append((timed[small], timed[big]))
        flat = [b / s for s, b in pairs]
        lines.append(
            f"PostgresStore get(last=50): 1,000 messages "
            f"{statistics.median(s for s, _ in pairs) * 1e6:,.0f} us | {n_big:,} "
            f"{statistics.median(b for _, b in pairs) * 1e6:,.0f} us | {ratio_summary(flat)} "
            f"(paired per round, median [min..max] of 5; goal <= {FLAT_GOAL}) -> "
            f"{verdict(statistics.median(flat) <= FLAT_GOAL)}"
        )
        if _has_peer():
            lines.append(read_line(dsn, store))
    finally:
        store.stop()
        server.cleanup()
        shutil.rmtree(where, ignore_errors=True)
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line)
