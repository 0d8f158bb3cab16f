"""Long-term memory and guardrail benchmarks: what facts and budgets cost a store and a turn.

Each figure is printed next to a baseline measured in the same run (this shared box swings
up to 2x between periods, perf_anchors.md): compare the paired ratios, never one absolute.

1. ``save_fact`` against ``add`` and ``get_facts`` against ``get`` of the same store, on a
   MemoryStore and a LevelDBStore (sync=True: every write fsynced, as the default). A
   save_fact changes one of 20 keys (a real write: a new version, the old value to
   history); an add appends one user message; get_facts reads the user's 20 facts, get the
   newest 20 messages (``last=20``). Rotated chunks per repeat, ratios of the same repeat.
2. A turn with long-term memory injected (a profile and 20 facts) and two guardrails (a
   user TokenBudget and a user CostBudget, one usage read between them) against a plain
   turn, and each part alone: ``Agent.run`` on a MemoryStore with ``DefaultProvider(window=
   20)``, a ScriptedModel answering "ok". Goal: LTM + two guardrails <= 1.2 x plain.
   The guardrails reserve (one store request before each model call, one release after):
   the same two as policies that only check (nothing held, as before reservations) are the
   unreserved path, reported beside them as reserved/unreserved.
3. ``LongTermMemory.get_relevant`` for a user with 1,000 facts among 100,000 other users'
   facts (3 each; 2,000 users with --quick), on a MemoryStore and a LevelDBStore, against
   the newest-facts read of the same store (``get_facts`` sorted newest first, what the
   injection of the newest facts reads per call): p50 and p99 of single calls,
   interleaved per repeat, and the ratio of the p50s per repeat. Beside them: a question
   right after a write to the user (the facts read again, one fact tokenized again, the
   index rebuilt), and what the cache holds per fact (tracemalloc).
4. ``get_facts(user, as_of=t)`` for a user with 200 facts corrected 4 times each (200
   current values, 800 closed ones) among 1,000,000 facts (20,000 with --quick), on a
   MemoryStore and a LevelDBStore (sync=False), against the read of what is true now
   (``get_facts(user)``) of the same store: p50 and p99 of single calls, interleaved per
   repeat, and the ratio of the p50s per repeat.
5. Background consolidation stays bounded: one extraction (``LongTermMemory.extract_now``
   of one new turn that corrects one key, so the key's history grows and is compacted)
   for a user whose key has been corrected thousands of times, in a store holding 1,000
   to 1,000,000 facts of other users (to 100,000 with --quick), against the same
   extraction on an empty store in the same repeats: p50 per size and the ratio of the
   p50s per repeat; beside them, the user's history entries after every thousand
   corrections (bounded by ``keep_history``), on a MemoryStore and a LevelDBStore
   (sync=False).
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from _common import percentile, ratio_summary, rotated, scratch, verdict

from otpmem.agents import Agent
from otpmem.guardrails import CostBudget, Request, TokenBudget, UsageReader
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider, LongTermMemory
from otpmem.memory.longterm import Decision
from otpmem.messages import Conv
from otpmem.stores import KEEP_FACT_HISTORY, Fact, LevelDBStore, MemoryStore, Profile

FACTS = 20
WINDOW = 20
TEXT = (
    "memory store actor supervisor restart message conversation user assistant tool call "
    "reply process link monitor crash exit reason child spec strategy intensity period"
)
GOAL = 1.2


def time_calls(call: Callable[[int], Any], n: int, start: int) -> float:
    """Seconds per call of n calls ``call(start + i)``."""
    t0 = time.perf_counter()
    for i in range(start, start + n):
        call(i)
    return (time.perf_counter() - t0) / n


def race(
    contenders: dict[str, Callable[[int], Any]],
    n: dict[str, int],
    chunks: int,
    repeats: int,
) -> dict[str, list[float]]:
    """Per repeat, the median chunk's seconds per call of every contender, rotated."""
    counter = 0
    for name, call in contenders.items():
        time_calls(call, max(1, n[name] // 5), counter)  # warm-up
        counter += n[name]
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(repeats):
        per_chunk: dict[str, list[float]] = {name: [] for name in contenders}
        for k in range(chunks):
            for name in rotated(list(contenders), r + k):
                per_chunk[name].append(time_calls(contenders[name], n[name], counter))
                counter += n[name]
        for name in contenders:
            times[name].append(statistics.median(per_chunk[name]))
    return times


def paired(times: dict[str, list[float]], a: str, b: str) -> list[float]:
    """Time ratios a/b, per repeat."""
    return [x / y for x, y in zip(times[a], times[b], strict=True)]


def us(values: Sequence[float]) -> str:
    """Median seconds as microseconds."""
    return f"{statistics.median(values) * 1e6:.1f} us"


def seed_facts(store: Any, user_id: str) -> None:
    """A profile and FACTS facts for ``user_id``."""
    store.save_facts(user_id, [Fact(user_id, f"k{i:02d}", f"value {i}") for i in range(FACTS)])
    store.save_profile(Profile(user_id, "A developer in Lyon who likes short answers."))


def bench_store(kind: str, store: Any, quick: bool) -> str:
    """save_fact vs add, get_facts vs get(last=20), on one store."""
    n = 40 if kind == "leveldb" and quick else (100 if kind == "leveldb" else 300)
    chunks, repeats = (3, 3) if quick else (8, 5)
    conv = Conv("bench", "c")
    seed_facts(store, "bench")
    store.add(conv, [{"role": "user", "content": TEXT} for _ in range(WINDOW)])
    contenders: dict[str, Callable[[int], Any]] = {
        "save_fact": lambda i: store.save_fact(Fact("bench", f"k{i % FACTS:02d}", f"v{i}")),
        "add": lambda i: store.add(conv, [{"role": "user", "content": TEXT}]),
        "get_facts": lambda i: store.get_facts("bench"),
        "get": lambda i: store.get(conv, last=WINDOW),
    }
    reads = 10 * n
    times = race(contenders, {"save_fact": n, "add": n, "get_facts": reads, "get": reads},
                 chunks, repeats)  # fmt: skip
    return (
        f"{kind}: save_fact {us(times['save_fact'])} vs add {us(times['add'])}: "
        f"save_fact/add = {ratio_summary(paired(times, 'save_fact', 'add'))} | get_facts "
        f"({FACTS} facts) {us(times['get_facts'])} vs get(last={WINDOW}) {us(times['get'])}: "
        f"get_facts/get = {ratio_summary(paired(times, 'get_facts', 'get'))} (paired per "
        f"repeat, median [min..max] of {repeats} repeats, each the median of {chunks} "
        "rotated chunks)"
    )


def bench_stores(quick: bool) -> list[str]:
    """Both stores."""
    lines = []
    memory = MemoryStore.start_link()
    try:
        lines.append(bench_store("memory", memory, quick))
    finally:
        memory.stop()
    tmp = Path(tempfile.mkdtemp(prefix="otpmem-bench-ltm-"))
    disk = LevelDBStore.start_link(tmp / "db")
    try:
        lines.append(bench_store("leveldb", disk, quick))
    finally:
        disk.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return lines


class CheckedOnly:
    """A budget as a policy that only checks: the unreserved path (nothing held)."""

    def __init__(self, budget: Any) -> None:
        self.budget = budget

    def check(self, request: Request, store: UsageReader) -> Request:
        """The budget's check."""
        checked: Request = self.budget.check(request, store)
        return checked


def bench_turns(quick: bool) -> list[str]:
    """A plain turn against turns with injection, guardrails, and both."""
    calls, chunks, repeats = (40, 4, 3) if quick else (100, 10, 5)
    model = ScriptedModel(lambda messages: "ok")
    budgets = [TokenBudget(10**12, scope="user"), CostBudget("1000000", scope="user")]
    with ExitStack() as running:
        store = MemoryStore.start_link()
        running.callback(store.stop)
        ltm = LongTermMemory(store)
        agents = {}
        for name, options in {
            "plain": {},
            "ltm": {"long_term_memory": ltm},
            "guards": {"guardrails": budgets},
            "checked": {"guardrails": [CheckedOnly(b) for b in budgets]},
            "both": {"long_term_memory": ltm, "guardrails": budgets},
        }.items():
            user_id = f"user-{name}"
            seed_facts(store, user_id)
            agent = Agent.start_link(llm=model, memory=DefaultProvider(store, window=WINDOW),
                                     user_id=user_id, conversation_id=name, **options)  # fmt: skip
            running.callback(agent.stop)
            agents[name] = agent
        contenders: dict[str, Callable[[int], Any]] = {
            name: (lambda i, a=agent: a.run(TEXT)) for name, agent in agents.items()
        }
        times = race(contenders, dict.fromkeys(contenders, calls), chunks, repeats)
        injected = sum(1 for m in store.get(Conv("user-both", "both")) if m["role"] == "system")
    if injected:
        raise AssertionError("injected context was stored")
    both = paired(times, "both", "plain")
    ok = statistics.median(both) <= GOAL
    return [
        f"turn with LTM injection (profile + {FACTS} facts) and two guardrails "
        f"{us(times['both'])} vs plain turn {us(times['plain'])}: both/plain = "
        f"{ratio_summary(both)} (goal <= {GOAL}x: {verdict(ok)}) | injection alone "
        f"{ratio_summary(paired(times, 'ltm', 'plain'))} | two guardrails alone "
        f"{ratio_summary(paired(times, 'guards', 'plain'))}, reserved/unreserved "
        f"{ratio_summary(paired(times, 'guards', 'checked'))} (Agent.run, DefaultProvider("
        f"MemoryStore, window={WINDOW}), ScriptedModel; paired per repeat, median [min..max] "
        f"of {repeats} repeats, each the median of {chunks} rotated chunks of {calls})"
    ]


RELEVANT_FACTS = 1000
OTHER_FACTS = 3
STARTS = ("ka", "lo", "mi", "nu", "po", "ri", "su", "ta", "ve", "zo")
ENDS = ("ber", "cal", "dor", "fen", "gim", "hul", "jas", "kor", "lin", "mup", "nar", "pex",
        "qui", "ros", "sil", "tam", "usk", "vor", "wex", "yal")  # fmt: skip
WORDS = [a + b for a in STARTS for b in ENDS]


def phrase(rng: random.Random, n: int) -> str:
    """n words of the benchmark's vocabulary (200 made-up words: no stopwords, no stems)."""
    return " ".join(rng.choice(WORDS) for _ in range(n))


def seed_users(store: Any, users: int, rng: random.Random) -> None:
    """``users`` users with OTHER_FACTS facts each, and "bench" with RELEVANT_FACTS."""
    for u in range(users):
        user_id = f"user-{u:06d}"
        facts = [Fact(user_id, f"topic_{k}", phrase(rng, 4)) for k in range(OTHER_FACTS)]
        store.save_facts(user_id, facts)
    for start in range(0, RELEVANT_FACTS, 100):
        facts = [Fact("bench", f"topic_{k}", phrase(rng, 5)) for k in range(start, start + 100)]
        store.save_facts("bench", facts, max_facts=RELEVANT_FACTS)


def p50_us(values: Sequence[float]) -> str:
    """p50 and p99 of single calls, in microseconds."""
    ordered = sorted(values)
    p50, p99 = percentile(ordered, 0.5), percentile(ordered, 0.99)
    return f"p50 {p50 * 1e6:.0f} us, p99 {p99 * 1e6:.0f} us"


def single_calls(call: Callable[[int], Any], n: int, start: int) -> list[float]:
    """Seconds of each of n calls ``call(start + i)``."""
    out = []
    for i in range(start, start + n):
        t0 = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - t0)
    return out


def bench_relevant_on(kind: str, store: Any, quick: bool) -> str:
    """get_relevant against the newest-facts read, for one user among many."""
    users, n, repeats = (2_000, 100, 3) if quick else (100_000, 300, 7)
    rng = random.Random(7)
    t0 = time.perf_counter()
    seed_users(store, users, rng)
    seeded = time.perf_counter() - t0
    ltm = LongTermMemory(store)
    questions = [f"what about {phrase(rng, 2)}?" for _ in range(64)]
    for u in range(0, users, max(1, users // 2000)):  # other users asked: the cache is shared
        ltm.get_relevant(questions[u % 64], user_id=f"user-{u:06d}")
    contenders: dict[str, Callable[[int], Any]] = {
        "relevant": lambda i: ltm.get_relevant(questions[i % 64], user_id="bench", limit=5),
        "newest": lambda i: sorted(store.get_facts("bench"),
                                   key=lambda f: (-f.updated_at, f.key))[:5],
    }  # fmt: skip
    assert ltm.get_relevant(WORDS[0], user_id="bench")  # built once, before the clock
    calls: dict[str, list[float]] = {name: [] for name in contenders}
    ratios = []
    counter = 0
    for r in range(repeats):
        medians = {}
        for name in rotated(list(contenders), r):
            times = single_calls(contenders[name], n, counter)
            counter += n
            calls[name].extend(times)
            medians[name] = statistics.median(times)
        ratios.append(medians["relevant"] / medians["newest"])
    after_write = []
    for i in range(max(20, n // 10)):
        store.save_fact(Fact("bench", f"topic_{i % RELEVANT_FACTS}", phrase(rng, 5)),
                        max_facts=RELEVANT_FACTS)  # fmt: skip
        after_write.extend(single_calls(contenders["relevant"], 1, i))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fresh = LongTermMemory(store)
    fresh.get_relevant(WORDS[0], user_id="bench")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return (
        f"{kind}: get_relevant, a user with {RELEVANT_FACTS:,} facts among {users:,} users' "
        f"facts ({OTHER_FACTS} each, seeded in {seeded:.0f} s): {p50_us(calls['relevant'])} "
        f"vs the newest-facts read (get_facts sorted, top 5) {p50_us(calls['newest'])}: "
        f"relevant/newest p50 = {ratio_summary(ratios)} (per repeat, {repeats} repeats of "
        f"{n} calls each, rotated) | the question after a write to the user "
        f"{p50_us(after_write)} | cached index {held / RELEVANT_FACTS:.0f} B a fact"
    )


def on_both_stores(
    bench_on: Callable[[str, Any, bool], str], prefix: str, quick: bool
) -> list[str]:
    """``bench_on`` over a MemoryStore, then a LevelDBStore with sync=False (only reads are
    timed), each stopped after."""
    lines = []
    memory = MemoryStore.start_link()
    try:
        lines.append(bench_on("memory", memory, quick))
    finally:
        memory.stop()
    with scratch(prefix) as root:
        disk = LevelDBStore.start_link(root / "db", sync=False)
        try:
            lines.append(bench_on("leveldb (sync=False)", disk, quick))
        finally:
            disk.stop()
    return lines


def bench_relevant(quick: bool) -> list[str]:
    """get_relevant on both stores."""
    return on_both_stores(bench_relevant_on, "otpmem-bench-relevant-", quick)


AS_OF_KEYS, AS_OF_VERSIONS = 200, 5


def seed_timeline(store: Any, total: int) -> float:
    """Other users' facts up to ``total`` facts, and "bench" with AS_OF_KEYS keys of
    AS_OF_VERSIONS values a day apart; the time halfway through the bench user's days."""
    t0, day = 1_700_000_000.0, 86_400.0
    bench_records = AS_OF_KEYS * AS_OF_VERSIONS
    for u in range(max(0, total - bench_records) // OTHER_FACTS):
        user_id = f"user-{u:07d}"
        store.save_facts(user_id, [Fact(user_id, f"k{k}", "v") for k in range(OTHER_FACTS)])
    for version in range(AS_OF_VERSIONS):
        facts = [
            Fact("bench", f"topic_{k}", f"value {version}", valid_from=t0 + version * day)
            for k in range(AS_OF_KEYS)
        ]
        store.save_facts("bench", facts, max_facts=AS_OF_KEYS)
    return t0 + (AS_OF_VERSIONS // 2) * day + 1


def bench_as_of_on(kind: str, store: Any, quick: bool) -> str:
    """get_facts(as_of=) against the read of what is true now, one user among many."""
    total, n, repeats = (20_000, 100, 3) if quick else (1_000_000, 300, 7)
    t0 = time.perf_counter()
    at = seed_timeline(store, total)
    seeded = time.perf_counter() - t0
    assert {f.value for f in store.get_facts("bench", as_of=at)} == {"value 2"}
    contenders: dict[str, Callable[[int], Any]] = {
        "as_of": lambda i: store.get_facts("bench", as_of=at),
        "now": lambda i: store.get_facts("bench"),
    }
    calls: dict[str, list[float]] = {name: [] for name in contenders}
    ratios, counter = [], 0
    for r in range(repeats):
        medians = {}
        for name in rotated(list(contenders), r):
            times = single_calls(contenders[name], n, counter)
            counter += n
            calls[name].extend(times)
            medians[name] = statistics.median(times)
        ratios.append(medians["as_of"] / medians["now"])
    return (
        f"{kind}: get_facts(as_of=), a user with {AS_OF_KEYS} facts of {AS_OF_VERSIONS} "
        f"values each among {total:,} facts (seeded in {seeded:.0f} s): "
        f"{p50_us(calls['as_of'])} vs what is true now (get_facts) {p50_us(calls['now'])}: "
        f"as_of/now p50 = {ratio_summary(ratios)} (per repeat, {repeats} repeats of {n} "
        "calls each, rotated)"
    )


def bench_as_of(quick: bool) -> list[str]:
    """get_facts(as_of=) on both stores."""
    return on_both_stores(bench_as_of_on, "otpmem-bench-as-of-", quick)


class Correcting:
    """An extractor that corrects one key per call (a new value every time)."""

    blocks = False

    def __init__(self) -> None:
        self.n = 0

    def extract(self, messages: Sequence[Any], known: Sequence[Fact]) -> list[Decision]:
        """One UPDATE of ``city``."""
        self.n += 1
        return [Decision("UPDATE", "city", f"city {self.n}", index=len(messages) - 1)]


class Extracting:
    """One user's conversation on one store, extracted one new turn at a time."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.ltm = LongTermMemory(store, Correcting())
        self.conv = Conv("bench", "chat")

    def one(self) -> float:
        """Add a turn, then time its extraction (seconds)."""
        self.store.add(self.conv, [{"role": "user", "content": "I moved again."}])
        t0 = time.perf_counter()
        report = self.ltm.extract_now(self.conv)
        elapsed = time.perf_counter() - t0
        assert report.ok and report.processed == 1
        return elapsed

    def history(self) -> int:
        """How many superseded values the corrected key keeps."""
        return len(self.store.fact_history("bench", "city"))


def seed_others(store: Any, held: int, upto: int) -> None:
    """Other users' facts, 10 each, from ``held`` facts to ``upto``."""
    for u in range(held // 10, upto // 10):
        user_id = f"other-{u:07d}"
        store.save_facts(user_id, [Fact(user_id, f"k{k}", "v") for k in range(10)])


def bench_bounded_on(kind: str, full: Any, empty: Any, quick: bool) -> list[str]:
    """Extraction cost as the facts held grow, beside an empty store; the history size."""
    sizes = (1_000, 10_000, 100_000) if quick else (1_000, 10_000, 100_000, 1_000_000)
    n, repeats, warm = (100, 3, 2_000) if quick else (300, 5, 5_000)
    big, small = Extracting(full), Extracting(empty)
    kept = []
    for i in range(warm):  # the key's history at its bound long before the first timing
        big.one()
        if (i + 1) % 1_000 == 0:
            kept.append(big.history())
    for _ in range(warm):
        small.one()
    lines, held = [], 0
    for size in sizes:
        t0 = time.perf_counter()
        seed_others(full, held, size)
        held, seeded = size, time.perf_counter() - t0
        times: dict[str, list[float]] = {"held": [], "empty": []}
        ratios = []
        for r in range(repeats):
            medians = {}
            for name in rotated(["held", "empty"], r):
                side = big if name == "held" else small
                run = [side.one() for _ in range(n)]
                times[name].extend(run)
                medians[name] = statistics.median(run)
            ratios.append(medians["held"] / medians["empty"])
        lines.append(
            f"{kind}: one extraction (one turn correcting a key) with {size:,} facts held "
            f"(seeded in {seeded:.0f} s): {p50_us(times['held'])} vs the same on an empty "
            f"store {p50_us(times['empty'])}: held/empty p50 = {ratio_summary(ratios)} "
            f"(per repeat, {repeats} repeats of {n}, rotated)"
        )
        kept.append(big.history())
    total = big.ltm.extractor.n  # type: ignore[union-attr]
    lines.append(
        f"{kind}: the corrected key's history after every 1,000 corrections, then after each "
        f"size: {kept} entries ({total:,} corrections in all; bound keep_history="
        f"{KEEP_FACT_HISTORY})"
    )
    assert max(kept) <= KEEP_FACT_HISTORY
    return lines


def bench_bounded(quick: bool) -> list[str]:
    """Extraction cost flat as facts are held, and the history bounded, on both stores."""
    lines = []
    with ExitStack() as stack:
        full, empty = MemoryStore.start_link(), MemoryStore.start_link()
        stack.callback(full.stop)
        stack.callback(empty.stop)
        lines += bench_bounded_on("memory", full, empty, quick)
    with scratch("otpmem-bench-bounded-") as root, ExitStack() as stack:
        full = LevelDBStore.start_link(root / "full", sync=False)
        stack.callback(full.stop)
        empty = LevelDBStore.start_link(root / "empty", sync=False)
        stack.callback(empty.stop)
        lines += bench_bounded_on("leveldb (sync=False)", full, empty, quick)
    return lines


def main(quick: bool) -> list[str]:
    """Run every long-term benchmark."""
    return [
        *bench_stores(quick),
        *bench_turns(quick),
        *bench_relevant(quick),
        *bench_as_of(quick),
        *bench_bounded(quick),
    ]


if __name__ == "__main__":
    import sys

    for result in main("--quick" in sys.argv):
        print(result)
