"""The pipeline: pinned messages out, strategies in priority order, pinned back in front.

::

    pipeline = Pipeline([Summarization(threshold=20, keep_recent=10), SlidingWindow(last=20)])
    pipeline.run(messages)              # what to send
    pipeline.explain(messages).reasons  # and why
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..messages import Conv
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
    or ``metadata.pinned``) are taken out first and put back first, never counted or cut."""

    def __init__(
        self, strategies: Iterable[Strategy] = (), counter: TokenCounter | None = None
    ) -> None:
        given = list(strategies)
        for strategy in given:
            if not isinstance(strategy, Strategy):
                raise TypeError(f"{strategy!r} is not a Strategy (needs priority and apply)")
        self.strategies = sorted(given, key=lambda s: s.priority)
        self.counter = counter or DEFAULT_COUNTER

    def __repr__(self) -> str:
        return f"Pipeline({self.strategies!r})"

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
    ) -> list[Mapping[str, Any]]:
        """The messages to send (``offset``: unpinned messages of the conversation before
        the ones given, left unread)."""
        return self._run(messages, conv, save_summary, offset)[0]

    def explain(
        self,
        messages: Sequence[Mapping[str, Any]],
        conv: Conv | None = None,
        save_summary: Callable[[dict[str, Any]], None] | None = None,
        *,
        offset: int = 0,
    ) -> PrepareReport:
        """Run the pipeline and report what it did with every input message."""
        output, context = self._run(messages, conv, save_summary, offset)
        return report(messages, output, context, self.counter)

    def sees_enough(
        self,
        tail: Sequence[Mapping[str, Any]],
        offset: int,
        pinned: Sequence[Mapping[str, Any]],
    ) -> bool:
        """Whether the newest unpinned messages ``tail`` (``offset`` older ones unread)
        give every strategy what the whole conversation would."""
        return all(
            sees_enough(strategy, tail, offset, pinned, self.counter)
            for strategy in self.strategies
        )

    def _run(
        self,
        messages: Sequence[Mapping[str, Any]],
        conv: Conv | None,
        save_summary: Callable[[dict[str, Any]], None] | None,
        offset: int = 0,
    ) -> tuple[list[Mapping[str, Any]], PrepareContext]:
        pinned: list[Mapping[str, Any]] = []
        rest: list[Mapping[str, Any]] = []
        for message in messages:
            (pinned if is_pinned(message) else rest).append(message)
        context = PrepareContext(self.counter, conv, pinned, save_summary, offset=offset)
        for strategy in self.strategies:
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
