"""What the strategies of one pipeline run share: the ``Strategy`` protocol, the
``PrepareContext`` they read and write, and ``CallOptions``, the overrides one call may
bring (PhoenixAI.Store's ``apply_memory`` options) without changing the pipeline.

::

    options = CallOptions(max_tokens=2000, model="gpt-4o-mini", provider=chat_model)
    pipeline.run(messages, options=options)   # this call only; the pipeline is unchanged
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..messages import Conv, short_repr
from .tokens import DEFAULT_COUNTER, TokenCounter

PROVIDER_NAMES = ("openai",)
"""The providers a name stands for: ``"openai"`` is ``OpenAIClient(model)``."""


@dataclass
class PrepareContext:
    """What strategies share while preparing one list of messages.

    ``model``, ``provider`` and ``max_tokens`` are the call's (PhoenixAI.Store's pipeline
    context): a strategy's own option wins over them.
    """

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
    model: str | None = None
    provider: Any = None
    max_tokens: int | None = None


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


def check_model_provider(provider: object, what: str = "provider") -> Any:
    """``provider`` if it can summarize: None, a ``ChatModel`` (anything with ``chat``) or
    a name of ``PROVIDER_NAMES``; else a ValueError/TypeError naming ``what``."""
    if provider is None or callable(getattr(provider, "chat", None)):
        return provider
    if isinstance(provider, str):
        if provider in PROVIDER_NAMES:
            return provider
        raise ValueError(
            f"{what} {provider!r} is not a provider otpmem knows by name (known: "
            f"{', '.join(PROVIDER_NAMES)}); pass a ChatModel for any other"
        )
    raise TypeError(
        f"{what} must be a ChatModel (with chat(messages, ...)) or one of "
        f"{', '.join(map(repr, PROVIDER_NAMES))}, got {short_repr(provider)}"
    )


def check_model_name(model: object, what: str = "model") -> str | None:
    """``model`` if it is None or a non-empty str; else a ValueError naming ``what``."""
    if model is None or (isinstance(model, str) and model.strip()):
        return model
    raise ValueError(f"{what} must be a non-empty str (a model name), got {short_repr(model)}")


def check_budget(value: object, what: str) -> int | None:
    """``value`` if it is None or an int >= 1; else a ValueError naming ``what``."""
    if value is None or (type(value) is int and value >= 1):
        return value
    raise ValueError(f"{what} must be None or an int >= 1, got {short_repr(value)}")


def check_counter(counter: object, what: str = "token_counter") -> TokenCounter | None:
    """``counter`` if it is None or a ``TokenCounter``; else a TypeError naming ``what``."""
    if counter is None or (isinstance(counter, TokenCounter) and not isinstance(counter, str)):
        return counter  # (a str has a count method too)
    raise TypeError(
        f"{what} must be a TokenCounter (count(message) -> int), got {short_repr(counter)}"
    )


@dataclass(frozen=True)
class CallOptions:
    """Overrides for one pipeline run, each None when not given (validated here):

    ``max_tokens`` the token budget of what is sent (every ``TokenTruncation`` of the
    pipeline takes it, and a pipeline with none gets one as its last step), ``counter``
    the token counter (for strategies that were not given their own), ``model`` and
    ``provider`` what a ``Summarization`` without its own summarizes with.
    """

    max_tokens: int | None = None
    counter: TokenCounter | None = None
    model: str | None = None
    provider: Any = None

    def __post_init__(self) -> None:
        check_budget(self.max_tokens, "max_tokens")
        check_counter(self.counter)
        check_model_name(self.model)
        check_model_provider(self.provider)


NO_OPTIONS = CallOptions()
