"""The pipeline: pinned messages out, strategies in priority order, pinned back in front.

::

    pipeline = Pipeline([Summarization(threshold=20, keep_recent=10), SlidingWindow(last=20)])
    pipeline = Pipeline.new([(Summarization, {"threshold": 40}), (SlidingWindow, {"last": 20})])
    pipeline.run(messages)              # what to send
    pipeline.explain(messages).reasons  # and why

A pipeline is built once and shared: what one call overrides (``CallOptions``: a token
budget, a counter, a model) lives in that call's ``PrepareContext``, never in the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import Conv, short_repr
from .prepare_context import NO_OPTIONS, CallOptions
from .strategies import (
    PrepareContext,
    SlidingWindow,
    Strategy,
    Summarization,
    TokenTruncation,
    sees_enough,
)
from .summarizers import SummarizeFn, Summarizer
from .tokens import DEFAULT_COUNTER, TokenCounter
from .window import drop_orphans, is_pinned

PRESETS = ("default", "aggressive", "summarize")

Entry = Strategy | tuple[Any, Any] | type
"""A pipeline entry: a strategy, a ``(StrategyClass, options)`` pair, or a strategy class."""


class InvalidPipeline(TypeError, ValueError):
    """A pipeline entry is neither a strategy nor a ``(Strategy, options)`` pair that makes
    one; ``entry`` is its index. A TypeError and a ValueError, as the entry's fault is."""

    def __init__(self, entry: int, given: object, reason: str) -> None:
        super().__init__(f"pipeline entry {entry} ({short_repr(given)}): {reason}")
        self.entry = entry


def strategy_of(entry: object, index: int) -> Strategy:
    """One pipeline entry as a strategy: a strategy as it is; ``(StrategyClass, options)``
    (options a mapping, or ``(name, value)`` pairs, PhoenixAI.Store's keyword list) made
    by the class's ``from_options``, else by calling it with the options; a strategy
    class alone, with its defaults. ``InvalidPipeline`` names the entry otherwise."""
    if isinstance(entry, Strategy) and not isinstance(entry, type):
        return entry
    if isinstance(entry, type):
        kind, options = entry, {}
    elif isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], type):
        kind, options = entry[0], _options(entry, index)
    else:
        raise InvalidPipeline(
            index,
            entry,
            "not a Strategy (needs priority and apply) nor a (StrategyClass, options) pair, "
            'e.g. (SlidingWindow, {"last": 30})',
        )
    make = getattr(kind, "from_options", None)
    try:
        made = make(options) if callable(make) else kind(**options)
    except (TypeError, ValueError) as exc:
        raise InvalidPipeline(index, entry, str(exc)) from exc
    if not isinstance(made, Strategy):
        raise InvalidPipeline(
            index, entry, f"{kind.__name__} made {short_repr(made)}, not a Strategy"
        )
    return made


def _options(entry: tuple[Any, Any], index: int) -> dict[str, Any]:
    options = entry[1]
    if isinstance(options, Mapping):
        pairs = list(options.items())
    elif isinstance(options, list | tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 for pair in options
    ):
        pairs = list(options)
    else:
        raise InvalidPipeline(
            index,
            entry,
            f"options must be a dict or (name, value) pairs, got {short_repr(options)}",
        )
    names = [name for name, _ in pairs]
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise InvalidPipeline(index, entry, f"option names must be str, got {short_repr(bad[0])}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InvalidPipeline(index, entry, f"option {', '.join(map(repr, twice))} given twice")
    return dict(pairs)


@dataclass
class PrepareReport:
    """What ``prepare`` did: the messages it returns and, by input index, what became of the
    input (pinned, kept, dropped), tokens per part, and the reasons.

    ``summarized`` is the range newly folded into a summary by this call, numbered as the
    summary's ``metadata.summary.covers`` is: over the conversation's unpinned messages.
    """

    messages: list[Mapping[str, Any]]
    pinned: list[int] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    summarized: tuple[int, int] | None = None
    summary: Mapping[str, Any] | None = None
    tokens: dict[str, int] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    fallback: bool = False

    def describe(self) -> str:
        """A few lines for a human (the CLI prints this)."""
        lines = [
            f"{len(self.messages)} message(s) to send: {len(self.pinned)} pinned, "
            f"{len(self.kept)} kept, {len(self.dropped)} dropped"
            + (
                f", messages {self.summarized[0]}..{self.summarized[1] - 1} summarized"
                if self.summarized
                else ""
            ),
            "tokens: " + ", ".join(f"{k} {v}" for k, v in self.tokens.items()),
        ]
        lines += [f"- {reason}" for reason in self.reasons]
        if self.fallback:
            lines.append("- the summarizer failed: older messages were dropped instead")
        return "\n".join(lines)


class Pipeline:
    """Strategies run in ascending priority over the unpinned messages; pinned ones (system,
    or ``metadata.pinned``) are taken out first and put back first, never counted or cut.

    Each entry is a strategy or PhoenixAI.Store's ``(StrategyClass, options)`` pair, mixed
    freely: ``Pipeline([(SlidingWindow, {"last": 30}), TokenTruncation(8000)])``.
    """

    def __init__(
        self, strategies: Iterable[Entry] = (), counter: TokenCounter | None = None
    ) -> None:
        if isinstance(strategies, str | bytes | Mapping) or not isinstance(strategies, Iterable):
            raise InvalidPipeline(
                0, strategies, "a pipeline takes a list of strategies or (Strategy, options) pairs"
            )
        given = [strategy_of(entry, index) for index, entry in enumerate(strategies)]
        self.strategies = sorted(given, key=lambda s: s.priority)
        self.counter = counter or DEFAULT_COUNTER

    @classmethod
    def new(cls, strategies: Iterable[Entry] = (), counter: TokenCounter | None = None) -> Pipeline:
        """``Pipeline(strategies)``, under PhoenixAI.Store's name ``Pipeline.new/1``."""
        return cls(strategies, counter)

    def __repr__(self) -> str:
        return f"Pipeline({self.strategies!r})"

    def strategies_for(self, options: CallOptions = NO_OPTIONS) -> list[Strategy]:
        """The strategies one call runs: with a ``max_tokens`` override every
        ``TokenTruncation`` takes that budget (a copy: the pipeline is unchanged), and a
        pipeline without one ends with one."""
        budget = options.max_tokens
        if budget is None:
            return self.strategies
        steps: list[Strategy] = [
            s.with_budget(budget) if isinstance(s, TokenTruncation) else s for s in self.strategies
        ]
        if not any(isinstance(s, TokenTruncation) for s in steps):
            steps.append(TokenTruncation(budget))
        return sorted(steps, key=lambda s: s.priority)

    @classmethod
    def preset(cls, name: str, summarizer: Summarizer | SummarizeFn | None = None) -> Pipeline:
        """``default`` (window of 50), ``aggressive`` (4,096 tokens), ``summarize`` (rolling
        summary past 20 messages keeping 10, then a window of 20)."""
        if name == "default":
            return cls([SlidingWindow(last=50)])
        if name == "aggressive":
            return cls([TokenTruncation(max_tokens=4096)])
        if name == "summarize":
            return cls([Summarization(20, 10, summarizer), SlidingWindow(last=20)])
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")

    def run(
        self,
        messages: Sequence[Mapping[str, Any]],
        conv: Conv | None = None,
        save_summary: Callable[[dict[str, Any]], None] | None = None,
        *,
        offset: int = 0,
        options: CallOptions = NO_OPTIONS,
    ) -> list[Mapping[str, Any]]:
        """The messages to send (``offset``: unpinned messages of the conversation before
        the ones given, left unread; ``options``: this call's overrides)."""
        return self._run(messages, conv, save_summary, offset, options)[0]

    def explain(
        self,
        messages: Sequence[Mapping[str, Any]],
        conv: Conv | None = None,
        save_summary: Callable[[dict[str, Any]], None] | None = None,
        *,
        offset: int = 0,
        options: CallOptions = NO_OPTIONS,
    ) -> PrepareReport:
        """Run the pipeline and report what it did with every input message."""
        output, context = self._run(messages, conv, save_summary, offset, options)
        return report(messages, output, context, context.counter)

    def sees_enough(
        self,
        tail: Sequence[Mapping[str, Any]],
        offset: int,
        pinned: Sequence[Mapping[str, Any]],
        options: CallOptions = NO_OPTIONS,
    ) -> bool:
        """Whether the newest unpinned messages ``tail`` (``offset`` older ones unread)
        give every strategy of the call (``options``) what the whole conversation would."""
        counter = options.counter or self.counter
        return all(
            sees_enough(strategy, tail, offset, pinned, counter)
            for strategy in self.strategies_for(options)
        )

    def _run(
        self,
        messages: Sequence[Mapping[str, Any]],
        conv: Conv | None,
        save_summary: Callable[[dict[str, Any]], None] | None,
        offset: int = 0,
        options: CallOptions = NO_OPTIONS,
    ) -> tuple[list[Mapping[str, Any]], PrepareContext]:
        pinned: list[Mapping[str, Any]] = []
        rest: list[Mapping[str, Any]] = []
        for message in messages:
            (pinned if is_pinned(message) else rest).append(message)
        context = PrepareContext(
            options.counter or self.counter,
            conv,
            pinned,
            save_summary,
            offset=offset,
            model=options.model,
            provider=options.provider,
            max_tokens=options.max_tokens,
        )
        for strategy in self.strategies_for(options):
            rest = strategy.apply(rest, context)
        return [*context.pinned, *drop_orphans(rest)], context


def report(
    source: Sequence[Mapping[str, Any]],
    output: list[Mapping[str, Any]],
    context: PrepareContext,
    counter: TokenCounter,
) -> PrepareReport:
    """Account for every input message of a prepare: pinned, kept or dropped."""
    sent = {id(m) for m in output}
    report = PrepareReport(
        output,
        summarized=context.summarized,
        summary=context.summary,
        reasons=context.reasons,
        fallback=context.fallback,
    )
    for index, message in enumerate(source):
        if id(message) not in sent:
            report.dropped.append(index)
        elif is_pinned(message):
            report.pinned.append(index)
        else:
            report.kept.append(index)
    count = counter.count
    report.tokens = {
        "pinned": sum(count(m) for m in output if is_pinned(m)),
        "kept": sum(count(source[i]) for i in report.kept),
        "dropped": sum(count(source[i]) for i in report.dropped),
    }
    report.tokens["sent"] = report.tokens["pinned"] + report.tokens["kept"]
    return report
