"""Recall benchmarks: retrieval quality on generated conversations, and what recall costs.

1. Quality. Generated users (``personas``) state eight facts once each, in early sessions of
   a long multi-session history, among distractors that share the facts' words ("my
   *brother* moved to...", "my coworker's *allergy*...") and small talk; much later they
   ask about each fact in other words ("Where does my sister live now?"). The evidence of
   a question is the one message that stated its fact. recall@k: the share of questions
   whose evidence is among the first k results, scoped to the asking user. Contenders,
   over the same messages in the same run: ``RecallIndex.get_relevant`` (fused), the raw
   bm25s library indexed per user at its defaults (its tokenizer, English stopwords: the
   baseline), bm25s given otpmem's tokens (stopwords and stemming: what the analyzer is
   worth), the index's own BM25 alone (``weights=(1, 0)``), ``HashingEmbedder`` alone
   (``weights=(0, 1)``) and the fused ranking with duplicates kept (``distinct=False``:
   what collapsing copies is worth). Goal: fused recall@10 >= 1.1 x raw bm25s recall@10.
2. Query latency p50/p99 of ``get_relevant`` for a user holding 1,000 messages, with 10k
   and with 1M messages indexed in all (the other users' messages must not matter): goal
   p50 <= 5 ms at 1M. Index build per 100k messages (every tenant's first catch-up).
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

Generated data is deterministic (``random.Random(seed)``). ``--quick`` uses 20 users for
quality and 10k / 100k for latency; the full run 60 users and 10k / 1M (about 2 GB).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from _common import percentile, verdict

from otpmem.memory.recall import RecallIndex, RecallIndexHandle
from otpmem.memory.recall.lexical import tokenize
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle

QUALITY_GOAL = 1.1
P50_GOAL_MS = 5.0
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


@dataclass
class Question:
    """A question a user asks, and where its evidence is."""

    user: str
    text: str
    evidence: tuple[Conv, int]


def personas(
    users: int, seed: int = 7, sessions: int = 10, turns: int = 20
) -> tuple[dict[Conv, list[dict[str, Any]]], list[Question]]:
    """Deterministic conversations and questions: ``users`` x ``sessions`` x ``turns``."""
    rng = random.Random(seed)
    convs: dict[Conv, list[dict[str, Any]]] = {}
    questions: list[Question] = []
    for u in range(users):
        user = f"user{u:04d}"
        plan: list[list[tuple[str, str | None]]] = [[] for _ in range(sessions)]
        facts = {}
        for name, (values, fact_t, question_t, distract_t) in CATEGORIES.items():
            value = rng.choice(values)
            fill = {"v": value, "c": rng.choice(COLORS), "a": rng.choice(ANIMALS)}
            other = rng.choice([x for x in values if x != value])
            text = rng.choice(fact_t).format(**fill)
            session = rng.randrange(0, sessions // 2)
            plan[session].append((text, name))
            facts[name] = question_t
            for _ in range(3):
                d = rng.choice(distract_t).format(**{**fill, "w": other, "a": rng.choice(ANIMALS)})
                plan[rng.randrange(sessions)].append((d, None))
        where: dict[str, tuple[Conv, int]] = {}
        for s in range(sessions):
            conv = Conv(user, f"session{s:02d}")
            items = plan[s] + [(rng.choice(SMALL_TALK), None) for _ in range(turns - len(plan[s]))]
            rng.shuffle(items)
            messages: list[dict[str, Any]] = []
            for text, fact in items:
                if fact is not None:
                    where[fact] = (conv, len(messages))
                messages.append({"role": "user", "content": text})
                messages.append({"role": "assistant", "content": rng.choice(REPLIES)})
            convs[conv] = messages
        for name, question_t in facts.items():
            for text in question_t:
                questions.append(Question(user, text, where[name]))
    return convs, questions


def recall_at(
    ranked: Sequence[Sequence[tuple[Conv, int]]], questions: Sequence[Question], k: int
) -> float:
    """Share of questions whose evidence is in the first k of their ranking."""
    found = sum(q.evidence in r[:k] for r, q in zip(ranked, questions, strict=True))
    return found / len(questions)


def bm25s_rankings(
    convs: dict[Conv, list[dict[str, Any]]],
    questions: Sequence[Question],
    k: int,
    analyzer: Callable[[str], list[str]] | None = None,
) -> list[list[tuple[Conv, int]]]:
    """Raw bm25s, one index per user over that user's messages, default settings; with
    ``analyzer``, given those tokens instead of its own tokenizer's."""
    by_user: dict[str, list[tuple[Conv, int, str]]] = {}
    for conv, messages in convs.items():
        for i, m in enumerate(messages):
            by_user.setdefault(str(conv.user_id), []).append((conv, i, m["content"]))

    def tokens(texts: list[str]) -> Any:
        if analyzer is None:
            return bm25s.tokenize(texts, stopwords="en", show_progress=False)
        return [analyzer(t) for t in texts]

    retrievers = {}
    for user, docs in by_user.items():
        retriever = bm25s.BM25()
        retriever.index(tokens([d[2] for d in docs]), show_progress=False)
        retrievers[user] = (retriever, docs)
    out = []
    for q in questions:
        retriever, docs = retrievers[q.user]
        if analyzer is None:
            ids, scores = retriever.retrieve(tokens([q.text]), k=k, show_progress=False)
            ranked = zip(ids[0], scores[0], strict=True)
        else:
            scores = retriever.get_scores(analyzer(q.text))
            ranked = ((i, scores[i]) for i in np.argsort(-scores, kind="stable")[:k])
        out.append([(docs[i][0], docs[i][1]) for i, s in ranked if s > 0])
    return out


def index_rankings(
    index: RecallIndexHandle, questions: Sequence[Question], k: int, distinct: bool = True
) -> list[list[tuple[Conv, int]]]:
    """``get_relevant`` for every question, scoped to its user."""
    return [
        [
            (h.conv, h.position)
            for h in index.get_relevant(q.text, user_id=q.user, limit=k, distinct=distinct)
        ]
        for q in questions
    ]


def quality(users: int) -> list[str]:
    """Result lines of the retrieval benchmark."""
    convs, questions = personas(users)
    store = MemoryStore.start_link()
    try:
        for conv, messages in convs.items():
            store.add(conv, messages)
        contenders: dict[str, list[list[tuple[Conv, int]]]] = {
            "raw bm25s (baseline)": bm25s_rankings(convs, questions, 10),
            "bm25s, otpmem's tokens": bm25s_rankings(convs, questions, 10, tokenize),
        }
        for label, weights, distinct in (
            ("index BM25 alone", (1.0, 0.0), True),
            ("HashingEmbedder alone", (0.0, 1.0), True),
            ("fused, duplicates kept", (1.0, 1.0), False),
            ("fused (get_relevant)", (1.0, 1.0), True),
        ):
            index = RecallIndex.start_link(store, weights=weights)
            try:
                contenders[label] = index_rankings(index, questions, 10, distinct)
            finally:
                index.stop()
    finally:
        store.stop()
    n = sum(len(m) for m in convs.values())
    base = recall_at(contenders["raw bm25s (baseline)"], questions, 10)
    lines = [f"recall quality: {users} users, {n} messages, {len(questions)} questions"]
    for label, ranked in contenders.items():
        r5, r10 = recall_at(ranked, questions, 5), recall_at(ranked, questions, 10)
        lines.append(
            f"  {label:<24} recall@5 {r5:.3f}  recall@10 {r10:.3f}  "
            f"({r10 / base:.2f}x raw bm25s @10)"
        )
    fused = recall_at(contenders["fused (get_relevant)"], questions, 10)
    lines.append(
        f"  fused / raw bm25s recall@10 = {fused / base:.3f}x "
        f"(goal >= {QUALITY_GOAL}x) {verdict(fused / base >= QUALITY_GOAL)}"
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
    lines = quality(20 if quick else 60)
    small, p50_small = latency(10_000)
    big, p50_big = latency(100_000 if quick else 1_000_000)
    lines += small + big
    lines.append(
        f"  p50 at the larger size / at 10k: {p50_big / p50_small:.2f}x; goal p50 <= "
        f"{P50_GOAL_MS} ms: {verdict(p50_big <= P50_GOAL_MS)}"
    )
    lines += add_cost()
    lines += reopen_cost(100_000 if quick else 1_000_000)
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line, flush=True)
