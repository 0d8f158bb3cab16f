"""LevelDBStore on a big database: reads that stay flat with a conversation's length, and a
reopen that does not read what it does not need.

Each figure is printed next to a baseline measured in the same run (see bench_stores: this
shared 2-core box swings up to 2x). Messages are bench_stores' perf_anchors shape.

1. LevelDBStore ``get(last=50)`` from a conversation of 1,000 messages and from one of
   1,000,000 (100,000 with --quick) in the same database, written with plyvel directly in
   the store's key layout; a raw plyvel reverse iterator + ``unpackb`` on the same handle is
   the floor.
2. Reopening that database: ``LevelDBStore.start_link(path)`` plus the first
   ``get(last=50)`` of a conversation not read before, after the previous store stopped and
   the database files were dropped from the page cache; against a bare ``plyvel.DB(path)``
   and the same read.

The LevelDB directory lives under ``$OTPMEM_BENCH_DIR`` (as bench_stores) and is removed at
the end.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, cast

import msgpack
import plyvel
from _common import race, ratio_summary, rotated, scratch, verdict
from bench_stores import LAST, SMALL, messages

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from otpmem.stores.leveldb import keys

FLAT_GET_GOAL = 1.5
"""get(last=50) time from the big conversation over the 1,000-message one, at most."""

REOPEN_GOAL_S = 1.0
"""Reopen of a 1M-message LevelDB plus its first get, in seconds, below."""

REOPEN_REPEATS = 3
"""Reopens per side; each reads a conversation no earlier open has read."""


# -- 1 and 2. LevelDBStore reads from a big database ------------------------------------------


class BigDB(NamedTuple):
    """A LevelDB directory in the store's layout, and what it holds."""

    path: Path
    big: Conv
    big_n: int
    small: Conv
    cold: list[Conv]
    total: int
    build_s: float


def write_conversation(
    db: Any, conv: Conv, packed: list[bytes], n: int, pinned: Sequence[bytes] = ()
) -> None:
    """Write ``pinned`` (system messages, indexed as pinned) then n messages cycling
    ``packed``, and the meta key of ``conv``, in the store's layout, unsynced batches."""
    prefix = keys.conv_prefix(keys.MESSAGE, conv)
    index = keys.conv_prefix(keys.PINNED, conv)
    with db.write_batch() as batch:
        for seq, value in enumerate(pinned):
            batch.put(keys.message_key(prefix, seq), value)
            batch.put(keys.message_key(index, seq), value)
    step = 10_000
    first = len(pinned)
    for start in range(0, n, step):
        with db.write_batch() as batch:
            for i in range(start, min(n, start + step)):
                batch.put(keys.message_key(prefix, first + i), packed[i % len(packed)])
    total = first + n
    db.put(keys.conv_prefix(keys.META, conv), keys.Meta(total, total, 0, -1, first).pack())
    db.put(keys.VERSION, str(keys.LAYOUT_VERSION).encode())


def build_big_db(path: Path, n: int) -> BigDB:
    """Write an n-message conversation, a small one and the reopen test's cold ones."""
    packed = [msgpack.packb(m, use_bin_type=True) for m in messages(0, 2_000)]
    big, small = Conv("bench", "big"), Conv("bench", "small")
    # Users that sort before and after "bench": the cold reads land in different tables.
    cold = [Conv(f"{u}-{k}", "c") for k in range(REOPEN_REPEATS) for u in ("alpha", "zulu")]
    t0 = time.perf_counter()
    db = plyvel.DB(str(path), create_if_missing=True)
    try:
        write_conversation(db, big, packed, n)
        for conv in [small, *cold]:
            write_conversation(db, conv, packed, SMALL)
        db.compact_range()  # a settled database: no compaction running under the reads
    finally:
        db.close()
    total = n + SMALL * (1 + len(cold))
    return BigDB(path, big, n, small, cold, total, time.perf_counter() - t0)


def raw_last(db: Any, conv: Conv) -> list[Any]:
    """The newest ``LAST`` messages of ``conv`` straight from plyvel: the floor of a get."""
    prefix = keys.conv_prefix(keys.MESSAGE, conv)
    with db.iterator(prefix=prefix, reverse=True, include_key=False) as it:
        newest = list(itertools.islice(it, LAST))
    return [msgpack.unpackb(raw) for raw in reversed(newest)]


def bench_flat_get(quick: bool, big: BigDB) -> list[str]:
    """get(last=50) from the big vs the small conversation, and a raw plyvel read of the big."""
    n, chunk, repeats = (600, 100, 3) if quick else (2_000, 200, 5)
    store = LevelDBStore.start_link(big.path)
    try:
        if store.count(big.big) != big.big_n:
            raise AssertionError(f"the store does not see the {big.big} conversation written")
        db = cast(LevelDBStore, store.resolve().server).db
        contenders: dict[str, Callable[[], Any]] = {
            "small": lambda: store.get(big.small, last=LAST),
            "big": lambda: store.get(big.big, last=LAST),
            "raw": lambda: raw_last(db, big.big),
        }
        if contenders["big"]() != contenders["raw"]():
            raise AssertionError("the store's get(last=50) differs from the raw read")
        every = dict.fromkeys(contenders, chunk)
        seconds = race(contenders, every, n // chunk, repeats, warmup=every)
        times = {name: [t * 1e6 for t in seconds[name]] for name in contenders}  # us per get
    finally:
        store.stop()

    def paired(a: str, b: str) -> list[float]:
        """Time ratios a/b, per repeat."""
        return [x / y for x, y in zip(times[a], times[b], strict=True)]

    flat = paired("big", "small")
    ok = statistics.median(flat) <= FLAT_GET_GOAL
    return [
        f"LevelDBStore get(last={LAST}) from a {big.big_n:,}-message conversation: "
        f"{statistics.median(times['big']):.0f} us | from a {SMALL:,}-message one "
        f"{statistics.median(times['small']):.0f} us | big/small time = {ratio_summary(flat)} "
        f"(paired per repeat, median [min..max] of {repeats} x {n:,}; goal <= "
        f"{FLAT_GET_GOAL}: flat) -> {verdict(ok)} | raw plyvel reverse iterator + unpackb "
        f"{statistics.median(times['raw']):.0f} us, store/raw = "
        f"{ratio_summary(paired('big', 'raw'))} | database of {big.total:,} msgs, "
        f"{disk_mb(big.path):.0f} MB on disk, written in {big.build_s:.1f} s"
    ]


def disk_mb(path: Path) -> float:
    """Size of the files in ``path``, in MB."""
    return sum(f.stat().st_size for f in path.iterdir()) / 1e6


def drop_page_cache(path: Path) -> None:
    """Write back and evict the files of ``path`` from the page cache: the next open is cold."""
    for file in path.iterdir():
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def reopen_store(big: BigDB, conv: Conv) -> tuple[float, float]:
    """Start a store on ``big`` and read ``conv`` once; (open s, first get s)."""
    t0 = time.perf_counter()
    store = LevelDBStore.start_link(big.path)
    t1 = time.perf_counter()
    try:
        got = store.get(conv, last=LAST)
        t2 = time.perf_counter()
    finally:
        store.stop()
    if len(got) != LAST:
        raise AssertionError(f"the first get after reopening returned {len(got)} messages")
    return t1 - t0, t2 - t1


def reopen_raw(big: BigDB, conv: Conv) -> tuple[float, float]:
    """Open ``big`` with bare plyvel and read ``conv`` once; (open s, first read s)."""
    t0 = time.perf_counter()
    db = plyvel.DB(str(big.path))
    t1 = time.perf_counter()
    try:
        got = raw_last(db, conv)
        t2 = time.perf_counter()
    finally:
        db.close()
    if len(got) != LAST:
        raise AssertionError(f"the raw read after reopening returned {len(got)} messages")
    return t1 - t0, t2 - t1


def bench_reopen(big: BigDB) -> list[str]:
    """Reopen + first get of a cold conversation, store vs bare plyvel, 3 paired repeats."""
    opens: dict[str, Callable[[BigDB, Conv], tuple[float, float]]] = {
        "store": reopen_store,
        "raw": reopen_raw,
    }
    runs: dict[str, list[tuple[float, float]]] = {side: [] for side in opens}
    cold = iter(big.cold)
    for r in range(REOPEN_REPEATS):
        for side in rotated(list(opens), r):
            drop_page_cache(big.path)
            runs[side].append(opens[side](big, next(cold)))
    totals = {side: [o + g for o, g in runs[side]] for side in opens}
    ratios = [s / b for s, b in zip(totals["store"], totals["raw"], strict=True)]
    worst = max(totals["store"])
    ok = worst < REOPEN_GOAL_S

    def med_ms(side: str, field: int) -> float:
        """Median over repeats of one phase of a side, in ms."""
        return statistics.median(run[field] for run in runs[side]) * 1e3

    return [
        f"reopen LevelDBStore of {big.total:,} msgs + first get(last={LAST}) of a cold "
        f"conversation: {statistics.median(totals['store']) * 1e3:.1f} ms median, max "
        f"{worst * 1e3:.1f} ms (start_link {med_ms('store', 0):.1f} ms + get "
        f"{med_ms('store', 1):.1f} ms; page cache dropped before each open; "
        f"{REOPEN_REPEATS} repeats; goal < {REOPEN_GOAL_S:g} s) -> {verdict(ok)} | bare "
        f"plyvel.DB() + the same read {statistics.median(totals['raw']) * 1e3:.1f} ms "
        f"(open {med_ms('raw', 0):.1f} + read {med_ms('raw', 1):.1f}) | store/raw time = "
        f"{ratio_summary(ratios)} (paired per repeat)"
    ]


def main(quick: bool) -> list[str]:
    """Build the big database, then read from it and reopen it."""
    with scratch("bench-bigdb-") as root:
        big = build_big_db(root / "big", 100_000 if quick else 1_000_000)
        return [*bench_flat_get(quick, big), *bench_reopen(big)]
