"""docs/ecosystem.md: every section's Python blocks run in a fresh directory, in order, and
print what their comments say."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ecosystem.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PRINTED = re.compile(r"print\(.*\)\s+# (.+)$")


def sections() -> dict[str, str]:
    """``{"## heading": the section's Python blocks, joined}``."""
    found = {}
    for part in re.split(r"^(?=## )", DOC.read_text(encoding="utf-8"), flags=re.M):
        code = "\n".join(BLOCK.findall(part))
        if part.startswith("## ") and code:
            found[part.splitlines()[0]] = code
    return found


def expected_lines(code: str) -> list[str]:
    """What the comments say is printed: ``print(x)  # shown``, or a ``# shown`` line right
    after a print that spans lines."""
    expected, lines = [], code.splitlines()
    for i, line in enumerate(lines):
        match = PRINTED.search(line)
        if match:
            expected.append(match.group(1))
        elif line.startswith("# ") and i and lines[i - 1].startswith("print("):
            expected.append(line[2:])
    return expected


def test_every_section_with_code_is_tested() -> None:
    assert len(sections()) == 6  # the five adapters and the LangGraph checkpointer


@pytest.mark.parametrize("heading", sorted(sections()))
def test_the_section_runs_and_prints_what_it_says(heading: str, tmp_path: Path) -> None:
    code = sections()[heading]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    printed = [line.strip() for line in result.stdout.splitlines()]
    expected = expected_lines(code)
    assert expected, f"{heading} says nothing it prints"
    assert printed == expected, f"{heading}:\n{result.stdout}"
