"""The observer's page in a real browser: Debian's chromium, driven by Playwright, watching a
running simulation while the test kills its store, and attached to one in another process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from otpmem.actors import faults
from otpmem.observe import TurnMeter, serve
from otpmem.simulate import Simulation, SimulationReport
from otpmem.stores import default_store
from tests.support import LineReader

CHROMIUM = "/usr/bin/chromium"  # Debian's package; .ci/run installs it when missing
# The flags that work on these machines: no sandbox as root, and no background traffic to
# a network that is closed.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000
ROOT = Path(__file__).resolve().parent.parent


def test_the_page_shows_the_tree_and_a_restart_after_a_fault(tmp_path: Path) -> None:
    meter = TurnMeter()
    simulation = Simulation(
        agents=3,
        turns=100_000,
        data_dir=tmp_path / "run",
        workers=3,
        callbacks=meter.callbacks(),
    )
    reports: list[SimulationReport] = []
    runner = threading.Thread(target=lambda: reports.append(simulation.run()), name="sim")
    with serve(port=0, meter=meter) as page_server:
        runner.start()
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                try:
                    page = browser.new_page(viewport={"width": 1280, "height": 900})
                    refused: list[str] = []
                    page.on(
                        "console", lambda m: refused.append(m.text) if m.type == "error" else None
                    )
                    page.goto(page_server.url)
                    tree = page.locator("#tree")
                    for label in (
                        "otpmem",
                        "default_store",
                        "otpmem.agents",
                        "otpmem.default_store",
                    ):
                        expect(tree.locator(f'li.node[data-label="{label}"]')).to_have_count(
                            1, timeout=WAIT_MS
                        )
                    agents = tree.locator('li.node[data-label="otpmem.agents"] li.node')
                    expect(agents).to_have_count(3, timeout=WAIT_MS)
                    store = tree.locator('li.node[data-label="otpmem.default_store"]')
                    expect(store).to_have_attribute("data-restarts", "0")
                    expect(page.locator("#agents td").nth(1)).not_to_have_text("0", timeout=WAIT_MS)

                    faults.kill(default_store())  # the store's supervisor restarts it

                    expect(store).to_have_attribute("data-restarts", "1", timeout=WAIT_MS)
                    expect(store.locator(".restarts")).to_have_text("restarts 1")
                    expect(page.locator("#restarts-total")).to_have_text("1")
                    expect(page.locator("#events")).to_contain_text("restarted", timeout=WAIT_MS)

                    # A process's own state and trace (sys.get_state, sys.trace) on the page.
                    row = page.locator("#procs tr", has_text="otpmem.default_store")
                    row.locator("button.pid").click()
                    view = page.locator("#process-view")
                    expect(view).to_be_visible(timeout=WAIT_MS)
                    expect(page.locator("#process-state")).to_contain_text('"', timeout=WAIT_MS)
                    page.locator("#trace-toggle").click()
                    expect(view).to_have_attribute("data-traced", "true", timeout=WAIT_MS)
                    expect(page.locator("#process-trace")).to_contain_text("call", timeout=WAIT_MS)
                    expect(page.locator("#process-trace")).to_contain_text("reply")
                    page.locator("#trace-toggle").click()
                    expect(view).to_have_attribute("data-traced", "false", timeout=WAIT_MS)
                    shot = tmp_path / "observer.png"
                    page.screenshot(path=str(shot), full_page=True)
                    assert shot.stat().st_size > 10_000
                    # CSP let the page's own script and style in (and refused nothing else).
                    assert not [m for m in refused if "Content Security Policy" in m], refused
                    # Nor asked for anything the server has not (the favicon was a 404).
                    assert not [m for m in refused if "404" in m], refused
                finally:
                    browser.close()
        finally:
            simulation.stop()
            runner.join(60.0)
    assert reports and reports[0].lost == 0 and reports[0].restarts >= 1


def test_an_attached_page_shows_a_simulate_node_running_in_another_process(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = tmp_path / "run"
    node = subprocess.Popen(
        [sys.executable, "-m", "otpmem.cli", "simulate", "--agents", "2", "--turns", "100000",
         "--data", str(run), "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
    )  # fmt: skip
    observer: subprocess.Popen[str] | None = None
    reader: LineReader | None = None
    try:
        ready = threading.Event()
        while not run.is_dir() and node.poll() is None:
            ready.wait(0.05)
        observer = subprocess.Popen(
            [sys.executable, "-m", "otpmem.cli", "observe", "--attach", str(run), "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        )  # fmt: skip
        reader = LineReader(observer)
        line = reader.read_until(lambda s: "http://" in s, 30.0, "the attached page's url")
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)  # type: ignore[union-attr]
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url)
                expect(page.locator("#attached")).to_contain_text(str(run), timeout=WAIT_MS)
                tree = page.locator("#tree")
                agents = tree.locator('li.node[data-label="otpmem.agents"] li.node')
                expect(agents).to_have_count(2, timeout=WAIT_MS)
                nodes = page.locator("#nodes tr[data-state]")
                expect(nodes).to_have_attribute("data-state", "live", timeout=WAIT_MS)
                expect(nodes).to_contain_text(str(node.pid))
                expect(page.locator("#agents td").nth(1)).not_to_have_text("0", timeout=WAIT_MS)
                expect(page.locator("#trace-toggle")).to_be_hidden()  # read-only when attached
                node.send_signal(signal.SIGINT)  # the node ends its run: the page says so
                expect(nodes).to_have_attribute("data-state", "stopped", timeout=WAIT_MS)
            finally:
                browser.close()
        assert node.wait(60.0) == 130
    finally:
        for proc in (node, observer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30.0)
        if reader is not None:
            reader.close(30.0)
