"""Per-turn context assembly at 1k, 100k and 1M messages: flat in the conversation's length.

What a turn pays to build the context it sends, ``provider.prepare(conv,
provider.history(conv))``, for ``DefaultProvider(store, window=50)`` and
``PipelineProvider(store, "default")`` (a sliding window of 50), on a MemoryStore and on a
LevelDBStore. Each conversation starts with a system message, so every context must reach
back to position 0 for it: the pinned index makes that one read, not a scan. The goal is
t(1M) / t(1k) <= 1.5 for each provider on each store. Baselines from the same run: a raw
``store.get(conv, last=50)`` of the biggest conversation (the floor: the tail read alone),
and, once, what a whole read costs (what PipelineProvider did before the index).

Contenders alternate in chunks in rotated order; ratios are of the same repeat. The LevelDB
directory lives under ``$OTPMEM_BENCH_DIR`` (default: this directory) and is removed at the
end.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import plyvel
from _common import BENCH_DIR, race, ratio_summary, verdict
from bench_bigdb import write_conversation
from bench_memory import CYCLE, messages

from otpmem.memory import DefaultProvider, PipelineProvider
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore

GOAL = 1.5
WINDOW = 50
SYSTEM = {"role": "system", "content": "You are a careful assistant. Answer briefly."}


def sizes(quick: bool) -> list[int]:
    """The conversation lengths measured."""
    return [1_000, 10_000, 100_000] if quick else [1_000, 100_000, 1_000_000]


def conv_of(n: int) -> Conv:
    """The conversation of ``n`` messages."""
    return Conv("bench", f"n{n}")


def fill_leveldb(path: Path, lengths: list[int]) -> float:
    """Write every conversation with plyvel in the store's layout; seconds taken."""
    packed = [msgpack.packb(m, use_bin_type=True) for m in messages(0, CYCLE)]
    system = [msgpack.packb(SYSTEM, use_bin_type=True)]
    t0 = time.perf_counter()
    db = plyvel.DB(str(path), create_if_missing=True)
    try:
        for n in lengths:
            write_conversation(db, conv_of(n), packed, n - 1, system)
        db.compact_range()  # a settled database: no compaction under the reads
    finally:
        db.close()
    return time.perf_counter() - t0


def fill_memory(store: Any, lengths: list[int]) -> float:
    """Add every conversation through the store, 10,000 messages an add; seconds taken."""
    cycle = messages(0, CYCLE)
    t0 = time.perf_counter()
    for n in lengths:
        conv = conv_of(n)
        store.add(conv, [SYSTEM])
        for start in range(0, n - 1, 10_000):
            batch = [cycle[i % CYCLE] for i in range(start, min(n - 1, start + 10_000))]
            store.add(conv, batch, timeout=120.0)
    return time.perf_counter() - t0


def measure(store: Any, label: str, lengths: list[int], quick: bool) -> list[str]:
    """The per-turn cost of both providers at every length, against the raw tail read."""
    calls, chunks, repeats = (100, 3, 3) if quick else (200, 6, 5)
    providers = {
        "DefaultProvider(window=50)": DefaultProvider(store, window=WINDOW),
        'PipelineProvider("default")': PipelineProvider(store, "default"),
    }
    contenders: dict[str, Callable[[], Any]] = {}
    for name, provider in providers.items():
        for n in lengths:
            conv = conv_of(n)

            def turn(provider: Any = provider, conv: Conv = conv) -> Any:
                return provider.prepare(conv, provider.history(conv))

            sent = turn()
            if sent[0] != SYSTEM or len(sent) > WINDOW + 1:
                raise AssertionError(f"{name} on {n:,} messages sent {len(sent)}, not pinned")
            contenders[f"{name} {n}"] = turn
    biggest = conv_of(lengths[-1])
    contenders["get"] = lambda: store.get(biggest, last=WINDOW)
    times = race(contenders, dict.fromkeys(contenders, calls), chunks, repeats)
    lines = []
    for name in providers:
        small, big = f"{name} {lengths[0]}", f"{name} {lengths[-1]}"
        flat = [b / s for b, s in zip(times[big], times[small], strict=True)]
        floor = [b / g for b, g in zip(times[big], times["get"], strict=True)]
        per_size = " | ".join(
            f"{n:,}: {statistics.median(times[f'{name} {n}']) * 1e6:.1f} us" for n in lengths
        )
        lines.append(
            f"{name} on {label}, per turn: {per_size} | t({lengths[-1]:,})/t({lengths[0]:,}) = "
            f"{ratio_summary(flat)} (goal <= {GOAL}) -> {verdict(statistics.median(flat) <= GOAL)}"
            f" | vs raw get(last={WINDOW}) {statistics.median(times['get']) * 1e6:.1f} us: "
            f"{ratio_summary(floor)}"
        )
    whole = conv_of(lengths[1])
    t0 = time.perf_counter()
    everything = store.get(whole)
    PipelineProvider(store, "default").pipeline.run(everything)
    lines.append(
        f"  for comparison, a whole read + pipeline of {lengths[1]:,} messages on {label} (what "
        f"PipelineProvider did before the pinned index): {(time.perf_counter() - t0) * 1e3:.0f} ms"
    )
    return lines


def main(quick: bool) -> list[str]:
    """Run the context-assembly benchmark on both stores."""
    lengths = sizes(quick)
    lines: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="otpmem-bench-context-", dir=BENCH_DIR))
    try:
        build_s = fill_leveldb(root / "db", lengths)
        store = LevelDBStore.start_link(root / "db")
        try:
            lines += measure(store, "LevelDBStore", lengths, quick)
        finally:
            store.stop()
        memory = MemoryStore.start_link()
        try:
            fill_s = fill_memory(memory, lengths)
            lines += measure(memory, "MemoryStore", lengths, quick)
        finally:
            memory.stop()
        lines.append(
            f"  {sum(lengths):,} messages written with plyvel in {build_s:.1f} s; added to the "
            f"MemoryStore in {fill_s:.1f} s"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line)
