"""Recall benchmarks: retrieval quality on hand-written conversations, and what recall costs.

1. Quality on benchmarks/recall_eval/ (six long multi-session conversations, 308 questions
   asked weeks later in other words; see recall_eval.py): ``RecallIndex.get_relevant``
   against the raw bm25s library at its defaults over each message's plain text (the
   baseline), bm25s over richer text (speaker, stems, neighbours, date: what each adds), and
   the index without its context and with ``HashingEmbedder`` fused in. Goals: recall@10 >=
   1.25 x raw bm25s and >= 0.62 absolute. (Until issue 29 this ran on generated personas;
   a gain measured there, 1.255x, came out 0.91x on real conversations, so it is gone.)
2. Query latency p50/p99 of ``get_relevant`` for a user holding 1,000 messages, with 10k
   and with 1M messages indexed in all (the other users' messages must not matter): goal
   p50 <= 1 ms at 1M. Index build per 100k messages (every tenant's first catch-up).
3. ``add`` with an index: adds of one message to 1,000 conversations, alone, against the
   same adds with a RecallIndex running over the store (it pulls: an add pays nothing),
   and against adds followed by the index's catch-up of them (``refresh``: the indexing
   work, paid by the next query). Goal: add throughput with an index >= 0.8 x without.

4. Reopen: a LevelDB store of 1M messages (100k with ``--quick``; 1,000 tenants of 1,000)
   reopened, then every tenant's first query, in the same run: rebuilt from the store by
   an index that keeps nothing (``snapshots=False``: re-read, re-tokenize, re-embed), by
   one that writes its snapshots as it goes (and the write of what it queued), and reopened
   from those snapshots by a new index (one range read per tenant, no tokenizing or
   embedding, then one newest message per conversation checked against the store); a
   sample of answers is compared between the rebuilt and the reopened index.

The cost figures' data is generated, deterministic (``random.Random(seed)``). ``--quick``
uses 10k / 100k for latency; the full run 10k / 1M.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import bm25s
import recall_eval
from _common import percentile, verdict
from recall_eval import recall_at

from otpmem.memory.recall import RecallIndex, RecallIndexHandle
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle

QUALITY_GOAL = 1.25
ABSOLUTE_GOAL = 0.62
P50_GOAL_MS = 1.0
ADD_GOAL = 0.8


def _words(text: str) -> list[str]:
    """A list of values written as one line."""
    return text.split()


CITIES = [
    "Lyon",
    "Porto",
    "Krakow",
    "Osaka",
    "Denver",
    "Tallinn",
    "Quito",
    "Perth",
    "Bergen",
    "Nairobi",
    "Hanoi",
    "Austin",
]
ALLERGENS = [
    "peanuts",
    "shellfish",
    "penicillin",
    "latex",
    "pollen",
    "gluten",
    "sesame",
    "soy",
    "walnuts",
    "mustard",
]
ANIMALS = _words("dog cat rabbit parrot ferret hamster tortoise")
PET_NAMES = [
    "Biscuit",
    "Pepper",
    "Mochi",
    "Ziggy",
    "Luna",
    "Waffles",
    "Noodle",
    "Pixel",
    "Olive",
    "Clementine",
]
JOBS = [
    "nurse",
    "architect",
    "chef",
    "pilot",
    "librarian",
    "carpenter",
    "pharmacist",
    "surveyor",
    "welder",
]
COLORS = _words("red blue green silver black white yellow")
CARS = _words("Corolla Civic Golf Outback Model3 Mazda3 Leaf Fiesta")
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
]
HOBBIES = [
    "pottery",
    "climbing",
    "chess",
    "fencing",
    "birdwatching",
    "kayaking",
    "salsa",
    "knitting",
    "archery",
]
DISHES = _words("lasagna ramen paella moussaka pho tacos risotto biryani goulash")

# category: (values, fact templates, question templates, distractor templates).
# {v} is the user's value, {w} another value of the same kind.
CATEGORIES: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "allergy": (
        ALLERGENS,
        [
            "Just so you know, I'm seriously allergic to {v}.",
            "The doctor confirmed my {v} allergy after the tests.",
        ],
        ["What am I allergic to?", "Do you remember which allergy I have?"],
        [
            "My coworker has a terrible allergy to {w}.",
            "Allergy season is starting and everyone is sneezing.",
            "Is an allergy to {w} common in kids?",
        ],
    ),
    "sister": (
        CITIES,
        [
            "My sister just moved to {v} for a new job.",
            "My sister has been living in {v} since the spring.",
        ],
        ["Where does my sister live now?", "Which city did my sister move to?"],
        [
            "My brother moved to {w} last year.",
            "My sister loves cooking on Sundays.",
            "I might travel to {w} next month for a conference.",
        ],
    ),
    "pet": (
        PET_NAMES,
        [
            "We adopted a puppy last week and named her {v}.",
            "Our kitten {v} keeps knocking things off the table.",
        ],
        ["What is my pet called?", "What name did we give the animal we adopted?"],
        [
            "My neighbor's {a} barks all night.",
            "Pet food got expensive again this month.",
            "I read that a {a} needs a lot of attention.",
        ],
    ),
    "job": (
        JOBS,
        [
            "I work as a {v} at the hospital downtown.",
            "I've been a {v} for six years now.",
        ],
        ["What do I do for a living?", "What is my profession?"],
        [
            "My friend wants to become a {w} someday.",
            "Work was exhausting today, long meetings.",
            "Do you think a {w} earns a good salary?",
        ],
    ),
    "car": (
        CARS,
        [
            "I drive a {c} {v} to work every day.",
            "I finally bought a used {c} {v}.",
        ],
        ["What car do I drive?", "Which vehicle did I buy?"],
        [
            "My dad's {w} broke down on the highway.",
            "The car wash near my office closed.",
            "Is a {w} reliable in the winter?",
        ],
    ),
    "birthday": (
        MONTHS,
        [
            "My birthday is in {v}, I always throw a small party.",
            "I was born in {v}, right after the holidays.",
        ],
        ["When is my birthday?", "Which month was I born in?"],
        [
            "My mom's birthday is in {w}.",
            "{w} is usually rainy around here.",
            "We should plan a party for the team.",
        ],
    ),
    "hobby": (
        HOBBIES,
        [
            "On weekends I practice {v} with a local club.",
            "I picked up {v} as a hobby this year.",
        ],
        ["What do I do on weekends?", "What hobby did I take up?"],
        [
            "I watched a documentary about {w} yesterday.",
            "Weekends always go by too fast.",
            "My cousin says {w} is a great way to relax.",
        ],
    ),
    "food": (
        DISHES,
        [
            "My favorite dish is {v}, I could eat it every day.",
            "Nothing beats a plate of homemade {v} for me.",
        ],
        ["What food do I like best?", "What is my favourite meal?"],
        [
            "We had {w} at the office party.",
            "My favorite movie is probably an old western.",
            "Is {w} hard to cook at home?",
        ],
    ),
}

SMALL_TALK = [
    "How is the weather looking for tomorrow?",
    "Can you suggest a good book to read?",
    "I need to remember to call the bank.",
    "The train was late again this morning.",
    "Any tips for sleeping better?",
    "I am thinking about repainting the kitchen.",
    "What should I cook for dinner tonight?",
    "The meeting got moved to Thursday.",
    "I started running in the mornings.",
    "Remind me to water the plants.",
    "My phone battery dies so quickly lately.",
    "We are planning a trip to the mountains.",
]
REPLIES = [
    "Got it, thanks for telling me.",
    "That sounds good. Anything else?",
    "Noted.",
    "Interesting, tell me more.",
    "I understand.",
    "Happy to help with that.",
]


def quality() -> list[str]:
    """Result lines of the retrieval benchmark (benchmarks/recall_eval.py)."""
    questions, found = recall_eval.contenders()
    base = recall_eval.recall_at(found[recall_eval.BASELINE][0], questions, 10)
    users = len({q.user for q in questions})
    lines = [
        f"recall quality: benchmarks/recall_eval, {users} conversations, "
        f"{len(questions)} questions (recall@k: share of a question's evidence in its top k)"
    ]
    for label, (ranked, ms) in found.items():
        r5 = recall_at(ranked, questions, 5)
        r10 = recall_at(ranked, questions, 10)
        lines.append(
            f"  {label:<30} recall@5 {r5:.3f}  recall@10 {r10:.3f}  "
            f"({r10 / base:.2f}x raw bm25s @10)  {ms:.2f} ms/query"
        )
    ours, ours_ms = found[recall_eval.OURS]
    ratio = recall_at(ours, questions, 10) / base
    absolute = recall_at(ours, questions, 10)
    raw_ms = found[recall_eval.BASELINE][1]
    lines.append(
        f"  get_relevant / raw bm25s recall@10 = {ratio:.3f}x (goal >= {QUALITY_GOAL}x) "
        f"{verdict(ratio >= QUALITY_GOAL)}; {absolute:.3f} absolute (goal >= {ABSOLUTE_GOAL}) "
        f"{verdict(absolute >= ABSOLUTE_GOAL)}; per query {ours_ms / raw_ms:.1f}x raw bm25s's "
        "time (a call to the index's process, its catch-up read of the store, the ranking)"
    )
    return lines


def filler_store(users: int, per_user: int, seed: int = 3) -> MemoryStoreHandle:
    """A store of ``users`` x ``per_user`` small-talk messages in 10 conversations each."""
    rng = random.Random(seed)
    vocabulary = [w for t in SMALL_TALK + REPLIES for w in t.rstrip(".?!").split()]
    vocabulary += CITIES + ALLERGENS + JOBS + HOBBIES + DISHES + PET_NAMES
    store = MemoryStore.start_link()
    per_conv = per_user // 10
    for u in range(users):
        for c in range(10):
            store.add(
                Conv(f"user{u:05d}", f"c{c}"),
                [
                    {
                        "role": "user" if i % 2 == 0 else "assistant",
                        "content": " ".join(rng.choice(vocabulary) for _ in range(12)),
                    }
                    for i in range(per_conv)
                ],
            )
    return store


def latency(total: int, per_user: int = 1000, queries: int = 300) -> tuple[list[str], float]:
    """p50/p99 of get_relevant at ``total`` messages indexed; build seconds per 100k."""
    users = total // per_user
    store = filler_store(users, per_user)
    index = RecallIndex.start_link(store)
    try:
        t0 = time.perf_counter()
        for u in range(users):
            index.refresh(user_id=f"user{u:05d}", timeout=600.0)
        build = (time.perf_counter() - t0) / total * 100_000
        rng = random.Random(1)
        asked = [rng.randrange(users) for _ in range(queries)]
        texts = [rng.choice(SMALL_TALK) for _ in range(queries)]
        for u, text in zip(asked[:20], texts[:20], strict=True):
            index.get_relevant(text, user_id=f"user{u:05d}", limit=10)  # warm-up
        lat = []
        for u, text in zip(asked, texts, strict=True):
            t = time.perf_counter()
            index.get_relevant(text, user_id=f"user{u:05d}", limit=10)
            lat.append(time.perf_counter() - t)
        lat.sort()
        p50, p99 = percentile(lat, 0.5) * 1e3, percentile(lat, 0.99) * 1e3
    finally:
        index.stop()
        store.stop()
    line = (
        f"get_relevant at {total:>9,} indexed ({per_user} per user): "
        f"p50 {p50:.2f} ms  p99 {p99:.2f} ms  (build {build:.2f} s per 100k)"
    )
    return [line], p50


def build_cost(users: int = 20, per_user: int = 1000, rounds: int = 3) -> list[str]:
    """Index build and incremental add, against raw bm25s in the same run.

    Build: every tenant's first catch-up (reads, analysis, postings) against bm25s
    tokenizing and indexing the same texts. Add: one new message in a tenant of
    ``per_user``, caught up by the index; bm25s has no incremental add (its index is a
    static matrix), so its figure is the re-index of that tenant's texts.
    """
    from otpmem.memory.recall.queries import Engine

    store = filler_store(users, per_user)
    try:
        texts = [m["content"] for c in store.conversations() for m in store.get(c)]
        ratios, ours_s, raw_s = [], [], []
        for _ in range(rounds):
            engine = Engine(store, None, 10**8, (1.0, 0.0), (0.5, 0.3, 1.0))
            t0 = time.perf_counter()
            for u in range(users):
                engine.tenants.catch_up(f"user{u:05d}", None)
            ours = time.perf_counter() - t0
            t0 = time.perf_counter()
            corpus = bm25s.tokenize(texts, stopwords="en", show_progress=False)
            bm25s.BM25().index(corpus, show_progress=False)
            raw = time.perf_counter() - t0
            ratios.append(ours / raw)
            ours_s.append(ours)
            raw_s.append(raw)
        conv = Conv("user00000", "c0")
        tenant = [m["content"] for c in store.conversations("user00000") for m in store.get(c)]
        adds, rebuilds = [], []
        for n in range(20):
            store.add(conv, [{"role": "user", "content": f"one more message number {n}"}])
            t0 = time.perf_counter()
            engine.tenants.catch_up("user00000", None)
            adds.append(time.perf_counter() - t0)
            tenant.append(f"one more message number {n}")
            t0 = time.perf_counter()
            bm25s.BM25().index(
                bm25s.tokenize(tenant, stopwords="en", show_progress=False), show_progress=False
            )
            rebuilds.append(time.perf_counter() - t0)
    finally:
        store.stop()
    ratio = statistics.median(ratios)
    per = 100_000 / len(texts)
    add, rebuild = statistics.median(adds) * 1e3, statistics.median(rebuilds) * 1e3
    return [
        f"index build, {len(texts):,} messages in {users} tenants: "
        f"{statistics.median(ours_s) * per:.2f} s per 100k; raw bm25s "
        f"{statistics.median(raw_s) * per:.2f} s per 100k; {ratio:.2f}x (goal <= 2x) "
        f"{verdict(ratio <= 2.0)}",
        f"  incremental add of one message to a {per_user}-message tenant: {add:.3f} ms "
        f"(bm25s re-indexes the tenant: {rebuild:.2f} ms; {add / rebuild:.3f}x)",
    ]


def add_cost(convs: int = 1000, rounds: int = 5) -> list[str]:
    """add throughput alone, with an index running, and with its catch-up paid."""

    def run(mode: str) -> float:
        store = MemoryStore.start_link()
        index = RecallIndex.start_link(store) if mode != "alone" else None
        try:
            message = [{"role": "user", "content": "the train was late again this morning"}]
            keys = [Conv(f"u{i % 50}", f"c{i}") for i in range(convs)]
            for key in keys:
                store.add(key, message)
            if index is not None:
                for u in range(50):
                    index.refresh(user_id=f"u{u}")
            t0 = time.perf_counter()
            for key in keys:
                store.add(key, message)
            if mode == "catch-up" and index is not None:
                for u in range(50):
                    index.refresh(user_id=f"u{u}")
            return convs / (time.perf_counter() - t0)
        finally:
            if index is not None:
                index.stop()
            store.stop()

    rates: dict[str, list[float]] = {"alone": [], "indexed": [], "catch-up": []}
    for r in range(rounds):
        for mode in list(rates)[r % 3 :] + list(rates)[: r % 3]:
            rates[mode].append(run(mode))
    alone = statistics.median(rates["alone"])
    idle = statistics.median(a / b for a, b in zip(rates["indexed"], rates["alone"], strict=True))
    paid = statistics.median(a / b for a, b in zip(rates["catch-up"], rates["alone"], strict=True))
    return [
        f"add to MemoryStore, 1 message x {convs} conversations: {alone:,.0f}/s alone",
        f"  with a RecallIndex over the store: {idle:.2f}x (goal >= {ADD_GOAL}x) "
        f"{verdict(idle >= ADD_GOAL)}",
        f"  with the index's catch-up of those adds paid too: {paid:.2f}x "
        "(the indexing work, paid by the next query)",
    ]


def reopen_cost(total: int = 1_000_000, per_user: int = 1000) -> list[str]:
    """A LevelDB store of ``total`` messages reopened, then every tenant's first query:
    rebuilt from the store (snapshots off, then on) against reopened from snapshots."""
    users = total // per_user
    owners = [f"user{u:05d}" for u in range(users)]
    rng = random.Random(4)
    vocabulary = [w for t in SMALL_TALK + REPLIES for w in t.rstrip(".?!").split()]
    sample = owners[:: max(1, users // 20)]

    def first_queries(index: RecallIndexHandle) -> tuple[float, float]:
        t0 = time.perf_counter()
        index.refresh(user_id=owners[0], timeout=600.0)
        one = time.perf_counter() - t0
        for owner in owners[1:]:
            index.refresh(user_id=owner, timeout=600.0)
        return one, time.perf_counter() - t0

    def answers(index: RecallIndexHandle) -> list[Any]:
        return [
            [(h.conv, h.position, h.score) for h in index.get_relevant(q, user_id=o, limit=10)]
            for o in sample
            for q in ("the train was late", "weekend plans")
        ]

    with tempfile.TemporaryDirectory(dir=os.environ.get("OTPMEM_BENCH_DIR")) as where:
        path = Path(where) / "db"
        store = LevelDBStore.start_link(path, sync=False)
        for owner in owners:
            for c in range(10):
                store.add(
                    Conv(owner, f"c{c}"),
                    [
                        {
                            "role": "user",
                            "content": " ".join(rng.choice(vocabulary) for _ in range(12)),
                        }
                        for _ in range(per_user // 10)
                    ],
                )
        store.stop()
        t0 = time.perf_counter()
        store = LevelDBStore.start_link(path)
        opened = time.perf_counter() - t0
        try:
            index = RecallIndex.start_link(store, snapshots=False)
            try:
                one_rebuild, rebuild = first_queries(index)
                rebuilt = answers(index)
            finally:
                index.stop()
            index = RecallIndex.start_link(store)
            try:
                _, writing = first_queries(index)
                t0 = time.perf_counter()
                index.flush(timeout=1800.0)
                flush = time.perf_counter() - t0
            finally:
                index.stop()
            size = sum(f.stat().st_size for f in (path / "recall").iterdir())
            index = RecallIndex.start_link(store)
            try:
                one_reopen, reopen = first_queries(index)
                same = answers(index) == rebuilt
            finally:
                index.stop()
        finally:
            store.stop()
    return [
        f"LevelDB reopen with {total:,} messages ({users:,} tenants of {per_user:,}): store "
        f"open {opened * 1e3:.0f} ms; every tenant's first query:",
        f"  rebuilt from the store (snapshots off): {rebuild:.1f} s "
        f"({one_rebuild * 1e3:.0f} ms for one tenant)",
        f"  rebuilt, writing snapshots: {writing:.1f} s, then {flush:.1f} s to write what was "
        f"queued ({size / 1e6:,.0f} MB on disk)",
        f"  reopened from snapshots: {reopen:.1f} s ({one_reopen * 1e3:.0f} ms for one tenant): "
        f"{rebuild / reopen:.1f}x faster than the rebuild; same answers: {verdict(same)}",
    ]


def main(quick: bool) -> list[str]:
    """Every result line of this module."""
    lines = quality()
    small, p50_small = latency(10_000)
    big, p50_big = latency(100_000 if quick else 1_000_000)
    lines += small + big
    lines.append(
        f"  p50 at the larger size / at 10k: {p50_big / p50_small:.2f}x; goal p50 <= "
        f"{P50_GOAL_MS} ms: {verdict(p50_big <= P50_GOAL_MS)}"
    )
    lines += build_cost()
    lines += add_cost()
    lines += reopen_cost(100_000 if quick else 1_000_000)
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line, flush=True)
