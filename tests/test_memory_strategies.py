"""The memory pipeline (seed 004, after PhoenixAI.Store): pinned messages, strategy order,
presets, SlidingWindow, TokenTruncation, and rolling Summarization over a store."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from otpmem.llm import ChatModel, ChatResponse
from otpmem.memory import (
    PRESETS,
    SUMMARY_PREFIX,
    ExtractiveSummarizer,
    ModelSummarizer,
    Pipeline,
    PipelineProvider,
    PrepareContext,
    SlidingWindow,
    Strategy,
    Summarization,
    Summarizer,
    TokenTruncation,
)
from otpmem.memory.summarizers import SUMMARY_PROMPT
from otpmem.memory.window import is_pinned
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle
from tests.support import assert_pair_safe

CONV = Conv("bob", "strategies")


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str, **metadata: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "user", "content": text}
    if metadata:
        message["metadata"] = metadata
    return message


def assistant(text: str, **metadata: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if metadata:
        message["metadata"] = metadata
    return message


def calls(*ids: str, cost: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": f"f_{i}", "arguments": "{}"}}
            for i in ids
        ],
    }
    if cost is not None:
        message["metadata"] = {"cost": cost}
    return message


def result(call_id: str, cost: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "content": f"result of {call_id}",
    }
    if cost is not None:
        message["metadata"] = {"cost": cost}
    return message


def pinned_user(text: str) -> dict[str, Any]:
    return user(text, pinned=True)


def contents(messages: Sequence[Mapping[str, Any]]) -> list[Any]:
    return [m.get("content") for m in messages]


class CostCounter:
    """Counts ``metadata.cost`` (1 if absent) and records every message it counted."""

    def __init__(self) -> None:
        self.seen: list[Mapping[str, Any]] = []

    def count(self, message: Mapping[str, Any]) -> int:
        self.seen.append(message)
        metadata = message.get("metadata") or {}
        return int(metadata.get("cost", 1))


class Recording:
    """A Strategy with a custom priority that records when it ran and what it saw."""

    def __init__(self, priority: int, log: list[tuple[int, list[Any]]], drop_first: bool = False):
        self.priority = priority
        self.log = log
        self.drop_first = drop_first

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        self.log.append((self.priority, contents(messages)))
        return messages[1:] if self.drop_first else messages


class RecordingSummarizer:
    """Returns "S<n>" (or ``texts[n]``) and records (aged contents, previous) per call."""

    name = "recording"

    def __init__(self, fail_on: set[int] | None = None) -> None:
        self.calls: list[tuple[list[Any], str | None]] = []
        self.fail_on = fail_on or set()

    def summarize(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        self.calls.append((contents(messages), previous))
        n = len(self.calls)
        if n in self.fail_on:
            raise RuntimeError(f"summarizer exploded on call {n}")
        return f"S{n}" + (f" after [{previous}]" if previous else "")


class FakeModel:
    """A tiny ChatModel: answers from a list and records what it was asked."""

    name = "tiny"

    def __init__(self, replies: Sequence[str | None]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[list[Mapping[str, Any]], dict[str, Any]]] = []

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        self.requests.append((list(messages), options))
        return ChatResponse(content=self.replies[len(self.requests) - 1])


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    try:
        yield handle
    finally:
        handle.stop()


def summaries(store: MemoryStoreHandle, conv: Conv = CONV) -> list[dict[str, Any]]:
    return [
        m
        for m in store.get(conv)
        if m["role"] == "system" and "summary" in (m.get("metadata") or {})
    ]


def unpinned_count(store: MemoryStoreHandle, conv: Conv = CONV) -> int:
    return sum(
        1
        for m in store.get(conv)
        if m["role"] != "system" and not (m.get("metadata") or {}).get("pinned")
    )


# --- pinned messages -------------------------------------------------------------------


def test_pinned_messages_are_extracted_and_prepended_in_original_order() -> None:
    s1, p1, s2 = system("S1"), pinned_user("remember: vegan"), system("S2")
    messages = [user("u0"), s1, assistant("a0"), p1, user("u1"), s2, assistant("a1"), user("u2")]
    out = Pipeline([SlidingWindow(last=2)]).run(messages)
    assert out == [s1, p1, s2, assistant("a1"), user("u2")]
    assert out[0] is s1 and out[1] is p1 and out[2] is s2


def test_manually_pinned_messages_are_never_truncated() -> None:
    pins = [pinned_user(f"pin {i}") for i in range(10)]
    messages = [*pins, *[user(f"u{i}") for i in range(10)]]
    out = Pipeline([SlidingWindow(last=1), TokenTruncation(max_tokens=1)]).run(messages)
    assert out == [*pins, user("u9")]


def test_pinned_messages_are_never_counted_against_the_budget() -> None:
    counter = CostCounter()
    huge = system("x" * 100_000)
    pin = {**pinned_user("pinned"), "metadata": {"pinned": True, "cost": 10_000}}
    messages = [huge, pin, user("u0"), assistant("a0"), user("u1")]
    out = Pipeline([TokenTruncation(max_tokens=3, counter=counter)]).run(messages)
    assert out == messages
    assert counter.seen, "the strategy's counter was not used"
    assert all(m is not huge and m is not pin for m in counter.seen)


def test_strategies_see_only_the_unpinned_messages() -> None:
    log: list[tuple[int, list[Any]]] = []
    messages = [system("S"), user("u0"), pinned_user("P"), assistant("a0")]
    out = Pipeline([Recording(1, log)]).run(messages)
    assert log == [(1, ["u0", "a0"])]
    assert contents(out) == ["S", "P", "u0", "a0"]


def test_empty_input_and_no_strategies() -> None:
    assert Pipeline([SlidingWindow(3)]).run([]) == []
    messages = [user("u0"), system("S"), assistant("a0")]
    assert Pipeline([]).run(messages) == [system("S"), user("u0"), assistant("a0")]


# --- strategy order ----------------------------------------------------------------------


def test_strategies_run_by_ascending_priority_each_on_the_previous_output() -> None:
    log: list[tuple[int, list[Any]]] = []
    pipeline = Pipeline(
        [Recording(30, log, True), Recording(10, log, True), Recording(20, log, True)]
    )
    assert [s.priority for s in pipeline.strategies] == [10, 20, 30]
    out = pipeline.run([user("m0"), assistant("m1"), user("m2"), assistant("m3")])
    assert log == [
        (10, ["m0", "m1", "m2", "m3"]),
        (20, ["m1", "m2", "m3"]),
        (30, ["m2", "m3"]),
    ]
    assert contents(out) == ["m3"]


def test_documented_order_summarization_then_window_then_truncation() -> None:
    truncation, window, summarization = TokenTruncation(100), SlidingWindow(5), Summarization()
    assert (summarization.priority, window.priority, truncation.priority) == (50, 100, 200)
    pipeline = Pipeline([truncation, window, summarization])
    assert pipeline.strategies == [summarization, window, truncation]


def test_summarize_preset_summarizes_before_the_window_unlike_phoenix_ai_code() -> None:
    # PhoenixAI's code windows to 20 first, then summarizes the oldest half of the window;
    # ours folds everything older than the kept messages, message 0 included.
    summarizer = RecordingSummarizer()
    pipeline = Pipeline.preset("summarize", summarizer=summarizer)
    messages = [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(41)]
    out = pipeline.run(messages)
    assert len(summarizer.calls) == 1
    aged, previous = summarizer.calls[0]
    assert previous is None
    assert aged == [f"m{i}" for i in range(31)]
    assert contents(out)[1:] == [f"m{i}" for i in range(31, 41)]
    assert out[0]["content"] == SUMMARY_PREFIX + "S1"


# --- presets -----------------------------------------------------------------------------


def test_preset_default_is_a_window_of_50() -> None:
    (strategy,) = Pipeline.preset("default").strategies
    assert isinstance(strategy, SlidingWindow) and strategy.last == 50


def test_preset_aggressive_is_a_4096_token_truncation() -> None:
    (strategy,) = Pipeline.preset("aggressive").strategies
    assert isinstance(strategy, TokenTruncation) and strategy.max_tokens == 4096


def test_preset_summarize_is_summarization_20_10_then_window_20() -> None:
    summarizer = RecordingSummarizer()
    first, second = Pipeline.preset("summarize", summarizer=summarizer).strategies
    assert isinstance(first, Summarization)
    assert (first.threshold, first.keep_recent) == (20, 10)
    assert first.summarizer is summarizer
    assert isinstance(second, SlidingWindow) and second.last == 20
    (default_summarizer, _) = Pipeline.preset("summarize").strategies
    assert isinstance(default_summarizer, Summarization)
    assert isinstance(default_summarizer.summarizer, ExtractiveSummarizer)


def test_unknown_preset_is_an_error_naming_the_choices(store: MemoryStoreHandle) -> None:
    assert PRESETS == ("default", "aggressive", "summarize")
    with pytest.raises(ValueError, match="unknown preset 'nope'") as info:
        Pipeline.preset("nope")
    assert all(name in str(info.value) for name in PRESETS)
    with pytest.raises(ValueError, match="nope"):
        PipelineProvider(store, "nope")
    with pytest.raises(TypeError):
        PipelineProvider(store, 42)  # type: ignore[arg-type]


# --- SlidingWindow -----------------------------------------------------------------------


def test_sliding_window_keeps_the_last_n() -> None:
    messages = [user(f"m{i}") if i % 2 else assistant(f"m{i}") for i in range(10)]
    report = Pipeline([SlidingWindow(last=3)]).explain(messages)
    assert contents(report.messages) == ["m7", "m8", "m9"]
    assert report.dropped == list(range(7))
    assert any("SlidingWindow(last=3)" in reason for reason in report.reasons)


def test_sliding_window_with_fewer_than_n_changes_nothing() -> None:
    messages = [user("a"), assistant("b")]
    report = Pipeline([SlidingWindow(last=3)]).explain(messages)
    assert report.messages == messages
    assert report.reasons == []
    assert SlidingWindow().last == 50


def test_sliding_window_puts_back_the_newest_user_message_after_a_long_tool_loop() -> None:
    question = user("what is the weather in 5 cities?")
    loop = [m for i in range(5) for m in (calls(f"c{i}"), result(f"c{i}"))]
    messages = [user("hi"), assistant("hello"), question, *loop]
    out = Pipeline([SlidingWindow(last=4)]).run(messages)
    assert out == [question, *loop[-4:]]
    assert out[0] is question
    assert_pair_safe(out)


def test_sliding_window_drops_results_whose_call_fell_out() -> None:
    messages = [user("q"), calls("c1", "c2"), result("c1"), result("c2"), assistant("done")]
    out = Pipeline([SlidingWindow(last=2)]).run(messages)
    assert out == [user("q"), assistant("done")]


# --- TokenTruncation ---------------------------------------------------------------------


def test_token_truncation_never_splits_a_tool_group() -> None:
    question = user("q")
    group = [calls("c1", "c2", cost=1), result("c1", cost=1), result("c2", cost=5)]
    final = assistant("answer", cost=1)
    messages = [user("old"), assistant("old answer"), question, *group, final]
    # Budget 6: the answer fits (5 left), the group (7) does not, though result c2 (5)
    # alone would: per-message truncation would send an orphan.
    out = Pipeline([TokenTruncation(6, counter=CostCounter())]).run(messages)
    assert out == [question, final]
    assert_pair_safe(out)
    # Budget 9: the whole group fits beside the answer and the question (whose cost is
    # set aside first).
    out = Pipeline([TokenTruncation(9, counter=CostCounter())]).run(messages)
    assert out == [question, *group, final]


def test_token_truncation_stops_at_the_first_span_over_budget() -> None:
    messages = [user("u0"), assistant("a0", cost=10), user("u1"), assistant("a1")]
    report = Pipeline([TokenTruncation(5, counter=CostCounter())]).explain(messages)
    # u0 (cost 1) would fit after a0 is skipped, but the kept part is a contiguous suffix.
    assert contents(report.messages) == ["u1", "a1"]
    assert report.dropped == [0, 1]
    assert any("token budget" in reason for reason in report.reasons)


def test_token_truncation_keeps_the_newest_user_message_over_budget() -> None:
    counter = CostCounter()
    alone = [user("u0"), assistant("a0"), user("huge", cost=100)]
    assert contents(Pipeline([TokenTruncation(5, counter=counter)]).run(alone)) == ["huge"]
    followed = [user("u0"), assistant("a0"), user("huge", cost=100), assistant("a1", cost=2)]
    assert contents(Pipeline([TokenTruncation(5, counter=counter)]).run(followed)) == [
        "huge",
        "a1",
    ]


def test_token_truncation_never_counts_or_sends_an_orphan_tool_result() -> None:
    # A result whose call is not in the list is never sent, so it costs nothing: the
    # group in front of it still fits.
    question, group = user("q"), [calls("c1"), result("c1")]
    ghost = result("ghost", cost=100)
    messages = [user("old"), question, *group, ghost, assistant("a")]
    strategy = TokenTruncation(4, counter=CostCounter())  # a, the group, q: "old" is out
    out = strategy.apply(list(messages), PrepareContext())
    assert out == [question, *group, assistant("a")]
    assert Pipeline([strategy]).run(messages) == out


def test_token_truncation_all_fit_changes_nothing() -> None:
    messages = [user("u0"), calls("c1"), result("c1"), assistant("a0")]
    report = Pipeline([TokenTruncation(1000)]).explain(messages)
    assert report.messages == messages
    assert report.reasons == []


def test_token_truncation_uses_its_counter_then_the_pipelines() -> None:
    messages = [user("u0", cost=3), assistant("a0", cost=3), user("u1", cost=3)]
    own = CostCounter()
    assert contents(Pipeline([TokenTruncation(6, counter=own)]).run(messages)) == ["a0", "u1"]
    assert own.seen
    shared = CostCounter()
    pipeline = Pipeline([TokenTruncation(6)], counter=shared)
    assert contents(pipeline.run(messages)) == ["a0", "u1"]
    assert shared.seen
    # The default heuristic counts these 2-char messages as 4 tokens each: all fit.
    assert contents(Pipeline([TokenTruncation(12)]).run(messages)) == ["u0", "a0", "u1"]


# --- invalid arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: SlidingWindow(0), "last"),
        (lambda: SlidingWindow(-3), "last"),
        (lambda: SlidingWindow(2.5), "last"),
        (lambda: TokenTruncation(0), "max_tokens"),
        (lambda: TokenTruncation(-1), "max_tokens"),
        (lambda: TokenTruncation("100"), "max_tokens"),
        (lambda: Summarization(threshold=0, keep_recent=0), "threshold"),
        (lambda: Summarization(threshold=10, keep_recent=10), "keep_recent"),
        (lambda: Summarization(threshold=10, keep_recent=11), "keep_recent"),
        (lambda: Summarization(threshold=10, keep_recent=-1), "keep_recent"),
    ],
)
def test_invalid_strategy_arguments_raise_naming_the_parameter(make: Any, parameter: str) -> None:
    with pytest.raises(ValueError, match=parameter):
        make()


class HasPriorityOnly:
    priority = 10


@pytest.mark.parametrize(
    "strategies",
    [["window"], [object()], [SlidingWindow(3), 42], [HasPriorityOnly()]],
    ids=["str", "object", "int-after-a-strategy", "no-apply"],
)
def test_pipeline_rejects_non_strategies_with_type_error(strategies: list[Any]) -> None:
    with pytest.raises(TypeError):
        Pipeline(strategies)


def test_built_in_strategies_and_summarizers_satisfy_the_protocols() -> None:
    for strategy in (SlidingWindow(), TokenTruncation(10), Summarization()):
        assert isinstance(strategy, Strategy)
    assert isinstance(ExtractiveSummarizer(), Summarizer)
    assert isinstance(ModelSummarizer(FakeModel([])), Summarizer)
    assert isinstance(FakeModel([]), ChatModel)


# --- Summarization over a store ----------------------------------------------------------


def chat(provider: PipelineProvider, text: str) -> Any:
    """One turn: store the question, prepare what is sent, store the answer (and with it
    the summary prepare rolled)."""
    provider.append(CONV, [user(text)])
    report = provider.explain(CONV, provider.history(CONV), keep_summary=True)
    provider.append(CONV, [assistant(f"answer to {text}")])
    return report


def test_summary_is_persisted_as_a_pinned_system_message(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    reports = [chat(provider, f"q{i}") for i in range(4)]
    assert len(summarizer.calls) == 1
    report = reports[3]
    (stored,) = summaries(store)
    assert stored == report.summary
    assert stored == {
        "role": "system",
        "content": SUMMARY_PREFIX + "S1",
        "metadata": {
            "pinned": True,
            "summary": {"covers": [0, 5], "summarizer": "recording", "rolled_from": None},
        },
    }
    assert report.summarized == (0, 5)
    assert report.messages[0] is report.summary
    assert contents(report.messages[1:]) == ["answer to q2", "q3"]
    # It is stored after the messages it summarizes; the full history is kept.
    assert store.get(CONV)[-2] == stored
    assert unpinned_count(store) == 8


def test_summary_rolls_onto_the_previous_one(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    for i in range(6):
        chat(provider, f"q{i}")
    assert len(summarizer.calls) == 2
    (first_aged, first_previous), (second_aged, second_previous) = summarizer.calls
    assert first_previous is None
    assert second_previous == "S1"
    # The second roll folds only what the first did not cover.
    assert first_aged == ["q0", "answer to q0", "q1", "answer to q1", "q2"]
    assert second_aged == ["answer to q2", "q3", "answer to q3", "q4"]
    first, second = summaries(store)
    assert second["content"] == SUMMARY_PREFIX + "S2 after [S1]"
    assert first["content"].removeprefix(SUMMARY_PREFIX) in second["content"]


def test_extractive_summary_rolls_the_first_summary_text_in(store: MemoryStoreHandle) -> None:
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2)]))
    for i in range(6):
        chat(provider, f"Question number {i}. With detail.")
    first, second = summaries(store)
    first_text = first["content"].removeprefix(SUMMARY_PREFIX)
    assert "user: Question number 0." in first_text
    assert "With detail" not in first_text  # only the first sentence is kept
    assert second["content"].removeprefix(SUMMARY_PREFIX).startswith(first_text)
    assert first["metadata"]["summary"]["summarizer"] == "extractive"


def test_provenance_is_correct_across_several_rolls(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    for i in range(12):
        chat(provider, f"q{i}")
    stored = summaries(store)
    assert len(stored) == len(summarizer.calls) >= 4
    previous_end = None
    for n, summary in enumerate(stored):
        meta = summary["metadata"]
        assert meta["pinned"] is True
        covers = meta["summary"]["covers"]
        assert covers[0] == 0
        assert meta["summary"]["summarizer"] == "recording"
        if previous_end is None:
            assert meta["summary"]["rolled_from"] is None
        else:
            assert meta["summary"]["rolled_from"] == [0, previous_end]
            assert covers[1] > previous_end
        # The summarizer was given exactly the messages between the two ends.
        aged, _ = summarizer.calls[n]
        assert len(aged) == covers[1] - (previous_end or 0)
        previous_end = covers[1]
    # Only the newest summary is sent.
    report = provider.explain(CONV, provider.history(CONV))
    sent_summaries = [m for m in report.messages if "summary" in (m.get("metadata") or {})]
    assert sent_summaries == [stored[-1]]


def test_summary_is_reused_below_threshold_without_calling_the_summarizer(
    store: MemoryStoreHandle,
) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    for i in range(4):
        chat(provider, f"q{i}")
    assert len(summarizer.calls) == 1
    (stored,) = summaries(store)
    provider.append(CONV, [user("q4")])
    for _ in range(3):  # prepare again and again on the same history
        report = provider.explain(CONV, provider.history(CONV))
        assert len(summarizer.calls) == 1
        assert report.summary == stored
        assert report.summarized is None
        assert report.messages[0] == stored
        assert contents(report.messages[1:]) == ["answer to q2", "q3", "answer to q3", "q4"]
        assert any("reused the summary" in reason for reason in report.reasons)
    assert len(summaries(store)) == 1


def test_summary_is_not_recomputed_every_turn(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    threshold, keep_recent = 9, 3
    provider = PipelineProvider(
        store, Pipeline([Summarization(threshold, keep_recent, summarizer)])
    )
    for turn in range(30):
        provider.append(CONV, [user(f"q{turn}")])
        stored = summaries(store)
        covered = stored[-1]["metadata"]["summary"]["covers"][1] if stored else 0
        due = unpinned_count(store) - covered >= threshold
        before = len(summarizer.calls)
        report = provider.explain(CONV, provider.history(CONV), keep_summary=True)
        assert len(summarizer.calls) == before + (1 if due else 0), f"turn {turn}"
        assert (report.summarized is not None) == due
        assert_pair_safe(report.messages)
        assert contents(report.messages)[-1] == f"q{turn}"
        provider.append(CONV, [calls(f"c{turn}"), result(f"c{turn}"), assistant(f"answer {turn}")])
    # PhoenixAI.Store would call its summarizer on every turn past the threshold (28 of
    # 30 here); a rolling summary is made again only once threshold - keep_recent more
    # messages piled up: every other turn at 4 messages a turn.
    assert 10 <= len(summarizer.calls) <= 15, len(summarizer.calls)
    assert summarizer.calls[0][1] is None
    assert all(previous is not None for _, previous in summarizer.calls[1:])


def test_cut_never_splits_a_tool_group(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 3, summarizer)]))
    group = [calls("c1", "c2"), result("c1"), result("c2")]
    provider.append(CONV, [user("u0"), assistant("a0"), user("u1"), *group, assistant("a1")])
    provider.append(CONV, [user("u2")])
    # 8 messages: the naive cut (8 - 3 = 5) falls inside the tool group; it moves back to 3.
    report = provider.explain(CONV, provider.history(CONV))
    assert summarizer.calls[0][0] == ["u0", "a0", "u1"]
    assert report.summarized == (0, 3)
    assert report.messages[1:] == [*group, assistant("a1"), user("u2")]
    assert_pair_safe(report.messages)


def test_cut_never_folds_the_newest_user_message(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    question = user("the real question")
    loop = [m for i in range(5) for m in (calls(f"c{i}"), result(f"c{i}"))]
    provider.append(CONV, [user("u0"), assistant("a0"), user("u1"), assistant("a1")])
    provider.append(CONV, [question, *loop])
    report = provider.explain(CONV, provider.history(CONV))
    assert summarizer.calls[0][0] == ["u0", "a0", "u1", "a1"]
    assert report.messages[1] == question
    assert report.messages[2:] == loop
    assert_pair_safe(report.messages)
    # With the question first among the fresh messages, there is nothing to fold.
    store.clear(CONV)
    provider.append(CONV, [question, *loop])
    report = provider.explain(CONV, provider.history(CONV))
    assert len(summarizer.calls) == 1
    assert report.messages == [question, *loop]
    assert summaries(store) == []


def test_summarizer_failure_falls_back_to_pair_safe_truncation(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer(fail_on={2})
    strategy = Summarization(6, 2, summarizer)
    provider = PipelineProvider(store, Pipeline([strategy]))

    def tool_turn(i: int) -> Any:
        provider.append(CONV, [user(f"q{i}"), calls(f"c{i}"), result(f"c{i}")])
        report = provider.explain(CONV, provider.history(CONV), keep_summary=True)
        provider.append(CONV, [assistant(f"answer {i}")])
        return report

    first = tool_turn(0)
    assert first.summarized is None
    second = tool_turn(1)  # 7 messages: the first roll works
    assert second.summarized == (0, 4) and not second.fallback
    (kept_summary,) = summaries(store)
    report = tool_turn(2)  # 7 fresh messages again: the second roll raises
    assert len(summarizer.calls) == 2
    assert report.fallback is True
    assert strategy.failures == 1
    assert any("failed" in r and "summarizer exploded on call 2" in r for r in report.reasons)
    assert report.summarized is None
    assert_pair_safe(report.messages)
    # The previous summary is still pinned and sent; nothing new was stored; the aged
    # messages were dropped, the newest question and its tool group kept.
    assert report.messages[0] == kept_summary
    assert summaries(store) == [kept_summary]
    assert contents(report.messages[1:]) == ["q2", None, "result of c2"]
    assert "the summarizer failed" in report.describe()
    # The next turn tries again, rolling onto the summary that is still stored.
    recovered = tool_turn(3)
    assert not recovered.fallback
    assert summarizer.calls[-1][1] == "S1"
    assert recovered.summary is not None
    assert recovered.summary["metadata"]["summary"]["rolled_from"] == [0, 4]
    assert strategy.failures == 1


def test_first_summary_failure_drops_aged_messages_pair_safely(store: MemoryStoreHandle) -> None:
    summarizer = RecordingSummarizer(fail_on={1})
    strategy = Summarization(6, 3, summarizer)
    provider = PipelineProvider(store, Pipeline([strategy]))
    group = [calls("c1", "c2"), result("c1"), result("c2")]
    provider.append(CONV, [user("u0"), assistant("a0"), user("u1"), *group, assistant("a1")])
    provider.append(CONV, [user("u2")])
    report = provider.explain(CONV, provider.history(CONV))
    assert report.fallback is True
    assert strategy.failures == 1
    assert report.messages == [*group, assistant("a1"), user("u2")]
    assert report.summary is None
    assert summaries(store) == []


def test_report_summarized_range_is_in_the_numbering_of_covers(store: MemoryStoreHandle) -> None:
    # PrepareReport documents its fields "by input index". Once a summary is stored in
    # the conversation (a pinned message among the others), the range it reports must
    # still select, in the input, exactly the messages that were folded in.
    summarizer = RecordingSummarizer()
    provider = PipelineProvider(store, Pipeline([Summarization(6, 2, summarizer)]))
    for i in range(5):
        chat(provider, f"q{i}")
    provider.append(CONV, [user("q5")])
    history = provider.history(CONV)
    report = provider.explain(CONV, history)
    assert len(summarizer.calls) == 2
    assert report.summarized is not None
    start, end = report.summarized
    # Numbered as metadata.summary.covers: over the conversation's unpinned messages.
    unpinned = [m for m in history if not is_pinned(m)]
    assert contents(unpinned[start:end]) == summarizer.calls[1][0]


# --- summarizers -------------------------------------------------------------------------


def test_model_summarizer_prompt_has_the_previous_summary_and_the_transcript() -> None:
    model = FakeModel(["first summary", "  second summary \n"])
    summarizer = ModelSummarizer(model, temperature=0)
    assert summarizer.name == "model:tiny"
    aged = [user("I like green tea."), calls("c1"), result("c1"), assistant("Noted.")]
    assert summarizer.summarize(aged, None) == "first summary"
    ((prompt, options),) = model.requests
    assert options == {"temperature": 0}
    assert prompt[0] == {"role": "system", "content": SUMMARY_PROMPT}
    assert prompt[1]["role"] == "user"
    body = prompt[1]["content"]
    assert "Previous summary" not in body
    assert "user: I like green tea." in body
    assert "[called f_c1]" in body
    assert "tool: result of c1" in body
    assert "assistant: Noted." in body
    assert summarizer.summarize([user("And black coffee.")], "first summary") == "second summary"
    body = model.requests[1][0][1]["content"]
    assert "Previous summary:\nfirst summary" in body
    assert "user: And black coffee." in body
    assert body.index("first summary") < body.index("And black coffee")


@pytest.mark.parametrize("empty", ["", "   ", None])
def test_model_summarizer_empty_answer_raises(empty: str | None) -> None:
    summarizer = ModelSummarizer(FakeModel([empty]))
    with pytest.raises(ValueError, match="empty"):
        summarizer.summarize([user("x")], None)


def test_model_summarizer_in_a_pipeline_over_a_store(store: MemoryStoreHandle) -> None:
    model = FakeModel(["the user asked q0 to q2", ""])
    strategy = Summarization(6, 2, ModelSummarizer(model))
    provider = PipelineProvider(store, Pipeline([strategy]))
    for i in range(4):
        report = chat(provider, f"q{i}")
    (stored,) = summaries(store)
    assert stored["content"] == SUMMARY_PREFIX + "the user asked q0 to q2"
    assert stored["metadata"]["summary"]["summarizer"] == "model:tiny"
    assert report.messages[0] == stored
    for i in range(4, 6):
        report = chat(provider, f"q{i}")
    # The second roll got the first summary and the new transcript, then answered "".
    body = model.requests[1][0][1]["content"]
    assert "Previous summary:\nthe user asked q0 to q2" in body
    assert "user: q3" in body
    assert report.fallback is True
    assert strategy.failures == 1
    assert any("empty summary" in reason for reason in report.reasons)
    assert report.messages[0] == stored
    assert summaries(store) == [stored]


def test_extractive_summarizer_is_deterministic() -> None:
    aged = [
        user("My name is Ada. I live in London."),
        assistant("Nice to meet you, Ada!  How can I help?"),
        calls("c1"),
        result("c1"),
    ]
    first = ExtractiveSummarizer().summarize(aged, "earlier")
    assert first == ExtractiveSummarizer().summarize(aged, "earlier")
    assert first == ExtractiveSummarizer().summarize(list(aged), "earlier")
    assert first == "\n".join(
        [
            "earlier",
            "user: My name is Ada.",
            "assistant: Nice to meet you, Ada!",
            "tool: result of c1",
        ]
    )
    short = ExtractiveSummarizer(sentence_chars=5).summarize(aged[:1], None)
    assert short == "user: My na"


def test_extractive_summarizer_respects_max_chars_keeping_the_newest() -> None:
    aged = [user(f"Message number {i}.") for i in range(50)]
    summary = ExtractiveSummarizer(max_chars=100).summarize(aged, "old " * 100)
    assert len(summary) == 100
    assert summary.startswith("…")
    assert summary.endswith("user: Message number 49.")
    for bad in ({"max_chars": 0}, {"sentence_chars": 0}):
        with pytest.raises(ValueError):
            ExtractiveSummarizer(**bad)


@pytest.mark.parametrize("threshold", [1, 3])
def test_a_stored_summary_that_claims_the_newest_question_does_not_hide_it(threshold: int) -> None:
    # Summarization never rolls the newest question into a summary; a stored one that says
    # it covers it (an edited or imported history) must not drop the question either.
    stale = {
        "role": "system",
        "content": SUMMARY_PREFIX + "stale",
        "metadata": {
            "pinned": True,
            "summary": {"covers": [0, 1], "summarizer": "old", "rolled_from": None},
        },
    }
    question = user("u0 ")
    pipeline = Pipeline([Summarization(threshold, 0), TokenTruncation(max_tokens=1)])
    sent = pipeline.run([question, stale])
    assert question in sent
