"""Strategies: what a pipeline does to the unpinned messages, in priority order.

Lower priority runs first. Unlike PhoenixAI.Store (whose code runs its window before its
summarization, against its own guide), ``Summarization`` (``summarization.py``) runs first
here: it must see every aged message to fold it in; ``SlidingWindow`` then caps what is
left, and ``TokenTruncation`` is the last guard of the budget. Each also takes the tuple
form's options: ``SlidingWindow.from_options({"last": 30})``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import short_repr
from .prepare_context import PrepareContext, Strategy, check_counter, sees_enough
from .summarization import SUMMARY_PREFIX, Summarization
from .tokens import TokenCounter
from .window import call_ids, drop_orphans, newest_user_index

__all__ = [
    "SUMMARY_PREFIX",
    "PrepareContext",
    "SlidingWindow",
    "Strategy",
    "Summarization",
    "TokenTruncation",
    "sees_enough",
]


def check_options(name: str, options: Mapping[str, Any], takes: Sequence[str]) -> None:
    """A ValueError naming the options of ``options`` the strategy ``name`` does not take."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ValueError(
            f"{name} takes no option {', '.join(map(repr, unknown))} (it takes {', '.join(takes)})"
        )


class SlidingWindow:
    """Keep the newest ``last`` unpinned messages (minus results whose call fell out), and
    the newest user message even when a long tool loop pushed it out of the window."""

    def __init__(self, last: int = 50, priority: int = 100) -> None:
        if type(last) is not int or last < 1:
            raise ValueError(f"SlidingWindow.last must be an int >= 1, got {last!r}")
        if type(priority) is not int:
            raise TypeError(f"SlidingWindow.priority must be an int, got {short_repr(priority)}")
        self.last = last
        self.priority = priority

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlidingWindow:
        """The tuple form's options: ``last`` (default 50), ``priority`` (default 100)."""
        check_options("SlidingWindow", options, ("last", "priority"))
        return cls(**options)

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
        if type(priority) is not int:
            raise TypeError(f"TokenTruncation.priority must be an int, got {short_repr(priority)}")
        self.max_tokens = max_tokens
        self.counter = check_counter(counter, "TokenTruncation.counter")
        self.priority = priority

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TokenTruncation:
        """The tuple form's options: ``max_tokens`` (required, as in PhoenixAI.Store),
        ``token_counter``, ``priority`` (default 200)."""
        check_options("TokenTruncation", options, ("max_tokens", "token_counter", "priority"))
        if "max_tokens" not in options:
            raise ValueError("TokenTruncation needs max_tokens (its token budget)")
        return cls(
            options["max_tokens"], options.get("token_counter"), options.get("priority", 200)
        )

    def with_budget(self, max_tokens: int) -> TokenTruncation:
        """The same truncation with another budget (one call's ``max_tokens``)."""
        return TokenTruncation(max_tokens, self.counter, self.priority)

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


def _with_question(
    messages: Sequence[Mapping[str, Any]], kept: list[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """``kept``, with the newest user message of ``messages`` put back in front if it fell
    out (it is a plain message: no tool group is split by keeping it)."""
    question = newest_user_index(messages)
    if question is None or any(m is messages[question] for m in kept):
        return kept
    return [messages[question], *kept]
