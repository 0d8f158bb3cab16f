"""The observer as a newcomer reads it (issue 33, point 11): an agent under the dynamic
supervisor shows its own restarts, the unnamed store supervisor is shown by its child id,
the page's icon is there, and ``--live`` into a log writes whole frames."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

import otpmem
from otpmem.actors import faults
from otpmem.llm import ScriptedModel
from otpmem.observe import Observer, serve
from tests.support import LineReader
from tests.test_observe import ROOT, find


def test_an_agent_under_the_dynamic_supervisor_shows_its_own_restarts() -> None:
    with otpmem.running() as root, Observer() as observer:
        kept = otpmem.start_agent(llm=ScriptedModel(["hi"] * 9), conversation_id="a", name="kept")
        killed = otpmem.start_agent(llm=ScriptedModel(["hi"] * 9), conversation_id="b", name="kk")
        observer.sample()  # subscribes to every supervisor
        for _ in range(3):
            faults.kill(killed)
            root.sync_tree()
        assert killed.run("still there?").content == "hi"
        tree = observer.sample()["tree"]
        assert find(tree, "otpmem.agents")["restarts"] == 3
        assert find(tree, "kk")["restarts"] == 3
        assert find(tree, "kept")["restarts"] == 0
        kept.stop()


def test_the_unnamed_store_supervisor_is_shown_by_its_child_id() -> None:
    with otpmem.running() as root, Observer() as observer:
        observer.sample()
        faults.kill(otpmem.default_store())
        root.sync_tree()
        snapshot = observer.sample()
    store_sup = find(snapshot["tree"], "default_store")
    assert [e["supervisor"] for e in snapshot["events"][:2]] == ["default_store"] * 2
    [row] = [p for p in snapshot["processes"] if p["pid"] == store_sup["pid"]]
    assert row["name"] == "default_store"


def test_the_page_has_an_icon_so_the_browser_logs_no_404() -> None:
    with otpmem.running(), serve(port=0) as page:
        home = httpx.get(page.url)
        icon = httpx.get(page.url + "favicon.ico")
    assert '<link rel="icon" href="/favicon.ico"' in home.text
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml" and icon.content.startswith(b"<svg")


def test_live_into_a_log_writes_whole_frames_not_one_cut_to_80_columns(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "otpmem.cli", "simulate", "--live", "--agents", "2", "--turns",
         "100000", "--data", str(tmp_path / "run"), "--json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**env, "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
    )  # fmt: skip
    reader = LineReader(_Stderr(proc))
    try:
        # A frame every 5 s while it runs: the second one shows the running tree.
        reader.read_until(lambda s: "-- otpmem observer, up " in s, 30.0, "a first frame")
        reader.read_until(lambda s: "-- otpmem observer, up " in s, 30.0, "a second frame")
        line = reader.read_until(lambda s: "simple_one_for_one" in s, 30.0, "the agents' line")
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the run ends after its turns in flight
        assert proc.wait(60.0) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.thread.join(5.0)
    assert line.rstrip().endswith("restarts 0"), line  # whole, not cut at 80 columns
    assert len(line) > 80


class _Stderr:
    """A process seen by its stderr, for ``LineReader`` (which reads ``stdout``)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.stdout = proc.stderr
