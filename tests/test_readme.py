"""The README's five-minute tour runs as written, and says what it prints."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def tour_source() -> str:
    """The first python block under the tour heading."""
    section = README.read_text(encoding="utf-8").split("## A five-minute tour", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_tour_runs_and_every_message_survives_the_store_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    printed: list[Any] = []
    source = tour_source()
    # Each commented expression line is checked: its value is recorded.
    lines = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith(("agent.run(", "otpmem.default_store().get(")):
            indent = line[: len(line) - len(line.lstrip())]
            line = f"{indent}printed.append({stripped.split('  #')[0].strip()})"
        lines.append(line)
    exec(compile("\n".join(lines), "README tour", "exec"), {"printed": printed})
    assert printed[0] == "saw 1 message(s)"
    assert printed[1] == "saw 3 message(s)"
    assert [m["content"] for m in printed[2]] == ["At eight, please", "saw 3 message(s)"]
    assert (tmp_path / "data").is_dir() and os.listdir(tmp_path / "data")
