"""Running the installed ``otpmem`` command as a user does: a child process, its output and
exit status, with a deadline; and the stores and reports the CLI tests share."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore

OTPMEM = Path(sys.executable).with_name("otpmem")  # the console script pip installed
DEADLINE = 60.0

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

# Holds the LevelDB lock of argv[1] until stdin closes.
HOLDER = r"""
import sys, plyvel
db = plyvel.DB(sys.argv[1])
print("locked", flush=True)
sys.stdin.readline()
db.close()
"""


@dataclass
class Result:
    """What a finished ``otpmem`` printed, and its exit status."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"otpmem {' '.join(self.args)} -> {self.returncode}\n"
            f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"
        )


def otpmem(
    *args: object,
    stdin: str | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = DEADLINE,
) -> Result:
    """Run ``otpmem args...`` to its end (killed, and the test failed, past ``timeout``)."""
    argv = [str(a) for a in args]
    proc = subprocess.Popen(
        [str(OTPMEM), *argv],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"otpmem {' '.join(argv)} did not finish within {timeout} s\n{err[-3000:]}")
    return Result(argv, proc.returncode, out, err)


def no_traceback(result: Result) -> None:
    """A user's situation never prints Python's traceback."""
    assert "Traceback" not in result.stderr, str(result)
    assert "Traceback" not in result.stdout, str(result)


def fails_with(result: Result, status: int, *fragments: str) -> str:
    """Assert a failure: the status, nothing on stdout, one clean message naming each
    fragment; returns the message."""
    no_traceback(result)
    assert result.returncode == status, str(result)
    assert result.stdout == "", str(result)
    command = "otpmem " + result.args[0] if result.args else "otpmem"
    assert result.stderr.startswith(command + ": "), str(result)
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in:\n{result}"
    return result.stderr


def fields(report: str) -> dict[str, str]:
    """The ``key: value`` lines of a simulate report."""
    result = {}
    for line in report.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith(" "):
            result[key.strip()] = value.strip()
    return result


def first_number(value: str) -> int:
    """The integer a report value starts with."""
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
    """``simulate --agents A --turns T --data DIR extra...``."""
    return ["simulate", "--agents", agents, "--turns", turns, "--data", data, *extra]


def make_store(path: Path) -> Path:
    """A LevelDB store holding CONVERSATIONS, closed again (the commands open it)."""
    store = LevelDBStore.start_link(path)
    try:
        for conv, messages in CONVERSATIONS.items():
            store.add(conv, messages)
    finally:
        store.stop()
    return path


def tree_state(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``path`` with its bytes and mtime (to prove nothing was written)."""
    return {
        os.fspath(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


class LockHolder:
    """A child interpreter holding a store's LevelDB lock until ``release()``."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self) -> None:
        """Let go of the lock and reap the child."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        try:
            assert self.proc.wait(timeout=DEADLINE) == 0
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


__all__ = [
    "CONVERSATIONS",
    "OTPMEM",
    "LockHolder",
    "Result",
    "fails_with",
    "fields",
    "first_number",
    "ledger_turns",
    "make_store",
    "no_traceback",
    "otpmem",
    "simulate_args",
    "tree_state",
]


def servers_under(where: Path) -> list[psutil.Process]:
    """PostgreSQL servers whose data directory is under ``where``."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["name"] == "postgres" and str(where) in cmdline:
            found.append(proc)
    return found


def two_node_run(data: Path, dsn: str, agents: int, turns: int) -> subprocess.Popen[str]:
    """``otpmem simulate`` on 2 nodes with 1 s leases, on the server at ``dsn``, running."""
    return subprocess.Popen(
        [
            str(OTPMEM),
            "simulate",
            *("--store", f"postgres={dsn}", "--nodes", "2", "--lease-seconds", "1"),
            *("--agents", str(agents), "--turns", str(turns), "--data", str(data)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def nodes_after_a_tenth(proc: subprocess.Popen[str]) -> list[psutil.Process]:
    """The run's node processes, once its progress says a tenth of it is done."""
    assert proc.stderr is not None
    for line in proc.stderr:  # a progress line per tenth of the run
        if line.startswith("simulating: ") and "(10%)" in line:
            break
    else:
        pytest.fail("the run ended before a tenth of it was done")
    children = psutil.Process(proc.pid).children()
    return [p for p in children if "otpmem.simulate._node" in p.cmdline()]
