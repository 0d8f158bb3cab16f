"""ScriptedModel: a deterministic, offline ChatModel for tests, demos and benchmarks."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..messages import thaw
from .base import ChatResponse, ModelError

Reply = str | ChatResponse | Mapping[str, Any] | BaseException
"""A scripted reply: text, a ChatResponse, a dict of ChatResponse fields, or an error to raise."""


def as_response(reply: Reply) -> ChatResponse:
    """Turn a scripted reply into a ChatResponse (raising it if it is an exception)."""
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, ChatResponse):
        return reply
    if isinstance(reply, str):
        return ChatResponse(content=reply)
    if isinstance(reply, Mapping):
        calls = tuple(reply.get("tool_calls") or ())
        return ChatResponse(
            content=reply.get("content"),
            tool_calls=calls,
            usage=reply.get("usage"),
            finish_reason=reply.get("finish_reason", "tool_calls" if calls else "stop"),
        )
    raise TypeError(f"a scripted reply is a str, dict, ChatResponse or exception, got {reply!r}")


def tool_call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    """A tool call in the message shape, for scripts."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class ScriptedModel:
    """Answers from a list of replies, in order, or from a function of the messages::

        ScriptedModel(["hello", {"tool_calls": [tool_call("c1", "add", '{"a": 1}')]}, "done"])
        ScriptedModel(lambda messages, tools: f"saw:{len(messages)}")

    Every call is recorded in ``calls`` (a copy of the messages and tools it was sent).
    Thread-safe: agents sharing one model see one script.
    """

    name = "scripted"

    def __init__(
        self,
        replies: Iterable[Reply] | Callable[[list[dict[str, Any]], Any], Reply],
    ) -> None:
        self._fn = _two_arguments(replies) if callable(replies) else None
        # A list of replies never blocks; a function may (tests hold turns with events).
        self.blocks = self._fn is not None
        self._replies = None if callable(replies) else list(replies)
        self._lock = threading.Lock()
        self.calls: list[tuple[list[dict[str, Any]], Any]] = []

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """The next scripted reply (or the function's answer) to ``messages``."""
        sent = [thaw(m) for m in messages]
        tools = None if tools is None else [thaw(t) for t in tools]
        with self._lock:
            self.calls.append((sent, tools))
            if self._fn is not None:
                reply = self._fn(sent, tools)
            else:
                assert self._replies is not None
                if not self._replies:
                    raise ModelError(
                        f"ScriptedModel ran out of replies after {len(self.calls) - 1} call(s)"
                    )
                reply = self._replies.pop(0)
        return as_response(reply)


def _two_arguments(fn: Callable[..., Reply]) -> Callable[[list[dict[str, Any]], Any], Reply]:
    """``fn`` as ``fn(messages, tools)``: DESIGN.md documents ``fn(messages)``, tests and
    examples also pass ``fn(messages, tools)``; both are taken."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: assume the full form
        return fn
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_more = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    if len(positional) == 1 and not takes_more:
        return lambda messages, tools: fn(messages)
    return fn
