"""``otpmem simulate --budget-tokens N``: a TokenBudget per conversation stops agents, the
report counts them, and the audit still finds every acknowledged message once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otpmem.cli import main
from otpmem.messages import Conv
from otpmem.simulate import USER_ID, Simulation
from otpmem.stores import LevelDBStore


def test_a_budget_stops_every_agent_and_the_audit_stays_exact(tmp_path: Path) -> None:
    budget = 300
    report = Simulation(agents=4, turns=12, data_dir=tmp_path / "run", budget_tokens=budget).run()
    assert report.ok, report.lines()
    assert report.stopped_by_budget == 4
    assert report.turns_done + report.turns_over_budget == 48 and report.turns_over_budget > 0
    assert report.duplicated == 0 and report.lost == 0
    store = LevelDBStore.start_link(tmp_path / "run")
    try:
        for i in range(4):
            stored = store.get(Conv(USER_ID, f"sim-{i}"))
            totals = [m["metadata"]["usage"]["total_tokens"] for m in stored
                      if m["role"] == "assistant"]  # fmt: skip
            # Checked before every call: all but the last answer fit; the last crossed it.
            assert sum(totals[:-1]) <= budget < sum(totals)
            assert store.usage(Conv(USER_ID, f"sim-{i}")).total_tokens == sum(totals)
    finally:
        store.stop()


def test_without_a_budget_no_agent_is_stopped(tmp_path: Path) -> None:
    report = Simulation(agents=2, turns=3, data_dir=tmp_path / "run").run()
    assert report.ok and report.stopped_by_budget == 0 and report.turns_done == 6


def test_the_cli_flag_shows_budget_stops_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--agents", "3", "--turns", "8", "--data", str(tmp_path / "run"),
            "--budget-tokens", "250", "--no-progress"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "budget stops:      3 agents stopped by --budget-tokens" in out
    assert "OK: every acknowledged message is in the store, once" in out
    assert main([*args[:6], str(tmp_path / "two"), "--budget-tokens", "250", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["stopped_by_budget"] == 3 and report["ok"]
