"""``otpmem import`` says what it stored and what it skipped, and refuses a simulation's run
directory, whose audit an import would fail DUPLICATED (issue 33, point 6)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_support import fails_with, fields, otpmem, simulate_args, tree_state


def test_a_second_import_of_one_document_stores_nothing_and_says_so(
    store_dir: Path, tmp_path: Path
) -> None:
    document = tmp_path / "all.json"
    assert otpmem("export", store_dir, "--all", "-o", document).returncode == 0
    fresh = tmp_path / "fresh"

    first = otpmem("import", fresh, document)
    again = otpmem("import", fresh, document)

    assert first.returncode == again.returncode == 0, f"{first}\n{again}"
    assert first.stdout == (
        f"stored 8 messages, skipped 0 already there, from 4 conversations into {fresh}\n"
    )
    assert again.stdout == (
        f"stored 0 messages, skipped 8 already there, from 4 conversations into {fresh}\n"
    )
    assert otpmem("inspect", fresh).stdout.splitlines()[-1] == "4 conversations"
    assert json.loads(otpmem("export", fresh, "--all").stdout) == json.loads(document.read_text())


def test_an_import_counts_the_new_conversations_apart_from_those_already_there(
    store_dir: Path, tmp_path: Path
) -> None:
    fresh = tmp_path / "fresh"
    bob = otpmem("export", store_dir, "b1", "--user", "bob").stdout
    assert otpmem("import", fresh, "-", stdin=bob).returncode == 0
    everything = otpmem("export", store_dir, "--all").stdout

    result = otpmem("import", fresh, "-", stdin=everything)

    assert result.stdout == (
        f"stored 6 messages, skipped 2 already there, from 4 conversations into {fresh}\n"
    )


def test_an_import_into_a_run_is_refused_and_writes_nothing_unless_into_run(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    done = otpmem(*simulate_args(run, 2, 2, "--no-progress"))
    assert done.returncode == 0, str(done)
    document = tmp_path / "sim.json"
    assert otpmem("export", run, "sim-0", "--user", "sim", "-o", document).returncode == 0
    held = len(json.loads(document.read_text())["conversations"][0]["messages"])
    before = tree_state(run)

    refused = otpmem("import", run, document)

    fails_with(refused, 2, f"{run} is a run of otpmem simulate", "DUPLICATED", "--into-run")
    assert len(refused.stderr.splitlines()) == 1
    assert tree_state(run) == before

    forced = otpmem("import", run, document, "--into-run")
    assert forced.returncode == 0, str(forced)
    assert forced.stdout.startswith(f"stored {held} messages, skipped 0 already there")
    # What the refusal warned of: the run's next audit fails DUPLICATED, exit 1.
    audited = otpmem("simulate", "--data", run, "--resume", "--no-progress")
    assert audited.returncode == 1, str(audited)
    assert fields(audited.stdout)["DUPLICATED"].startswith(
        f"{held} stored messages in no acknowledged"
    )
