"""Memory providers: how an agent loads, stores and prepares a conversation.

The provider is the policy over a store (seed 000's second layer): ``history`` loads what
a turn needs, ``append`` stores (the full history is always kept), ``prepare`` turns the
list about to be sent into what is sent, ``clear`` forgets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..messages import ConvLike, as_conv
from ..stores import ChatMemory
from .pipeline import Pipeline, PrepareReport, report
from .strategies import PrepareContext
from .tokens import DEFAULT_COUNTER, TokenCounter
from .window import safe_window


@runtime_checkable
class MemoryProvider(Protocol):
    """The policy layer. Contract: ``history`` sees every message whose ``append`` returned
    (read-your-writes), and ``prepare`` never changes what is stored of the messages given."""

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The stored messages a turn needs, oldest first."""

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        """Store ``messages``; returns once they are stored."""

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """What to send of ``messages`` (never a tool result without its call)."""

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation."""


class DefaultProvider:
    """Stores everything; ``prepare`` applies ``safe_window(messages, window)`` when a window
    is set. With a window, ``history`` reads only the newest messages from the store::

        provider = DefaultProvider(MemoryStore.start_link(), window=20)
    """

    def __init__(
        self, store: ChatMemory, window: int | None = None, counter: TokenCounter | None = None
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must implement ChatMemory (add/get/clear/...), got {store!r}")
        if window is not None and (type(window) is not int or window < 1):
            raise ValueError(f"window must be None or an int >= 1, got {window!r}")
        self.store = store
        self.window = window
        self.counter = counter or DEFAULT_COUNTER

    def __repr__(self) -> str:
        return f"DefaultProvider({self.store!r}, window={self.window})"

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """All of it, or with a window the newest ``window`` non-system messages (a tail
        read: a turn's cost does not grow with the conversation)."""
        if self.window is None:
            return self.store.get(conv)
        want = self.window
        while True:
            tail = self.store.get(conv, last=want)
            others = sum(1 for m in tail if m.get("role") != "system")
            if len(tail) < want:
                return tail  # the whole conversation
            if others < self.window:
                # System messages in the tail took places of others: read further back.
                want += self.window - others
            elif tail[0].get("role") == "tool":
                # The tail starts inside a tool round: reach back to the call, so a turn can
                # see (and heal) the round whole.
                want += 1
            else:
                return tail

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        """Store ``messages`` (validated whole first)."""
        self.store.add(conv, messages)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """``safe_window(messages, window)``, or the messages as they are without a window."""
        as_conv(conv)
        if self.window is None:
            return list(messages)
        return safe_window(messages, self.window)

    def explain(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> PrepareReport:
        """``prepare``, and what became of each input message."""
        context = PrepareContext(self.counter, as_conv(conv))
        output = self.prepare(conv, messages)
        if self.window is not None and len(output) < len(messages):
            context.reasons.append(
                f"safe_window(n={self.window}): kept system messages and the newest "
                f"{self.window} others, minus tool results whose call fell out"
            )
        return report(messages, output, context, self.counter)

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation."""
        self.store.clear(conv)


class PipelineProvider:
    """A provider whose ``prepare`` runs a ``Pipeline`` (or a preset by name); summaries it
    makes are stored in the conversation as pinned messages::

        provider = PipelineProvider(store, "summarize")
    """

    def __init__(self, store: ChatMemory, pipeline: Pipeline | str = "default") -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must implement ChatMemory (add/get/clear/...), got {store!r}")
        if isinstance(pipeline, str):
            pipeline = Pipeline.preset(pipeline)
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"pipeline must be a Pipeline or a preset name, got {pipeline!r}")
        self.store = store
        self.pipeline = pipeline

    def __repr__(self) -> str:
        return f"PipelineProvider({self.store!r}, {self.pipeline!r})"

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The whole conversation: pinned messages and summaries may be anywhere in it."""
        return self.store.get(conv)

    def append(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> None:
        """Store ``messages`` (validated whole first)."""
        self.store.add(conv, messages)

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """Run the pipeline; a new rolling summary is stored before it is returned."""
        return self.explain(conv, messages).messages

    def explain(self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]) -> PrepareReport:
        """``prepare``, and what became of each input message."""
        key = as_conv(conv)
        return self.pipeline.explain(
            messages, key, save_summary=lambda summary: self.store.add(key, [summary])
        )

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation, summaries included."""
        self.store.clear(conv)
