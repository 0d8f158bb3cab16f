"""LevelDB store restart: kill -> the restarted store acknowledges an add, on 1M messages.

A supervised ``LevelDBStore`` (``LevelDBStore.child_spec``) over a directory holding a
1,000,000-message conversation (100,000 with ``--quick``); between kills a writer adds a
thousand messages in synced adds, as live traffic would, so that memtable flushes and
compactions run under some of the kills. Each trial times:

- the kill itself (``faults.kill`` returns once the store is dead: its committer stopped
  and its database closed);
- kill -> the first ``add`` the new incarnation acknowledges (the client retries
  ``NoProcess`` after ``sleep(0)``).

The baseline, interleaved trial by trial: raw plyvel ``close()`` then ``DB(path)`` and one
synced put on the same directory: the engine's own floor under any restart.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import plyvel
from _common import percentile, scratch, verdict
from bench_bigdb import build_big_db
from bench_stores import message

from otpmem.actors import NoProcess, faults
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle
from otpmem.supervisors import Supervisor

P99_GOAL_MS = 15.0
KILL_GOAL_MS = 50.0
NAME = "bench.restart.store"
TRAFFIC = 20  # synced adds between two kills, of BATCH messages each: enough that the
BATCH = 50  # memtable fills and compactions run under some of the kills


def restart_trial(store: LevelDBStoreHandle, conv: Conv, n: int) -> tuple[float, float]:
    """(kill ms, kill -> first acknowledged add ms), after ``TRAFFIC`` adds of traffic."""
    for i in range(TRAFFIC):
        store.add(conv, [message(n + i * BATCH + k) for k in range(BATCH)])
    t0 = time.perf_counter()
    faults.kill(store)
    killed = time.perf_counter()
    while True:
        try:
            store.add(conv, [message(n)])
            break
        except NoProcess:
            time.sleep(0)
    done = time.perf_counter()
    return (killed - t0) * 1e3, (done - t0) * 1e3


def raw_trial(path: Path, db: plyvel.DB, n: int) -> tuple[plyvel.DB, float]:
    """Close and reopen the raw database, then one synced put (ms)."""
    for i in range(TRAFFIC):
        with db.write_batch(sync=True) as batch:
            for k in range(BATCH):
                batch.put(b"raw-%d" % (n + i * BATCH + k), b"x" * 160)
    t0 = time.perf_counter()
    db.close()
    db = plyvel.DB(str(path))
    db.put(b"raw-first", b"x" * 160, sync=True)
    return db, (time.perf_counter() - t0) * 1e3


def bench_restart(quick: bool, root: Path) -> list[str]:
    """p50/p99/max of kill -> first acknowledged add, and the slowest kill."""
    size, trials = (100_000, 40) if quick else (1_000_000, 300)
    big = build_big_db(root / "store", size)
    raw_dir = root / "raw"
    shutil.copytree(big.path, raw_dir)
    sup = Supervisor.start(
        [LevelDBStore.child_spec(str(big.path), NAME, intensity=10**6, period=1.0)],
        strategy="one_for_one",
        intensity=10**6,
        period=1.0,
    )
    store = LevelDBStoreHandle.named(NAME)
    conv = Conv("bench", "restart")
    kills, restarts, raws = [], [], []
    db = plyvel.DB(str(raw_dir))
    try:
        store.add(conv, [message(0)])
        for t in range(trials):
            kill_ms, restart_ms = restart_trial(store, conv, t * TRAFFIC * BATCH)
            kills.append(kill_ms)
            restarts.append(restart_ms)
            db, raw_ms = raw_trial(raw_dir, db, t * TRAFFIC * BATCH)
            raws.append(raw_ms)
        stored = store.count(conv)
    finally:
        db.close()
        sup.stop(timeout=60.0)
    expected = 1 + trials * (TRAFFIC * BATCH + 1)
    if stored != expected:
        raise AssertionError(f"the store holds {stored} messages of {expected} acknowledged")
    restarts.sort()
    kills.sort()
    raws.sort()
    p50, p99 = percentile(restarts, 0.5), percentile(restarts, 0.99)
    ok = p99 <= P99_GOAL_MS and kills[-1] <= KILL_GOAL_MS
    return [
        f"LevelDBStore restart on {big.total:,} msgs, kill -> first acknowledged add: "
        f"{p50:.1f} ms p50, {p99:.1f} ms p99, max {restarts[-1]:.1f} ms; kill itself "
        f"{percentile(kills, 0.5):.1f} ms p50, max {kills[-1]:.1f} ms (goal p99 <= "
        f"{P99_GOAL_MS:g} ms, no kill over {KILL_GOAL_MS:g} ms) -> {verdict(ok)} | raw plyvel "
        f"close + open + synced put: {percentile(raws, 0.5):.1f} ms p50, "
        f"{percentile(raws, 0.99):.1f} ms p99, max {raws[-1]:.1f} ms | {trials} trials, "
        f"{TRAFFIC} synced adds of {BATCH} messages between kills"
    ]


def main(quick: bool) -> list[str]:
    """Run the restart benchmark in a scratch directory."""
    with scratch("bench-restart-") as root:
        return bench_restart(quick, root)
