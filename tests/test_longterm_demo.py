"""examples/long_term_memory_demo.py runs offline and shows what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_long_term_memory_demo_extracts_injects_prices_and_stops_on_budget(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "long_term_memory_demo.py")],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60.0,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "facts: {'location': 'Lyon', 'name': 'Ann'}" in out
    assert "answer: You live in Lyon." in out  # the model read the injected facts
    assert "context sent: ['Be brief.', 'User context:']" in out
    assert "stored system messages: []" in out  # injected, never stored
    assert "location: Paris (version 2), before: ['Lyon']" in out
    assert "answer: You live in Paris." in out
    assert "context now starts: User profile: Ann lives in Paris." in out
    assert "usage: 225 tokens, cost 0.0007575" in out
    assert "token budget exceeded: 333 / 300 tokens (scope: user)" in out
    assert "agent alive: True" in out
    assert "after a restart: token budget exceeded: 333 / 300 tokens" in out
    assert "facts after a restart: {'location': 'Paris', 'name': 'Ann'}" in out
    assert "Traceback" not in done.stderr
