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
    """Asks a ``ChatModel`` for the summary: the previous one plus the aged transcript.
    ``options`` go with every call (``model="gpt-4o-mini"`` names the model to a client
    that takes one per call, and the summaries' provenance)."""

    def __init__(self, model: ChatModel, /, prompt: str = SUMMARY_PROMPT, **options: Any) -> None:
        self.model = model
        self.prompt = prompt
        self.options = options
        name = str(getattr(model, "name", type(model).__name__))
        asked = options.get("model")
        self.name = f"model:{name}" if asked in (None, name) else f"model:{name}/{asked}"

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
"""A plain function as a summarizer: ``fn(messages, previous)``, ``fn(messages)``, or
PhoenixAI.Store's ``fn(messages, context, opts)``."""


class FunctionSummarizer:
    """A plain function as a ``Summarizer`` (PhoenixAI.Store's ``summarize_fn`` hook):
    ``fn(messages, previous)``, ``fn(messages)`` when it takes one argument, or
    ``fn(messages, context, opts)`` when it takes three: PhoenixAI's form, where
    ``context`` is the call's (``model``, ``provider``, ``conv``, ``max_tokens``, and
    ``previous``, the summary being rolled onto) and ``opts`` the strategy's options.
    It returns the text (PhoenixAI's ``{:ok, text}``) or raises (``{:error, reason}``)."""

    def __init__(self, fn: SummarizeFn) -> None:
        if not callable(fn):
            raise TypeError(f"a summarizer function must be callable, got {fn!r}")
        self.fn = fn
        self.name = f"function:{getattr(fn, '__qualname__', type(fn).__name__)}"
        self.arity = _arity(fn)

    def summarize(
        self,
        messages: Sequence[Mapping[str, Any]],
        previous: str | None,
        context: Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> str:
        """Call the function; what it returns must be a non-empty str."""
        if self.arity == 2:
            text = self.fn(messages, previous)
        elif self.arity == 3:
            text = self.fn(messages, {**(context or {}), "previous": previous}, options or {})
        else:
            text = self.fn(messages)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{self.name} returned {text!r}, not a non-empty str")
        return text


def _arity(fn: SummarizeFn) -> int:
    """How many arguments a summarizer function is given: 2 if it takes two, else 3 if it
    takes three, else 1."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return 2  # a builtin without a signature: given both, as the protocol says
    for arity in (2, 3):
        try:
            signature.bind(*[None] * arity)
        except TypeError:
            continue
        return arity
    return 1


def model_summarizer(provider: Any, model: str | None) -> Summarizer:
    """The summarizer of a provider and a model name: ``"openai"`` is
    ``OpenAIClient(model)`` (a model is required), a ``ChatModel`` is asked with
    ``model=`` among its options when a model is named."""
    if isinstance(provider, str):
        if model is None:
            raise ValueError(f"provider {provider!r} needs a model name (model=...)")
        from ..llm import OpenAIClient  # the only provider known by name

        return ModelSummarizer(OpenAIClient(model))
    return ModelSummarizer(provider, model=model) if model else ModelSummarizer(provider)


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
