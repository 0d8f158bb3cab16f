"""otpmem.observe: the snapshot of a live node, its page and JSON, its metrics, its terminal
view, and ``otpmem simulate --observe / --live``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

import otpmem
from otpmem.actors import GenServer, blocking, faults, runtime
from otpmem.llm import ScriptedModel
from otpmem.messages import Conv
from otpmem.observe import Observer, TurnMeter, serve
from otpmem.observe.terminal import render
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import LineReader

ROOT = Path(__file__).resolve().parent.parent


def find(nodes: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """The tree node labelled ``label``, anywhere below ``nodes``."""
    for node in nodes:
        if node["label"] == label:
            return node
        try:
            return find(node.get("children", []), label)
        except KeyError:
            continue
    raise KeyError(label)


def test_the_tree_shows_strategies_intensity_used_and_restarts_after_a_kill() -> None:
    with otpmem.running() as root, Observer() as observer:
        before = observer.sample()
        app = find(before["tree"], "otpmem")
        assert (app["strategy"], app["intensity"], app["period"]) == ("one_for_one", 10, 10.0)
        assert find(before["tree"], "otpmem.agents")["strategy"] == "simple_one_for_one"
        store_sup = find(before["tree"], "default_store")
        assert (store_sup["strategy"], store_sup["restarts_in_period"]) == ("rest_for_one", 0)
        assert find(before["tree"], "otpmem.default_store")["restarts"] == 0
        faults.kill(otpmem.default_store())
        root.sync_tree()
        after = observer.sample()
        assert find(after["tree"], "default_store")["restarts_in_period"] == 1
        assert find(after["tree"], "default_store")["restarts"] == 1
        assert find(after["tree"], "otpmem.default_store")["restarts"] == 1
        assert after["restarts_total"] == 1
        kinds = [(e["kind"], e["child"], e["reason"]) for e in after["events"][:2]]
        assert kinds == [("restarted", "store", None), ("exited", "store", "'killed'")]


def test_supervisor_info_counts_only_the_restarts_inside_its_period() -> None:
    now = [100.0]
    sup = Supervisor.start_link(
        [ChildSpec("w", start=lambda: Busy.start_link(threading.Event(), name="w"))],
        intensity=3,
        period=5.0,
        clock=lambda: now[0],
    )
    try:
        faults.kill(Busy.named("w"))
        sup.sync()
        assert sup.info() == {
            "strategy": "one_for_one",
            "intensity": 3,
            "period": 5.0,
            "auto_shutdown": "never",
            "restarts_in_period": 1,
        }
        now[0] += 6.0  # the restart has left the window
        assert sup.info()["restarts_in_period"] == 0
    finally:
        sup.stop()


class Busy(GenServer):
    """Blocks in its handler until released, so that messages queue behind it."""

    def init(self, gate: threading.Event) -> None:
        self.gate = gate

    def handle_cast(self, message: Any) -> None:
        blocking(self.gate.wait, 10.0)


def test_processes_show_their_state_and_mailbox_without_being_called() -> None:
    gate = threading.Event()
    sup = Supervisor.start_link(
        [ChildSpec("busy", start=lambda: Busy.start_link(gate, name="busy"))]
    )
    try:
        for _ in range(4):
            Busy.named("busy").cast("work")
        with Observer(roots=[sup]) as observer:
            for _ in range(1000):  # until the handler is inside its wait: fresh reads each
                snapshot = observer.sample()
                busy = find(snapshot["tree"], "busy")
                if busy["state"] == "waiting":
                    break
        assert (busy["state"], busy["mailbox"]) == ("waiting", 3)
        assert snapshot["processes"][0]["name"] == "busy"  # the busiest mailbox first
        assert snapshot["node"]["mailbox_total"] >= 3
        assert snapshot["node"]["schedulers"] == runtime.scheduler_count() >= 1
    finally:
        gate.set()
        sup.stop()


def test_stores_report_conversations_messages_write_rate_and_fsyncs(tmp_path: Path) -> None:
    memory = MemoryStore.start_link(name="obs.memory")
    disk = LevelDBStore.start_link(tmp_path / "db", name="obs.disk")
    try:
        with Observer() as observer:
            observer.sample()
            for store in (memory, disk):
                store.add(Conv("ann", "a"), [{"role": "user", "content": "x"}] * 3)
                store.add(Conv("bob", "b"), [{"role": "user", "content": "y"}])
            rows = {row["name"]: row for row in observer.sample()["stores"]}
        for name in ("obs.memory", "obs.disk"):
            assert (rows[name]["conversations"], rows[name]["messages"]) == (2, 4)
            assert rows[name]["writes_per_s"] > 0
        assert rows["obs.disk"]["fsyncs"] >= 1 and rows["obs.disk"]["writes"] == 2
        assert rows["obs.disk"]["writes_per_fsync"] == 2 / rows["obs.disk"]["fsyncs"]
        assert "fsyncs" not in rows["obs.memory"]
    finally:
        memory.stop()
        disk.stop()


def test_the_turn_meter_counts_turns_and_latencies_from_agent_callbacks() -> None:
    meter = TurnMeter()
    with otpmem.running():
        model = ScriptedModel(lambda messages, tools: "ok")
        agent = otpmem.start_agent(llm=model, callbacks=meter.callbacks())
        for n in range(5):
            agent.run(f"turn {n}")
        with Observer(meter=meter) as observer:
            agents = observer.sample()["agents"]
    assert (agents["running"], agents["turns"], agents["errors"]) == (1, 5, 0)
    assert 0 < agents["p50_ms"] <= agents["p99_ms"]
    assert agents["turns_per_s"] == 1.0  # 5 turns in the 5-second window


def test_serve_answers_the_page_json_and_metrics_and_nothing_else() -> None:
    with otpmem.running(), serve(port=0) as page:
        assert page.url.startswith("http://127.0.0.1:")
        home = httpx.get(page.url)
        assert home.status_code == 200 and "otpmem observer" in home.text
        snapshot = httpx.get(page.url + "api/snapshot").json()
        assert find(snapshot["tree"], "otpmem")["kind"] == "supervisor"
        metrics = httpx.get(page.url + "metrics").text
        for name in (
            "otpmem_processes",
            "otpmem_supervisor_intensity",
            "otpmem_store_messages",
            "otpmem_agent_turn_seconds_bucket",
        ):
            assert re.search(rf"^{name}[{{ ]", metrics, re.M), name
        assert httpx.post(page.url + "api/snapshot").status_code == 405
        assert httpx.get(page.url + "nothing").status_code == 404
        port = page.port
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=2.0)


def test_prometheus_metrics_carry_restarts_by_supervisor_and_child() -> None:
    from prometheus_client import generate_latest

    from otpmem.observe.prometheus import registry_for

    with otpmem.running() as root, Observer() as observer:
        observer.sample()  # subscribes to every supervisor
        faults.kill(otpmem.default_store())
        root.sync_tree()
        observer.sample()
        text = generate_latest(registry_for(observer)).decode()
    assert re.search(
        r'^otpmem_supervisor_restarts_total\{child="store",supervisor="<[\d.]+>"\} 1', text, re.M
    )
    assert re.search(r'^otpmem_supervisor_events_total\{kind="exited",', text, re.M)


def test_the_terminal_view_draws_the_same_snapshot() -> None:
    with otpmem.running(), Observer() as observer:
        console = Console(record=True, width=140)
        console.print(render(observer.sample()))
    text = console.export_text()
    for expected in ("otpmem node:", "otpmem.agents", "one_for_one, intensity 0/10", "Stores"):
        assert expected in text


def test_simulate_observe_serves_the_running_simulation(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "otpmem.cli", "simulate", "--observe", "--agents", "2",
         "--turns", "100000", "--data", str(tmp_path / "run"), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    reader = LineReader(proc)
    try:
        line = reader.read_until(lambda s: "observer: http://" in s, 30.0, "the observer's url")
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)  # type: ignore[union-attr]
        snapshot: dict[str, Any] = {}
        for _ in range(100):  # each sample is a fresh read of the running node
            snapshot = httpx.get(url + "api/snapshot", timeout=5.0).json()
            if snapshot["agents"]["turns"] > 0 and snapshot["tree"]:
                break
        assert len(find(snapshot["tree"], "otpmem.agents")["children"]) == 2
        assert snapshot["stores"][0]["fsyncs"] >= 1
        proc.send_signal(signal.SIGINT)  # the first Ctrl-C ends the run after its turns
        assert proc.wait(60.0) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.thread.join(5.0)


def test_simulate_live_draws_the_view_on_stderr(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "otpmem.cli", "simulate", "--live", "--agents", "2", "--turns",
         "200", "--data", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert "otpmem node:" in result.stderr and "Agents" in result.stderr
