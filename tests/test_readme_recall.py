"""The README's recall section runs as written, block after block, and says what it shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from otpmem.actors import Handle

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = "## Recall: ranked search, hybrid memory, bx-ai's memory API"


def section_blocks() -> list[str]:
    """Every python block of the recall section, in order."""
    text = README.read_text(encoding="utf-8")
    assert text.count(HEADING) == 1
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    return [part.split("```", 1)[0] for part in section.split("```python")[1:]]


def test_the_recall_section_runs_and_recalls() -> None:
    blocks = section_blocks()
    assert len(blocks) == 5
    namespace: dict[str, Any] = {}
    try:
        for block in blocks:
            exec(compile(block, "README recall section", "exec"), namespace)
        hits = namespace["hits"]
        assert hits[0].message["content"] == "I'm allergic to shellfish."
        assert hits[0].score == 1.0 and hits[0].position == 0
        found = namespace["found"]
        assert [h.message["content"] for h in found] == ["I'm allergic to shellfish."]
        assert type(found[0].score) is float  # BM25: the attached index answered
        # The agent's last model call had the old fact, recalled past its window of 2 (the
        # answer before the question and the question), as the comment says;
        turn = namespace["answer"]
        # "small talk 0" comes along: the passport turn before it is its context.
        assert turn.content == (
            "My passport expires in May. | small talk 0 | When does my passport expire?"
        )
        ranked = namespace["ranked"]
        assert {h.message["content"] for h in ranked} >= {
            "My passport expires in May.",
            "When does my passport expire?",
        }
        assert all("passport" in h.message["content"] for h in ranked)
        assert all(type(h.score) is float for h in ranked)
        assert namespace["recall"].alive is False  # the snapshot block stops what it starts
    finally:
        # The blocks leave the store, the index and the hybrid agent running, as a reader's
        # session would: stop them, newest first.
        for value in reversed(list(namespace.values())):
            if isinstance(value, Handle) and value.alive:
                value.stop()
