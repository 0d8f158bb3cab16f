"""The store commands on a run of ``otpmem simulate --store postgres``, as a user runs them
after it: ``inspect``, ``search``, ``export`` and ``import`` find the run's conversations in
PostgreSQL (the embedded server under the run's directory, or the DSN its run.json keeps
without its password), stop what they started, and refuse clearly what they cannot read."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

from tests.cli_support import fails_with, no_traceback, otpmem, servers_under


def simulated(run: Path, *store: object) -> dict[str, object]:
    """A small finished run on PostgreSQL; its JSON report."""
    result = otpmem(
        "simulate", "--store", *store, "--agents", 3, "--turns", 2, "--data", run, "--json"
    )  # fmt: skip
    assert result.returncode == 0, str(result)
    report: dict[str, object] = json.loads(result.stdout)
    return report


def run_of(where: Path, store: dict[str, str]) -> Path:
    """A run directory whose run.json names ``store`` (and nothing else yet)."""
    run = where / "run"
    run.mkdir()
    params = {
        "format": "otpmem.simulation",
        "version": 1,
        "agents": 1,
        "turns": 1,
        "chaos": 0.0,
        "seed": 0,
        "model": {"kind": "scripted"},
        "store": store,
        "nodes": 1,
    }
    (run / "run.json").write_text(json.dumps(params))
    return run


def listed(result_stdout: str) -> dict[str, int]:
    """``inspect``'s listing: conversation -> message count."""
    rows = [line.split("\t") for line in result_stdout.splitlines()[:-1]]
    return {row[1]: int(row[2].split()[0]) for row in rows}


def test_inspect_search_export_read_an_embedded_postgres_run_and_stop_its_server(
    run_dir: Path,
) -> None:
    report = simulated(run_dir, "postgres")

    listing = otpmem("inspect", run_dir)
    no_traceback(listing)
    assert listing.returncode == 0, str(listing)
    counts = listed(listing.stdout)
    assert set(counts) == {"sim-0", "sim-1", "sim-2"}
    assert sum(counts.values()) == report["messages_stored"]
    assert listing.stdout.splitlines()[-1] == "3 conversations"

    shown = otpmem("inspect", run_dir, "sim-1", "--user", "sim", "--last", 2)
    assert shown.returncode == 0, str(shown)
    newest = [json.loads(line) for line in shown.stdout.splitlines()]
    assert len(newest) == 2 and newest[-1]["role"] == "assistant"
    assert "agent 1 turn 1" in newest[-1]["content"]

    found = otpmem("search", run_dir, "agent 2 turn 1", "--user", "sim")
    assert found.returncode == 0, str(found)
    assert {line.split("\t")[2] for line in found.stdout.splitlines()[:-1]} == {"sim-2"}

    exported = otpmem("export", run_dir, "--all")
    assert exported.returncode == 0, str(exported)
    document = json.loads(exported.stdout)
    assert {c["conversation_id"]: len(c["messages"]) for c in document["conversations"]} == counts
    assert servers_under(run_dir) == []  # each command stopped the server it started


def test_import_into_an_embedded_postgres_run_appends_there(run_dir: Path, tmp_path: Path) -> None:
    simulated(run_dir, "postgres")
    document = {
        "format": "otpmem.export",
        "version": 1,
        "conversations": [
            {
                "user_id": "sim",
                "conversation_id": "imported",
                "messages": [{"role": "user", "content": "brought in"}],
            }
        ],
    }
    source = tmp_path / "doc.json"
    source.write_text(json.dumps(document))

    refused = otpmem("import", run_dir, source)
    fails_with(refused, 2, f"{run_dir} is a run of otpmem simulate", "--into-run")
    result = otpmem("import", run_dir, source, "--into-run")

    assert result.returncode == 0, str(result)
    shown = otpmem("inspect", run_dir, "imported", "--user", "sim")
    assert [json.loads(line) for line in shown.stdout.splitlines()] == [
        {"role": "user", "content": "brought in"}
    ]
    assert not (run_dir / "CURRENT").exists()  # no LevelDB store made beside the run
    assert servers_under(run_dir) == []


def test_a_run_on_a_server_with_a_password_is_read_with_the_password_libpq_finds(
    tmp_path: Path, postgres_dsn: str
) -> None:
    parts = urlsplit(postgres_dsn)
    with_password = postgres_dsn.replace(f"//{parts.username}:@", f"//{parts.username}:s3cret@")
    assert "s3cret" in with_password
    run = tmp_path / "run"
    simulated(run, f"postgres={with_password}")
    kept = json.loads((run / "run.json").read_text())["store"]["dsn"]
    assert "s3cret" not in kept and "***" in kept

    # The embedded server trusts local users: libpq, asked with no password, gets in.
    listing = otpmem("inspect", run, env={"PGPASSWORD": "s3cret"})

    assert listing.returncode == 0, str(listing)
    assert set(listed(listing.stdout)) == {"sim-0", "sim-1", "sim-2"}


def test_a_run_on_a_server_with_a_password_resumes_with_the_password_libpq_finds(
    tmp_path: Path, postgres_dsn: str
) -> None:
    parts = urlsplit(postgres_dsn)
    with_password = postgres_dsn.replace(f"//{parts.username}:@", f"//{parts.username}:s3cret@")
    run = tmp_path / "run"
    simulated(run, f"postgres={with_password}")
    kept = (run / "run.json").read_text()

    resumed = otpmem("simulate", "--data", run, "--resume", "--json", env={"PGPASSWORD": "s3cret"})

    assert resumed.returncode == 0, str(resumed)
    report = json.loads(resumed.stdout)
    assert report["resumed_from"] == 6 and report["lost"] == 0
    assert (run / "run.json").read_text() == kept  # still without the password


def test_a_postgres_run_whose_schema_is_gone_is_refused_and_not_created(
    tmp_path: Path, postgres_dsn: str
) -> None:
    run = run_of(
        tmp_path, {"kind": "postgres", "dsn": postgres_dsn, "namespace": "never_made_here"}
    )

    fails_with(otpmem("inspect", run), 2, "no schema 'never_made_here'", "stored nothing")
    fails_with(otpmem("inspect", run), 2, "no schema 'never_made_here'")  # still not made


def test_a_postgres_run_whose_server_is_unreachable_names_it(tmp_path: Path) -> None:
    run = run_of(
        tmp_path,
        {
            "kind": "postgres",
            "dsn": "postgresql://app:***@127.0.0.1:9/db?connect_timeout=2",
            "namespace": "x",
        },
    )

    message = fails_with(otpmem("search", run, "hello"), 2, "cannot reach PostgreSQL at")
    assert "127.0.0.1:9" in message


def test_an_embedded_run_without_its_server_directory_says_what_is_missing(
    tmp_path: Path,
) -> None:
    run = run_of(tmp_path, {"kind": "postgres", "dsn": "", "namespace": "otpmem_sim"})

    fails_with(otpmem("export", run, "--all"), 2, str(run / "postgres"), "missing")
