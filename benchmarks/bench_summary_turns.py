"""A summarising provider's turn at 1k, 100k and 1M stored messages, in both turn orders.

One turn is beamai's agent loop with ``PipelineProvider(store, "summarize")`` (a rolling
summary past 20 messages keeping 10, then a window of 20): ``history(conv)``, then
``prepare(conv, history + [question])`` (the question not yet stored), then ``append(conv,
[question, reply])``; the other order appends the question first, then ``history``,
``prepare(conv, history)``, ``append(conv, [reply])``. Before the fix a turn in beamai's
order re-read the whole conversation and rolled a summary every turn (1.0 ms -> 96-139 ms
from 1k to 100k messages). The goal is t(1M) / t(1k) <= 1.5 in each order, and a summary
only when the threshold says: one per 5 turns (10 messages kept, 2 added a turn, a roll at
20). The baseline of the same run: the same turn with ``DefaultProvider(store, window=20)``
(a plain window, no summary) on the same conversations.

Each size is one MemoryStore conversation (a system message, then bench_memory's messages,
tool groups among them), added 10,000 messages an add; the three contenders take turns on
it in rotated chunks, so it grows by two messages a turn (the final lengths are printed).
Its first turn folds the whole history into the first summary, once: that is timed apart.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import race, ratio_summary, verdict
from bench_context import SYSTEM, conv_of, fill_memory

from otpmem.memory import DefaultProvider, PipelineProvider
from otpmem.messages import Conv, is_summary
from otpmem.stores import MemoryStore

GOAL = 1.5
TURNS_PER_SUMMARY = 5  # (threshold 20 - 10 kept) / 2 messages a turn


def sizes(quick: bool) -> list[int]:
    """The conversation lengths measured."""
    return [1_000, 10_000, 100_000] if quick else [1_000, 100_000, 1_000_000]


def beamai_turn(provider: Any, conv: Conv, n: int) -> Any:
    """beamai_agent's order: load, prepare with the new question, persist both at the end."""
    question = {"role": "user", "content": f"question {n}?"}
    sent = provider.prepare(conv, provider.history(conv) + [question])  # noqa: RUF005 - as beamai
    provider.append(conv, [question, {"role": "assistant", "content": f"reply {n}"}])
    return sent


def question_first_turn(provider: Any, conv: Conv, n: int) -> Any:
    """The question stored first, then load, prepare, and store the reply."""
    provider.append(conv, [{"role": "user", "content": f"question {n}?"}])
    sent = provider.prepare(conv, provider.history(conv))
    provider.append(conv, [{"role": "assistant", "content": f"reply {n}"}])
    return sent


def summaries(store: Any, conv: Conv) -> int:
    """How many summaries the conversation holds, superseded ones too (a whole read, so
    never inside the timing)."""
    return sum(1 for m in store.get(conv) if is_summary(m))


def measure(store: Any, lengths: list[int], quick: bool) -> list[str]:
    """Per-turn cost of both orders and of the window baseline at every length."""
    calls, chunks, repeats = (15, 3, 3) if quick else (30, 4, 3)
    summarising = PipelineProvider(store, "summarize")
    window = DefaultProvider(store, window=20)
    counter = iter(range(10**9))
    lines: list[str] = []
    contenders: dict[str, Callable[[], Any]] = {}
    for n in lengths:
        conv = conv_of(n)
        t0 = time.perf_counter()
        beamai_turn(summarising, conv, next(counter))
        lines.append(
            f"  first turn on {n:,} messages (folds them all into the first summary, once): "
            f"{(time.perf_counter() - t0) * 1e3:.0f} ms"
        )
        for label, turn, provider in (
            ("beamai order", beamai_turn, summarising),
            ("question first", question_first_turn, summarising),
            ("window baseline", beamai_turn, window),
        ):

            def run(
                turn: Any = turn, provider: Any = provider, conv: Conv = conv, name: str = label
            ) -> Any:
                sent = turn(provider, conv, next(counter))
                if sent[0] != SYSTEM:
                    raise AssertionError(f"{name} on {conv} lost the system message")
                return sent

            contenders[f"{label} {n}"] = run
    before = {n: (store.count(conv_of(n)), summaries(store, conv_of(n))) for n in lengths}
    warmup = dict.fromkeys(contenders, 5)
    times = race(contenders, dict.fromkeys(contenders, calls), chunks, repeats, warmup)
    each = 5 + calls * chunks * repeats  # turns per contender and size, warm-up included
    turns = 2 * each  # the summarising ones: the window's turns add messages, roll nothing
    small, big = lengths[0], lengths[-1]
    for label in ("beamai order", "question first", "window baseline"):
        flat = [
            b / s for b, s in zip(times[f"{label} {big}"], times[f"{label} {small}"], strict=True)
        ]
        per_size = " | ".join(
            f"{n:,}: {statistics.median(times[f'{label} {n}']) * 1e6:.0f} us" for n in lengths
        )
        line = f"{label} per turn: {per_size} | t({big:,})/t({small:,}) = {ratio_summary(flat)}"
        if label == "window baseline":
            lines.append(f"{line} (the baseline)")
            continue
        versus = [
            a / b
            for a, b in zip(times[f"{label} {big}"], times[f"window baseline {big}"], strict=True)
        ]
        lines.append(
            f"PipelineProvider('summarize'), {line} (goal <= {GOAL}) -> "
            f"{verdict(statistics.median(flat) <= GOAL)} | vs the window baseline at {big:,}: "
            f"{ratio_summary(versus)}"
        )
    for n in lengths:
        count, rolled = store.count(conv_of(n)), summaries(store, conv_of(n)) - before[n][1]
        every = turns / rolled if rolled else float("inf")
        lines.append(
            f"  summaries rolled on the {n:,} conversation: {rolled} in {turns} summarising turns "
            f"(and {each} window turns), one per {every:.1f} (goal: one per "
            f"{TURNS_PER_SUMMARY}, not one a turn) -> "
            f"{verdict(abs(every - TURNS_PER_SUMMARY) <= 0.5)} | it grew from {before[n][0]:,} "
            f"to {count:,} messages"
        )
    return lines


def main(quick: bool) -> list[str]:
    """Run the summarising-turn benchmark on a MemoryStore."""
    lengths = sizes(quick)
    store = MemoryStore.start_link()
    try:
        fill_s = fill_memory(store, lengths)
        lines = measure(store, lengths, quick)
    finally:
        store.stop()
    lines.append(f"  {sum(lengths):,} messages added to the MemoryStore in {fill_s:.1f} s")
    return lines


if __name__ == "__main__":
    import sys

    for line in main("--quick" in sys.argv):
        print(line)
