"""A budget shared by nodes: agents of one user in several OS processes over one PostgreSQL
spend at most the limit plus one call, and a node killed (SIGKILL) mid-call holds its
share only until its holds expire, by the database's clock."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from otpmem.messages import Conv
from otpmem.stores import Hold, Limit
from otpmem.stores.postgres import PostgresStore
from tests.support import LineReader

WAIT = 60.0
ROOT = Path(__file__).resolve().parent.parent
USER = "racer"


def node(dsn: str, namespace: str, name: str, agents: int, limit: int, role: str) -> LineReader:
    """A node process of the race (``tests.budget_node``), once it said ``ready``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.budget_node", dsn, namespace, USER, name, str(agents),
         str(limit), role],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    reader = LineReader(proc, name)
    reader.expect("ready", WAIT)
    return reader


@pytest.fixture
def nodes() -> Iterator[list[LineReader]]:
    """Node processes to stop at the end of the test (append what you start)."""
    started: list[LineReader] = []
    yield started
    for reader in started:
        if reader.proc.poll() is None:
            reader.proc.kill()
        reader.close(WAIT)


def go(reader: LineReader) -> None:
    """Let a node's agents run."""
    assert reader.proc.stdin is not None
    reader.proc.stdin.write("go\n")
    reader.proc.stdin.flush()


def test_nodes_racing_one_budget_spend_the_limit_plus_one_call_and_a_killed_node_lets_go(
    postgres_dsn: str, pg_namespace: str, nodes: list[LineReader]
) -> None:
    limit = 1000
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        victim = node(postgres_dsn, pg_namespace, "victim", 2, limit, "victim")
        nodes.append(victim)
        racers = [node(postgres_dsn, pg_namespace, f"n{i}", 4, limit, "racer") for i in range(2)]
        nodes.extend(racers)
        go(victim)
        victim.expect("in-call", WAIT)  # its hold is taken, its call in flight
        victim.proc.send_signal(signal.SIGKILL)
        assert victim.proc.wait(WAIT) == -signal.SIGKILL
        never = [Limit("user", "tokens", 0, own=1)]  # refuses: says what is held
        probe = store.reserve(Conv(USER, "probe"), "probe", Hold(), never, 1.0)
        assert probe.held, "the dead node's hold outlives it, until it expires"
        for racer in racers:
            go(racer)
        answered = [json.loads(racer.expect("{", WAIT))["answered"] for racer in racers]
        spent = store.user_usage(USER).total_tokens
        assert 1000 < spent <= 1100 and spent == 100 * sum(answered)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            left = conn.execute(
                f"SELECT count(*) FROM {pg_namespace}.budget_holds WHERE expires_at >= now()"
            ).fetchone()
        assert left == (0,), "every hold was released or expired"
    finally:
        store.stop()
