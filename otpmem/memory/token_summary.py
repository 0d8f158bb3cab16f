"""TokenSummarization: bx-ai's ``maxTokens`` summary trigger under its own name.

A message count under- or overshoots a budget (seed_peers.md §1.6), so this summary rolls
when the messages no summary covers yet cost more than ``max_tokens``, keeping the newest
``keep_recent`` as they are. It is ``Summarization(threshold=None, max_tokens=...)``:
everything else (what is folded, where the summary goes, reuse on later turns, the fallback
when the summarizer fails) is ``Summarization``'s.
"""

from __future__ import annotations

from .strategies import Summarization
from .summarizers import SummarizeFn, Summarizer
from .tokens import TokenCounter


class TokenSummarization(Summarization):
    """Summarize once the unsummarized messages cost more than ``max_tokens``::

    Pipeline([TokenSummarization(max_tokens=3000, keep_recent=10), TokenTruncation(4000)])
    """

    def __init__(
        self,
        max_tokens: int,
        keep_recent: int = 10,
        summarizer: Summarizer | SummarizeFn | None = None,
        counter: TokenCounter | None = None,
        priority: int = 50,
    ) -> None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(
                f"TokenSummarization.max_tokens must be an int >= 1, got {max_tokens!r}"
            )
        super().__init__(None, keep_recent, summarizer, priority, max_tokens, counter)

    def __repr__(self) -> str:
        return f"TokenSummarization(max_tokens={self.max_tokens}, keep_recent={self.keep_recent})"
