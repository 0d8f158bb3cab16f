"""``otpmem simulate --report run.html``: one self-contained HTML file, plots over time and
the audit table; read back here for the data it carries."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli_support import fails_with, otpmem, simulate_args


def island(page: str, element_id: str) -> Any:
    """The JSON inside ``<script type="application/json" id=element_id>``."""
    found = re.search(
        rf'<script type="application/json" id="{element_id}">(.*?)</script>', page, re.S
    )
    assert found is not None, f"no {element_id} in the page"
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """A 4 x 30 run under chaos with --report: (its JSON report, the HTML page)."""
    base = tmp_path_factory.mktemp("report")
    page = base / "run.html"
    args = simulate_args(base / "run", 4, 30, "--chaos", 0.2, "--seed", 3, "--json")
    result = otpmem(*args, "--report", page)
    assert result.returncode == 0, str(result)
    assert f"report written to {page}" in result.stderr
    return json.loads(result.stdout), page.read_text(encoding="utf-8")


def test_the_page_opens_without_a_network(run: tuple[dict[str, Any], str]) -> None:
    _, page = run
    assert page.startswith("<!DOCTYPE html>")
    assert "plotly.js v" in page and len(page) > 1_000_000  # the library itself, inline
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=", page)
    assert 'Plotly.newPlot("plots"' in page


def test_the_page_carries_the_report_and_its_buckets(run: tuple[dict[str, Any], str]) -> None:
    report, page = run
    data = island(page, "otpmem-data")

    assert data["report"] == report
    buckets = data["buckets"]
    width = data["bucket_width_s"]
    assert width > 0 and len(buckets) >= 1
    assert [b["start_s"] for b in buckets] == pytest.approx(
        [i * width for i in range(len(buckets))]
    )
    assert sum(b["turns"] for b in buckets) == report["turns_this_run"] == 120
    assert sum(b["restarts"] for b in buckets) == report["restarts"] > 0
    faults: dict[str, int] = {}
    for bucket in buckets:
        for kind, count in bucket["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
    assert faults == report["faults"] and sum(faults.values()) > 0
    for bucket in buckets:
        assert bucket["turns_per_s"] == pytest.approx(bucket["turns"] / width)
        if bucket["turns"]:
            assert 0 < bucket["p50_ms"] <= bucket["p99_ms"]
        else:
            assert bucket["p50_ms"] is None and bucket["p99_ms"] is None


def test_the_plots_draw_the_same_numbers(run: tuple[dict[str, Any], str]) -> None:
    report, page = run
    buckets = island(page, "otpmem-data")["buckets"]
    traces = {trace["name"]: trace for trace in island(page, "otpmem-figure")["data"]}

    assert set(traces) == {"turns/s", "restarts", "p50 latency", "p99 latency", *report["faults"]}
    assert traces["turns/s"]["y"] == pytest.approx([b["turns_per_s"] for b in buckets])
    assert sum(traces["restarts"]["y"]) == report["restarts"]
    for kind, count in report["faults"].items():
        assert sum(traces[kind]["y"]) == count
    assert traces["p99 latency"]["y"] == [b["p99_ms"] for b in buckets]


def test_the_page_ends_with_the_audit_table(run: tuple[dict[str, Any], str]) -> None:
    report, page = run
    table = re.search(r'<table id="audit">(.*?)</table>', page, re.S)
    assert table is not None
    rows = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", table.group(1)))
    assert rows["turns done"] == "120 of 120"
    assert rows["messages acked"].startswith(f"{report['messages_acknowledged']} (")
    assert rows["messages stored"].startswith(f"{report['messages_stored']} (")
    assert rows["messages lost"].startswith("0 (")
    assert rows["verdict"] == "OK: every acknowledged message is in the store, once"


def test_report_without_plotly_is_refused_before_the_run(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "plotly"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n", "utf-8")
    data = tmp_path / "run"

    result = otpmem(
        *simulate_args(data, 2, 2),
        "--report",
        tmp_path / "r.html",
        env={"PYTHONPATH": str(shadow.parent)},
    )

    fails_with(result, 2, "--report needs plotly", "pip install 'otpmem[report]'")
    assert not data.exists() and not (tmp_path / "r.html").exists()


def test_report_into_a_missing_directory_is_refused_before_the_run(tmp_path: Path) -> None:
    result = otpmem(*simulate_args(tmp_path / "run", 2, 2), "--report", tmp_path / "no" / "r.html")

    fails_with(result, 2, f"{tmp_path / 'no'} is not a directory")
    assert not (tmp_path / "run").exists()
