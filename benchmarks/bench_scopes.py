"""Scopes benchmark: what a scope beyond the user costs beside the user's own records.

Each figure is printed next to a baseline measured in the same run (this shared box swings
up to 2x between periods, perf_anchors.md): compare the paired ratios, never one absolute.

- ``save_fact`` and ``get_facts`` (50 facts) of ``Scope(user, team=...)`` against the same
  calls for the user, on a MemoryStore and a LevelDBStore (sync=True), interleaved per repeat:
  a scope's key is longer and its first write lists it under its user.
- Long-term injection for an agent's view of four scopes (user, agent, run, team: 50 facts
  each) against one user with the same 200 facts: ``LongTermMemory.context`` with a question,
  the indexes cached (what every turn after the first pays).
- ``join_scope`` into a team that has 1k members and one that has 100k: a join is O(1).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import ratio_summary, scratch

from otpmem.memory import LongTermMemory
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, MemoryStore, Scope, view_of

TEAM = Scope("ann", team="alpha")


def _per_op(fn: Callable[[int], Any], n: int, start: int = 0) -> float:
    began = time.perf_counter()
    for i in range(start, start + n):
        fn(i)
    return (time.perf_counter() - began) / n


def _writes_and_reads(store: Any, chunk: int, repeats: int) -> list[str]:
    saves: list[tuple[float, float]] = []
    reads: list[tuple[float, float]] = []
    done = 0
    for who in ("ann", TEAM):  # 50 facts each, read back below
        for i in range(50):
            store.save_fact(Fact(who, f"k{i}", f"value {i}"))
    for _ in range(repeats):
        scoped = _per_op(lambda i: store.save_fact(Fact(TEAM, f"s{i}", "v")), chunk, done)
        plain = _per_op(lambda i: store.save_fact(Fact("ann", f"s{i}", "v")), chunk, done)
        saves.append((scoped, plain))
        for i in range(done, done + chunk):  # back to 50 facts each
            store.delete_fact(TEAM, f"s{i}")
            store.delete_fact("ann", f"s{i}")
        done += chunk
        reads.append(
            (
                _per_op(lambda i: store.get_facts(TEAM), chunk * 4),
                _per_op(lambda i: store.get_facts("ann"), chunk * 4),
            )
        )
    return [
        _line("save_fact", saves),
        _line("get_facts (50)", reads),
    ]


def _line(what: str, pairs: list[tuple[float, float]]) -> str:
    ratios = [a / b for a, b in pairs]
    scoped = statistics.median(a for a, _ in pairs) * 1e6
    plain = statistics.median(b for _, b in pairs) * 1e6
    return f"{what} of a team scope {scoped:.1f} us vs the user's {plain:.1f} us: " + (
        ratio_summary(ratios)
    )


def _injection(calls: int, repeats: int) -> str:
    store = MemoryStore.start_link()
    try:
        view = view_of("ann", agent="planner", run="r1", team="alpha")
        for n, scope in enumerate(view):
            for i in range(50):
                store.save_fact(Fact(scope, f"k{n}-{i}", f"fact {n} {i} about topic{i % 7}"))
                store.save_fact(Fact("bob", f"k{n}-{i}", f"fact {n} {i} about topic{i % 7}"))
        ltm = LongTermMemory(store)
        pairs = []
        questions = [f"what about topic{i % 7}" for i in range(calls)]
        for _ in range(repeats):
            pairs.append(
                (
                    _per_op(lambda i: ltm.context(view, questions[i]), calls),
                    _per_op(lambda i: ltm.context("bob", questions[i]), calls),
                )
            )
    finally:
        store.stop()
    ratios = [a / b for a, b in pairs]
    viewed, single = (statistics.median(p[k] for p in pairs) * 1e6 for k in (0, 1))
    return (
        f"injection over a 4-scope view (4 x 50 facts) {viewed:.0f} us vs one user's 200 facts "
        f"{single:.0f} us: {ratio_summary(ratios)}"
    )


def _joins(sizes: tuple[int, ...], probe: int) -> str:
    store = MemoryStore.start_link()
    try:
        costs = []
        for size in sizes:
            team = Scope("ann", team=f"t{size}")
            for i in range(size):
                store.join_scope(team, Conv("ann", f"c{i}"))

            def join(i: int, team: Scope = team) -> None:
                store.join_scope(team, Conv("ann", f"new{i}"))

            costs.append(_per_op(join, probe))
    finally:
        store.stop()
    shown = ", ".join(f"{s:,} members {c * 1e6:.1f} us" for s, c in zip(sizes, costs, strict=True))
    return f"join_scope (MemoryStore): {shown}: {costs[-1] / costs[0]:.2f}x"


def main(quick: bool) -> list[str]:
    """Scoped writes and reads beside the user's, view injection, join cost by team size."""
    chunk, repeats = (50, 3) if quick else (140, 5)  # 50 + chunk facts: under the cap of 200
    lines = []
    with scratch("bench-scopes-") as root:
        for name, start in (
            ("MemoryStore", lambda: MemoryStore.start_link()),
            ("LevelDBStore", lambda: LevelDBStore.start_link(str(root / "db"))),
        ):
            store = start()
            try:
                lines += [
                    f"scopes {name}: {line}" for line in _writes_and_reads(store, chunk, repeats)
                ]
            finally:
                store.stop()
    lines.append("scopes " + _injection(200 if quick else 1000, repeats))
    lines.append("scopes " + _joins((1_000, 100_000) if not quick else (1_000, 20_000), 500))
    return lines


if __name__ == "__main__":
    print("\n".join(main(quick=True)))
