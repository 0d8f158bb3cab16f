"""``otpmem simulate --store postgres --nodes K``, run as a user does (the installed command,
real node processes, real PostgreSQL): exactly-once across nodes, a node SIGKILLed mid-run
taken over, ``--resume`` of a multi-node run, and clear refusals."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.cli_support import (
    fails_with,
    fields,
    first_number,
    no_traceback,
    nodes_after_a_tenth,
    otpmem,
    servers_under,
    two_node_run,
)

WAIT = 120.0


def nodes_of(data: Path) -> list[psutil.Process]:
    """Node processes of the run in ``data`` (a node works in its run's directory)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if "otpmem.simulate._node" in (proc.info["cmdline"] or []) and proc.cwd() == str(data):
                found.append(proc)
        except psutil.Error:
            continue  # gone meanwhile
    return found


def node_ledgers(data: Path) -> dict[str, list[dict[str, Any]]]:
    """Each node's ledger entries, by file name."""
    return {
        path.name: [json.loads(line) for line in path.read_text().splitlines() if line]
        for path in sorted(data.glob("ledger-*.jsonl"))
    }


def assert_exactly_once(report: dict[str, Any], planned: int) -> None:
    assert report["ok"], report
    assert report["turns_done"] == planned
    assert report["lost"] == 0 and report["duplicated"] == 0
    assert report["messages_stored"] == report["messages_acknowledged"] > 0


def test_two_nodes_on_the_embedded_postgres_store_every_message_once(run_dir: Path) -> None:
    args = ["--agents", 8, "--turns", 6, "--chaos", 0.1, "--seed", 1, "--json"]
    result = otpmem("simulate", "--store", "postgres", "--nodes", 2, "--data", run_dir, *args)

    no_traceback(result)
    assert result.returncode == 0, str(result)
    report = json.loads(result.stdout)
    assert_exactly_once(report, 48)
    assert report["nodes"] == 2 and report["store"] == "postgres"
    ledgers = node_ledgers(run_dir)
    # Both nodes ran, each incarnation with a ledger of its own (opened at its start). Which
    # acknowledged turns is the leases' business: a node claims free leases, so one that
    # starts late on a loaded box may find its share taken and its ledger empty.
    assert {name.split("-")[1] for name in ledgers} == {"n0", "n1"}
    assert sum(len(entries) for entries in ledgers.values()) >= 48
    assert not (run_dir / "ledger.jsonl").exists()  # no one-process ledger
    kept = json.loads((run_dir / "run.json").read_text())
    assert kept["store"] == {"kind": "postgres", "dsn": "", "namespace": "otpmem_sim"}
    assert kept["nodes"] == 2
    assert (run_dir / "postgres" / "PG_VERSION").exists()
    assert servers_under(run_dir) == []  # the run stopped its server
    assert nodes_of(run_dir) == []


def test_a_node_sigkilled_by_the_test_mid_run_is_taken_over_and_nothing_is_lost(
    tmp_path: Path, postgres_dsn: str
) -> None:
    data = tmp_path / "run"
    proc = two_node_run(data, postgres_dsn, agents=8, turns=40)
    try:
        victims = nodes_after_a_tenth(proc)
        assert len(victims) == 2
        victims[0].send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 0, err[-3000:]
    report = fields(out)
    assert report["turns done"] == "320 of 320"
    assert report["messages lost"].startswith("0 ")
    assert report["messages extra"].startswith("0 ")
    assert out.rstrip().endswith("OK: every acknowledged message is in the store, once")
    assert first_number(report["restarts"]) >= 1  # the killed node's new incarnation
    ledgers = node_ledgers(data)
    assert len(ledgers) >= 3, list(ledgers)  # the killed node's, its successor's, the other's
    assert nodes_of(data) == []


def test_chaos_kills_whole_nodes_and_the_audit_still_finds_every_message_once(
    tmp_path: Path, postgres_dsn: str
) -> None:
    data = tmp_path / "run"
    result = otpmem(
        "simulate",
        *("--store", f"postgres={postgres_dsn}", "--nodes", 2, "--lease-seconds", 1),
        *("--agents", 6, "--turns", 10, "--chaos", 0.3, "--seed", 2, "--data", data, "--json"),
        timeout=WAIT,
    )

    assert result.returncode == 0, str(result)
    report = json.loads(result.stdout)
    assert_exactly_once(report, 60)
    assert report["faults"].get("kill_node", 0) >= 1
    assert len(node_ledgers(data)) >= 3


def test_resume_of_a_killed_multi_node_run_continues_it_with_its_nodes(run_dir: Path) -> None:
    args = ["--agents", 6, "--turns", 8, "--chaos", 0.1, "--seed", 4, "--no-progress"]
    killed = otpmem(
        "simulate", "--store", "postgres", "--nodes", 2, "--data", run_dir, *args,
        "--kill-self-after", 15,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, str(killed)
    # The nodes follow their coordinator (their stdin closed): none outlives the run.
    _, alive = psutil.wait_procs(nodes_of(run_dir), timeout=WAIT)
    assert alive == []
    before = len(
        {(e["conversation"], e["turn"]) for es in node_ledgers(run_dir).values() for e in es}
    )
    assert before >= 15

    result = otpmem("simulate", "--data", run_dir, "--resume", "--no-progress", timeout=WAIT)

    no_traceback(result)
    assert result.returncode == 0, str(result)
    report = fields(result.stdout)
    assert report["nodes"].startswith("2 ")
    assert report["turns done"] == f"48 of 48 ({before} before resuming)"
    assert report["messages lost"].startswith("0 ")
    assert report["messages extra"].startswith("0 ")
    assert result.stdout.rstrip().endswith("OK: every acknowledged message is in the store, once")
    assert servers_under(run_dir) == []  # the server the killed run left is stopped now


def test_resume_with_a_flag_that_contradicts_the_nodes_or_the_store_names_both(
    tmp_path: Path, postgres_dsn: str
) -> None:
    data = tmp_path / "run"
    first = otpmem(
        "simulate", "--store", f"postgres={postgres_dsn}", "--nodes", 2,
        "--agents", 2, "--turns", 2, "--data", data, "--no-progress",
    )  # fmt: skip
    assert first.returncode == 0, str(first)
    fails_with(
        otpmem("simulate", "--data", data, "--resume", "--nodes", 3),
        2,
        "--nodes 3 contradicts the run's --nodes 2",
    )
    fails_with(
        otpmem("simulate", "--data", data, "--resume", "--store", "leveldb"),
        2,
        f"--store leveldb contradicts the run's --store postgres={postgres_dsn}",
    )


def test_resume_of_a_run_whose_dsn_had_a_password_asks_for_it_again(tmp_path: Path) -> None:
    data = tmp_path / "run"
    data.mkdir()
    params = {
        "format": "otpmem.simulation", "version": 1, "agents": 2, "turns": 2, "chaos": 0.0,
        "seed": 0, "model": {"kind": "scripted"}, "nodes": 2,
        "store": {"kind": "postgres", "dsn": "postgresql://app:***@db/x", "namespace": "s1"},
    }  # fmt: skip
    (data / "run.json").write_text(json.dumps(params))
    (data / "ledger-n0-abc.jsonl").write_text("")

    # Nowhere for libpq to take a password from: no PGPASSWORD, no password file.
    no_password = {"PGPASSWORD": "", "PGPASSFILE": str(tmp_path / "no-such-pgpass")}
    fails_with(
        otpmem("simulate", "--data", data, "--resume", env=no_password),
        2,
        "run.json keeps its DSN without the password",
        "pass --store postgres=DSN again",
        "or set PGPASSWORD",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "2"], "--nodes 2 needs --store postgres"),
        (["--cluster", "ray"], "--cluster ray places nodes: it needs --store postgres"),
        (["--store", "postgres="], "choose leveldb, postgres"),
        (["--store", "mysql"], "choose leveldb, postgres"),
        (["--store", "postgres=notadsn"], 'not a PostgreSQL DSN: missing "=" after "notadsn"'),
        (
            ["--store", "postgres=host=db password=hunter2 port"],
            'not a PostgreSQL DSN: missing "=" after "port"',
        ),
        (["--nodes", "0", "--store", "postgres"], "0 is not in the range 1<=x<=64"),
        (
            ["--store", "postgres", "--budget-tokens", "100"],
            "--budget-tokens watches the agents of this process",
        ),
        (["--store", "postgres", "--live"], "--observe/--live watches the agents"),
    ],
)
def test_combinations_that_cannot_work_are_usage_errors(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    data = tmp_path / "run"
    text = fails_with(otpmem("simulate", "--data", data, *flags), 2, message)
    assert "hunter2" not in text
    assert not data.exists()


def test_an_unreachable_database_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    data = tmp_path / "run"
    dsn = f"postgresql://app:secret@/db?host={tmp_path}&connect_timeout=2"
    text = fails_with(
        otpmem("simulate", "--store", f"postgres={dsn}", "--nodes", 2, "--data", data),
        2,
        "cannot reach PostgreSQL at postgresql://app:***@/db",
    )
    assert "secret" not in text
    assert not data.exists()
