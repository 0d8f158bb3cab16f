"""Every example runs, in a subprocess with a timeout, and shows what it claims to show."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from otpmem.stores.testing import ChatMemoryConformance
from tests.support import LineReader

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT = 60.0
OUTPUT_WAIT = 30.0  # for each awaited line of a running example
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
# The examples import otpmem from this checkout, installed or not.
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
}


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python *args``; stdout and stderr together in ``.stdout``."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("supervision_demo.py", [r"supervisor alive: False, exit reason: 'shutdown'"]),
        (
            "store_recovery_demo.py",
            [r"user0: \d+ acknowledged adds, 0 lost", r"every acknowledged batch present: True"],
        ),
        (
            "memory_policy_demo.py",
            [r"safe_window: .* 0 orphaned", r"summaries stored in the conversation: [1-9]"],
        ),
        (
            "agents_demo.py",
            [
                r"agent 3: 10 turns acknowledged, 10 answers stored",
                r"each acknowledged turn stored once: True",
                r"next answer: The sum is 42\.",
            ],
        ),
        ("fastapi_app.py", [r"OK: the retried turn was stored once"]),
        (
            "multi_agent_simulation.py",
            [
                r"messages acknowledged: (\d+), stored: \1 ",
                r"lost: 0, orphaned tool results: 0",
                r"OK: every acknowledged message was read back, once",
            ],
        ),
        (
            "team_blocks_demo.py",
            [r"OK: every acknowledged edit is in the block exactly once"],
        ),
        (
            "shared_postgres.py",
            [r"2 programs, 2 conversations, 120 turns: 0 split, 0 lost, 0 twice"],
        ),
    ],
)
def test_demo_runs_and_prints_its_result(script: str, expected: list[str], tmp_path: Path) -> None:
    # cwd is a scratch directory: a demo that writes next to itself writes there.
    result = run([str(EXAMPLES / script)], cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    for pattern in expected:
        assert re.search(pattern, result.stdout), f"{pattern!r} not in:\n{result.stdout}"


def test_the_recall_demo_recalls_ranks_and_keeps_tenants_apart(tmp_path: Path) -> None:
    result = run([str(EXAMPLES / "recall_demo.py")], cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    out = result.stdout
    assert "#0: I'm allergic to shellfish." in out
    assert "bob's query sees only bob: ['I am allergic to cats.']" in out
    # store.search answered by the index: a BM25 score, and "allergies" finds "allergic".
    assert re.search(r"BM25 \d+\.\d\d  #0: I'm allergic to shellfish\.", out), out
    assert "substring 'talk 2': ['small talk 29', 'small talk 28', 'small talk 27']" in out
    assert "after the restart: #31: My passport expires in May." in out
    # The agent's context: the old fact recalled before the newest question.
    assert "user: I'm allergic to shellfish.\n" in out.split("hybrid memory")[1]
    assert "system messages: ['You are very terse.']" in out
    assert "relevant: I parked on level 3." in out


def test_fault_injection_suite_passes_whole() -> None:
    suite = EXAMPLES / "fault_injection"
    result = subprocess.run(
        [*PYTEST, "-q", "examples/fault_injection"],
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = result.stdout.strip().splitlines()[-1]
    tree = ast.parse((suite / "test_resilience.py").read_text(encoding="utf-8"))
    own = sum(
        1 for node in tree.body if isinstance(node, ast.FunctionDef) and node.name[:5] == "test_"
    )
    contract = sum(1 for name in dir(ChatMemoryConformance) if name[:5] == "test_")
    assert own >= 5 and contract >= 10
    assert re.fullmatch(rf"{own + contract} passed in [\d.]+s( \([\d:]+\))?", summary), summary


def test_the_project_run_does_not_collect_the_example_suite() -> None:
    result = subprocess.run(
        [*PYTEST, "--collect-only", "-q"],
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tests/test_examples.py::" in result.stdout
    collected = [line for line in result.stdout.splitlines() if "::" in line]
    assert collected and all(line.startswith("tests/") for line in collected)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_embedded_service_serves_then_stops_cleanly_on_a_signal(
    signum: signal.Signals, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "embedded_service.py"), str(data)],
        cwd=tmp_path,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = LineReader(proc, name="example-output")
    try:
        output.expect("ready", OUTPUT_WAIT)
        assert proc.stdin is not None
        proc.stdin.write("alice: 2+3\n")
        proc.stdin.flush()
        assert output.expect("alice <-", OUTPUT_WAIT) == "alice <- The sum is 5."
        proc.send_signal(signum)
        assert proc.wait(TIMEOUT) == 0, output.lines
        assert output.expect("stopped cleanly", OUTPUT_WAIT) == "stopped cleanly after 1 request(s)"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output.thread.join(TIMEOUT)
        if proc.stdin is not None:
            proc.stdin.close()
    # Stopped cleanly means the store was closed: the directory opens at once, turn intact.
    store = LevelDBStore.start_link(data, lock_timeout=0.5)
    try:
        assert [m["role"] for m in store.get(Conv("alice", "main"))] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
    finally:
        store.stop()


def test_restart_recovery_finds_every_acknowledged_message_after_sigkill(tmp_path: Path) -> None:
    script = str(EXAMPLES / "restart_recovery.py")
    data = tmp_path / "run"
    first = run([script, str(data)], cwd=tmp_path)
    assert first.returncode == -signal.SIGKILL, first.stdout
    assert "SIGKILL to myself" in first.stdout
    second = run([script, str(data)], cwd=tmp_path)
    assert second.returncode == 0, second.stdout
    found = re.search(r"recovered: (\d+) acknowledged messages, 0 lost", second.stdout)
    assert found is not None, second.stdout
    assert int(found.group(1)) >= 60  # 30 acknowledged turns of two to four messages
    # What the store holds beyond them is what the turns the kill cut short stored.
    cut = re.search(r"and (\d+) stored by turns the kill cut short", second.stdout)
    assert cut is not None, second.stdout
    stored = sum(int(n) for n in re.findall(r": (\d+) messages stored", second.stdout))
    assert stored == int(found.group(1)) + int(cut.group(1))


def test_make_examples_runs_every_example() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nEXAMPLES :=", 1)[1].split("\nbench:", 1)[0]
    for script in sorted(EXAMPLES.glob("*.py")):
        assert re.search(rf"\b{script.stem}\b", recipe), f"make examples skips {script.name}"
    assert "pytest" in recipe and "examples/fault_injection" in recipe
