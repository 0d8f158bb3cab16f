"""Summarizers: turn aged messages (and the previous summary) into the next summary's text.

``ExtractiveSummarizer`` works offline and deterministically (the default for demos and
tests); ``ModelSummarizer`` asks any ``ChatModel``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..llm import ChatModel
from ..messages import text_of

SUMMARY_PROMPT = (
    "Summarize the conversation below concisely, preserving key facts, decisions, user "
    "preferences and open questions. Output only the summary, no preamble."
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@runtime_checkable
class Summarizer(Protocol):
    """Rolling summarization: ``summarize(aged, previous)`` returns the new summary text."""

    name: str

    def summarize(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        """Fold ``messages`` into ``previous`` (None for the first summary)."""


def transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """``role: text`` lines, tool calls named, for a summarizer's prompt."""
    lines = []
    for message in messages:
        text = text_of(message).strip()
        calls = [c.get("function", {}).get("name", "?") for c in message.get("tool_calls") or ()]
        if calls:
            text = (text + " " if text else "") + f"[called {', '.join(calls)}]"
        lines.append(f"{message.get('role')}: {text}")
    return "\n".join(lines)


class ExtractiveSummarizer:
    """Keeps the first sentence of each message (role-tagged), rolling onto the previous
    summary, trimmed to ``max_chars`` from the oldest end. Offline and deterministic."""

    name = "extractive"

    def __init__(self, max_chars: int = 2000, sentence_chars: int = 200) -> None:
        if max_chars < 1 or sentence_chars < 1:
            raise ValueError("max_chars and sentence_chars must be >= 1")
        self.max_chars = max_chars
        self.sentence_chars = sentence_chars

    def summarize(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        """Fold ``messages`` into ``previous`` (None for the first summary)."""
        lines = [previous] if previous else []
        for message in messages:
            text = " ".join(text_of(message).split())
            if not text:
                continue
            first = _SENTENCE_END.split(text, maxsplit=1)[0][: self.sentence_chars]
            lines.append(f"{message.get('role')}: {first}")
        summary = "\n".join(lines)
        if len(summary) > self.max_chars:
            summary = "…" + summary[len(summary) - self.max_chars + 1 :]
        return summary


class ModelSummarizer:
    """Asks a ``ChatModel`` for the summary: the previous one plus the aged transcript."""

    def __init__(self, model: ChatModel, prompt: str = SUMMARY_PROMPT, **options: Any) -> None:
        self.model = model
        self.prompt = prompt
        self.options = options
        self.name = f"model:{getattr(model, 'name', type(model).__name__)}"

    def summarize(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        """Fold ``messages`` into ``previous``; raises if the model fails or answers nothing."""
        body = transcript(messages)
        if previous:
            body = f"Previous summary:\n{previous}\n\nNew messages to fold in:\n{body}"
        response = self.model.chat(
            [{"role": "system", "content": self.prompt}, {"role": "user", "content": body}],
            **self.options,
        )
        text = (response.content or "").strip()
        if not text:
            raise ValueError(f"{self.name} returned an empty summary")
        return text


SummarizeFn = Callable[..., str]
"""A plain function as a summarizer: ``fn(messages, previous)`` or ``fn(messages)``."""


class FunctionSummarizer:
    """A plain function as a ``Summarizer`` (PhoenixAI.Store's ``summarize_fn`` hook):
    ``fn(messages, previous)``, or ``fn(messages)`` when it takes one argument."""

    def __init__(self, fn: SummarizeFn) -> None:
        if not callable(fn):
            raise TypeError(f"a summarizer function must be callable, got {fn!r}")
        self.fn = fn
        self.name = f"function:{getattr(fn, '__qualname__', type(fn).__name__)}"
        self._with_previous = _takes_two(fn)

    def summarize(self, messages: Sequence[Mapping[str, Any]], previous: str | None) -> str:
        """Call the function; what it returns must be a non-empty str."""
        text = self.fn(messages, previous) if self._with_previous else self.fn(messages)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{self.name} returned {text!r}, not a non-empty str")
        return text


def _takes_two(fn: SummarizeFn) -> bool:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True  # a builtin without a signature: given both, as the protocol says
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def as_summarizer(summarizer: object) -> Summarizer | None:
    """A ``Summarizer`` as it is, a plain function wrapped, None as None; ``TypeError``
    for anything else, naming what a summarizer is."""
    if summarizer is None or isinstance(summarizer, Summarizer):
        return summarizer
    if callable(summarizer):
        return FunctionSummarizer(summarizer)
    raise TypeError(
        "a summarizer is a Summarizer (name and summarize(messages, previous)) or a "
        f"function fn(messages, previous) -> str, got {summarizer!r}"
    )
