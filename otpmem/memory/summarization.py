"""Summarization: fold aged messages into a rolling summary, stored as a pinned message.

::

    Summarization(threshold=20, keep_recent=10)                   # offline, extractive
    Summarization(threshold=40, provider=chat_model, model="gpt-4o-mini")
    Summarization.from_options({"threshold": 40, "summarize_fn": fn})  # the tuple form

What summarizes, first that applies: the summarizer given (``summarizer``, PhoenixAI's
``summarize_fn``); else a model, from the strategy's own ``provider`` and ``model`` or, for
the one it lacks, the call's (``apply_memory(..., provider=..., model=...)``); else the
offline ``ExtractiveSummarizer``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import is_summary, short_repr
from .prepare_context import (
    PrepareContext,
    check_counter,
    check_model_name,
    check_model_provider,
)
from .summarizers import (
    ExtractiveSummarizer,
    FunctionSummarizer,
    SummarizeFn,
    Summarizer,
    as_summarizer,
    model_summarizer,
)
from .tokens import TokenCounter
from .window import drop_orphans, newest_user_index, units

logger = logging.getLogger("otpmem.memory")

SUMMARY_PREFIX = "Summary of the earlier conversation:\n"
OPTIONS = (
    "threshold",
    "keep_recent",
    "summarize_fn",
    "summarizer",
    "provider",
    "model",
    "priority",
    "max_tokens",
    "token_counter",
)
"""The options ``Summarization.from_options`` takes (PhoenixAI.Store's, and ours)."""


class Summarization:
    """Fold aged messages into a rolling summary, stored as a pinned system message.

    When ``threshold`` or more messages are not yet covered by a summary, or (with
    ``max_tokens``, bx-ai's token trigger) when those messages cost more than
    ``max_tokens``, all but the newest ``keep_recent`` (by default half the threshold, as
    PhoenixAI.Store keeps; moved back to a tool-group boundary) are summarized together
    with the previous summary; ``threshold=None`` rolls by tokens alone. The new summary
    records which messages it covers and which summarizer made it, and is reused on later
    turns until the trigger fires again. If the summarizer fails, the aged messages are
    dropped instead (pair-safe truncation) and the report says so.
    """

    def __init__(
        self,
        threshold: int | None = 20,
        keep_recent: int | None = None,
        summarizer: Summarizer | SummarizeFn | None = None,
        priority: int = 50,
        max_tokens: int | None = None,
        counter: TokenCounter | None = None,
        *,
        provider: Any = None,
        model: str | None = None,
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
        if keep_recent is None:
            keep_recent = threshold // 2 if threshold is not None else 10
        limit = threshold if threshold is not None else 2**62
        if type(keep_recent) is not int or not 0 <= keep_recent < limit:
            raise ValueError(
                f"Summarization.keep_recent must be an int in [0, threshold), got {keep_recent!r}"
            )
        if type(priority) is not int:
            raise TypeError(f"Summarization.priority must be an int, got {short_repr(priority)}")
        self.threshold = threshold
        self.keep_recent = keep_recent
        given = as_summarizer(summarizer)
        self.given = given is not None
        """Whether a summarizer was given (it then wins over any provider)."""
        self.summarizer: Summarizer = given or ExtractiveSummarizer()
        self.provider = check_model_provider(provider, "Summarization.provider")
        self.model = check_model_name(model, "Summarization.model")
        self.priority = priority
        self.max_tokens = max_tokens
        self.counter = check_counter(counter, "Summarization.counter")
        self.failures = 0
        self.options: dict[str, Any] = {"threshold": threshold, "keep_recent": keep_recent}
        """What a three-argument ``summarize_fn`` is given as ``opts``."""
        self._clients: dict[str, Summarizer] = {}  # model name -> summarizer of a named provider
        self._clients_lock = threading.Lock()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Summarization:
        """The tuple form's options (``OPTIONS``): PhoenixAI.Store's ``threshold``,
        ``provider``, ``model``, ``summarize_fn``, and ``keep_recent``, ``priority``,
        ``max_tokens``, ``token_counter``."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"Summarization takes no option {', '.join(map(repr, unknown))} "
                f"(it takes {', '.join(OPTIONS)})"
            )
        if "summarize_fn" in options and "summarizer" in options:
            raise ValueError("Summarization takes summarize_fn or summarizer, not both")
        strategy = cls(
            options.get("threshold", 20),
            options.get("keep_recent"),
            options.get("summarize_fn", options.get("summarizer")),
            options.get("priority", 50),
            options.get("max_tokens"),
            options.get("token_counter"),
            provider=options.get("provider"),
            model=options.get("model"),
        )
        strategy.options = {**strategy.options, **options}
        return strategy

    def __repr__(self) -> str:
        tokens = "" if self.max_tokens is None else f", max_tokens={self.max_tokens}"
        return f"Summarization(threshold={self.threshold}, keep_recent={self.keep_recent}{tokens})"

    def summarizer_for(self, context: PrepareContext) -> Summarizer:
        """What summarizes in this call (see the module docstring)."""
        if self.given:
            return self.summarizer
        provider = self.provider if self.provider is not None else context.provider
        model = self.model if self.model is not None else context.model
        if provider is None:
            if model is not None:
                raise ValueError(
                    f"{self!r} is to summarize with model {model!r} but has no provider: "
                    "give provider= (a ChatModel, or 'openai') in its options or the call's"
                )
            return self.summarizer
        if not isinstance(provider, str):
            return model_summarizer(provider, model)
        key = f"{provider}:{model}"
        with self._clients_lock:  # one client (and its connection pool) per model name
            found = self._clients.get(key)
            if found is None:
                found = self._clients[key] = model_summarizer(provider, model)
        return found

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
        summarizer = self.summarizer_for(context)
        try:
            text = self._summarize(summarizer, aged, previous_text, context)
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"summarizer returned {text!r}")
        except Exception as exc:
            self.failures += 1
            context.fallback = True
            context.reasons.append(
                f"{self!r}: summarizer {summarizer.name!r} failed ({exc!r}); dropped "
                f"{len(aged)} aged message(s) instead (pair-safe truncation)"
            )
            logger.warning(
                "summarizer %s failed, falling back to truncation: %r", summarizer.name, exc
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
                    "summarizer": summarizer.name,
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
            f"covering [0, {end}) with {summarizer.name!r}"
        )
        return drop_orphans(recent)

    def _summarize(
        self,
        summarizer: Summarizer,
        aged: Sequence[Mapping[str, Any]],
        previous: str | None,
        context: PrepareContext,
    ) -> str:
        if isinstance(summarizer, FunctionSummarizer) and summarizer.arity == 3:
            call = {
                "model": self.model if self.model is not None else context.model,
                "provider": self.provider if self.provider is not None else context.provider,
                "conv": context.conv,
                "max_tokens": context.max_tokens,
                "token_counter": context.counter,
            }
            return summarizer.summarize(aged, previous, call, self.options)
        return summarizer.summarize(aged, previous)


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
