"""examples/recall_demo.py runs offline and shows what it promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_recall_demo_runs_and_recalls() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "recall_demo.py")],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60.0,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "#0: I'm allergic to shellfish." in out
    assert "bob's query sees only bob: ['I am allergic to cats.']" in out
    assert "after the restart: #31: My passport expires in May." in out
    # The agent's context: the old fact recalled before the newest question.
    assert "user: I'm allergic to shellfish.\n" in out.split("hybrid memory")[1]
    assert "system messages: ['You are very terse.']" in out
    assert "relevant: I parked on level 3." in out
