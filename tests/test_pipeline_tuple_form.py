"""PhoenixAI.Store's ``Pipeline.new([{Strategy, opts}])`` as ``(Strategy, options)`` pairs:
the same strategies as the instance form, mixed with it, with the seed's option names;
and each malformed entry refused with an error that names it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from otpmem.memory import (
    FunctionSummarizer,
    HeuristicCounter,
    InvalidPipeline,
    Pipeline,
    PrepareContext,
    SlidingWindow,
    Summarization,
    TokenSummarization,
    TokenTruncation,
)


def turns(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * (i % 7)}
        for i in range(n)
    ]


SYSTEM = {"role": "system", "content": "be brief"}


def test_a_pair_makes_the_strategy_the_instance_form_makes() -> None:
    messages = [SYSTEM, *turns(100)]
    for entries, instances in [
        ([(SlidingWindow, {"last": 30})], [SlidingWindow(last=30)]),
        ([(TokenTruncation, {"max_tokens": 200})], [TokenTruncation(200)]),
        (
            [(Summarization, {"threshold": 40}), (SlidingWindow, {"last": 20})],
            [Summarization(40, 20), SlidingWindow(20)],
        ),
    ]:
        tupled, plain = Pipeline(entries), Pipeline(instances)
        assert repr(tupled) == repr(plain)
        assert tupled.run(messages) == plain.run(messages)
        assert Pipeline.new(entries).run(messages) == plain.run(messages)
    (window,) = Pipeline([(SlidingWindow, {"last": 30})]).strategies
    assert isinstance(window, SlidingWindow) and (window.last, window.priority) == (30, 100)
    sent = Pipeline.new([(SlidingWindow, {"last": 30})]).run(messages)
    assert sent[0] == SYSTEM and sent[1:] == messages[-30:]


def test_keyword_list_pairs_and_a_bare_class_are_entries_too() -> None:
    (window,) = Pipeline([(SlidingWindow, [("last", 7)])]).strategies
    assert isinstance(window, SlidingWindow) and window.last == 7
    (default,) = Pipeline([SlidingWindow]).strategies
    assert isinstance(default, SlidingWindow) and default.last == 50


def test_instances_and_pairs_mix_and_run_by_priority() -> None:
    pipeline = Pipeline.new(
        [TokenTruncation(120), (SlidingWindow, {"last": 10}), (Summarization, {"threshold": 8})]
    )
    assert [type(s) for s in pipeline.strategies] == [Summarization, SlidingWindow, TokenTruncation]
    # priority is an option like the others: here the window runs before the summary
    reordered = Pipeline(
        [(Summarization, {"threshold": 8}), (SlidingWindow, {"last": 4, "priority": 1})]
    )
    assert [type(s) for s in reordered.strategies] == [SlidingWindow, Summarization]
    sent = reordered.run(turns(30))
    # the window cut to 4 before the summary ran: nothing reached its threshold of 8
    assert len(sent) == 4 and not any(m["role"] == "system" for m in sent)


def test_summarization_takes_the_seed_options() -> None:
    (summary, window) = Pipeline.new(
        [
            (Summarization, {"threshold": 40, "provider": "openai", "model": "gpt-4o-mini"}),
            (SlidingWindow, {"last": 20}),
        ]
    ).strategies
    assert isinstance(summary, Summarization) and isinstance(window, SlidingWindow)
    assert (summary.threshold, summary.keep_recent) == (40, 20)  # PhoenixAI keeps threshold/2
    assert (summary.provider, summary.model) == ("openai", "gpt-4o-mini")
    tokens = Pipeline([(Summarization, {"max_tokens": 500, "threshold": None})]).strategies[0]
    assert isinstance(tokens, Summarization) and tokens.max_tokens == 500
    (by_tokens,) = Pipeline([(TokenSummarization, {"max_tokens": 300})]).strategies
    assert isinstance(by_tokens, TokenSummarization) and by_tokens.max_tokens == 300


@pytest.mark.parametrize("arity", [1, 2, 3])
def test_a_plain_function_as_summarize_fn_keeps_working_in_the_tuple_form(arity: int) -> None:
    seen: list[tuple[Any, ...]] = []

    def one(messages: Sequence[Mapping[str, Any]]) -> str:
        seen.append((len(messages),))
        return f"one:{len(messages)}"

    def two(messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        seen.append((len(messages), previous))
        return f"two:{len(messages)}"

    def three(
        messages: Sequence[Mapping[str, Any]], context: Mapping[str, Any], opts: Mapping[str, Any]
    ) -> str:  # PhoenixAI.Store's fun(messages, context, opts)
        seen.append((len(messages), context["model"], opts["threshold"], context["previous"]))
        return f"three:{len(messages)}"

    fn = {1: one, 2: two, 3: three}[arity]
    pipeline = Pipeline.new(
        [
            (Summarization, {"threshold": 10, "summarize_fn": fn, "model": "gpt-4o-mini"}),
            (SlidingWindow, {"last": 20}),
        ]
    )
    (step, _) = pipeline.strategies
    assert isinstance(step, Summarization) and isinstance(step.summarizer, FunctionSummarizer)
    sent = pipeline.run(turns(25))
    assert sent[0]["content"].endswith(f"{['one', 'two', 'three'][arity - 1]}:20")
    assert sent[0]["metadata"]["summary"]["summarizer"] == f"function:{fn.__qualname__}"
    assert len(sent) == 1 + 5
    expected = {1: (20,), 2: (20, None), 3: (20, "gpt-4o-mini", 10, None)}[arity]
    assert seen == [expected]


def test_a_strategy_class_of_your_own_is_made_from_its_options() -> None:
    class KeepFirst:
        def __init__(self, n: int, priority: int = 5) -> None:
            self.n, self.priority = n, priority

        def apply(
            self, messages: list[Mapping[str, Any]], context: PrepareContext
        ) -> list[Mapping[str, Any]]:
            return messages[: self.n]

    class Parsed(KeepFirst):
        @classmethod
        def from_options(cls, options: Mapping[str, Any]) -> Parsed:
            return cls(int(options["keep"]))

    assert Pipeline([(KeepFirst, {"n": 3})]).run(turns(10)) == turns(3)
    assert Pipeline([(Parsed, {"keep": "2"})]).run(turns(10)) == turns(2)
    with pytest.raises(InvalidPipeline, match=r"pipeline entry 0 .*unexpected keyword .*'m'"):
        Pipeline([(KeepFirst, {"m": 3})])


@pytest.mark.parametrize(
    ("entries", "index", "says"),
    [
        (
            [(SlidingWindow, {"last": 30, "lats": 2})],
            0,
            r"no option 'lats' \(it takes last, priority\)",
        ),
        ([SlidingWindow(5), (TokenTruncation, {})], 1, "TokenTruncation needs max_tokens"),
        ([(TokenTruncation, {"max_tokens": 0})], 0, "max_tokens must be an int >= 1, got 0"),
        ([(SlidingWindow, {"last": "30"})], 0, "SlidingWindow.last must be an int >= 1"),
        ([(SlidingWindow, 30)], 0, "options must be a dict or \\(name, value\\) pairs"),
        ([(SlidingWindow, [("last", 3), ("last", 4)])], 0, "option 'last' given twice"),
        ([(SlidingWindow, {3: "last"})], 0, "option names must be str"),
        (
            [("SlidingWindow", {"last": 30})],
            0,
            "not a Strategy .* nor a \\(StrategyClass, options\\)",
        ),
        ([(SlidingWindow, {"last": 3}, "extra")], 0, "not a Strategy"),
        ([SlidingWindow(3), 42], 1, "not a Strategy"),
        ([(dict, {"last": 3})], 0, "dict made .*, not a Strategy"),
        ([(Summarization, {"summarize_fn": "not a function"})], 0, "a summarizer is"),
        ([(Summarization, {"provider": "anthropic"})], 0, "'anthropic' is not a provider"),
        ([(Summarization, {"provider": 42})], 0, "must be a ChatModel"),
        ([(Summarization, {"model": ""})], 0, "model must be a non-empty str"),
        (
            [(Summarization, {"summarize_fn": len, "summarizer": len})],
            0,
            "summarize_fn or summarizer, not both",
        ),
        ([(Summarization, {"threshold": 10, "keep_recent": 10})], 0, "keep_recent must be"),
        ([(Summarization, {"window": 3})], 0, "Summarization takes no option 'window'"),
        ([(TokenTruncation, {"max_tokens": 9, "token_counter": "chars"})], 0, "TokenCounter"),
        ([(TokenTruncation, {"max_tokens": 9, "token_counter": 4})], 0, "TokenCounter"),
        (
            [(Summarization, {"token_counter": 4})],
            0,
            "Summarization.counter must be a TokenCounter",
        ),
        ([(SlidingWindow, {"priority": "high"})], 0, "priority must be an int"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(entries: list[Any], index: int, says: str) -> None:
    with pytest.raises(InvalidPipeline, match=f"pipeline entry {index} .*{says}") as info:
        Pipeline(entries)
    assert info.value.entry == index
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    with pytest.raises(InvalidPipeline):
        Pipeline.new(entries)


@pytest.mark.parametrize("given", ["default", {"last": 3}, 42])
def test_a_pipeline_of_no_list_is_refused(given: Any) -> None:
    with pytest.raises(InvalidPipeline, match="a pipeline takes a list"):
        Pipeline(given)


def test_the_token_counter_option_is_the_strategys_own() -> None:
    counter = HeuristicCounter(chars_per_token=1.0)
    (strategy,) = Pipeline(
        [(TokenTruncation, {"max_tokens": 50, "token_counter": counter})]
    ).strategies
    assert isinstance(strategy, TokenTruncation) and strategy.counter is counter
    loose = Pipeline([(TokenTruncation, {"max_tokens": 50})]).run(turns(40))
    strict = Pipeline([strategy]).run(turns(40))
    assert len(strict) < len(loose)
