"""``otpmem simulate`` on PostgreSQL: turns/s with 1 node against 2 nodes, in one run.

Each round runs the same simulation (agents x turns, the scripted model, no chaos, 8 worker
threads per node) once on 1 node and once on 2 nodes, alternately, on one embedded
PostgreSQL 16 (pgserver, ``synchronous_commit = on``: every store write and every lease
advance is fsynced), each run in a schema of its own. The ratio is paired per round (2
nodes over the 1 node of the same round): this 2-core box is shared, and swings.

Two figures per run: the report's throughput (turns over the run's wall time, node
start-up included, as ``otpmem simulate`` prints it), and the steady rate (turns between
the first and the last acknowledgement in the ledgers, start-up excluded). The CPU the
box had for the run is the ceiling: a node's Python (the GIL: about one core) plus the
PostgreSQL backends serving it, so 1 node already takes about 1.3 cores of the 2.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import uuid
from pathlib import Path

from _common import ratio_summary, verdict

from otpmem.simulate import ClusterSimulation

GOAL = 1.5


def steady_rate(data: Path) -> float:
    """Turns per second between the first and the last acknowledgement of the run."""
    times = sorted(
        json.loads(line)["at"]
        for path in data.glob("ledger-*.jsonl")
        for line in path.read_text().splitlines()
        if line
    )
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0


def one_run(dsn: str, nodes: int, agents: int, turns: int) -> tuple[float, float]:
    """(report turns/s, steady turns/s) of one simulation on ``nodes`` nodes."""
    where = Path(tempfile.mkdtemp(prefix="otpmem-bench-nodes-"))
    try:
        simulation = ClusterSimulation(
            agents=agents,
            turns=turns,
            data_dir=where / "run",
            nodes=nodes,
            dsn=dsn,
            namespace=f"bench_{uuid.uuid4().hex[:10]}",
        )
        report = simulation.run()
        if not report.ok:
            raise RuntimeError(f"the {nodes}-node run failed its audit: {report.verdict()}")
        return report.turns_per_s, steady_rate(where / "run")
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main(quick: bool, async_commit: bool = False) -> list[str]:
    """1 node against 2 nodes, paired per round, on a throwaway embedded server.

    ``async_commit`` (``--async-commit``, a diagnosis, not otpmem's setting): the server
    acknowledges commits before their WAL is flushed, to see how much of the ceiling is the
    one server's WAL flushes, which every node's every write waits for.
    """
    import pgserver
    import psycopg

    rounds, agents, turns = (2, 32, 25) if quick else (4, 40, 60)
    where = tempfile.mkdtemp(prefix="otpmem-bench-nodes-pg-")
    server = pgserver.get_server(where, cleanup_mode="stop")
    dsn = server.get_uri()
    if async_commit:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_commit = off")
            conn.execute("SELECT pg_reload_conf()")
    one: list[tuple[float, float]] = []
    two: list[tuple[float, float]] = []
    try:
        one_run(dsn, 1, 4, 2)  # warm: the server's caches, the interpreter's imports
        for _ in range(rounds):
            one.append(one_run(dsn, 1, agents, turns))
            two.append(one_run(dsn, 2, agents, turns))
    finally:
        server.cleanup()
        shutil.rmtree(where, ignore_errors=True)
    lines = []
    durability = ", synchronous_commit=off (diagnosis, not durable)" if async_commit else ""
    for label, index in (("report (wall time, start-up included)", 0), ("steady", 1)):
        label += durability
        ratios = [b[index] / a[index] for a, b in zip(one, two, strict=True)]
        median = statistics.median(ratios)
        lines.append(
            f"simulate on PostgreSQL, {agents} agents x {turns} turns, {label}: 1 node "
            f"{statistics.median(a[index] for a in one):,.0f} turns/s | 2 nodes "
            f"{statistics.median(b[index] for b in two):,.0f} turns/s | {ratio_summary(ratios)} "
            f"over {rounds} paired rounds (goal >= {GOAL}) -> {verdict(median >= GOAL)}"
        )
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv, async_commit="--async-commit" in sys.argv):
        print(line)
