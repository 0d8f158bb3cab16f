"""A run remembers itself: ``--resume`` takes the store's lock before it reads the ledger,
continues with the parameters the run was started with, and a run stopped with Ctrl-C
says how to continue it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.cli_support import (
    OTPMEM,
    LockHolder,
    fails_with,
    fields,
    ledger_turns,
    otpmem,
    simulate_args,
)
from tests.support import LineReader


@pytest.fixture
def killed_run(tmp_path: Path) -> Path:
    """A 3 x 4 run at chaos 0.2, SIGKILLed after 5 turns."""
    data = tmp_path / "run"
    args = simulate_args(data, 3, 4, "--chaos", 0.2, "--seed", 5, "--no-progress")
    killed = otpmem(*args, "--kill-self-after", 5)
    assert killed.returncode == -signal.SIGKILL, str(killed)
    return data


def test_resume_without_flags_continues_the_run_as_it_was_started(killed_run: Path) -> None:
    kept = json.loads((killed_run / "run.json").read_text(encoding="utf-8"))
    assert {k: kept[k] for k in ("agents", "turns", "chaos", "seed")} == {
        "agents": 3,
        "turns": 4,
        "chaos": 0.2,
        "seed": 5,
    }
    before = len(ledger_turns(killed_run))

    result = otpmem("simulate", "--data", killed_run, "--resume", "--no-progress")

    assert result.returncode == 0, str(result)
    report = fields(result.stdout)
    assert report["agents"] == "3"
    assert report["turns done"] == f"12 of 12 ({before} before resuming)"


def test_resume_with_the_same_flags_is_accepted(killed_run: Path) -> None:
    args = simulate_args(killed_run, 3, 4, "--chaos", 0.2, "--seed", 5, "--resume", "--json")
    result = otpmem(*args)

    assert result.returncode == 0, str(result)
    assert json.loads(result.stdout)["turns_done"] == 12


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--agents", "10"], "--agents 10 contradicts the run's --agents 3"),
        (["--turns", "1"], "--turns 1 contradicts the run's --turns 4"),
        (
            ["--chaos", "0.5", "--seed", "9"],
            "--chaos 0.5 contradicts the run's --chaos 0.2; "
            "--seed 9 contradicts the run's --seed 5",
        ),
        (["--model", "openai"], "--model openai contradicts the run's --model scripted"),
    ],
)
def test_resume_with_flags_that_contradict_the_run_is_a_usage_error_naming_both(
    killed_run: Path, flags: list[str], message: str
) -> None:
    ledger = (killed_run / "ledger.jsonl").read_bytes()

    fails_with(
        otpmem("simulate", "--data", killed_run, "--resume", *flags),
        2,
        message,
        f"(kept in {killed_run / 'run.json'})",
    )
    assert (killed_run / "ledger.jsonl").read_bytes() == ledger


def test_resume_of_a_run_another_process_holds_fails_at_once_naming_the_lock(
    killed_run: Path, lock_holder: list[LockHolder]
) -> None:
    lock_holder.append(LockHolder(killed_run))
    ledger = (killed_run / "ledger.jsonl").read_bytes()

    began = time.monotonic()
    result = otpmem("simulate", "--data", killed_run, "--resume")
    took = time.monotonic() - began

    text = fails_with(
        result, 2, f"the LevelDB store at {str(killed_run)!r} is locked by another process"
    )
    assert "StartChildFailed" not in text and "InitFailed" not in text
    assert "turns done" not in result.stdout
    assert took < 4.0  # no wait for the store's 5 s lock timeout
    assert (killed_run / "ledger.jsonl").read_bytes() == ledger
    # inspect says the same.
    fails_with(otpmem("inspect", killed_run), 2, "is locked by another process")

    lock_holder.pop().release()
    done = otpmem("simulate", "--data", killed_run, "--resume", "--no-progress")
    assert done.returncode == 0, str(done)
    assert fields(done.stdout)["turns done"].startswith("12 of 12")


def test_resume_needs_data_and_an_earlier_run(tmp_path: Path) -> None:
    fails_with(otpmem("simulate", "--resume"), 2, "--resume needs --data DIR")
    empty = tmp_path / "empty"
    empty.mkdir()
    fails_with(
        otpmem("simulate", "--data", empty, "--resume"),
        2,
        "nothing to resume",
        "ledger.jsonl does not exist",
    )
    assert list(empty.iterdir()) == []


def test_a_new_run_in_a_used_directory_points_to_resume(tmp_path: Path) -> None:
    data = tmp_path / "run"
    assert otpmem(*simulate_args(data, 2, 2, "--no-progress")).returncode == 0
    ledger = (data / "ledger.jsonl").read_bytes()

    fails_with(otpmem(*simulate_args(data, 2, 2)), 2, "holds an earlier run", "--resume")
    assert (data / "ledger.jsonl").read_bytes() == ledger


def _stderr_lines(proc: subprocess.Popen[str]) -> LineReader:
    return LineReader(SimpleNamespace(stdout=proc.stderr), name="otpmem-stderr")  # type: ignore[arg-type]


def test_ctrl_c_stops_after_the_turns_in_flight_and_says_how_to_resume(tmp_path: Path) -> None:
    data = tmp_path / "run"
    args: list[Any] = simulate_args(data, 2, 1500)
    proc = subprocess.Popen(
        [str(OTPMEM), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    progress = _stderr_lines(proc)
    try:
        progress.expect("simulating: 0/3000 turns", 30.0)
        progress.expect("simulating: 300/3000 turns", 30.0)  # a tenth is done
        proc.send_signal(signal.SIGINT)
        progress.expect("stopping after the turns in flight (Ctrl-C again to quit at once)", 30)
        stopped = progress.expect("simulating: ", 30.0)
        assert proc.stdout is not None
        out = proc.stdout.read()
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        progress.thread.join(30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()

    assert stopped.endswith("(stopped)")
    report = fields(out)
    done = int(report["turns done"].split(" of ")[0])
    assert 300 <= done < 3000 and done == len(ledger_turns(data))
    assert report["messages lost"].startswith("0 ")
    lines = out.splitlines()
    assert lines[-2] == f"INCOMPLETE: {3000 - done} of 3000 turns not done:"
    assert (
        lines[-1] == f"  - interrupted (Ctrl-C); continue: otpmem simulate --data {data} --resume"
    )

    resumed = otpmem("simulate", "--data", data, "--resume", "--no-progress")
    assert resumed.returncode == 0, str(resumed)
    assert fields(resumed.stdout)["turns done"] == f"3000 of 3000 ({done} before resuming)"
