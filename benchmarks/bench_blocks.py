"""Memory-block benchmark: what one tool edit of a block costs beside a plain ``add``.

Each figure is printed next to a baseline measured in the same run (this shared box swings
up to 2x between periods, perf_anchors.md): compare the paired ratios, never one absolute.

``append_block`` (keyed, as an agent's tool sends it: the edit key checked, the block's
record read and written in one write) against ``add`` of one keyed user message to a
conversation, on a MemoryStore and a LevelDBStore (sync=True: every write fsynced), the two
interleaved in chunks per repeat, their ratio per repeat.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import ratio_summary, scratch

from otpmem.stores import LevelDBStore, MemoryStore


def _per_op(fn: Callable[[int], Any], n: int, start: int) -> float:
    began = time.perf_counter()
    for i in range(start, start + n):
        fn(i)
    return (time.perf_counter() - began) / n


def _measure(store: Any, chunk: int, repeats: int) -> tuple[list[float], list[float]]:
    store.set_block("team:bench", "notes", "", limit=100_000)
    edits, adds = [], []
    done = 0
    for _ in range(repeats):
        store.set_block("team:bench", "notes", "")  # the block stays small: its edit, not its size

        def edit(i: int) -> None:
            store.append_block("team:bench", "notes", f"note {i}", key=f"turn:{i}:c1")

        def add(i: int) -> None:
            store.add("bench", [{"role": "user", "content": f"note {i}"}], f"turn:{i}:0")

        edits.append(_per_op(edit, chunk, done))
        adds.append(_per_op(add, chunk, done))
        done += chunk
    return edits, adds


def main(quick: bool) -> list[str]:
    """One line per store: append_block latency against add's, paired per repeat."""
    chunk, repeats = (50, 3) if quick else (200, 7)
    lines = []
    with scratch("bench-blocks-") as root:
        for name, start in (
            ("MemoryStore", lambda: MemoryStore.start_link()),
            ("LevelDBStore", lambda: LevelDBStore.start_link(str(root / "db"))),
        ):
            store = start()
            try:
                edits, adds = _measure(store, chunk, repeats)
            finally:
                store.stop()
            ratios = [e / a for e, a in zip(edits, adds, strict=True)]
            lines.append(
                f"blocks {name}: append_block {statistics.median(edits) * 1e6:.1f} us vs add "
                f"{statistics.median(adds) * 1e6:.1f} us: {ratio_summary(ratios)}"
            )
    return lines


if __name__ == "__main__":
    print("\n".join(main(quick=True)))
