"""A summarising provider in a turn loop, in beamai's order (``history`` -> ``prepare(history
+ [question])`` -> model -> ``append([question, reply])``) and with the question appended
first: each turn reads a bounded tail (counted through the store, not timed), summaries
roll only when the threshold says, each covers exactly the messages after the one before,
and the loop goes on across a store crash and a reopen."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from otpmem.actors import faults
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import History, Pipeline, PipelineProvider, SlidingWindow, Summarization
from otpmem.messages import Conv, is_pinned
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import Supervisor
from tests.pipeline_support import (
    SYSTEM,
    CountingStore,
    assistant,
    exchanges,
    summaries,
    user,
)

CONV = Conv("ann", "long")
STORED = 2000
TAIL = 64 + 8  # the first read, plus the pinned: system and summaries
Build = Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]]

BUILDS: dict[str, Build] = {
    "history + [question]": lambda h, q: h + [q],  # noqa: RUF005 - beamai builds a new list
    "[*history, question]": lambda h, q: [*h, q],
    "list(history) + [question]": lambda h, q: [*list(h), q],
}


class Folds:
    """A summarize_fn that records what each roll folds."""

    def __init__(self) -> None:
        self.aged: list[list[str]] = []

    def __call__(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        self.aged.append([str(m.get("content")) for m in messages])
        return f"roll {len(self.aged)} of {len(messages)}"


def filled(store: Any) -> None:
    store.add(CONV, [SYSTEM, *exchanges(STORED)])


def beamai_turn(provider: PipelineProvider, n: int, build: Build) -> list[Any]:
    """beamai_agent's order: load, prepare with the new question (not yet stored), call
    the model, persist the question and the reply at the end."""
    question = user(f"turn {n}?")
    sent = provider.prepare(CONV, build(provider.history(CONV), question))
    reply = assistant(f"reply {n}")
    provider.append(CONV, [question, reply])
    return sent


def question_first_turn(provider: PipelineProvider, n: int, build: Build) -> list[Any]:
    """The question stored first, then load, prepare, and store the reply."""
    provider.append(CONV, [user(f"turn {n}?")])
    sent = provider.prepare(CONV, provider.history(CONV))
    provider.append(CONV, [assistant(f"reply {n}")])
    return sent


ORDERS = {"beamai": beamai_turn, "question first": question_first_turn}


def check_summaries(store: Any, folds: Folds) -> None:
    """Each stored summary covers [0, end) of the unpinned messages, rolled from the one
    before, and folded exactly the messages between the two ends."""
    unpinned = [str(m.get("content")) for m in store.get(CONV) if not is_pinned(m)]
    stored = summaries(store, CONV)
    assert len(stored) == len(folds.aged)
    end = 0
    for summary, aged in zip(stored, folds.aged, strict=True):
        provenance = summary["metadata"]["summary"]
        assert provenance["rolled_from"] == (None if end == 0 else [0, end])
        covers = provenance["covers"]
        assert covers[0] == 0 and covers[1] > end
        assert aged == unpinned[end : covers[1]]
        end = covers[1]


LOOPS = [("beamai", build) for build in BUILDS] + [("question first", "history + [question]")]


@pytest.mark.parametrize(("order", "build"), LOOPS)
def test_a_summarising_loop_reads_a_bounded_tail_and_rolls_by_the_threshold(
    order: str, build: str
) -> None:
    memory = MemoryStore.start_link()
    try:
        filled(memory)
        store = CountingStore(memory)
        folds = Folds()
        provider = PipelineProvider(
            store, Pipeline([Summarization(20, 10, folds), SlidingWindow(20)])
        )
        reference = Pipeline([Summarization(20, 10, lambda m, p: "x"), SlidingWindow(20)])
        reads: list[int] = []
        for n in range(21):
            # what a whole read of the conversation would send this turn
            expected = reference.run([*memory.get(CONV), user(f"turn {n}?")])
            mark = len(store.reads)
            sent = ORDERS[order](provider, n, BUILDS[build])
            reads.append(store.read_since(mark))
            assert sent[0] == SYSTEM and sent[1]["content"].startswith("Summary of")
            assert sent[1]["metadata"] == expected[1]["metadata"] | {
                "summary": {**expected[1]["metadata"]["summary"], "summarizer": ANY}
            }
            assert sent[2:] == expected[2:] and sent[-1] == user(f"turn {n}?")
        # one whole read to fold the 2,000 messages stored with no summary, then a tail
        assert reads[0] >= STORED
        assert max(reads[1:]) <= TAIL, reads
        # a roll at the first turn, then each time 20 messages await one: every 5 turns
        assert len(folds.aged) == 5
        check_summaries(memory, folds)
        assert memory.count(CONV) == 1 + STORED + 42 + 5
    finally:
        memory.stop()


@pytest.mark.parametrize("order", ORDERS)
def test_the_summarize_preset_rolls_five_summaries_in_21_turns(order: str) -> None:
    memory = MemoryStore.start_link()
    try:
        filled(memory)
        provider = PipelineProvider(memory, "summarize")
        for n in range(21):
            ORDERS[order](provider, n, BUILDS["history + [question]"])
        stored = summaries(memory, CONV)
        assert len(stored) == 5
        assert [s["metadata"]["summary"]["summarizer"] for s in stored] == ["extractive"] * 5
        ends = [s["metadata"]["summary"]["covers"][1] for s in stored]
        assert ends == sorted(ends) and ends[1] - ends[0] == 10
    finally:
        memory.stop()


def test_history_keeps_its_offset_when_a_question_is_added() -> None:
    memory = MemoryStore.start_link()
    try:
        filled(memory)
        provider = PipelineProvider(memory, "summarize")
        beamai_turn(provider, 0, BUILDS["history + [question]"])
        history = provider.history(CONV)
        assert isinstance(history, History) and history.offset > 0
        longer = history + [user("next?")]  # noqa: RUF005 - the operator under test
        assert isinstance(longer, History) and longer.offset == history.offset
        assert history.copy().offset == history.offset
        history.extend([user("in place")])
        assert history.offset == longer.offset
    finally:
        memory.stop()


def test_an_agent_turn_loop_reads_a_bounded_tail_and_rolls_by_the_threshold() -> None:
    memory = MemoryStore.start_link()
    try:
        filled(memory)
        store = CountingStore(memory)
        folds = Folds()
        provider = PipelineProvider(
            store, Pipeline([Summarization(20, 10, folds), SlidingWindow(20)])
        )
        agent = Agent.start_link(
            llm=ScriptedModel(lambda messages, tools: f"seen {len(messages)}", blocks=False),
            memory=provider,
            conversation_id="long",
            user_id="ann",
        )
        try:
            reads = []
            for n in range(21):
                mark = len(store.reads)
                assert agent.run(f"turn {n}?").content.startswith("seen ")
                reads.append(store.read_since(mark))
        finally:
            agent.stop()
        assert max(reads[1:]) <= TAIL, reads
        assert len(folds.aged) == 5
        check_summaries(memory, folds)
    finally:
        memory.stop()


def test_the_loop_goes_on_across_a_crash_of_the_supervised_store() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("summary-loop")])
    try:
        memory = MemoryStore.named("summary-loop")
        filled(memory)
        store = CountingStore(memory)
        folds = Folds()
        provider = PipelineProvider(
            store, Pipeline([Summarization(20, 10, folds), SlidingWindow(20)])
        )
        for n in range(8):
            beamai_turn(provider, n, BUILDS["history + [question]"])
        # the store is killed in turn 8 between its read and its prepare, and in turn 10
        # between its prepare (which rolls a summary, waiting in the provider) and its append
        for n in range(8, 21):
            question = user(f"turn {n}?")
            history = provider.history(CONV)
            mark = len(store.reads)
            if n == 8:
                faults.kill(memory, grace=5.0)
                sup.sync_tree()
            sent = provider.prepare(CONV, history + [question])  # noqa: RUF005 - as beamai
            assert sent[-1] == question
            if n == 10:
                assert sent[1]["metadata"]["summary"]["rolled_from"] is not None
                assert summaries(memory, CONV)[-1] != sent[1]  # not stored yet
                faults.kill(memory, grace=5.0)
                sup.sync_tree()
            provider.append(CONV, [question, assistant(f"reply {n}")])
            assert store.read_since(mark) == 0  # prepare reads nothing
            mark = len(store.reads)
            provider.history(CONV)
            assert store.read_since(mark) <= TAIL
        assert len(folds.aged) == 5
        check_summaries(memory, folds)
        assert memory.count(CONV) == 1 + STORED + 42 + 5  # nothing lost, nothing twice
    finally:
        sup.stop()


def test_the_loop_goes_on_after_a_reopen_with_a_new_provider(tmp_path: Path) -> None:
    path = tmp_path / "db"
    folds = Folds()

    def provider_over(store: Any) -> PipelineProvider:
        return PipelineProvider(store, Pipeline([Summarization(20, 10, folds), SlidingWindow(20)]))

    first = LevelDBStore.start_link(path)
    try:
        filled(first)
        provider = provider_over(first)
        for n in range(9):
            beamai_turn(provider, n, BUILDS["history + [question]"])
    finally:
        first.stop()
    again = LevelDBStore.start_link(path)
    try:
        store = CountingStore(again)
        provider = provider_over(store)  # a new process: nothing remembered
        reads = []
        for n in range(9, 21):
            mark = len(store.reads)
            beamai_turn(provider, n, BUILDS["[*history, question]"])
            reads.append(store.read_since(mark))
        assert max(reads) <= TAIL, reads
        assert len(folds.aged) == 5
        check_summaries(again, folds)
    finally:
        again.stop()
