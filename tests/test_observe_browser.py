"""The observer's page in a real browser: Debian's chromium, driven by Playwright, watching a
running simulation while the test kills its store."""

from __future__ import annotations

import threading
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from otpmem.actors import faults
from otpmem.observe import TurnMeter, serve
from otpmem.simulate import Simulation, SimulationReport
from otpmem.stores import default_store

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
                    shot = tmp_path / "observer.png"
                    page.screenshot(path=str(shot), full_page=True)
                    assert shot.stat().st_size > 10_000
                finally:
                    browser.close()
        finally:
            simulation.stop()
            runner.join(60.0)
    assert reports and reports[0].lost == 0 and reports[0].restarts >= 1
