"""A graph killed between two super-steps (SIGKILL of the process that runs it, over a
LevelDBStore directory) and resumed by a new process: no step lost, none repeated.

The graph is ``a -> (b1 | b2) -> c``. The child runs it with ``durability="sync"`` (each
super-step's checkpoint stored before the next begins); ``b1`` finishes and its writes are
stored while ``b2`` is still running, so the kill lands in the middle of the second
super-step: ``a``'s checkpoint and ``b1``'s pending writes are on disk, ``b2``'s are not.
A new process reopens the directory and resumes the thread: ``b2`` and ``c`` run, ``a``
and ``b1`` do not run again. The child says where it is on stdout; the test waits on that
line (with a timeout), never on a sleep.

Run as ``python -m tests.test_langgraph_checkpoint_killed DIR JOURNAL run|resume``.
"""

from __future__ import annotations

import json
import operator
import os
import selectors
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
WAIT = 60.0
READY = "b2 is running; b1's writes are stored"


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def child(directory: str, journal: str, mode: str) -> None:
    """Run (mode ``run``: until killed in b2) or resume (``resume``) the thread."""
    from langgraph.graph import END, START, StateGraph

    from otpmem.integrations.langgraph import OtpmemSaver
    from otpmem.stores import LevelDBStore

    b1_stored = threading.Event()

    class Saver(OtpmemSaver):
        def put_writes(
            self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
        ) -> None:
            super().put_writes(config, writes, task_id, task_path)
            if ("steps", ["b1"]) in [tuple(w) for w in writes]:
                b1_stored.set()

    def log(line: str) -> None:
        with open(journal, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def node(name: str) -> Any:
        def step(state: Steps) -> dict[str, list[str]]:
            log(f"start {name}")
            if name == "b2" and mode == "run":
                assert b1_stored.wait(WAIT), "b1's writes were never stored"
                print(READY, flush=True)
                sys.stdin.readline()  # the test kills us here; it never writes
            log(f"done {name}")
            return {"steps": [name]}

        return step

    builder = StateGraph(Steps)
    for name in ("a", "b1", "b2", "c"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "a")
    builder.add_edge("a", "b1")
    builder.add_edge("a", "b2")
    builder.add_edge(["b1", "b2"], "c")
    builder.add_edge("c", END)
    store = LevelDBStore.start_link(directory)
    graph = builder.compile(checkpointer=Saver(store))
    config: Any = {"configurable": {"thread_id": "killed"}}
    result = graph.invoke({"steps": []} if mode == "run" else None, config, durability="sync")
    history = [s.metadata["step"] for s in graph.get_state_history(config) if s.metadata]
    print(json.dumps({"result": result, "history": history}), flush=True)
    store.stop()


def spawn(directory: Path, journal: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.test_langgraph_checkpoint_killed",
            str(directory),
            str(journal),
            mode,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The child's next stdout line, or fail after ``timeout`` s (it died or hung)."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError(f"the child said nothing in {timeout} s")
    return proc.stdout.readline().strip()


def test_a_graph_killed_mid_step_resumes_in_a_new_process_with_no_step_lost_or_repeated(
    tmp_path: Path,
) -> None:
    directory, journal = tmp_path / "db", tmp_path / "journal"
    first = spawn(directory, journal, "run")
    try:
        line = read_line(first, WAIT)
        assert line == READY, (line, first.stderr.read() if first.poll() is not None else "")
        first.send_signal(signal.SIGKILL)
        assert first.wait(WAIT) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(WAIT)
        first.communicate()
    assert journal.read_text().split("\n")[:2] == ["start a", "done a"]
    ran_before = Counter(journal.read_text().split())
    assert ran_before["c"] == 0 and "done b2" not in journal.read_text()

    second = spawn(directory, journal, "resume")
    try:
        out, err = second.communicate(timeout=WAIT)
    finally:
        if second.poll() is None:
            second.kill()
            second.communicate()
    assert second.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    steps = report["result"]["steps"]
    assert sorted(steps) == ["a", "b1", "b2", "c"]  # every step once: none lost or repeated
    assert steps[0] == "a" and steps[-1] == "c"
    # The history is one chain: input, a's step, the resumed b step, c's step.
    assert report["history"] == [3, 2, 1, 0, -1]
    lines = journal.read_text().splitlines()
    assert lines.count("done a") == 1 and lines.count("done b1") == 1  # not run again
    assert lines.count("start b2") == 2 and lines.count("done b2") == 1  # killed, then rerun
    assert lines.count("done c") == 1
    assert lines[-2:] == ["start c", "done c"]


if __name__ == "__main__":
    child(*sys.argv[1:4])
