"""Leases decided by PostgreSQL: two processes contending get disjoint leases, a dead owner's
lease passes to another after it expires (with its progress), and a live owner that renews
keeps its lease however hard another process tries."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from otpmem.stores.postgres import Heartbeat, Leases, ensure_leases

WAIT = 30.0
NAMES = [f"sim-{i}" for i in range(40)]


@pytest.fixture
def leases_ns(postgres_dsn: str, pg_namespace: str) -> Iterator[str]:
    """A schema with an empty leases table."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {pg_namespace}")
        ensure_leases(conn, pg_namespace)
    yield pg_namespace


@pytest.fixture
def mine(postgres_dsn: str, leases_ns: str) -> Iterator[Leases]:
    leases = Leases(postgres_dsn, leases_ns, owner="test", ttl=1.0)
    yield leases
    leases.close()


def owner_process(
    dsn: str, namespace: str, owner: str, body: str, ttl: float = 1.0
) -> subprocess.Popen[str]:
    """A child process with ``leases`` (ttl 1 s unless given) as ``owner``, running ``body``."""
    script = (
        "import json, sys, time\n"
        "from otpmem.stores.postgres import Heartbeat, Leases\n"
        f"leases = Leases({dsn!r}, {namespace!r}, owner={owner!r}, ttl={ttl!r})\n"
        + textwrap.dedent(body)
    )
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    """Close its stdin, wait for it (killed past WAIT), return its stdout; it must exit 0."""
    try:
        out, err = proc.communicate("", timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    return out


def test_two_processes_claiming_at_once_get_disjoint_leases_covering_all(
    mine: Leases, postgres_dsn: str, leases_ns: str
) -> None:
    mine.add(NAMES)
    body = """
        sys.stdin.readline()                       # both start claiming together
        got = []
        while True:
            taken = leases.claim_free(3, below=10)
            if not taken:
                break
            got += [lease.name for lease in taken]
        print(json.dumps(got), flush=True)
        sys.stdin.readline()                       # hold them until the test has looked
    """
    procs = [owner_process(postgres_dsn, leases_ns, f"p{i}", body) for i in range(2)]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    claimed = []
    for proc in procs:
        assert proc.stdout is not None
        claimed.append(set(json.loads(proc.stdout.readline())))
    assert mine.claim_free(10, below=10) == []  # held by the two children: none is free
    assert mine.claim("sim-0") is None
    for proc in procs:
        finish(proc)
    assert not claimed[0] & claimed[1], "a lease was given to both processes"
    assert claimed[0] | claimed[1] == set(NAMES)


def test_one_name_claimed_by_many_at_once_has_one_winner(postgres_dsn: str, leases_ns: str) -> None:
    body = """
        sys.stdin.readline()
        print("won" if leases.claim("contested") is not None else "lost", flush=True)
        sys.stdin.readline()
    """
    # A lease that outlives the test: on a loaded machine a child may claim over a second
    # after the winner, when a 1 s lease has rightly expired and would be won again.
    procs = [owner_process(postgres_dsn, leases_ns, f"p{i}", body, ttl=60.0) for i in range(4)]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for proc in procs:
        assert proc.stdout is not None
        results.append(proc.stdout.readline().strip())
    for proc in procs:
        finish(proc)
    assert sorted(results) == ["lost", "lost", "lost", "won"]


def test_a_killed_owner_s_lease_passes_on_after_expiry_with_its_progress(
    mine: Leases, postgres_dsn: str, leases_ns: str
) -> None:
    body = """
        lease = leases.claim("sim-7")
        assert leases.advance("sim-7", 3)
        print("holding", lease.epoch, flush=True)
        sys.stdin.readline()
    """
    owner = owner_process(postgres_dsn, leases_ns, "doomed", body)
    assert owner.stdout is not None
    assert owner.stdout.readline().split()[0] == "holding"
    assert mine.claim("sim-7") is None  # the owner lives: its lease holds
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=WAIT)
    assert owner.returncode == -signal.SIGKILL
    killed_at = time.monotonic()

    taken = mine.claim_within("sim-7", timeout=WAIT)

    assert taken is not None
    assert taken.progress == 3  # the successor continues where the database says
    assert taken.epoch == 2
    assert time.monotonic() - killed_at < WAIT
    assert mine.held("sim-7")
    assert mine.advance("sim-7", 4)


def test_a_live_owner_renewing_keeps_its_lease_and_a_lost_one_cannot_advance(
    mine: Leases, postgres_dsn: str, leases_ns: str
) -> None:
    body = """
        assert leases.claim("kept") is not None
        heartbeat = Heartbeat(leases, below=10).start()
        print("holding", flush=True)
        sys.stdin.readline()                 # the test tries to take it meanwhile
        heartbeat.stop()
        print(json.dumps(leases.names()), flush=True)
        print(leases.advance("kept", 1), flush=True)
    """
    owner = owner_process(postgres_dsn, leases_ns, "alive", body)
    assert owner.stdout is not None
    assert owner.stdout.readline().strip() == "holding"
    began = time.monotonic()
    # Three lease lifetimes of trying: a lease nobody renewed would have changed hands.
    assert mine.claim_within("kept", timeout=3.0) is None
    assert time.monotonic() - began >= 3.0
    out = finish(owner)
    names, advanced = out.splitlines()
    assert json.loads(names) == ["kept"]
    assert advanced == "True"
    # Renewals stopped: once the lease runs out it is ours, and the old owner's epoch is over.
    assert mine.claim_within("kept", timeout=WAIT) is not None
    stale = Leases(postgres_dsn, leases_ns, owner="alive", ttl=1.0)
    try:
        assert stale.claim("kept") is None
    finally:
        stale.close()


def test_heartbeat_reports_a_lease_another_owner_took(
    mine: Leases, postgres_dsn: str, leases_ns: str
) -> None:
    lost: list[list[str]] = []
    heard = threading.Event()
    assert mine.claim("taken") is not None and mine.claim("ours") is not None
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # another owner's claim
        conn.execute(
            f"UPDATE {leases_ns}.leases SET owner = 'thief', epoch = epoch + 1 WHERE name = 'taken'"
        )

    def on_lost(names: list[str]) -> None:
        lost.append(names)
        heard.set()

    heartbeat = Heartbeat(mine, below=10, on_lost=on_lost, every=0.05).start()
    try:
        assert heard.wait(WAIT)
    finally:
        heartbeat.stop()
    assert lost == [["taken"]]
    assert not mine.held("taken") and mine.held("ours")
    assert mine.advance("taken", 1) is False
    assert mine.advance("ours", 1) is True


def test_a_bad_ttl_is_refused(postgres_dsn: str, leases_ns: str) -> None:
    with pytest.raises(ValueError, match="ttl"):
        Leases(postgres_dsn, leases_ns, owner="x", ttl=0)


def test_advance_many_records_the_held_leases_in_one_statement_and_drops_a_lost_one(
    mine: Leases, postgres_dsn: str, leases_ns: str
) -> None:
    mine.add(["a", "b", "c"])
    assert len(mine.claim_free(3, below=10)) == 3
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # another owner takes b
        conn.execute(
            f"UPDATE {leases_ns}.leases SET owner = 'thief', epoch = epoch + 1 WHERE name = 'b'"
        )

    kept = mine.advance_many({"a": 2, "b": 2, "c": 5})

    assert kept == {"a", "c"}
    assert mine.names() == ["a", "c"]
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT name, owner, progress FROM {leases_ns}.leases ORDER BY name")
        assert rows.fetchall() == [("a", "test", 2), ("b", "thief", 0), ("c", "test", 5)]
    assert mine.progress(below=4) == 2 + 0 + 4  # each counted up to below
    assert mine.remaining(below=4) == 2
