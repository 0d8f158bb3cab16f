"""LevelDBStore durable adds beside raw plyvel doing the same synced writes, from the same
threads: 16 writers x 1 message (raw: ``put(sync=True)``, which LevelDB merges itself), 16
x 4 messages (raw: a synced WriteBatch per add) and 1 x 1 (raw: a synced WriteBatch).

A third contender, the bare Python writer, does the least any store written in Python
must do per add (number, pack, key, one synced batch), nothing checked or counted: its
distance below raw is what Python costs on these threads, under the GIL; the store's
distance below it is the store's own work per add (validation, the count, the pinned
index, keys and usage). Paired per repeat, who goes first rotating. The directories live
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
"""LevelDBStore durable adds over the same writes done with raw plyvel, at least."""


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


def bench_durable_vs_raw(quick: bool, root: Path) -> list[str]:
    """LevelDBStore add(sync=True) vs raw plyvel doing the same synced writes from the same
    threads: 16 writers x 1 message (raw: put(sync=True)), 16 x 4 (raw: a WriteBatch per
    add), 1 x 1 (raw: a synced WriteBatch); paired per repeat, order rotated."""
    per_writer, one, repeats = (100, 300, 3) if quick else (400, 1_500, 5)
    cases = [
        ("16 writers, 1 msg per add", 16, 1, True, "put(sync=True)"),
        ("16 writers, 4 msgs per add", 16, 4, False, "WriteBatch(sync=True) per add"),
        ("1 writer, 1 msg per add", 1, 1, False, "WriteBatch(sync=True)"),
    ]
    store = LevelDBStore.start_link(root / "raw-store", sync=True)
    db = plyvel.DB(str(root / "raw-plyvel"), create_if_missing=True)
    seq = itertools.count()
    results: dict[str, list[tuple[float, float, float]]] = {c[0]: [] for c in cases}
    try:
        for r in range(repeats + 1):  # the first is a warm-up
            for label, writers, per_add, single, _ in cases:
                n = one if writers == 1 else per_writer
                batches = [messages(next(seq) * n, n) for _ in range(writers)]
                rates = {}
                for name in rotated(["ours", "raw", "bare"], r):  # the disk warms for those after
                    if name == "ours":
                        rates[name] = writers_round(store, writers, batches, per_add)[0]
                    elif name == "raw":
                        rates[name] = plyvel_round(
                            db, writers, batches, per_add, single_puts=single
                        )
                    else:
                        rates[name] = plyvel_round(db, writers, batches, per_add, numbered=True)
                if r:
                    results[label].append((rates["ours"], rates["raw"], rates["bare"]))
    finally:
        store.stop()
        db.close()
    lines = []
    for label, _, _, _, raw_name in cases:
        triples = results[label]
        ratios = [ours / raw for ours, raw, _ in triples]
        bound = [bare / raw for _, raw, bare in triples]
        ok = statistics.median(ratios) >= RAW_GOAL
        lines.append(
            f"LevelDBStore add(sync=True) vs raw plyvel, {label}: "
            f"{statistics.median(t[0] for t in triples) / 1e3:.1f}k msgs/s | raw {raw_name} "
            f"{statistics.median(t[1] for t in triples) / 1e3:.1f}k msgs/s | store/raw = "
            f"{ratio_summary(ratios)} (throughput, paired per repeat; goal >= {RAW_GOAL}) -> "
            f"{verdict(ok)} | the bare Python writer (number, pack, key, one synced batch; "
            f"nothing checked or counted) {statistics.median(t[2] for t in triples) / 1e3:.1f}k "
            f"msgs/s, bare/raw = {ratio_summary(bound)}: a store in Python on these threads "
            f"stays below it"
        )
    return lines


def main(quick: bool) -> list[str]:
    """Run the durable-vs-raw benchmark in a scratch directory."""
    with scratch("bench-durable-") as root:
        return bench_durable_vs_raw(quick, root)
