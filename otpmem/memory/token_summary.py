"""TokenSummarization: bx-ai's ``maxTokens`` summary trigger under its own name.

A message count under- or overshoots a budget (seed_peers.md §1.6), so this summary rolls
when the messages no summary covers yet cost more than ``max_tokens``, keeping the newest
``keep_recent`` as they are. It is ``Summarization(threshold=None, max_tokens=...)``:
everything else (what is folded, where the summary goes, reuse on later turns, the fallback
when the summarizer fails) is ``Summarization``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .strategies import Summarization
from .summarization import OPTIONS as SUMMARIZATION_OPTIONS
from .summarizers import SummarizeFn, Summarizer
from .tokens import TokenCounter

OPTIONS = (
    "max_tokens",
    *(o for o in SUMMARIZATION_OPTIONS if o not in ("threshold", "max_tokens")),
)
"""The options ``TokenSummarization.from_options`` takes: ``Summarization``'s, but
``threshold`` (it rolls by tokens alone)."""


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
        *,
        provider: Any = None,
        model: str | None = None,
    ) -> None:
        if type(max_tokens) is not int or max_tokens < 1:
            raise ValueError(
                f"TokenSummarization.max_tokens must be an int >= 1, got {max_tokens!r}"
            )
        super().__init__(
            None,
            keep_recent,
            summarizer,
            priority,
            max_tokens,
            counter,
            provider=provider,
            model=model,
        )

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> TokenSummarization:
        """The tuple form's options (``OPTIONS``; ``max_tokens`` is required)."""
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"TokenSummarization takes no option {', '.join(map(repr, unknown))} "
                f"(it takes {', '.join(OPTIONS)})"
            )
        if "max_tokens" not in options:
            raise ValueError("TokenSummarization needs max_tokens (what triggers a summary)")
        if "summarize_fn" in options and "summarizer" in options:
            raise ValueError("TokenSummarization takes summarize_fn or summarizer, not both")
        strategy = cls(
            options["max_tokens"],
            options.get("keep_recent", 10),
            options.get("summarize_fn", options.get("summarizer")),
            options.get("token_counter"),
            options.get("priority", 50),
            provider=options.get("provider"),
            model=options.get("model"),
        )
        strategy.options = {**strategy.options, **options}
        return strategy

    def __repr__(self) -> str:
        return f"TokenSummarization(max_tokens={self.max_tokens}, keep_recent={self.keep_recent})"
