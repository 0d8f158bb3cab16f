"""TokenSummarization: the rolling summary of ``Summarization``, triggered by tokens.

bx-ai's ``maxTokens`` trigger (seed_peers.md §1.6): a message count under- or overshoots a
budget, so the summary rolls when the messages not yet covered by a summary cost more
than ``max_tokens``; the newest ``keep_recent`` are kept as they are. Everything else
(what is folded, where the summary goes, reuse on later turns, the fallback when the
summarizer fails) is ``Summarization``'s, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .strategies import PrepareContext, Summarization, _covered, _latest_summary
from .summarizers import Summarizer
from .tokens import TokenCounter
from .window import newest_user_index

NEVER = 2**62


class TokenSummarization(Summarization):
    """Summarize once the unsummarized messages cost more than ``max_tokens``::

    Pipeline([TokenSummarization(max_tokens=3000, keep_recent=10), TokenTruncation(4000)])
    """

    def __init__(
        self,
        max_tokens: int,
        keep_recent: int = 10,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        priority: int = 50,
    ) -> None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(
                f"TokenSummarization.max_tokens must be an int >= 1, got {max_tokens!r}"
            )
        if type(keep_recent) is not int or keep_recent < 0:
            raise ValueError(
                f"TokenSummarization.keep_recent must be an int >= 0, got {keep_recent!r}"
            )
        super().__init__(keep_recent + 1, keep_recent, summarizer, priority)
        self.max_tokens = max_tokens
        self.counter = counter

    def __repr__(self) -> str:
        return f"TokenSummarization(max_tokens={self.max_tokens}, keep_recent={self.keep_recent})"

    def over_budget(self, messages: list[Mapping[str, Any]], context: PrepareContext) -> bool:
        """Whether the messages no summary covers yet cost more than ``max_tokens``."""
        covered = _covered(_latest_summary(context.pinned), len(messages))
        asked = newest_user_index(messages)
        if asked is not None and covered > asked:
            covered = asked  # as Summarization does: the newest question is never covered
        count = (self.counter or context.counter).count
        return sum(count(m) for m in messages[covered:]) > self.max_tokens

    def apply(
        self, messages: list[Mapping[str, Any]], context: PrepareContext
    ) -> list[Mapping[str, Any]]:
        """Roll a summary when over budget; otherwise reuse the latest one."""
        # A Summarization per call with the threshold this call needs: an instance may be
        # shared by providers on many threads, so none of its state changes here.
        threshold = self.keep_recent + 1 if self.over_budget(messages, context) else NEVER
        step = Summarization(threshold, self.keep_recent, self.summarizer, self.priority)
        kept = step.apply(messages, context)
        self.failures += step.failures
        return kept
