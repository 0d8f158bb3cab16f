"""Store benchmarks: what MemoryStore and LevelDBStore cost over the raw structures under them.

Each figure is printed next to a baseline measured in the same run, because this shared
2-core box swings up to 2x between periods (perf_anchors.md): compare the paired ratios and
the medians over repeats, never one absolute number. Messages are the perf_anchors shape:
about 160 chars of content from a 47-word vocabulary, every 5th an assistant message with a
tool call, each with its own strings.

1. MemoryStore ``add`` of one message per call to a warm conversation, against a bare pykka
   ``ask`` roundtrip carrying the same message (the floor of any call). ``get(conv,
   last=50)`` from a conversation of 1,000 messages, against slicing a raw dict of lists
   (``d[key][-50:]``), once with a ``Conv`` key and once with a plain str id. Contenders
   alternate in chunks, in rotated order; ratios are throughputs of the same repeat.
2. LevelDBStore ``add`` with ``sync=True`` (acknowledged once fsynced), one message per add,
   from 1 and from 16 writer threads (each its own conversation), against the naive durable
   store: one thread doing ``db.put(key, msgpack.packb(msg), sync=True)`` per message on the
   same disk. Concurrent adds share one fsync (group commit); messages per fsync is the
   message count over the committer's groups.
3. RSS of a MemoryStore holding 1,000,000 messages (100,000 with --quick, scaled), added in
   batches of 1,000 into 1,000 conversations, against a plain dict of lists of the same
   messages.

The LevelDB directories live under ``$OTPMEM_BENCH_DIR`` (default: this directory, on the
project's disk; not /tmp, which may be tmpfs and would make fsync free) and are removed at
the end.
"""

from __future__ import annotations

import itertools
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import msgpack
import plyvel
from _common import (
    EchoActor,
    latency_race,
    memory_kib,
    race,
    ratio_summary,
    rotated,
    safe_ratio,
    scratch,
    verdict,
)

from otpmem.actors import GenServer
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, LevelDBStoreHandle, MemoryStore
from otpmem.stores.leveldb import keys

ADD_VS_ASK_GOAL = 1.2
"""MemoryStore add throughput over a bare pykka ask roundtrip, at least."""

GET_VS_SLICE_GOAL = 0.5
"""MemoryStore get(last=50) throughput over a raw ``d[key][-50:]``, at least."""

GROUP_COMMIT_GOAL = 5.0
"""LevelDBStore sync adds from 16 writers over naive single-thread sync puts, at least."""


VOCABULARY = (
    "the a memory store actor supervisor restart message conversation user assistant tool "
    "call reply process link monitor crash exit reason child spec strategy intensity period "
    "table heir owner write read batch commit sync disk log level key value sequence prefix "
    "range scan count search export import token"
)
"""The 47-word vocabulary of the synthetic content (as in perf_anchors.md)."""

WORDS = VOCABULARY.split()

LAST = 50
SMALL = 1_000
"""Messages in the small (and the MemoryStore get) conversation."""


# -- messages ---------------------------------------------------------------------------------

_rng = random.Random(20_260_301)
_TEXTS = [" ".join(_rng.choices(WORDS, k=40))[:150] for _ in range(1_000)]


def message(i: int) -> dict[str, Any]:
    """Message ``i``: ~160 chars of content, every 5th an assistant tool call; fresh strings."""
    content = f"{i:09d} {_TEXTS[i % len(_TEXTS)]}"
    if i % 5 == 4:
        return {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": f'{{"q": {i}}}'},
                }
            ],
        }
    return {"role": "user" if i % 2 else "assistant", "content": content}


def messages(start: int, n: int) -> list[dict[str, Any]]:
    """Messages ``start`` .. ``start + n - 1``."""
    return [message(i) for i in range(start, start + n)]


# -- 1. MemoryStore against pykka and a dict --------------------------------------------------


def bench_memory_add(quick: bool) -> list[str]:
    """MemoryStore add of one message per call vs a pykka ask roundtrip, in rotated chunks."""
    n, chunk, repeats = (2_000, 250, 3) if quick else (20_000, 500, 5)
    store = MemoryStore.start_link()
    actor = EchoActor.start()
    conv = Conv("bench", "warm")
    pool = messages(SMALL, 1_000)
    contenders: dict[str, Callable[[int], Any]] = {
        "add": lambda i: store.add(conv, [pool[i % len(pool)]]),
        "ask": lambda i: actor.ask(pool[i % len(pool)]),
    }
    try:
        store.add(conv, messages(0, SMALL))
        # Per repeat and contender: (p50 us, p99 us, calls per second).
        runs = latency_race(contenders, n, chunk, repeats)
        stored = store.count(conv)
    finally:
        store.stop()
        actor.stop()
    expected = SMALL + chunk + repeats * n  # the warm-up chunk added too
    if stored != expected:
        raise AssertionError(f"the store holds {stored} messages, {expected} were added")

    def med(name: str, field: int) -> float:
        """Median over repeats of one field of a contender's runs."""
        return statistics.median(run[field] for run in runs[name])

    ratios = [a[2] / b[2] for a, b in zip(runs["add"], runs["ask"], strict=True)]
    ok = statistics.median(ratios) >= ADD_VS_ASK_GOAL
    return [
        f"MemoryStore add (1 msg per call, warm conversation): {med('add', 0):.1f} us p50 "
        f"(p99 {med('add', 1):.0f} us, {med('add', 2) / 1e3:.1f}k/s) | pykka ask "
        f"{med('ask', 0):.1f} us ({med('ask', 2) / 1e3:.1f}k/s) | add/ask = "
        f"{ratio_summary(ratios)} (throughput, paired per repeat, median [min..max] of "
        f"{repeats} x {n}; goal >= {ADD_VS_ASK_GOAL}) -> {verdict(ok)}"
    ]


ADD_IN_PROCESS_GOAL = 5.0
"""MemoryStore add from a process over a bare pykka ask from a plain thread, at least."""


class AddLoop(GenServer):
    """A process that adds ``n`` one-message batches when asked: adds from a process."""

    def handle_call(self, message: Any) -> Any:
        """Run the loop; its seconds."""
        store, conv, pool, n = message
        began = time.perf_counter()
        for i in range(n):
            store.add(conv, [pool[i % len(pool)]])
        return time.perf_counter() - began


def bench_memory_add_in_process(quick: bool) -> list[str]:
    """MemoryStore add from a process on the schedulers vs a pykka ask from a thread."""
    n, repeats = (2_000, 3) if quick else (20_000, 5)
    store = MemoryStore.start_link()
    actor = EchoActor.start()
    loop = AddLoop.start_link()
    conv = Conv("bench", "from-a-process")
    pool = messages(SMALL, 1_000)
    ratios, ours, asks = [], [], []
    try:
        for _ in range(repeats):
            seconds = loop.call((store, conv, pool, n), timeout=600)
            began = time.perf_counter()
            for i in range(n):
                actor.ask(pool[i % len(pool)])
            ask_seconds = time.perf_counter() - began
            ours.append(seconds / n * 1e6)
            asks.append(ask_seconds / n * 1e6)
            ratios.append(ask_seconds / seconds)
    finally:
        loop.stop()
        store.stop()
        actor.stop()
    ok = statistics.median(ratios) >= ADD_IN_PROCESS_GOAL
    return [
        f"MemoryStore add from a process (1 msg per call): {statistics.median(ours):.1f} us | "
        f"pykka ask from a thread {statistics.median(asks):.1f} us | add/ask = "
        f"{ratio_summary(ratios)} (throughput, {repeats} x {n}; goal >= "
        f"{ADD_IN_PROCESS_GOAL}) -> {verdict(ok)}"
    ]


def bench_memory_get(quick: bool) -> list[str]:
    """MemoryStore get(last=50) vs a raw dict-of-lists slice, with a Conv and a str key."""
    n, chunk, repeats = (20_000, 2_000, 3) if quick else (200_000, 10_000, 5)
    store = MemoryStore.start_link()
    conv = Conv("bench", "reader")
    try:
        store.add(conv, messages(0, SMALL))
        store.add(conv.conversation_id, messages(0, SMALL))
        raw: dict[Any, list[dict[str, Any]]] = {
            conv: store.get(conv),
            conv.conversation_id: store.get(conv.conversation_id),
        }
        get = store.get
        # Each side is one lambda over closure variables: the loops differ only in the read.
        contenders: dict[str, Callable[[], Any]] = {
            "get Conv": lambda: get(conv, last=LAST),
            "slice Conv": lambda: raw[conv][-LAST:],
            "get str": lambda: get("reader", last=LAST),
            "slice str": lambda: raw["reader"][-LAST:],
        }
        if any(len(read()) != LAST for read in contenders.values()):
            raise AssertionError(f"a read did not return {LAST} messages")
        every = dict.fromkeys(contenders, chunk)
        times = race(contenders, every, n // chunk, repeats, warmup=every)
        rates = {name: [1 / t for t in times[name]] for name in contenders}  # calls per second
    finally:
        store.stop()

    lines = []
    for key, shown in (("Conv", 'Conv("bench", "reader")'), ("str", '"reader"')):
        ours, theirs = rates[f"get {key}"], rates[f"slice {key}"]
        ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
        ok = statistics.median(ratios) >= GET_VS_SLICE_GOAL
        lines.append(
            f"MemoryStore get({shown}, last={LAST}) of {SMALL:,}: "
            f"{1e9 / statistics.median(ours):.0f} ns ({statistics.median(ours) / 1e6:.2f}M/s) | "
            f"raw d[key][-{LAST}:] {1e9 / statistics.median(theirs):.0f} ns | get/slice = "
            f"{ratio_summary(ratios)} (throughput, paired per repeat, median [min..max] of "
            f"{repeats} x {n:,}; goal >= {GET_VS_SLICE_GOAL}) -> {verdict(ok)}"
        )
    return lines


# -- 2. LevelDBStore group commit -------------------------------------------------------------


def committer_groups(store: LevelDBStoreHandle) -> int:
    """Synced log writes (one per fsync) so far: the write syscalls of this process, since
    a plain thread's add is one WriteBatch LevelDB's own writer queue gathers, out of our
    sight, with those of the threads beside it (the committer's groups are among them)."""
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    server = cast(LevelDBStore, store.resolve().server)  # no /proc: the groups we wrote
    return server.committer.groups + server.committer.direct_writes


def naive_round(db: Any, prefix: bytes, start: int, batch: list[dict[str, Any]]) -> float:
    """One synced put per message, single thread; return msgs/s."""
    put, pack, key = db.put, msgpack.packb, keys.message_key
    t0 = time.perf_counter()
    for i, msg in enumerate(batch):
        put(key(prefix, start + i), pack(msg), sync=True)
    return len(batch) / (time.perf_counter() - t0)


def writers_round(
    store: LevelDBStoreHandle, writers: int, batches: list[list[dict[str, Any]]], per_add: int = 1
) -> tuple[float, float]:
    """``writers`` threads each add their batch, ``per_add`` messages per add; (msgs/s, msgs
    per fsync)."""
    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def write(k: int) -> None:
        """Add one batch to this writer's own conversation, ``per_add`` messages per call."""
        conv = Conv(f"writer-{k}", "c")
        add = store.add
        mine = batches[k]
        start.wait()
        try:
            for i in range(0, len(mine), per_add):
                add(conv, mine[i : i + per_add])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(k,), name=f"bench-writer-{k}") for k in range(writers)
    ]
    for thread in threads:
        thread.start()
    groups0 = committer_groups(store)
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    total = sum(len(batches[k]) for k in range(writers))
    return total / elapsed, total / max(1, committer_groups(store) - groups0)


def bench_group_commit(quick: bool, root: Path) -> list[str]:
    """LevelDBStore sync adds from 1 and 16 writers vs naive synced puts, paired per repeat."""
    n_naive, n_one, per_writer, repeats = (500, 400, 100, 3) if quick else (3_000, 2_000, 500, 5)
    many = 16
    store = LevelDBStore.start_link(root / "commit-store", sync=True)
    db = plyvel.DB(str(root / "commit-naive"), create_if_missing=True)
    prefix = keys.conv_prefix(keys.MESSAGE, Conv("naive", "c"))
    # Per repeat: msgs/s (and msgs per fsync for the store).
    runs: dict[str, list[tuple[float, float]]] = {"naive": [], "1": [], "16": [], "16x4": []}
    sizes = {"naive": n_naive, "1": n_one, "16": per_writer, "16x4": per_writer}
    seq = itertools.count()

    def run(side: str, n: int) -> tuple[float, float]:
        """One round of ``side`` with fresh messages (and fresh keys for the naive side)."""
        if side == "naive":
            start = next(seq) * n_naive
            return naive_round(db, prefix, start, messages(start, n)), 1.0
        writers, _, per_add = side.partition("x")
        batches = [messages(next(seq) * n, n) for _ in range(int(writers))]
        return writers_round(store, int(writers), batches, int(per_add or 1))

    try:
        for side in runs:
            run(side, sizes[side] // 10)  # warm-up
        for r in range(repeats):
            for side in rotated(list(runs), r):
                runs[side].append(run(side, sizes[side]))
    finally:
        store.stop()
        db.close()

    def med(side: str, field: int) -> float:
        """Median over repeats of one field of a side's runs."""
        return statistics.median(run[field] for run in runs[side])

    def paired(side: str) -> list[float]:
        """Store/naive throughput ratios, per repeat."""
        return [s[0] / b[0] for s, b in zip(runs[side], runs["naive"], strict=True)]

    ok = statistics.median(paired("16")) >= GROUP_COMMIT_GOAL
    naive = (
        f"naive plyvel put(sync=True) + packb, 1 thread: {med('naive', 0) / 1e3:.1f}k msgs/s "
        f"({1e6 / med('naive', 0):.0f} us per fsync)"
    )
    lines = []
    for side, goal in (
        ("16", f"goal >= {GROUP_COMMIT_GOAL:g}) -> {verdict(ok)}"),
        ("1", "informational: one writer has nothing to share an fsync with)"),
        ("16x4", "informational: a tool-call turn is several messages in one add)"),
    ):
        count = n_one if side == "1" else per_writer * many
        writers, _, per_add = side.partition("x")
        lines.append(
            f"LevelDBStore add(sync=True), {writers} writer{'s' if writers != '1' else ''} "
            f"({per_add or 1} msg{'s' if per_add else ''} per add, own conversations): "
            f"{med(side, 0) / 1e3:.1f}k msgs/s, "
            f"{med(side, 1):.1f} msgs per fsync ({med(side, 0) / med(side, 1):.0f} fsyncs/s) | "
            f"{naive} | store/naive = {ratio_summary(paired(side))} (throughput, paired per "
            f"repeat, median [min..max] of {repeats} x {count:,} msgs; {goal}"
        )
    return lines


# -- 3. MemoryStore memory --------------------------------------------------------------------


def fill_store(n: int, batch: int, convs: list[Conv]) -> tuple[float, float]:
    """Add n messages to a fresh MemoryStore in batches; (RSS growth bytes, seconds)."""
    rss0, _ = memory_kib()
    t0 = time.perf_counter()
    store = MemoryStore.start_link()
    try:
        for b, start in enumerate(range(0, n, batch)):
            store.add(convs[b % len(convs)], messages(start, batch))
        elapsed = time.perf_counter() - t0
        rss1, _ = memory_kib()
        if sum(store.count(c) for c in convs) != n:
            raise AssertionError(f"the store does not hold the {n} messages added")
    finally:
        store.stop()
    return (rss1 - rss0) * 1024, elapsed


def fill_dict(n: int, batch: int, convs: list[Conv]) -> tuple[float, float]:
    """The same messages in a plain dict of lists; (RSS growth bytes, seconds)."""
    rss0, _ = memory_kib()
    t0 = time.perf_counter()
    table: dict[Conv, list[dict[str, Any]]] = {}
    for b, start in enumerate(range(0, n, batch)):
        table.setdefault(convs[b % len(convs)], []).extend(messages(start, batch))
    elapsed = time.perf_counter() - t0
    rss1, _ = memory_kib()
    del table
    return (rss1 - rss0) * 1024, elapsed


def bench_memory_rss(quick: bool) -> list[str]:
    """RSS growth of a MemoryStore per million small messages vs a plain dict of lists."""
    n, batch, n_convs = (100_000, 1_000, 1_000) if quick else (1_000_000, 1_000, 1_000)
    convs = [Conv(f"user-{k % 100}", f"conv-{k}") for k in range(n_convs)]
    # The store first: a round that runs second may reuse heap the first one freed.
    store_bytes, store_s = fill_store(n, batch, convs)
    dict_bytes, dict_s = fill_dict(n, batch, convs)
    scaled = "" if n == 1_000_000 else ", scaled to a million"
    return [
        f"MemoryStore RSS: +{store_bytes / n * 1e6 / 2**20:.0f} MiB per million small messages "
        f"({store_bytes / n:.0f} B/msg; {n:,} added in batches of {batch:,} into "
        f"{min(n_convs, n // batch):,} conversations{scaled}; filled at "
        f"{n / store_s / 1e3:.0f}k msgs/s) | plain dict of lists of the same messages "
        f"+{dict_bytes / n * 1e6 / 2**20:.0f} MiB ({dict_bytes / n:.0f} B/msg, filled at "
        f"{n / dict_s / 1e3:.0f}k msgs/s) | store/dict RSS = "
        f"{safe_ratio(store_bytes, dict_bytes)} (one round each; fill rates include building "
        f"the messages)"
    ]


def main(quick: bool) -> list[str]:
    """Run every store benchmark and return its result lines."""
    with scratch("bench-stores-") as root:
        lines = [*bench_memory_add(quick), *bench_memory_add_in_process(quick)]
        lines += bench_memory_get(quick)
        lines += bench_group_commit(quick, root)
        lines += bench_memory_rss(quick)
        return lines
