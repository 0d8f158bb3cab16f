"""LevelDBStore durable adds beside the bare Python writer and raw plyvel doing the same
synced writes, from the same threads: 16 writers x 1 message (raw: ``put(sync=True)``,
which LevelDB merges itself), 16 x 4 messages (raw: a synced WriteBatch per add), and one
writer x 1 and x 4 (raw: a synced WriteBatch per add).

The bare Python writer does the least any store written in Python must do per add
(number, pack, key, one synced batch), nothing checked or counted: its distance below raw
is what Python costs on these threads, under the GIL; the store's distance below it is the
store's own work per add (validation, the count, the pinned index, keys and usage). The
goals (issue 32): with 16 writers the store >= 0.9x the bare writer, with one >= 0.9x raw.
Each repeat runs rotated chunks of the three, paired per repeat. The directories live
where ``bench_stores`` puts its own (``$OTPMEM_BENCH_DIR``), not on a tmpfs.
"""

from __future__ import annotations

import itertools
import statistics
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import plyvel
from _common import drive, ratio_summary, rotated, scratch, verdict
from bench_stores import messages, writers_round

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from otpmem.stores.leveldb import keys

RAW_GOAL = 0.9
"""With 1 writer: LevelDBStore durable adds over the same writes done with raw plyvel (a
synced WriteBatch per add), at least."""


raw_keys = itertools.count()


def plyvel_round(
    db: Any,
    writers: int,
    batches: list[list[dict[str, Any]]],
    per_add: int,
    *,
    single_puts: bool = False,
    numbered: bool = False,
) -> float:
    """``writers`` threads write their batches straight to plyvel, synced, ``per_add``
    messages per WriteBatch (or one ``put(sync=True)`` each); msgs/s.

    Raw, each message's number is its place in the batch. ``numbered``, each add first
    takes its numbers under a lock, as the least a store must do: the bare Python writer.
    """
    pack, key = msgpack.packb, keys.message_key
    lock = threading.Lock()

    def writes(k: int) -> list[Callable[[], Any]]:
        """This writer's synced writes, under its own prefix, keyed as the store keys them."""
        prefix = keys.conv_prefix(keys.MESSAGE, Conv(f"raw-{k}", "c"))
        base = next(raw_keys) * 1_000_000
        next_seq = [base]
        mine = batches[k]

        def write(i: int) -> None:
            """Messages i .. i + per_add - 1, in one synced write."""
            seq = base + i
            if numbered:
                with lock:
                    seq = next_seq[0]
                    next_seq[0] += per_add
            if single_puts:
                db.put(key(prefix, seq), pack(mine[i]), sync=True)
                return
            batch = db.write_batch(sync=True)
            for j, message in enumerate(mine[i : i + per_add]):
                batch.put(key(prefix, seq + j), pack(message))
            batch.write()

        return [lambda i=i: write(i) for i in range(0, len(mine), per_add)]

    groups = [writes(k) for k in range(writers)]
    elapsed = drive(groups, len(groups[0]))
    return sum(len(b) for b in batches) / elapsed


CASES = [
    ("16 writers, 1 msg per add", 16, 1, True, "put(sync=True)"),
    ("16 writers, 4 msgs per add", 16, 4, False, "WriteBatch(sync=True) per add"),
    ("1 writer, 1 msg per add", 1, 1, False, "WriteBatch(sync=True)"),
    ("1 writer, 4 msgs per add", 1, 4, False, "WriteBatch(sync=True)"),
]
"""(label, writers, messages per add, raw as single puts, raw's name)."""

BARE_GOAL = 0.9
"""With 16 writers: LevelDBStore durable adds over the bare Python writer's, at least."""


def bench_durable_vs_raw(quick: bool, root: Path) -> list[str]:
    """LevelDBStore add(sync=True) vs the bare Python writer vs raw plyvel, the same synced
    writes from the same threads, for every case of ``CASES``: each repeat is rotated
    chunks of each contender (the box's swings, and other processes' fsyncs, hit all three
    alike), paired per repeat."""
    # adds per writer per chunk, chunks per repeat, repeats
    many, one, chunks, repeats = (12, 40, 3, 3) if quick else (25, 60, 4, 5)
    store = LevelDBStore.start_link(root / "raw-store", sync=True)
    db = plyvel.DB(str(root / "raw-plyvel"), create_if_missing=True)
    seq = itertools.count()
    names = ["ours", "bare", "raw"]
    results: dict[str, list[dict[str, float]]] = {c[0]: [] for c in CASES}

    def chunk(name: str, writers: int, per_add: int, single: bool) -> tuple[int, float]:
        """One chunk of ``name``'s writes: (messages, seconds)."""
        n = (one if writers == 1 else many) * per_add
        batches = [messages(next(seq) * n, n) for _ in range(writers)]
        if name == "ours":
            rate = writers_round(store, writers, batches, per_add)[0]
        elif name == "raw":
            rate = plyvel_round(db, writers, batches, per_add, single_puts=single)
        else:
            rate = plyvel_round(db, writers, batches, per_add, numbered=True)
        return n * writers, n * writers / rate

    try:
        for label, writers, per_add, single, _ in CASES:
            for name in names:
                chunk(name, writers, per_add, single)  # warm-up
            for r in range(repeats):
                done = dict.fromkeys(names, 0.0)
                took = dict.fromkeys(names, 0.0)
                for k in range(chunks):
                    for name in rotated(names, r + k):  # the disk warms for those after
                        msgs, seconds = chunk(name, writers, per_add, single)
                        done[name] += msgs
                        took[name] += seconds
                results[label].append({name: done[name] / took[name] for name in names})
    finally:
        store.stop()
        db.close()
    lines = []
    for label, writers, _, _, raw_name in CASES:
        runs = results[label]

        def med(name: str, runs: list[dict[str, float]] = runs) -> str:
            """The median rate of ``name``, in k msgs/s."""
            return f"{statistics.median(run[name] for run in runs) / 1e3:.1f}k msgs/s"

        over_bare = [run["ours"] / run["bare"] for run in runs]
        over_raw = [run["ours"] / run["raw"] for run in runs]
        bare_raw = [run["bare"] / run["raw"] for run in runs]
        if writers > 1:
            goal, ratios, what = BARE_GOAL, over_bare, "store/bare"
        else:
            goal, ratios, what = RAW_GOAL, over_raw, "store/raw"
        ok = statistics.median(ratios) >= goal
        lines.append(
            f"LevelDBStore add(sync=True), {label}: {med('ours')} | the bare Python writer "
            f"(number, pack, key, one synced batch; nothing checked or counted) {med('bare')} "
            f"| raw {raw_name} {med('raw')} | {what} = {ratio_summary(ratios)} (goal >= "
            f"{goal}) -> {verdict(ok)} | store/bare = {ratio_summary(over_bare)}, store/raw = "
            f"{ratio_summary(over_raw)}, bare/raw = {ratio_summary(bare_raw)} (throughput, "
            f"{chunks} rotated chunks per repeat, paired per repeat, {repeats} repeats)"
        )
    return lines


def main(quick: bool) -> list[str]:
    """Run the durable-vs-raw benchmark in a scratch directory."""
    with scratch("bench-durable-") as root:
        return bench_durable_vs_raw(quick, root)
