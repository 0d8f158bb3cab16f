"""``otpmem simulate --report run.html``: one self-contained HTML file (plotly.js inline, no
network needed to open it) with the run over time (turns/s, faults injected, restarts,
p50/p99 turn latency) and the final audit table.

The file also carries its data as JSON (``<script type="application/json"
id="otpmem-data">``: the report and the buckets the plots are drawn from, and
``id="otpmem-figure"``: the plotly figure itself), for tools and tests to read back.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import CommandError
from .output import write_text

if TYPE_CHECKING:
    from ..simulate import Bucket, SimulationReport

PLOTLY_MISSING = (
    "--report needs plotly, which this installation lacks: pip install 'otpmem[report]'"
)


def check_available() -> None:
    """Fail before the run, not after it, when plotly is not installed."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise CommandError(PLOTLY_MISSING) from None


def _json_for_script(data: Any) -> str:
    # Inside <script>, "</" could end the element early (a lost example may hold one).
    return json.dumps(data).replace("</", "<\\/")


def figure(buckets: list[Bucket]) -> Any:
    """The four plots, one above the other, over seconds since the run started."""
    from plotly import graph_objects as go
    from plotly.subplots import make_subplots

    x = [round(b.start + b.width / 2, 3) for b in buckets]
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(
            "turns per second",
            "faults injected",
            "restarts (by the supervisors)",
            "turn latency, ms (first attempt to acknowledgement)",
        ),
    )
    fig.add_trace(
        go.Scatter(x=x, y=[b.turns_per_s for b in buckets], name="turns/s", mode="lines"),
        row=1,
        col=1,
    )
    kinds = sorted({kind for b in buckets for kind in b.faults})
    for kind in kinds:
        counts = [b.faults.get(kind, 0) for b in buckets]
        fig.add_trace(go.Bar(x=x, y=counts, name=kind), row=2, col=1)
    fig.add_trace(go.Bar(x=x, y=[b.restarts for b in buckets], name="restarts"), row=3, col=1)
    for label, values in (
        ("p50", [b.p50_ms for b in buckets]),
        ("p99", [b.p99_ms for b in buckets]),
    ):
        fig.add_trace(
            go.Scatter(x=x, y=values, name=f"{label} latency", mode="lines+markers"),
            row=4,
            col=1,
        )
    fig.update_layout(barmode="stack", height=1000, margin={"t": 60, "b": 40})
    fig.update_xaxes(title_text="seconds since the run started", row=4, col=1)
    return fig


def audit_rows(report: SimulationReport) -> list[tuple[str, str]]:
    """The audit table: each figure of the text report, with what it counts."""
    result = []
    for text in report.lines():
        key, _, value = text.partition(":")
        result.append((key.strip(), value.strip()))
    result += [("verdict", text) for text in report.verdict()]
    return result


def render(report: SimulationReport, buckets: list[Bucket]) -> str:
    """The whole HTML page."""
    from plotly.offline import get_plotlyjs

    fig = figure(buckets)
    data = {
        "report": report.as_dict(),
        "bucket_width_s": buckets[0].width if buckets else None,
        "buckets": [
            {
                "start_s": b.start,
                "turns": b.turns,
                "turns_per_s": b.turns_per_s,
                "faults": b.faults,
                "restarts": b.restarts,
                "p50_ms": b.p50_ms,
                "p99_ms": b.p99_ms,
            }
            for b in buckets
        ],
    }
    table = "\n".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in audit_rows(report)
    )
    verdict = html.escape(report.verdict()[0])
    figure_json = fig.to_json().replace("</", "<\\/")  # as _json_for_script does
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>otpmem simulate: {verdict}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; }}
table {{ border-collapse: collapse; }}
th, td {{ text-align: left; padding: 0.25em 1em 0.25em 0; vertical-align: top; }}
th {{ white-space: nowrap; }}
.verdict {{ font-weight: bold; }}
</style>
<script>{get_plotlyjs()}</script>
</head>
<body>
<h1>otpmem simulate</h1>
<p class="verdict">{verdict}</p>
<div id="plots"></div>
<h2>The audit</h2>
<table id="audit">
{table}
</table>
<script type="application/json" id="otpmem-data">{_json_for_script(data)}</script>
<script type="application/json" id="otpmem-figure">{figure_json}</script>
<script>
var figure = JSON.parse(document.getElementById("otpmem-figure").textContent);
Plotly.newPlot("plots", figure.data, figure.layout, {{responsive: true}});
</script>
</body>
</html>
"""


def write_report(path: Path, report: SimulationReport, buckets: list[Bucket]) -> None:
    """Write the page to ``path``."""
    write_text(path, render(report, buckets))


__all__ = ["PLOTLY_MISSING", "audit_rows", "check_available", "figure", "render", "write_report"]
