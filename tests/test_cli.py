"""``otpmem simulate``, run as a user runs it: chaos, SIGKILL and resume, the audit and the
report that explains itself. (The store commands: test_cli_store_commands.py; failures:
test_cli_errors.py; resuming: test_cli_resume.py.)"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

from otpmem import version
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from tests.cli_support import (
    fields,
    first_number,
    ledger_turns,
    no_traceback,
    otpmem,
    simulate_args,
)

# A seed whose 4 x 5 run at chaos 0.3 injects store crashes, a store kill and agent crashes.
CHAOS_SEED = 3
# Faults after which a supervisor always restarts something (crash_agent_on_message fires
# on its agent's next turn, so after the agent's last turn it restarts nothing).
RESTARTING_FAULTS = ("kill_store", "crash_store", "kill_agent")
# What default_store() prints when it starts an unsupervised MemoryStore in place of the
# supervised LevelDB store: it must never happen inside a simulation.
ORPHAN_WARNING = "no application is running"


def fault_counts(report: str) -> dict[str, int]:
    """``faults injected:   5 (crash_store 2, kill_store 3)`` -> {"crash_store": 2, ...}."""
    value = fields(report)["faults injected"]
    total, _, detail = value.partition(" ")
    counts = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", detail)}
    assert sum(counts.values()) == int(total), value
    return counts


def test_simulate_under_chaos_loses_nothing_and_the_report_explains_itself(
    tmp_path: Path,
) -> None:
    data = tmp_path / "run"
    args = simulate_args(data, 4, 5, "--chaos", 0.3, "--seed", CHAOS_SEED, "--no-progress")
    result = otpmem(*args)

    assert result.returncode == 0, str(result)
    no_traceback(result)
    assert ORPHAN_WARNING not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "OK: every acknowledged message is in the store, once"
    report = fields(result.stdout)
    assert report["data"] == str(data)
    assert report["agents"] == "4"
    assert report["turns done"] == "20 of 20"
    assert report["messages lost"].startswith("0 (acked, but not in the store)")
    # Acked and stored side by side, each saying what it counts.
    acked, stored = first_number(report["messages acked"]), first_number(report["messages stored"])
    assert "from the ledger" in report["messages acked"]
    assert "read back from the store" in report["messages stored"]
    assert acked >= 2 * 20  # every turn is at least a user message and a reply
    assert stored >= acked  # a retried turn may store twice, never less
    if stored > acked:
        assert f"{stored - acked} more than acked" in report["messages stored"]
    faults = fault_counts(result.stdout)
    assert sum(faults.get(kind, 0) for kind in RESTARTING_FAULTS) > 0
    # Faults and restarts are different counts, and the report says why.
    restarts = first_number(report["restarts"])
    assert 0 < restarts <= sum(faults.values())
    assert "one per fault" in report["restarts"]
    # Throughput over this run's wall time, in the same words as the progress lines.
    throughput = re.fullmatch(
        r"([\d.]+) turns/s \((\d+) turns of this run over ([\d.]+) s of wall time\)",
        report["throughput"],
    )
    assert throughput is not None, report["throughput"]
    rate, turns, seconds = (float(x) for x in throughput.groups())
    assert turns == 20
    assert abs(rate - turns / seconds) <= 0.03 * rate + 0.1  # seconds are rounded

    # The store the run leaves behind holds one conversation per agent, for user "sim".
    listed = otpmem("inspect", data, "--user", "sim")
    assert listed.returncode == 0, str(listed)
    assert listed.stdout.splitlines()[-1] == "4 conversations"
    assert {row.split("\t")[1] for row in listed.stdout.splitlines()[:-1]} == {
        f"sim-{i}" for i in range(4)
    }


def test_simulate_json_report_parses_and_is_ok(tmp_path: Path) -> None:
    args = simulate_args(tmp_path / "run", 4, 5, "--chaos", 0.3, "--seed", CHAOS_SEED, "--json")
    result = otpmem(*args)

    assert result.returncode == 0, str(result)
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["complete"] is True
    assert report["lost"] == 0
    assert report["agents"] == 4
    assert report["turns_done"] == report["turns_planned"] == report["turns_this_run"] == 20
    # Exactly once: every fault's retry reused its turn id, so nothing was stored twice.
    assert report["messages_stored"] == report["messages_acknowledged"] >= 40
    assert report["duplicated"] == 0
    assert sum(report["faults"].values()) > 0
    # Every fault is answered by a restart of its own (a fault waits for its target's next
    # incarnation to be ready), but a crash plan after its agent's last turn never fires.
    assert 0 < report["restarts"] <= sum(report["faults"].values())
    assert report["resumed_from"] == 0
    assert report["lost_examples"] == [] and report["errors"] == []
    assert report["interrupted"] is False
    assert result.stderr == ""  # --json: no progress either


def test_simulate_store_faults_in_a_row_complete_every_turn_without_loss_or_stall(
    tmp_path: Path,
) -> None:
    # Ten store kills and crashes, nothing else. A 4 x 5 run takes well under a second; a
    # stall waiting on a store incarnation that never became ready, or a default store
    # replaced by an unsupervised MemoryStore, shows up here.
    args = simulate_args(tmp_path / "run", 4, 5, "--chaos", 0.3, "--seed", 6, "--json")
    result = otpmem(*args, timeout=20.0)

    assert ORPHAN_WARNING not in result.stderr, result.stderr
    no_traceback(result)
    assert result.returncode == 0, str(result)
    report = json.loads(result.stdout)
    assert report["lost"] == 0, report["lost_examples"]
    assert report["duplicated"] == 0
    assert report["messages_stored"] == report["messages_acknowledged"]
    assert report["turns_done"] == report["turns_planned"] == 20
    assert set(report["faults"]) == {"kill_store", "crash_store"}
    assert report["restarts"] == sum(report["faults"].values()) == 10  # one each


def test_simulate_killed_by_sigkill_resumes_every_turn_without_loss(tmp_path: Path) -> None:
    data = tmp_path / "run"
    killed = otpmem(*simulate_args(data, 4, 5, "--no-progress", "--kill-self-after", 7))

    assert killed.returncode == -signal.SIGKILL, str(killed)
    assert killed.stdout == ""  # it died before any report
    before = ledger_turns(data)
    assert 7 <= len(before) < 20

    resumed = otpmem("simulate", "--data", data, "--resume")

    assert resumed.returncode == 0, str(resumed)
    # The resumed run's progress starts where the ledger left off and ends full, in lines.
    progress = resumed.stderr.splitlines()
    assert progress[0].startswith(f"simulating: {len(before)}/20 turns")
    assert progress[-1].startswith("simulating: 20/20 turns (100%)")
    assert progress[-1].endswith("(done)")
    assert "\r" not in resumed.stderr
    report = fields(resumed.stdout)
    assert report["turns done"] == f"20 of 20 ({len(before)} before resuming)"
    assert report["throughput"].split("(")[1].startswith(f"{20 - len(before)} turns of this run")
    assert report["messages lost"].startswith("0 ")
    # The turn the kill interrupted was continued with its turn id, not stored again.
    assert report["messages extra"].startswith("0 ")
    assert report["messages stored"].split()[0] == report["messages acked"].split()[0]
    assert resumed.stdout.splitlines()[-1] == "OK: every acknowledged message is in the store, once"
    assert ledger_turns(data) == {(f"sim-{i}", t) for i in range(4) for t in range(5)}


def test_simulate_without_data_runs_in_a_fresh_temporary_directory_and_says_where(
    tmp_path: Path,
) -> None:
    result = otpmem(
        "simulate", "--agents", 2, "--turns", 2, "--no-progress", env={"TMPDIR": str(tmp_path)}
    )

    assert result.returncode == 0, str(result)
    announced = re.search(r"running in a new temporary directory: (\S+)", result.stderr)
    assert announced is not None, result.stderr
    where = Path(announced.group(1))
    assert where.parent == tmp_path and where.is_dir()
    assert fields(result.stdout)["data"] == str(where)
    assert (where / "ledger.jsonl").exists() and (where / "run.json").exists()
    # It is a run like any other: inspect reads it.
    assert otpmem("inspect", where).stdout.splitlines()[-1] == "2 conversations"


def test_simulate_progress_goes_to_stderr_as_lines_without_carriage_returns(
    tmp_path: Path,
) -> None:
    result = otpmem(*simulate_args(tmp_path / "run", 2, 5))

    assert result.returncode == 0, str(result)
    assert "\r" not in result.stderr and "\r" not in result.stdout
    progress = result.stderr.splitlines()
    assert progress[0].startswith("simulating: 0/10 turns (0%)")
    assert progress[-1].startswith("simulating: 10/10 turns (100%)")
    assert 2 <= len(progress) <= 12  # a line per tenth at most, not one per turn
    assert all(line.startswith("simulating: ") for line in progress)
    assert "simulating" not in result.stdout
    assert result.stdout.splitlines()[0] == f"data:              {tmp_path / 'run'}"


def test_simulate_audit_that_finds_loss_exits_1_and_names_what_is_missing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "run"
    first = otpmem(*simulate_args(data, 2, 3, "--no-progress"))
    assert first.returncode == 0, str(first)

    store = LevelDBStore.start_link(data)
    try:
        wiped = store.count(Conv("sim", "sim-0"))
        store.clear(Conv("sim", "sim-0"))
    finally:
        store.stop()
    assert wiped >= 6

    result = otpmem("simulate", "--data", data, "--resume", "--no-progress")

    assert result.returncode == 1, str(result)
    lines = result.stdout.splitlines()
    report = fields(result.stdout)
    assert first_number(report["messages lost"]) == wiped
    assert report["turns done"] == "6 of 6 (6 before resuming)"
    assert any(line.startswith("  lost: sim-0 turn 0: ") for line in lines)
    assert not any("sim-1" in line for line in lines if line.startswith("  lost:"))
    assert lines[-1] == f"LOST: {wiped} acknowledged messages missing from the store"


def test_version_prints_the_version() -> None:
    result = otpmem("--version")
    assert result.returncode == 0, str(result)
    assert result.stdout == f"otpmem {version}\n"
