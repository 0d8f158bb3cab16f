"""An observer in another process: a node publishes its status, ``attach`` reads it, and
``otpmem observe --attach`` serves it, never writing where it reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import otpmem
from otpmem.observe import STATUS_FILE, AttachError, Publisher, attach, publish, serve
from tests.cli_support import tree_state
from tests.support import LineReader

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0


def eventually(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``check`` every 0.1 s until it returns something true; fail at the deadline."""
    tick = threading.Event()
    for _ in range(int(timeout * 10)):
        got = check()
        if got:
            return got
        tick.wait(0.1)
    raise AssertionError(f"no {what} within {timeout} s")


def find(nodes: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    for node in nodes:
        if node.get("label") == label:
            return node
        below = find(node.get("children", []), label)
        if below is not None:
            return below
    return None


def simulate(data: Path, turns: int = 100_000) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "otpmem.cli", "simulate", "--agents", "2", "--turns", str(turns),
         "--data", str(data), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=data.parent,
    )  # fmt: skip


def test_attach_reads_a_running_simulate_node_and_sees_it_stop(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = simulate(run)
    reader = LineReader(proc)
    try:
        eventually(run.is_dir, WAIT, "the run's directory")
        attached = attach(run)

        def running_tree() -> dict[str, Any] | None:
            snap = attached.sample()
            agents = find(snap["tree"], "otpmem.agents")
            nodes = snap["attached"]["nodes"]
            ready = agents and len(agents["children"]) == 2 and snap["agents"]["turns"] > 0
            return snap if ready and nodes and nodes[0]["state"] == "live" else None

        snap = eventually(running_tree, WAIT, "published tree with two agents")
        assert snap["attached"]["nodes"][0]["os_pid"] == proc.pid
        assert snap["stores"][0]["type"] == "LevelDBStore" and snap["stores"][0]["fsyncs"] >= 1
        assert find(snap["tree"], "otpmem.default_store") is not None
        turns_then = snap["agents"]["turns"]
        later = eventually(
            lambda: (s := attached.sample())["agents"]["turns"] > turns_then and s, WAIT, "progress"
        )
        assert later["taken_at"] > snap["taken_at"]
        proc.send_signal(signal.SIGINT)  # ends the run after its turns in flight
        assert proc.wait(WAIT) == 130
        last = attached.sample()
        assert last["attached"]["nodes"][0]["state"] == "stopped"
        # Attaching wrote nothing: every file of the run, bytes and times, as it was.
        before = tree_state(run)
        with attach(run) as again:
            again.start(0.05)
            assert again.latest()["attached"]["nodes"][0]["state"] == "stopped"
        cli = subprocess.run(
            [sys.executable, "-m", "otpmem.cli", "observe", "--attach", str(run), "--json"],
            capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=WAIT,
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["attached"]["nodes"][0]["os_pid"] == proc.pid
        assert tree_state(run) == before
    finally:
        if proc.poll() is None:
            proc.kill()
        reader.close(WAIT)


def test_the_published_file_is_always_whole_while_a_reader_races_it(tmp_path: Path) -> None:
    root = otpmem.start(tmp_path / "node")
    bad: list[str] = []
    reads = [0]
    stop = threading.Event()

    def read() -> None:
        path = tmp_path / "node" / STATUS_FILE
        while not stop.is_set():
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            reads[0] += 1
            try:
                json.loads(text)
            except ValueError:
                bad.append(text[:80])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with publish(tmp_path / "node", interval=0.01) as publisher:
            eventually(lambda: publisher.published >= 30, WAIT, "30 publications")
    finally:
        stop.set()
        reader.join(WAIT)
        root.stop()
    assert not bad and reads[0] > 30
    document = json.loads((tmp_path / "node" / STATUS_FILE).read_text())
    assert document["running"] is False and document["os_pid"] == os.getpid()
    assert [p.name for p in (tmp_path / "node").glob(".*partial")] == []


def test_publishing_waits_until_ready_and_creates_no_directory(tmp_path: Path) -> None:
    ready = threading.Event()
    missing = tmp_path / "later"
    publisher = Publisher(missing, interval=0.01, ready=ready.is_set)
    try:
        assert not missing.exists()
        missing.mkdir()
        eventually(lambda: True, 0.3, "a few ticks")
        assert not (missing / STATUS_FILE).exists()  # not ready yet
        ready.set()
        eventually(lambda: (missing / STATUS_FILE).exists(), WAIT, "the status file")
    finally:
        publisher.stop()


def test_attach_refuses_what_it_cannot_read_with_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(AttachError, match="not a directory nor a PostgreSQL DSN"):
        attach(tmp_path / "missing")
    with pytest.raises(AttachError, match="--namespace goes with a PostgreSQL DSN"):
        attach(tmp_path, namespace="x")
    with pytest.raises(AttachError, match="not a schema name"):
        attach("postgresql://localhost/db", namespace="Robert'); DROP")
    with pytest.raises(ValueError, match="exactly one of"):
        publish()
    with pytest.raises(ValueError, match="interval must be"):
        publish(tmp_path, interval=0)
    with attach(tmp_path) as empty:  # nothing published yet: an empty view that says why
        snap = empty.sample()
        assert snap["tree"] == [] and "nothing published yet" in snap["attached"]["hint"]


def test_an_attached_page_refuses_to_switch_a_trace(tmp_path: Path) -> None:
    root = otpmem.start(tmp_path / "node")
    try:
        with publish(tmp_path / "node", interval=0.05) as publisher:
            eventually(lambda: publisher.published, WAIT, "a publication")
            with attach(tmp_path / "node") as attached, serve(observer=attached) as page:
                snap = httpx.get(page.url + "api/snapshot", timeout=WAIT).json()
                assert snap["attached"]["nodes"][0]["state"] == "live"
                pid = int(snap["processes"][0]["pid"].split(".")[1])
                row = httpx.get(f"{page.url}api/process/{pid}", timeout=WAIT).json()
                assert "attached" in row["note"] and row["trace"] == []
                answer = httpx.post(f"{page.url}api/trace/{pid}", json={"on": True}, timeout=WAIT)
                assert answer.status_code == 409
    finally:
        root.stop()


def test_every_node_of_a_postgres_run_is_read_from_the_database_only(
    postgres_dsn: str, pg_namespace: str
) -> None:
    from otpmem.stores.postgres import Leases, connected, ensure_leases

    with connected(postgres_dsn) as conn:
        conn.execute(f"CREATE SCHEMA {pg_namespace}")
        ensure_leases(conn, pg_namespace)
    node_a = Leases(postgres_dsn, pg_namespace, owner="n0-a", ttl=30.0)
    node_b = Leases(postgres_dsn, pg_namespace, owner="n1-b", ttl=30.0)
    try:
        node_a.add(["c0", "c1", "c2"])
        assert node_a.claim("c0") and node_a.claim("c1") and node_b.claim("c2")
        node_a.advance("c0", 4)
        publishers = [
            publish(dsn=postgres_dsn, namespace=pg_namespace, interval=0.05) for _ in range(1)
        ]
        try:
            eventually(lambda: publishers[0].published, WAIT, "a published row")
            with attach(postgres_dsn, namespace=pg_namespace) as attached:
                snap = attached.sample()
                assert "error" not in snap, snap.get("error")
                assert {
                    r["owner"]: (r["leases"], r["live"], r["progress"]) for r in snap["leases"]
                } == {
                    "n0-a": (2, 2, 4),
                    "n1-b": (1, 1, 0),
                }
                assert [n["state"] for n in snap["attached"]["nodes"]] == ["live"]
                # The session is read-only: the server refuses a write, whatever asks.
                import psycopg

                with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                    attached._connection().execute(
                        f"DELETE FROM {pg_namespace}.leases"
                    )
        finally:
            for publisher in publishers:
                publisher.stop()
        with attach(postgres_dsn, namespace=pg_namespace) as attached:
            assert [n["state"] for n in attached.sample()["attached"]["nodes"]] == ["stopped"]
    finally:
        node_a.close()
        node_b.close()
