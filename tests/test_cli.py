"""The ``otpmem`` command: simulate (chaos, SIGKILL and resume, the audit), inspect,
export/import and search, run in-process through ``otpmem.cli.main`` (it returns the exit
status) or as a child process where a process has to die or hold a lock."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tqdm

from otpmem import version
from otpmem.cli import main
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore

ROOT = Path(__file__).resolve().parents[1]
CHILD_WAIT = 20.0
# A seed whose 4 x 5 run at chaos 0.3 injects store crashes, a store kill and agent crashes.
CHAOS_SEED = 3
# Faults after which a supervisor always restarts something (crash_agent_on_message only
# fires if the victim gets two more messages, so it may restart nothing).
RESTARTING_FAULTS = ("kill_store", "crash_store", "kill_agent")
# What default_store() prints when it starts an unsupervised MemoryStore in place of the
# supervised LevelDB store: it must never happen inside a simulation.
ORPHAN_WARNING = "no application is running"

# Holds the LevelDB lock of argv[1] until stdin closes.
HOLDER = r"""
import sys, plyvel
db = plyvel.DB(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
db.close()
"""

CONVERSATIONS: dict[Conv, list[dict[str, Any]]] = {
    Conv("alice", "c1"): [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": "hi alice, the Weather is sunny"},
        {"role": "user", "content": "and the weather tomorrow?"},
    ],
    Conv("alice", "c2"): [
        {"role": "user", "content": "weather, weather: the report"},
        {"role": "assistant", "content": "ok", "metadata": {"pinned": True}},
    ],
    Conv("bob", "b1"): [
        {"role": "user", "content": "bob's secret weather"},
        {"role": "assistant", "content": "noted"},
    ],
    Conv(None, "anon"): [{"role": "user", "content": "anonymous weather note"}],
}


# -- helpers --------------------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run ``otpmem argv...`` in-process: (status, stdout, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def child(*argv: object, timeout: float = CHILD_WAIT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m otpmem.cli argv...``; killed (and the test failed) past ``timeout``."""
    command = [sys.executable, "-m", "otpmem.cli", *map(str, argv)]
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(
            f"otpmem {' '.join(map(str, argv))} did not finish within {timeout} s\n"
            f"stdout:\n{out}\nstderr:\n{err[-3000:]}"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def fields(report: str) -> dict[str, str]:
    """The ``key: value`` lines of a simulate report."""
    result = {}
    for line in report.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith(" "):
            result[key.strip()] = value.strip()
    return result


def fault_counts(report: str) -> dict[str, int]:
    """``faults injected:   5 (crash_store 2, kill_store 3)`` -> {"crash_store": 2, ...}."""
    value = fields(report)["faults injected"]
    total, _, detail = value.partition(" ")
    counts = {k: int(v) for k, v in re.findall(r"(\w+) (\d+)", detail)}
    assert sum(counts.values()) == int(total), value
    return counts


def first_number(value: str) -> int:
    match = re.match(r"\d+", value)
    assert match is not None, value
    return int(match.group())


def ledger_turns(data: Path) -> set[tuple[str, int]]:
    """The (conversation, turn) pairs acknowledged in the ledger (a torn last line ignored)."""
    turns = set()
    for line in (data / "ledger.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        turns.add((entry["conversation"], entry["turn"]))
    return turns


def simulate_args(data: Path, agents: int = 4, turns: int = 5, *extra: object) -> list[object]:
    return ["simulate", "--agents", agents, "--turns", turns, "--data", data, *extra]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A LevelDB store holding CONVERSATIONS (closed again: the commands open it)."""
    path = tmp_path / "store"
    store = LevelDBStore.start_link(path)
    try:
        for conv, messages in CONVERSATIONS.items():
            store.add(conv, messages)
    finally:
        store.stop()
    return path


@pytest.fixture
def no_tqdm_monitor(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tqdm's monitor thread outlives the bar by ~10 s; the leak check would flag it."""
    monkeypatch.setattr(tqdm.tqdm, "monitor_interval", 0)
    yield


# -- simulate -------------------------------------------------------------------------------


def test_simulate_under_chaos_loses_nothing_and_counts_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "run"
    args = simulate_args(data, 4, 5, "--chaos", 0.3, "--seed", CHAOS_SEED, "--no-progress")
    status, out, err = cli(capsys, *args)

    assert status == 0, out + err
    lines = out.splitlines()
    assert "messages lost:     0" in lines
    assert "turns done:        20 of 20" in lines
    assert lines[-1] == "OK: every acknowledged message is in the store, once"
    report = fields(out)
    assert report["agents"] == "4"
    acked = first_number(report["messages acked"])
    stored = first_number(report["messages stored"])
    assert acked >= 2 * 20  # every turn is at least a user message and a reply
    assert stored >= acked  # a retried turn may store twice, never less
    faults = fault_counts(out)
    assert sum(faults.values()) > 0
    restarting = sum(faults.get(kind, 0) for kind in RESTARTING_FAULTS)
    assert restarting > 0
    # At most one restart per fault (two faults can share one: see the seed 7 test).
    assert 0 < first_number(report["restarts"]) <= sum(faults.values())
    assert ORPHAN_WARNING not in err
    assert "Traceback" not in err

    # The store the run leaves behind holds one conversation per agent, for user "sim".
    status, out, _ = cli(capsys, "inspect", data, "--user", "sim")
    assert status == 0
    assert out.splitlines()[-1] == "4 conversation(s)"
    assert {line.split("\t")[1] for line in out.splitlines()[:-1]} == {f"sim-{i}" for i in range(4)}


def test_simulate_json_report_parses_and_is_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = simulate_args(tmp_path / "run", 4, 5, "--chaos", 0.3, "--seed", CHAOS_SEED, "--json")
    status, out, err = cli(capsys, *args)

    assert status == 0, out + err
    report = json.loads(out)
    assert report["ok"] is True
    assert report["lost"] == 0
    assert report["agents"] == 4
    assert report["turns_done"] == report["turns_planned"] == 20
    # Exactly once: every fault's retry reused its turn id, so nothing was stored twice.
    assert report["messages_stored"] == report["messages_acknowledged"] >= 40
    assert report["duplicated"] == 0
    assert sum(report["faults"].values()) > 0
    # Every restarting fault is answered by a restart, but one restart can answer two: a
    # kill that lands on a store still in its init fails that restart, and the retry
    # that follows is the one "restarted" event for both faults.
    assert 0 < report["restarts"] <= sum(report["faults"].values())
    assert report["resumed_from"] == 0
    assert report["lost_examples"] == []
    assert "simulating" not in err  # --json: no progress bar either


def test_simulate_chaos_seed_7_completes_every_turn_without_loss_or_stall(
    tmp_path: Path,
) -> None:
    # The example seed of the brief: several store kills in a row. A 4 x 5 run takes well
    # under a second; a stall waiting on a store incarnation that never became ready, or a
    # default store replaced by an unsupervised MemoryStore, shows up here.
    args = simulate_args(tmp_path / "run", 4, 5, "--chaos", 0.3, "--seed", 7, "--json")
    result = child(*args, timeout=10.0)

    assert ORPHAN_WARNING not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["lost"] == 0, report["lost_examples"]
    assert report["duplicated"] == 0
    assert report["messages_stored"] == report["messages_acknowledged"]
    assert report["turns_done"] == report["turns_planned"] == 20
    assert sum(report["faults"].values()) > 0
    # Every restarting fault is answered by a restart, but one restart can answer two: a
    # kill that lands on a store still in its init fails that restart, and the retry
    # that follows is the one "restarted" event for both faults.
    assert 0 < report["restarts"] <= sum(report["faults"].values())


def test_simulate_killed_by_sigkill_resumes_every_turn_without_loss(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_tqdm_monitor: None
) -> None:
    data = tmp_path / "run"
    killed = child(*simulate_args(data, 4, 5, "--no-progress", "--kill-self-after", 7))

    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert killed.stdout == ""  # it died before any report
    before = ledger_turns(data)
    assert 7 <= len(before) < 20

    status, out, err = cli(capsys, *simulate_args(data, 4, 5, "--resume"))

    assert status == 0, out + err
    # The resumed run's progress bar starts where the ledger left off and ends full.
    assert f" {len(before)}/20 " in err
    assert " 0/20 " not in err
    assert " 20/20 " in err
    lines = out.splitlines()
    assert f"turns done:        20 of 20 ({len(before)} before resuming)" in lines
    assert "messages lost:     0" in lines
    # The turn the kill interrupted was continued with its turn id, not stored again.
    assert "messages extra:    0 (stored, but in no acknowledged turn)" in lines
    assert lines[-1] == "OK: every acknowledged message is in the store, once"
    assert ledger_turns(data) == {(f"sim-{i}", t) for i in range(4) for t in range(5)}


def test_simulate_resume_of_an_empty_directory_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "empty"
    data.mkdir()
    status, out, err = cli(capsys, *simulate_args(data, 2, 2, "--no-progress", "--resume"))

    assert status == 2
    assert out == ""
    assert err.startswith("otpmem simulate: nothing to resume")
    assert "ledger.jsonl does not exist" in err
    assert list(data.iterdir()) == []


def test_simulate_again_in_a_used_directory_exits_2_and_points_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "run"
    status, out, err = cli(capsys, *simulate_args(data, 2, 2, "--no-progress"))
    assert status == 0, out + err
    ledger = (data / "ledger.jsonl").read_bytes()

    status, out, err = cli(capsys, *simulate_args(data, 2, 2, "--no-progress"))

    assert status == 2
    assert out == ""
    assert "holds an earlier run" in err
    assert "--resume" in err
    assert (data / "ledger.jsonl").read_bytes() == ledger


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--chaos", "2", "chaos is a probability"),
        ("--chaos", "-0.5", "chaos is a probability"),
        ("--agents", "0", "agents and turns must be >= 1"),
        ("--turns", "0", "agents and turns must be >= 1"),
    ],
)
def test_simulate_rejects_invalid_numbers_with_a_message_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    data = tmp_path / "run"
    argv = [str(a) for a in simulate_args(data, 2, 2, "--no-progress", option, value)]
    try:
        status = main(argv)
    except ValueError as exc:
        pytest.fail(f"otpmem {' '.join(argv)}: ValueError escaped main() as a traceback: {exc}")
    out, err = capsys.readouterr()

    assert status == 2
    assert out == ""
    assert err.startswith("otpmem simulate: ")
    assert message in err
    assert not data.exists()


def test_simulate_audit_that_finds_loss_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "run"
    status, out, err = cli(capsys, *simulate_args(data, 2, 3, "--no-progress"))
    assert status == 0, out + err

    store = LevelDBStore.start_link(data)
    try:
        wiped = store.count(Conv("sim", "sim-0"))
        store.clear(Conv("sim", "sim-0"))
    finally:
        store.stop()
    assert wiped >= 6

    status, out, err = cli(capsys, *simulate_args(data, 2, 3, "--no-progress", "--resume"))

    assert status == 1, out + err
    lines = out.splitlines()
    report = fields(out)
    assert first_number(report["messages lost"]) == wiped > 0
    assert report["turns done"] == "6 of 6 (6 before resuming)"
    assert any(line.startswith("  lost: sim-0 turn 0: ") for line in lines)
    assert not any("sim-1" in line for line in lines if line.startswith("  lost:"))
    assert lines[-1] == "LOST: acknowledged messages are missing from the store"


def test_simulate_progress_bar_goes_to_stderr_not_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_tqdm_monitor: None
) -> None:
    status, out, err = cli(capsys, *simulate_args(tmp_path / "run", 2, 2))

    assert status == 0, out + err
    assert "simulating" in err
    assert "4/4" in err  # agents x turns, all done
    assert "simulating" not in out
    assert "\r" not in out
    assert out.splitlines()[0] == "agents:            2"
    assert "messages lost:     0" in out.splitlines()


# -- inspect --------------------------------------------------------------------------------


def test_inspect_lists_every_conversation_with_its_count(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "inspect", store_dir)

    assert status == 0, err
    lines = out.splitlines()
    assert sorted(lines[:-1]) == sorted(
        [
            "alice\tc1\t3 messages",
            "alice\tc2\t2 messages",
            "bob\tb1\t2 messages",
            "-\tanon\t1 messages",
        ]
    )
    assert lines[-1] == "4 conversation(s)"


def test_inspect_user_lists_only_that_users_conversations(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "inspect", store_dir, "--user", "alice")

    assert status == 0, err
    assert out.splitlines() == [
        "alice\tc1\t3 messages",
        "alice\tc2\t2 messages",
        "2 conversation(s)",
    ]


def test_inspect_conversation_prints_its_messages_as_json_lines(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "inspect", store_dir, "c1", "--user", "alice")

    assert status == 0, err
    assert [json.loads(line) for line in out.splitlines()] == CONVERSATIONS[Conv("alice", "c1")]

    status, out, _ = cli(capsys, "inspect", store_dir, "anon")
    assert status == 0
    assert [json.loads(line) for line in out.splitlines()] == CONVERSATIONS[Conv(None, "anon")]


def test_inspect_last_shows_only_the_newest_messages(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "inspect", store_dir, "c1", "--user", "alice", "--last", 2)

    assert status == 0, err
    assert [json.loads(line) for line in out.splitlines()] == (
        CONVERSATIONS[Conv("alice", "c1")][-2:]
    )


@pytest.mark.parametrize(("conversation", "user"), [("nope", "alice"), ("c1", "bob")])
def test_inspect_unknown_conversation_exits_2(
    store_dir: Path, capsys: pytest.CaptureFixture[str], conversation: str, user: str
) -> None:
    status, out, err = cli(capsys, "inspect", store_dir, conversation, "--user", user)

    assert status == 2
    assert out == ""
    assert err == f"otpmem inspect: no conversation {conversation!r} for user {user!r}\n"


def test_inspect_missing_directory_exits_2_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    status, out, err = cli(capsys, "inspect", missing)

    assert status == 2
    assert out == ""
    assert err == f"otpmem inspect: {missing} does not exist\n"
    assert not missing.exists()


def test_inspect_directory_locked_by_another_process_exits_2_naming_the_lock(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"

        status, out, err = cli(capsys, "inspect", store_dir)

        assert status == 2
        assert out == ""
        assert err.startswith("otpmem inspect: ")
        assert "is locked by another process" in err
        assert str(store_dir) in err
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        try:
            holder.wait(timeout=CHILD_WAIT)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            if holder.stdout is not None:
                holder.stdout.close()
    assert holder.returncode == 0

    # Released: the same command works again.
    status, out, _ = cli(capsys, "inspect", store_dir)
    assert status == 0
    assert out.splitlines()[-1] == "4 conversation(s)"


# -- export / import ------------------------------------------------------------------------


def conversations_of(document: dict[str, Any]) -> dict[Conv, list[dict[str, Any]]]:
    return {
        Conv(c["user_id"], c["conversation_id"]): c["messages"] for c in document["conversations"]
    }


def test_export_user_prints_that_users_conversations(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "export", store_dir, "--user", "alice")

    assert status == 0, err
    document = json.loads(out)
    assert conversations_of(document) == {
        conv: messages for conv, messages in CONVERSATIONS.items() if conv.user_id == "alice"
    }


def test_export_one_conversation_of_a_user(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "export", store_dir, "c2", "--user", "alice")

    assert status == 0, err
    assert conversations_of(json.loads(out)) == {
        Conv("alice", "c2"): CONVERSATIONS[Conv("alice", "c2")]
    }


def test_export_all_to_a_file_then_import_round_trips(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "all.json"
    status, out, err = cli(capsys, "export", store_dir, "--all", "-o", exported)
    assert status == 0, err
    assert out == ""
    original = json.loads(exported.read_text(encoding="utf-8"))
    assert conversations_of(original) == CONVERSATIONS

    fresh = tmp_path / "fresh"
    status, out, err = cli(capsys, "import", fresh, exported)
    assert status == 0, err
    assert out == "imported 8 message(s) in 4 conversation(s)\n"

    again = tmp_path / "again.json"
    status, _, err = cli(capsys, "export", fresh, "--all", "--output", again)
    assert status == 0, err
    assert json.loads(again.read_text(encoding="utf-8")) == original


def test_import_of_a_file_that_is_not_json_exits_2_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": ', encoding="utf-8")
    fresh = tmp_path / "fresh"

    status, out, err = cli(capsys, "import", fresh, bad)

    assert status == 2
    assert out == ""
    assert err.startswith(f"otpmem import: {bad} is not JSON")
    assert not fresh.exists()


def test_import_with_an_invalid_message_exits_2_and_stores_nothing(
    store_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = cli(capsys, "export", store_dir, "--all")
    assert status == 0
    document = json.loads(out)
    document["conversations"][-1]["messages"].append({"role": "wizard", "content": "boo"})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    fresh = tmp_path / "fresh"

    status, out, err = cli(capsys, "import", fresh, bad)

    assert status == 2
    assert out == ""
    assert err.startswith("otpmem import: conversations[3]")
    assert "wizard" in err
    # All or nothing: not even the valid conversations before the bad one were stored.
    status, out, _ = cli(capsys, "inspect", fresh)
    assert status == 0
    assert out == "0 conversation(s)\n"


@pytest.mark.parametrize(
    "selector",
    [[], ["c1", "--all"], ["--user", "alice", "--all"]],
    ids=["none", "conv-and-all", "user-and-all"],
)
def test_export_without_exactly_one_selector_exits_2(
    store_dir: Path, capsys: pytest.CaptureFixture[str], selector: list[str]
) -> None:
    status, out, err = cli(capsys, "export", store_dir, *selector)

    assert status == 2
    assert out == ""
    assert err.startswith("otpmem export: name exactly one of")


# -- search ---------------------------------------------------------------------------------


def hit(score: int, user: str, conversation: str, index: int) -> str:
    content = CONVERSATIONS[Conv(None if user == "-" else user, conversation)][index]["content"]
    return f"{score}\t{user}\t{conversation}\t#{index}\t{json.dumps(content)}"


def test_search_prints_score_user_conversation_and_index_of_each_hit(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "search", store_dir, "WEATHER", "--user", "alice")

    assert status == 0, err
    assert out.splitlines() == [
        hit(2, "alice", "c2", 0),
        hit(1, "alice", "c1", 2),
        hit(1, "alice", "c1", 1),
        "3 hit(s)",
    ]
    assert "bob" not in out and "anonymous" not in out


def test_search_without_user_reads_only_conversations_of_no_user(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "search", store_dir, "weather")

    assert status == 0, err
    assert out.splitlines() == [hit(1, "-", "anon", 0), "1 hit(s)"]


def test_search_limit_keeps_the_best_hits(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "search", store_dir, "weather", "--user", "alice", "--limit", 1)

    assert status == 0, err
    assert out.splitlines() == [hit(2, "alice", "c2", 0), "1 hit(s)"]


def test_search_conv_scopes_to_one_conversation(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(
        capsys, "search", store_dir, "weather", "--user", "alice", "--conv", "c1"
    )

    assert status == 0, err
    assert out.splitlines() == [hit(1, "alice", "c1", 2), hit(1, "alice", "c1", 1), "2 hit(s)"]


def test_search_conversation_of_another_user_exits_2(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # c1 is alice's: bob names it and must get an error, and never alice's messages.
    status, out, err = cli(capsys, "search", store_dir, "weather", "--user", "bob", "--conv", "c1")

    assert "alice" not in out and "Weather" not in out
    assert status == 2, f"exit {status}, stdout {out!r}"
    assert err.startswith("otpmem search: ")
    assert "'c1'" in err


def test_search_rejects_a_bad_limit_with_exit_2(
    store_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = cli(capsys, "search", store_dir, "weather", "--user", "alice", "--limit", 0)

    assert status == 2
    assert out == ""
    assert err.startswith("otpmem search: limit must be an int >= 1")


# -- version --------------------------------------------------------------------------------


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"otpmem {version}\n"


def test_console_script_otpmem_version() -> None:
    script = Path(sys.executable).with_name("otpmem")
    result = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=CHILD_WAIT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"otpmem {version}\n"
