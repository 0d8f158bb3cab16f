"""The multi-node simulation as a library: a turn a dead node half-stored is continued by
the node that takes its lease, once; ledgers merge; one coordinator per run; Ray places the
nodes (a local Ray, started by the test)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from otpmem.messages import Conv
from otpmem.simulate import ClusterSimulation, RunRefused, merge_ledgers
from otpmem.stores.postgres import Leases, PostgresStore, ensure_leases


def test_a_turn_a_dead_node_half_stored_is_continued_by_its_successor_once(
    tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    # A node that died in turn 0 of sim-0: it stored the user message under the turn's key,
    # and its lease (owner "ghost") runs out in a second, never renewed.
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        store.add(
            Conv("sim", "sim-0"),
            [{"role": "user", "content": "agent 0 turn 0: 0+0?"}],
            idempotency_key="turn:sim-0:0:0",
        )
    finally:
        store.stop()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        ensure_leases(conn, pg_namespace)
    ghost = Leases(postgres_dsn, pg_namespace, owner="ghost", ttl=1.0)
    try:
        ghost.add(["sim-0"])
        assert ghost.claim("sim-0") is not None
    finally:
        ghost.close()

    simulation = ClusterSimulation(
        agents=2,
        turns=3,
        data_dir=tmp_path / "run",
        nodes=1,
        dsn=postgres_dsn,
        namespace=pg_namespace,
        lease_ttl=1.0,
    )
    report = simulation.run()

    assert report.ok, report.verdict()
    assert report.continued == 1
    assert report.lost == 0 and report.duplicated == 0
    reader = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        contents = [m["content"] for m in reader.get(Conv("sim", "sim-0"))]
    finally:
        reader.stop()
    assert contents.count("agent 0 turn 0: 0+0?") == 1
    assert contents[:4] == [
        "agent 0 turn 0: 0+0?",
        "Let me add that.",
        "0",
        "The answer is 0.",
    ]


def test_ledgers_merge_turns_two_nodes_acknowledged_and_flag_ones_that_differ(
    tmp_path: Path,
) -> None:
    same = {"conversation": "sim-1", "turn": 4, "messages": [["user", "x"]]}
    (tmp_path / "ledger-a.jsonl").write_text(
        json.dumps({**same, "node": "a"}) + "\n" + '{"conversation": "sim-2", "tu'
    )  # a torn last line, as a SIGKILL leaves it
    (tmp_path / "ledger-b.jsonl").write_text(
        json.dumps({**same, "node": "b"})
        + "\n"
        + json.dumps({"conversation": "sim-3", "turn": 0, "messages": [["user", "y"]]})
        + "\n"
    )
    (tmp_path / "ledger-c.jsonl").write_text(
        json.dumps({"conversation": "sim-3", "turn": 0, "messages": [["user", "z"]], "node": "c"})
        + "\n"
    )

    entries, conflicts = merge_ledgers(sorted(tmp_path.glob("ledger-*.jsonl")))

    assert sorted((e["conversation"], e["turn"]) for e in entries) == [("sim-1", 4), ("sim-3", 0)]
    assert conflicts == [
        "sim-3 turn 0 was acknowledged by None and c with different messages",
    ]


def test_a_second_coordinator_on_a_running_run_is_refused(
    tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"otpmem.sim.{pg_namespace}",))
        simulation = ClusterSimulation(
            agents=1,
            turns=1,
            data_dir=tmp_path / "run",
            dsn=postgres_dsn,
            namespace=pg_namespace,
        )
        with pytest.raises(RunRefused, match="still going in another process"):
            simulation.run()
    assert not list((tmp_path / "run").glob("ledger*"))


def test_ray_places_the_nodes_as_actor_processes_and_a_killed_one_is_taken_over(
    tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    import ray  # the cluster extra, in dev: imported here, as only this test needs it

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        simulation = ClusterSimulation(
            agents=6,
            turns=30,  # long enough that a drawn node fault finds a node still at work
            data_dir=tmp_path / "run",
            chaos=0.3,
            seed=2,  # a node is killed within the first turns
            nodes=2,
            dsn=postgres_dsn,
            namespace=pg_namespace,
            cluster="ray",
            lease_ttl=1.0,
        )
        report = simulation.run()
        assert ray.is_initialized()  # the test's Ray: the placement joined it, left it up
    finally:
        ray.shutdown()

    assert report.ok, report.verdict()
    assert report.lost == 0 and report.duplicated == 0
    assert report.faults.get("kill_node", 0) >= 1
    assert len(list((tmp_path / "run").glob("ledger-*.jsonl"))) >= 3
