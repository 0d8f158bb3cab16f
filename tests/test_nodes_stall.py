"""A node frozen (SIGSTOP) past its leases, as a long GC pause, a swapped-out VM or a
debugger would freeze it: the other node takes its conversations over; when it thaws, the
turn it was in the middle of must not land beside its successor's work. The audit finds
every acknowledged message once, and no two nodes acknowledged one turn differently."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psutil
import psycopg
import pytest
from psycopg import sql

from tests.cli_support import fields, nodes_after_a_tenth, two_node_run

WAIT = 120.0
TURNS = 40


def node_id_of(proc: psutil.Process, deadline: float) -> str:
    """The node id of a node process: its ledger file's name (``ledger-NODE.jsonl``)."""
    while time.monotonic() < deadline:
        for opened in proc.open_files():
            name = Path(opened.path).name
            if name.startswith("ledger-") and name.endswith(".jsonl"):
                return name[len("ledger-") : -len(".jsonl")]
        threading.Event().wait(0.05)
    pytest.fail(f"node process {proc.pid} never opened its ledger")


def taken_over(dsn: str, namespace: str, victim: str) -> tuple[int, int]:
    """(unfinished leases the victim still owns, leases others took from it)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE owner = %s AND progress < %s), "
                "count(*) FILTER (WHERE owner <> %s AND epoch > 1) FROM {}.leases"
            ).format(sql.Identifier(namespace)),
            (victim, TURNS, victim),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_node_frozen_past_its_leases_then_thawed_stores_nothing_beside_its_successor(
    tmp_path: Path, postgres_dsn: str
) -> None:
    data = tmp_path / "run"
    proc = two_node_run(data, postgres_dsn, agents=8, turns=TURNS)
    victim: psutil.Process | None = None
    try:
        nodes = nodes_after_a_tenth(proc)
        deadline = time.monotonic() + WAIT
        assert len(nodes) == 2
        victim = nodes[0]
        victim_id = node_id_of(victim, deadline)
        namespace = json.loads((data / "run.json").read_text())["store"]["namespace"]
        victim.suspend()
        # Frozen until the other node holds every conversation the victim had unfinished.
        while True:
            left, taken = taken_over(postgres_dsn, namespace, victim_id)
            if left == 0 and taken > 0:
                break
            assert time.monotonic() < deadline, "the other node never took the leases over"
            threading.Event().wait(0.05)
        victim.resume()
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if victim is not None and victim.is_running():
            victim.resume()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 0, out[-4000:] + err[-2000:]
    report = fields(out)
    assert report["turns done"] == f"{8 * TURNS} of {8 * TURNS}"
    assert report["messages lost"].startswith("0 ")
    assert report["messages extra"].startswith("0 ")
    assert out.rstrip().endswith("OK: every acknowledged message is in the store, once")
