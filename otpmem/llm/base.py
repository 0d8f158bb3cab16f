"""The ChatModel protocol: what the kernel, agents and model-backed summaries call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .pricing import normalize_usage


@dataclass(frozen=True)
class ChatResponse:
    """A model's answer: text and/or tool calls (in the message shape), usage, why it stopped."""

    content: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    usage: Mapping[str, Any] | None = None
    finish_reason: str = "stop"

    def to_message(self) -> dict[str, Any]:
        """The assistant message to store: text kept alongside any tool calls, and the call's
        usage in ``metadata.usage`` (what stores sum and budgets read)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [dict(call) for call in self.tool_calls]
        usage = normalize_usage(self.usage)
        if usage is not None:
            message["metadata"] = {"usage": usage}
        return message


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a list of messages: ``chat(messages, tools=None, **opts)``."""

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Answer ``messages``; ``tools`` are JSON-schema function specs the model may call."""


class ModelError(RuntimeError):
    """A model call failed; ``retryable`` says whether trying again may help."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
