"""Property tests of the memory policy (issue 4) over random conversation histories.

A history is built from user messages, plain assistant replies, tool groups (an assistant
message with 1-3 calls followed by their results, sometimes reordered, sometimes with one
missing), system messages anywhere, pinned messages, stray orphan tool results, contents of
0-2,000 chars or lists of parts, and (for pipelines) stale rolling summaries. Properties:

1. no output sends a tool result before the assistant message that called it (by id);
2. pinned messages come first, in their order, none dropped (Summarization may add its new
   summary and drop superseded ones);
3. every other output message is an input message, in input order;
4. TokenTruncation keeps whole tool groups within ``max_tokens`` (the newest user message may
   only exceed it when it alone is over budget);
5. every pipeline keeps the newest user message; ``safe_window`` is exactly
   systems + drop_orphans(newest n others) (beamai's rule);
6. nothing mutates its input;
7. a PrepareReport accounts for every input index once and counts what it sends;
8. a rolling summary kept in a store only grows, and is only rolled past ``threshold``
   uncovered messages; a failing summarizer falls back to pair-safe truncation.

The reference helpers below (``_pinned``, ``_drop_orphans``, ``_units``) are written from the
brief, not imported, so that a broken library helper cannot also break the oracle.

Hypothesis spends ~0.08 ms per choice, so a history step is one integer whose bit fields say
what the step is (0 = the simplest: a short user message); shrinking lowers the integers and
drops steps, so minimal examples stay readable.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from otpmem.memory import (
    DEFAULT_COUNTER,
    PRESETS,
    SUMMARY_PREFIX,
    DefaultProvider,
    ExtractiveSummarizer,
    HeuristicCounter,
    Pipeline,
    PipelineProvider,
    SlidingWindow,
    Summarization,
    TiktokenCounter,
    TokenCounter,
    TokenTruncation,
    drop_orphans,
    is_pinned,
    safe_window,
    units,
)
from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from tests.support import assert_pair_safe

Message = Mapping[str, Any]

EXAMPLES = 400


def prop(examples: int = EXAMPLES) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- reference semantics (from the brief) --------------------------------------------------------


def _pinned(message: Message) -> bool:
    """System, or metadata.pinned True on a message that is not tool traffic."""
    if message.get("role") == "system":
        return True
    if message.get("role") == "tool" or message.get("tool_calls"):
        return False
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get("pinned") is True


def _is_summary(message: Message) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and isinstance(metadata.get("summary"), Mapping)


def _calls(message: Message) -> set[str]:
    return {call["id"] for call in message.get("tool_calls") or ()}


def _drop_orphans(messages: Sequence[Message]) -> list[Message]:
    asked: set[str] = set()
    kept = []
    for message in messages:
        if message.get("role") == "tool" and message.get("tool_call_id") not in asked:
            continue
        asked |= _calls(message)
        kept.append(message)
    return kept


def _units(messages: Sequence[Message]) -> list[list[Message]]:
    """Tool groups: a message with calls plus the results right after it that answer it."""
    groups: list[list[Message]] = []
    open_ids: set[str] = set()
    for message in messages:
        if groups and message.get("role") == "tool" and message.get("tool_call_id") in open_ids:
            groups[-1].append(message)
        else:
            groups.append([message])
            open_ids = _calls(message)
    return groups


def _newest_user(messages: Sequence[Message]) -> Message | None:
    users = [m for m in messages if m.get("role") == "user"]
    return users[-1] if users else None


def _ids(messages: Sequence[Message]) -> list[int]:
    return [id(m) for m in messages]


def _contains(messages: Sequence[Message], message: Message) -> bool:
    return any(m is message for m in messages)


def assert_report_accounts(
    source: Sequence[Message], report: Any, counter: TokenCounter, added: int
) -> None:
    """Property 7: pinned + kept + dropped partition the input indices, each rightly."""
    out = report.messages
    sent = set(_ids(out))
    assert sorted(report.pinned + report.kept + report.dropped) == list(range(len(source)))
    for i in report.pinned:
        assert id(source[i]) in sent and _pinned(source[i]), f"pinned index {i}"
    for i in report.kept:
        assert id(source[i]) in sent and not _pinned(source[i]), f"kept index {i}"
    for i in report.dropped:
        assert id(source[i]) not in sent, f"dropped index {i} is in the output"
    assert len(report.pinned) + len(report.kept) + added == len(out)
    assert report.tokens["sent"] == sum(counter.count(m) for m in out)


# -- histories ----------------------------------------------------------------------------------

# 16 kinds (4 bits): index 0 is the simplest, which shrinking goes to.
KINDS = (
    "user",
    "reply",
    "tools",
    "user",
    "reply",
    "tools",
    "tools",
    "user",
    "reply",
    "tools",
    "system",
    "orphan",
    "tools",
    "user",
    "reply",
    "special",  # a system message, or a stale rolling summary when summaries are allowed
)
LENGTHS = (3, 0, 1, 7, 15, 40, 64, 100, 160, 333, 600, 999, 1200, 1500, 1999, 2000)
SNIPPETS = (
    "Hi. ",
    "The quick brown fox jumps over the lazy dog. Then it rests! ",
    "x",
    "héllo wörld — ünïcode ✓? Yes. ",
    "  \n\t ",
    '{"key": [1, 2, 3]} ',
    "a.b.c!d?e ",
    "word ",
)
METADATA: tuple[dict[str, Any] | None, ...] = (
    (None,) * 11
    + ({"pinned": True},) * 2
    + ({"pinned": False}, {"pinned": "yes"}, {"note": 1, "pinned": 1})
)
STEP_BITS = 48


class _Bits:
    """Reads bit fields off one drawn integer."""

    def __init__(self, value: int) -> None:
        self.value = value

    def take(self, width: int) -> int:
        field = self.value & ((1 << width) - 1)
        self.value >>= width
        return field


def _text(bits: _Bits, tag: str) -> str:
    size = LENGTHS[bits.take(4)]
    snippet = SNIPPETS[bits.take(3)]
    body = (tag + snippet * (size // len(snippet) + 1))[:size]
    return body


def _content(bits: _Bits, tag: str) -> Any:
    text = _text(bits, tag)
    if bits.take(3) != 7:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if bits.take(1):
        parts.append({"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}})
    return parts


def _with_metadata(message: dict[str, Any], bits: _Bits) -> dict[str, Any]:
    metadata = METADATA[bits.take(4)]
    if metadata is not None:
        message["metadata"] = dict(metadata)
    return message


def _step(code: int, ids: Iterator[int], summaries: bool) -> list[dict[str, Any]]:
    bits = _Bits(code)
    kind = KINDS[bits.take(4)]
    n = next(ids)
    if kind == "user":
        return [_with_metadata({"role": "user", "content": _content(bits, f"u{n} ")}, bits)]
    if kind == "reply":
        return [_with_metadata({"role": "assistant", "content": _text(bits, f"a{n} ")}, bits)]
    if kind == "orphan":
        return [{"role": "tool", "tool_call_id": f"ghost-{n}", "content": _text(bits, "stray ")}]
    if kind == "special" and summaries and bits.take(1):
        shape = bits.take(2)
        covers: Any = [0, bits.take(6)] if shape < 2 else ([1, 4] if shape == 2 else None)
        return [
            {
                "role": "system",
                "content": SUMMARY_PREFIX + f"stale summary {n}",
                "metadata": {
                    "pinned": True,
                    "summary": {"covers": covers, "summarizer": "old", "rolled_from": None},
                },
            }
        ]
    if kind in ("system", "special"):
        return [_with_metadata({"role": "system", "content": _text(bits, f"s{n} ")}, bits)]
    # A tool group.
    count = 1 + bits.take(2) % 3
    call_ids = [f"call-{n}-{i}" for i in range(count)]
    orders = list(itertools.permutations(call_ids))
    order = list(orders[bits.take(3) % len(orders)])
    if bits.take(2) == 3:
        order.pop(bits.take(2) % len(order))  # one result is missing
    speech = bits.take(2)
    call: dict[str, Any] = {
        "role": "assistant",
        "content": None if speech < 2 else _text(bits, f"calling{n} "),
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "lookup", "arguments": f'{{"q": "{call_id}"}}'},
            }
            for call_id in call_ids
        ],
    }
    group = [_with_metadata(call, bits)]
    for call_id in order:
        result: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": call_id,
            "content": _content(bits, f"r-{call_id} "),
        }
        if bits.take(3) == 7:
            result["metadata"] = {"pinned": True}  # tool traffic is never pinned
        group.append(result)
    return group


def build_history(codes: Sequence[int], flags: int, summaries: bool) -> list[dict[str, Any]]:
    ids = itertools.count()
    messages = [m for code in codes for m in _step(code, ids, summaries)]
    if flags & 1:
        messages.insert(0, {"role": "system", "content": "You are terse."})
    if flags & 2:
        messages.append({"role": "system", "content": "Answer in French.", "name": "late"})
    return messages


@st.composite
def histories(draw: st.DrawFn, summaries: bool = True, max_steps: int = 70) -> list[Any]:
    size = draw(st.integers(0, max_steps))
    codes = draw(st.lists(st.integers(0, (1 << STEP_BITS) - 1), min_size=size, max_size=size))
    return build_history(codes, draw(st.integers(0, 3)), summaries)


def split_turns(messages: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A turn starts at each user message."""
    turns: list[list[dict[str, Any]]] = []
    for message in messages:
        if message["role"] == "user" or not turns:
            turns.append([])
        turns[-1].append(message)
    return turns


# -- strategies, summarizers, counters ------------------------------------------------------------


class RaisingSummarizer:
    """A summarizer whose model is down."""

    name = "raising"

    def __init__(self) -> None:
        self.calls = 0

    def __repr__(self) -> str:
        return "RaisingSummarizer()"

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        self.calls += 1
        raise RuntimeError("summarizer backend unavailable")


class BlankSummarizer:
    """A summarizer that answers nothing (the strategy must treat it as a failure)."""

    name = "blank"

    def __repr__(self) -> str:
        return "BlankSummarizer()"

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        return "  \n"


class CountingSummarizer:
    """Counts calls, then delegates (or raises)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = f"counting:{inner.name}"
        self.calls = 0

    def summarize(self, messages: Sequence[Message], previous: str | None) -> str:
        self.calls += 1
        text: str = self.inner.summarize(messages, previous)
        return text


TIKTOKEN = TiktokenCounter("cl100k_base")
COUNTERS: tuple[TokenCounter | None, ...] = (
    None,
    None,
    HeuristicCounter(),
    HeuristicCounter(chars_per_token=1.0, per_message=0, per_image=0),
    HeuristicCounter(chars_per_token=2.5, per_message=5, per_image=10),
    TIKTOKEN,
)


@st.composite
def summarizers(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return None  # Summarization's default: ExtractiveSummarizer()
    if kind == 1:
        return RaisingSummarizer()
    if kind == 2:
        return BlankSummarizer()
    return ExtractiveSummarizer(draw(st.integers(1, 2000)), draw(st.integers(1, 200)))


def budgets() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 30), st.integers(1, 6000))


@st.composite
def strategy_of(draw: st.DrawFn, kind: str) -> Any:
    priority = draw(st.sampled_from((None, None, None, 0, 75, 150, 250)))
    extra = {} if priority is None else {"priority": priority}
    if kind == "window":
        return SlidingWindow(draw(st.integers(1, 60)), **extra)
    if kind == "tokens":
        return TokenTruncation(draw(budgets()), draw(st.sampled_from(COUNTERS)), **extra)
    threshold = draw(st.one_of(st.integers(1, 8), st.integers(1, 40)))
    keep_recent = draw(st.integers(0, threshold - 1))
    return Summarization(threshold, keep_recent, draw(summarizers()), **extra)


@st.composite
def pipelines(draw: st.DrawFn, must_have: str | None = None) -> Pipeline:
    if must_have is None and draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(PRESETS))
        return Pipeline.preset(name, draw(summarizers()) if name == "summarize" else None)
    kinds = draw(
        st.lists(
            st.sampled_from(("window", "tokens", "summary")),
            unique=True,
            min_size=0 if draw(st.integers(0, 9)) == 0 else 1,  # sometimes no strategy at all
        )
    )
    if must_have is not None and must_have not in kinds:
        kinds.insert(draw(st.integers(0, len(kinds))), must_have)
    strategies = [draw(strategy_of(kind)) for kind in kinds]
    return Pipeline(strategies, counter=draw(st.sampled_from(COUNTERS)))


def describe(pipeline: Pipeline) -> str:
    parts = []
    for s in pipeline.strategies:
        detail = f"{s!r} priority={s.priority}"
        if isinstance(s, TokenTruncation):
            detail += f" counter={s.counter!r}"
        if isinstance(s, Summarization):
            detail += f" summarizer={s.summarizer!r}"
        parts.append(detail)
    return f"pipeline counter={pipeline.counter!r}: " + "; ".join(parts)


def _summarization(pipeline: Pipeline) -> Summarization | None:
    found = [s for s in pipeline.strategies if isinstance(s, Summarization)]
    return found[0] if found else None


# -- properties ---------------------------------------------------------------------------------


def test_reference_helpers_agree_with_the_library_on_random_histories() -> None:
    @prop(300)
    @given(messages=histories())
    def check(messages: list[Any]) -> None:
        assert _ids(drop_orphans(messages)) == _ids(_drop_orphans(messages))
        assert [_ids(u) for u in units(messages)] == [_ids(u) for u in _units(messages)]
        assert [is_pinned(m) for m in messages] == [_pinned(m) for m in messages]

    check()


def test_safe_window_is_pinned_then_the_orphan_free_newest_n() -> None:
    store = MemoryStore.start_link()
    try:

        @prop()
        @given(messages=histories(), n=st.one_of(st.integers(0, 8), st.integers(0, 120)))
        def check(messages: list[Any], n: int) -> None:
            before = copy.deepcopy(messages)
            out = safe_window(messages, n)
            assert messages == before  # property 6
            assert_pair_safe(out)  # property 1
            pinned = [m for m in messages if _pinned(m)]
            summaries = [
                m
                for m in pinned
                if m["role"] == "system" and isinstance(m.get("metadata", {}).get("summary"), dict)
            ]
            # the newest summary supersedes the others
            pinned = [m for m in pinned if not any(m is s for s in summaries[:-1])]
            others = [m for m in messages if not _pinned(m)]
            newest = others[len(others) - n :] if len(others) > n else others
            assert _ids(out) == _ids(pinned + _drop_orphans(newest))  # beamai's rule, pinned too
            if n == 0:
                return
            provider = DefaultProvider(store, window=n)
            report = provider.explain(Conv("invariants", "window"), messages)
            assert messages == before
            assert _ids(report.messages) == _ids(out)
            assert_report_accounts(messages, report, provider.counter, added=0)

        check()
    finally:
        store.stop()


def _expected_pinned(messages: Sequence[Message], pipeline: Pipeline, report: Any) -> list[Any]:
    """The pinned prefix the output must start with (property 2)."""
    pinned = [m for m in messages if _pinned(m)]
    if _summarization(pipeline) is None:
        assert report.summarized is None and report.summary is None
        return pinned
    summaries = [m for m in pinned if _is_summary(m)]
    latest = summaries[-1] if summaries else None
    expected = [m for m in pinned if not _is_summary(m) or m is latest]
    if report.summarized is not None:
        expected = [m for m in expected if m is not latest] + [report.summary]
    return expected


def _check_new_summary(messages: Sequence[Message], pipeline: Pipeline, report: Any) -> None:
    strategy = _summarization(pipeline)
    if strategy is None:
        return
    assert strategy.failures == int(report.fallback)
    if report.summarized is None:
        return
    assert not report.fallback
    assert not any(m is report.summary for m in messages)
    start, end = report.summarized
    assert 0 <= start < end
    summary = report.summary
    assert summary["role"] == "system" and summary["content"].startswith(SUMMARY_PREFIX)
    assert summary["metadata"]["pinned"] is True
    info = summary["metadata"]["summary"]
    assert info["covers"] == [0, end]
    assert info["rolled_from"] == ([0, start] if start else None)
    assert info["summarizer"] == strategy.summarizer.name


@prop()
@given(messages=histories(), pipeline=pipelines())
def test_pipeline_keeps_pairs_pinned_order_and_the_newest_question(
    messages: list[Any], pipeline: Pipeline
) -> None:
    note(describe(pipeline))
    before = copy.deepcopy(messages)
    report = pipeline.explain(messages)
    out = report.messages
    assert messages == before, "explain mutated its input"  # property 6

    assert_pair_safe(out)  # property 1

    expected = _expected_pinned(messages, pipeline, report)  # property 2
    assert _ids(out[: len(expected)]) == _ids(expected), "pinned prefix"
    rest_out = out[len(expected) :]
    assert not any(_pinned(m) for m in rest_out), "a pinned message after the unpinned ones"
    _check_new_summary(messages, pipeline, report)

    position = {id(m): i for i, m in enumerate(messages)}  # property 3
    assert all(id(m) in position for m in rest_out), "an output message not from the input"
    order = [position[id(m)] for m in rest_out]
    assert order == sorted(order), "unpinned output out of input order"

    question = _newest_user(messages)  # property 5
    if question is not None:
        assert _contains(out, question), "the newest user message was dropped"

    if len(pipeline.strategies) == 1 and isinstance(pipeline.strategies[0], SlidingWindow):
        rest = [m for m in messages if not _pinned(m)]
        tail = _drop_orphans(rest[-pipeline.strategies[0].last :])
        asked = _newest_user(rest)
        if asked is not None and not _contains(tail, asked):
            tail = [asked, *tail]
        assert _ids(rest_out) == _ids(tail), "SlidingWindow: newest `last` plus the question"


@prop()
@given(messages=histories(), pipeline=pipelines())
def test_pipeline_reports_every_input_message_and_never_mutates(
    messages: list[Any], pipeline: Pipeline
) -> None:
    note(describe(pipeline))
    before = copy.deepcopy(messages)
    report = pipeline.explain(messages)
    assert messages == before, "explain mutated its input"
    sent = pipeline.run(messages)
    assert messages == before, "run mutated its input"
    assert sent == report.messages
    added = 1 if report.summarized is not None else 0
    assert_report_accounts(messages, report, pipeline.counter, added)


def _check_budget(messages: Sequence[Message], pipeline: Pipeline, out: list[Any]) -> None:
    """Property 4 for every TokenTruncation of the pipeline."""
    rest_in = [m for m in messages if not _pinned(m)]
    rest_out = [m for m in out if not _pinned(m)]
    question = _newest_user(rest_in)
    for strategy in pipeline.strategies:
        if not isinstance(strategy, TokenTruncation):
            continue
        counter = strategy.counter or pipeline.counter

        def cost(part: Sequence[Message], counter: TokenCounter = counter) -> int:
            return sum(counter.count(m) for m in part)

        budget = strategy.max_tokens
        if question is not None and counter.count(question) > budget:
            assert _contains(rest_out, question)
            others = [m for m in rest_out if m is not question]
            assert cost(others) <= budget, (
                f"over budget besides an over-budget question: {cost(others)} > {budget}"
            )
        else:
            assert cost(rest_out) <= budget, (
                f"unpinned output costs {cost(rest_out)} tokens > max_tokens={budget}, "
                f"though the newest user message alone costs "
                f"{counter.count(question) if question is not None else 0}"
            )


@st.composite
def truncation_cases(draw: st.DrawFn) -> tuple[list[Any], TokenCounter | None, int]:
    """A history, a counter, and a budget: absolute (tiny or wide), or the cost of the newest
    k messages plus a few tokens either way, so that cuts land at and inside tool groups."""
    messages = draw(histories())
    counter = draw(st.sampled_from(COUNTERS))
    if draw(st.booleans()):
        return messages, counter, draw(budgets())
    count = (counter or DEFAULT_COUNTER).count
    body = _drop_orphans([m for m in messages if not _pinned(m)])
    k = draw(st.integers(0, len(body)))
    cost = sum(count(m) for m in body[len(body) - k :])
    return messages, counter, max(1, cost + draw(st.integers(-3, 3)))


@prop()
@given(case=truncation_cases())
def test_token_truncation_keeps_newest_whole_groups_within_budget(
    case: tuple[list[Any], TokenCounter | None, int],
) -> None:
    messages, counter, budget = case
    pipeline = Pipeline([TokenTruncation(budget, counter)])
    note(describe(pipeline))
    out = pipeline.run(messages)
    assert_pair_safe(out)
    count = (counter or pipeline.counter).count
    rest_in = [m for m in messages if not _pinned(m)]
    rest_out = [m for m in out if not _pinned(m)]
    question = _newest_user(rest_in)
    if question is not None:
        assert _contains(rest_out, question)

    # Whole groups: the kept part is the newest k groups, or the question plus them.
    groups = _units(_drop_orphans(rest_in))
    suffixes = [[m for g in groups[len(groups) - k :] for m in g] for k in range(len(groups) + 1)]
    shapes = [_ids(s) for s in suffixes] + [[id(question), *_ids(s)] for s in suffixes]
    assert _ids(rest_out) in shapes, "the kept part is not the newest whole tool groups"
    kept = shapes.index(_ids(rest_out)) % len(suffixes)

    # The longest such suffix: the next older group would not fit in what the question
    # leaves (an over-budget question is kept with the newer groups that fit, nothing older).
    def cost(part: Sequence[Message]) -> int:
        return sum(count(m) for m in part if m is not question)

    over = question is not None and count(question) > budget
    room = budget if question is None or over else budget - count(question)
    if kept < len(groups) and not (over and _contains(suffixes[kept], question)):
        assert cost(suffixes[kept + 1]) > room, (
            f"kept the newest {kept} of {len(groups)} groups, but {kept + 1} fit: "
            f"{cost(suffixes[kept + 1])} <= {room} tokens left by the question"
        )

    _check_budget(messages, pipeline, out)


@prop()
@given(messages=histories(), pipeline=pipelines(must_have="tokens"))
def test_token_budget_holds_in_any_pipeline_with_token_truncation(
    messages: list[Any], pipeline: Pipeline
) -> None:
    note(describe(pipeline))
    out = pipeline.run(messages)
    assert_pair_safe(out)
    _check_budget(messages, pipeline, out)


def test_rolling_summary_in_a_store_only_grows_and_rolls_past_the_threshold() -> None:
    store = MemoryStore.start_link()
    conv_ids = itertools.count()
    try:

        @prop(300)
        @given(
            messages=histories(summaries=False, max_steps=50),
            threshold=st.integers(1, 25),
            keep=st.integers(0, 24),
            mode=st.sampled_from(("extractive", "raises", "blank")),
            after=st.sampled_from(("none", "window", "tokens")),
        )
        def check(messages: list[Any], threshold: int, keep: int, mode: str, after: str) -> None:
            inner: Any = {
                "extractive": ExtractiveSummarizer(),
                "raises": RaisingSummarizer(),
                "blank": BlankSummarizer(),
            }[mode]
            summarizer = CountingSummarizer(inner)
            strategies: list[Any] = [Summarization(threshold, keep % threshold, summarizer)]
            if after == "window":
                strategies.append(SlidingWindow(7))
            elif after == "tokens":
                strategies.append(TokenTruncation(300))
            provider = PipelineProvider(store, Pipeline(strategies))
            conv = Conv("invariants", f"rolling-{next(conv_ids)}")
            note(f"{conv} {strategies!r}")
            cover = 0
            for turn in split_turns(messages):
                provider.append(conv, turn)
                history = provider.history(conv)
                _check_turn(provider, conv, history, summarizer, threshold, mode, cover)
                summary = _latest_summary(provider.history(conv))
                if summary is not None:
                    now = summary["metadata"]["summary"]["covers"][1]
                    assert now >= cover, f"covers went back from {cover} to {now}"
                    cover = now
            provider.clear(conv)

        check()
    finally:
        store.stop()


def _latest_summary(messages: Sequence[Message]) -> Message | None:
    summaries = [m for m in messages if _is_summary(m)]
    return summaries[-1] if summaries else None


def _check_turn(
    provider: PipelineProvider,
    conv: Conv,
    history: list[Any],
    summarizer: CountingSummarizer,
    threshold: int,
    mode: str,
    cover: int,
) -> None:
    rest = [m for m in history if not _pinned(m)]
    # history may be the tail only: ``offset`` unpinned messages before it were not read
    offset = getattr(history, "offset", 0)
    previous = _latest_summary(history)
    covered = previous["metadata"]["summary"]["covers"][1] if previous is not None else 0
    assert covered == cover
    assert offset <= covered, "the tail read misses messages no summary covers"
    uncovered = offset + len(rest) - covered
    stored = provider.store.count(conv)
    calls = summarizer.calls
    before = copy.deepcopy(history)

    report = provider.explain(conv, history, keep_summary=True)

    assert history == before, "prepare mutated the history"
    called = summarizer.calls - calls
    assert called in (0, 1)
    if called:
        assert uncovered >= threshold, f"summarized with {uncovered} < {threshold} uncovered"
    fresh = rest[covered - offset :]
    question = _newest_user(rest)
    if (
        uncovered >= threshold
        and not fresh[0].get("tool_calls")
        and (question is None or fresh[0] is not question)
    ):
        assert called, f"{uncovered} >= {threshold} uncovered messages, yet no summary rolled"
    assert_pair_safe(report.messages)
    newest = _newest_user(history)
    if newest is not None:
        assert _contains(report.messages, newest), "the newest user message was dropped"
    if report.summarized is not None:
        assert mode == "extractive" and called and not report.fallback
        assert provider.store.count(conv) == stored, "prepare stored something"
        provider.append(conv, [])  # the rolled summary is stored with the next append
        assert provider.store.count(conv) == stored + 1
        assert provider.store.get(conv, last=1) == [report.summary]
        start, end = report.summarized
        assert start == covered and end > covered
        assert report.summary["metadata"]["summary"]["covers"] == [0, end]
    else:
        assert provider.store.count(conv) == stored, "a summary was stored though none rolled"
        assert report.fallback == bool(called), "a failed roll must report fallback"
        if previous is not None:
            assert report.summary == previous, "the previous summary is reused"
    if mode != "extractive" and called:
        assert report.fallback
