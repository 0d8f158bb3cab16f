"""The README's ``explain`` block, run on its own as a reader pastes it, prints the report
its comment shows: what was kept, dropped and summarized, and why (issue 33, point 10)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_readme import ENV, sections

MARK = "report = provider.explain("


def test_the_explain_block_alone_prints_the_report_its_comment_shows(tmp_path: Path) -> None:
    [code] = [
        code
        for lang, code in sections()["## Memory policy: providers, windows, summaries"]
        if lang == "python" and MARK in code
    ]
    shown = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    printed = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == shown
    assert "21 dropped" in shown[0] and "reused the summary" in shown[2]
