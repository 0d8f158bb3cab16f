"""Strategies: what a pipeline does to the unpinned messages, in priority order.

Lower priority runs first. Unlike PhoenixAI.Store (whose code runs its window before its
summarization, against its own guide), ``Summarization`` runs first here: it must see every
aged message to fold it in; ``SlidingWindow`` then caps what is left, and
``TokenTruncation`` is the last guard of the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..messages import Conv, is_summary
from .summarizers import ExtractiveSummarizer, SummarizeFn, Summarizer, as_summarizer
from .tokens import DEFAULT_COUNTER, TokenCounter
from .window import call_ids, drop_orphans, newest_user_index, units

logger = logging.getLogger("otpmem.memory")

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"


@dataclass
class PrepareContext:
    """What strategies share while preparing one list of messages."""

    counter: TokenCounter = DEFAULT_COUNTER
    conv: Conv | None = None
    pinned: list[Mapping[str, Any]] = field(default_factory=list)
    save_summary: Callable[[dict[str, Any]], None] | None = None
    reasons: list[str] = field(default_factory=list)
    summarized: tuple[int, int] | None = None
    summary: Mapping[str, Any] | None = None
    fallback: bool = False
    offset: int = 0
    """How many of the conversation's unpinned messages come before the ones given: a
    provider that read only the tail says so, and summaries keep numbering the whole."""


@runtime_checkable
class Strategy(Protocol):
    """One step of a pipeline: ``apply`` returns the unpinned messages to keep."""

    priority: int

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        """Transform the unpinned messages (never splitting a tool group)."""


def sees_enough(
    strategy: Strategy,
    tail: Sequence[Mapping[str, Any]],
    offset: int,
    pinned: Sequence[Mapping[str, Any]],
    counter: TokenCounter,
) -> bool:
    """Whether ``strategy`` gives the same answer over the newest unpinned messages
    ``tail`` (``offset`` older ones left unread) as over the whole conversation.

    A strategy may say so with a ``sees_enough`` method of the same arguments; one that
    does not is given the whole conversation.
    """
    method = getattr(strategy, "sees_enough", None)
    if method is None:
        return offset == 0
    return bool(method(tail, offset, pinned, counter))


class SlidingWindow:
    """Keep the newest ``last`` unpinned messages (minus results whose call fell out), and
    the newest user message even when a long tool loop pushed it out of the window."""

    def __init__(self, last: int = 50, priority: int = 100) -> None:
        if type(last) is not int or last < 1:
            raise ValueError(f"SlidingWindow.last must be an int >= 1, got {last!r}")
        self.last = last
        self.priority = priority

    def __repr__(self) -> str:
        return f"SlidingWindow(last={self.last})"

    def sees_enough(
        self,
        tail: Sequence[Mapping[str, Any]],
        offset: int,
        pinned: Sequence[Mapping[str, Any]],
        counter: TokenCounter,
    ) -> bool:
        """The newest ``last``, and the newest question, are in the tail."""
        return offset == 0 or (len(tail) >= self.last and newest_user_index(tail) is not None)

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        """Keep the newest ``last``."""
        if len(messages) <= self.last:
            return messages
        kept = _with_question(messages, drop_orphans(messages[-self.last :]))
        context.reasons.append(f"{self!r}: dropped {len(messages) - len(kept)} older message(s)")
        return kept


class TokenTruncation:
    """Keep the newest whole tool groups and messages that fit in ``max_tokens``, and always
    the newest user message (even when it alone is over budget)."""

    def __init__(
        self, max_tokens: int, counter: TokenCounter | None = None, priority: int = 200
    ) -> None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(f"TokenTruncation.max_tokens must be an int >= 1, got {max_tokens!r}")
        self.max_tokens = max_tokens
        self.counter = counter
        self.priority = priority

    def __repr__(self) -> str:
        return f"TokenTruncation(max_tokens={self.max_tokens})"

    def sees_enough(
        self,
        tail: Sequence[Mapping[str, Any]],
        offset: int,
        pinned: Sequence[Mapping[str, Any]],
        counter: TokenCounter,
    ) -> bool:
        """The tail is over budget (nothing older could be kept) and holds the question."""
        if offset == 0:
            return True
        count = (self.counter or counter).count
        return newest_user_index(tail) is not None and sum(map(count, tail)) > self.max_tokens

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        """Keep the newest spans that fit, and the newest user message."""
        count = (self.counter or context.counter).count
        question = newest_user_index(messages)
        # The newest question matters more than the budget (without it the model answers
        # something else): its cost is set aside first; alone over budget, it is kept anyway
        # with the newer messages that fit the budget on their own, and nothing older.
        asking = count(messages[question]) if question is not None else 0
        budget = self.max_tokens - asking if asking <= self.max_tokens else self.max_tokens
        spans: list[list[Mapping[str, Any]]] = []
        # From the newest end, one span at a time, stopping at the budget: the cost is what
        # is kept, not the conversation's length.
        end = len(messages)
        while end > 0:
            start = end - 1
            if messages[start].get("role") == "tool":
                while start >= 0 and messages[start].get("role") == "tool":
                    start -= 1
                if start < 0 or not messages[start].get("tool_calls"):
                    end = start + 1  # results with no call in front: orphans, never sent
                    continue
                asked = call_ids(messages[start])
                span = [messages[start]] + [
                    m for m in messages[start + 1 : end] if m.get("tool_call_id") in asked
                ]
            else:
                span = [messages[start]]
            if start != question:
                cost = sum(count(m) for m in span)
                if cost > budget:
                    break
                budget -= cost
            spans.append(span)
            if start == question and asking > self.max_tokens:
                break  # the question alone is over budget: nothing older goes with it
            end = start
        kept = _with_question(messages, [m for span in reversed(spans) for m in span])
        dropped = len(messages) - len(kept)
        if dropped:
            context.reasons.append(
                f"{self!r}: dropped {dropped} older message(s) over the token budget"
            )
        return kept


class Summarization:
    """Fold aged messages into a rolling summary, stored as a pinned system message.

    When ``threshold`` or more messages are not yet covered by a summary, or (with
    ``max_tokens``, bx-ai's token trigger) when those messages cost more than
    ``max_tokens``, all but the newest ``keep_recent`` (moved back to a tool-group
    boundary) are summarized together with the previous summary; ``threshold=None`` rolls
    by tokens alone. The new summary records which messages it covers and which summarizer
    made it, and is reused on later turns until the trigger fires again. If the summarizer
    fails, the aged messages are dropped instead (pair-safe truncation) and the report
    says so.
    """

    def __init__(
        self,
        threshold: int | None = 20,
        keep_recent: int = 10,
        summarizer: Summarizer | SummarizeFn | None = None,
        priority: int = 50,
        max_tokens: int | None = None,
        counter: TokenCounter | None = None,
    ) -> None:
        if threshold is not None and (type(threshold) is not int or threshold < 1):
            raise ValueError(
                f"Summarization.threshold must be None or an int >= 1, got {threshold!r}"
            )
        if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
            raise ValueError(
                f"Summarization.max_tokens must be None or an int >= 1, got {max_tokens!r}"
            )
        if threshold is None and max_tokens is None:
            raise ValueError("Summarization needs a threshold, a max_tokens, or both")
        limit = threshold if threshold is not None else 2**62
        if type(keep_recent) is not int or not 0 <= keep_recent < limit:
            raise ValueError(
                f"Summarization.keep_recent must be an int in [0, threshold), got {keep_recent!r}"
            )
        self.threshold = threshold
        self.keep_recent = keep_recent
        self.summarizer = as_summarizer(summarizer) or ExtractiveSummarizer()
        self.priority = priority
        self.max_tokens = max_tokens
        self.counter = counter
        self.failures = 0

    def __repr__(self) -> str:
        tokens = "" if self.max_tokens is None else f", max_tokens={self.max_tokens}"
        return f"Summarization(threshold={self.threshold}, keep_recent={self.keep_recent}{tokens})"

    def due(self, fresh: Sequence[Mapping[str, Any]], context: PrepareContext) -> bool:
        """Whether the messages no summary covers yet (``fresh``) trigger a roll."""
        if self.threshold is not None and len(fresh) >= self.threshold:
            return True
        if self.max_tokens is None:
            return False
        count = (self.counter or context.counter).count
        return sum(count(m) for m in fresh) > self.max_tokens

    def sees_enough(
        self,
        tail: Sequence[Mapping[str, Any]],
        offset: int,
        pinned: Sequence[Mapping[str, Any]],
        counter: TokenCounter,
    ) -> bool:
        """Every message the newest summary does not cover, and the question, are read."""
        if offset == 0:
            return True
        covered = _covered(_latest_summary(pinned), offset + len(tail))
        return covered >= offset and newest_user_index(tail) is not None

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        """Reuse the latest summary, or roll a new one when enough messages aged."""
        previous = _latest_summary(context.pinned)
        offset = context.offset
        # Numbered over the conversation's unpinned messages, of which the first ``offset``
        # were not read: what the summary covers, counted from the first one given.
        claimed = _covered(previous, offset + len(messages))
        covered = max(0, claimed - offset)
        asked = newest_user_index(messages)
        if asked is not None and covered > asked:
            # A roll never covers the newest question (see below); a stored summary that
            # claims to (an edited or imported history) must not hide it either.
            covered = asked
        context.pinned = [m for m in context.pinned if not is_summary(m) or m is previous]
        in_use = offset + covered > 0 and claimed > 0
        if in_use:
            context.summary = previous
        fresh = messages[covered:]
        if not self.due(fresh, context):
            if in_use:
                context.reasons.append(
                    f"{self!r}: reused the summary of messages [0, {offset + covered}); "
                    f"{len(fresh)} since"
                )
            return drop_orphans(fresh)
        cut = len(fresh) - self.keep_recent
        question = newest_user_index(fresh)
        if question is not None:
            cut = min(cut, question)  # the newest question is answered, not summarized
        cut = _boundary(fresh, cut)
        aged, recent = fresh[:cut], fresh[cut:]
        if not aged:
            return drop_orphans(fresh)
        previous_text = _summary_text(previous) if in_use else None
        try:
            text = self.summarizer.summarize(aged, previous_text)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"summarizer returned {text!r}")
        except Exception as exc:
            self.failures += 1
            context.fallback = True
            context.reasons.append(
                f"{self!r}: summarizer {self.summarizer.name!r} failed ({exc!r}); dropped "
                f"{len(aged)} aged message(s) instead (pair-safe truncation)"
            )
            logger.warning(
                "summarizer %s failed, falling back to truncation: %r", self.summarizer.name, exc
            )
            return drop_orphans(recent)
        end = offset + covered + cut
        summary: dict[str, Any] = {
            "role": "system",
            "content": SUMMARY_PREFIX + text,
            "metadata": {
                "pinned": True,
                "summary": {
                    "covers": [0, end],
                    "summarizer": self.summarizer.name,
                    "rolled_from": [0, offset + covered] if in_use else None,
                },
            },
        }
        if context.save_summary is not None:
            context.save_summary(summary)
        context.pinned = [m for m in context.pinned if m is not previous] + [summary]
        context.summary = summary
        context.summarized = (offset + covered, end)
        context.reasons.append(
            f"{self!r}: summarized messages [{offset + covered}, {end}) into a new rolling summary "
            f"covering [0, {end}) with {self.summarizer.name!r}"
        )
        return drop_orphans(recent)


def _with_question(
    messages: Sequence[Mapping[str, Any]], kept: list[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """``kept``, with the newest user message of ``messages`` put back in front if it fell
    out (it is a plain message: no tool group is split by keeping it)."""
    question = newest_user_index(messages)
    if question is None or any(m is messages[question] for m in kept):
        return kept
    return [messages[question], *kept]


def _latest_summary(pinned: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    summaries = [m for m in pinned if is_summary(m)]
    return summaries[-1] if summaries else None


def _covered(summary: Mapping[str, Any] | None, available: int) -> int:
    """How many of the unpinned messages the summary covers (0 if it does not fit them)."""
    if summary is None:
        return 0
    covers = summary["metadata"]["summary"].get("covers")
    if (
        isinstance(covers, Sequence)
        and len(covers) == 2
        and covers[0] == 0
        and type(covers[1]) is int
        and 0 <= covers[1] <= available
    ):
        return covers[1]
    return 0


def _summary_text(summary: Mapping[str, Any] | None) -> str | None:
    if summary is None:
        return None
    content = str(summary.get("content") or "")
    return content.removeprefix(SUMMARY_PREFIX)


def _boundary(messages: Sequence[Mapping[str, Any]], cut: int) -> int:
    """The largest span boundary at or before ``cut``: a tool group is never split."""
    best = position = 0
    for span in units(messages):
        position += len(span)
        if position > cut:
            break
        best = position
    return best
