"""ScriptedModel: a deterministic, offline ChatModel for tests, demos and benchmarks."""

from __future__ import annotations

import dataclasses
import inspect
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..messages import thaw
from .base import ChatResponse, ModelError

Reply = str | ChatResponse | Mapping[str, Any] | BaseException
"""A scripted reply: text, a ChatResponse, a dict of ChatResponse fields, or an error to raise."""

Call = tuple[list[dict[str, Any]], Any]
"""A recorded call: a copy of the messages and of the tools (or None) the model was sent."""

RECORD_LAST = 1000
"""Calls ``ScriptedModel(record=True)`` keeps: the last thousand."""


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
        ScriptedModel(["hi"], record=True)  # .calls: what each of the last 1,000 was sent

    ``call_count`` counts its calls. It records what it was sent only when asked:
    ``record=True`` keeps the last 1,000 calls in ``calls``, a deque (a copy of the messages
    and tools of each, oldest first), ``record=N`` the last N; by default it keeps none, so
    a model that answers for days holds no more than one that answered once (reading
    ``calls`` then says how to turn recording on). Thread-safe: agents sharing one model
    see one script.

    A reply that scripts no ``usage`` gets one, as a provider would report it: the tokens
    of what it was sent and of what it answered, counted as ``HeuristicCounter`` counts
    them (chars / 4 plus 3 a message), so budgets and usage sums work offline and
    deterministically. ``usage=False`` answers without usage; a ``ChatResponse`` reply is
    returned as it is. A function is run off the schedulers (it may wait on anything);
    ``blocks=False`` says it never waits, and agents then call it inline.
    """

    name = "scripted"

    def __init__(
        self,
        replies: Iterable[Reply] | Callable[[list[dict[str, Any]], Any], Reply],
        *,
        usage: bool = True,
        blocks: bool | None = None,
        record: bool | int = False,
    ) -> None:
        self.usage = usage
        self.record = _record_limit(record)
        self._fn = _two_arguments(replies) if callable(replies) else None
        # A list of replies never blocks; a function may (tests hold turns with events),
        # unless its caller says it does not: then agents call it inline, as a local model.
        self.blocks = self._fn is not None if blocks is None else bool(blocks)
        self._replies = None if callable(replies) else list(replies)
        self._lock = threading.Lock()
        self._calls: deque[Call] | None = None if self.record == 0 else deque(maxlen=self.record)
        self.call_count = 0

    @property
    def calls(self) -> deque[Call]:
        """The recorded calls, oldest first: the live record (``calls.clear()`` empties it),
        only for a model made with ``record``."""
        if self._calls is None:
            raise AttributeError(
                "this ScriptedModel records no calls: make it with record=True to keep the "
                f"last {RECORD_LAST:,} in .calls, or record=N for the last N "
                f"(it counts them in .call_count: {self.call_count} so far)"
            )
        return self._calls

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
            self.call_count += 1
            if self._calls is not None:
                self._calls.append((sent, tools))
            if self._fn is not None:
                reply = self._fn(sent, tools)
            else:
                assert self._replies is not None
                if not self._replies:
                    raise ModelError(
                        f"ScriptedModel ran out of replies after {self.call_count - 1} call(s)"
                    )
                reply = self._replies.pop(0)
        if isinstance(reply, ChatResponse):
            return reply  # the whole answer: usage=None means none was reported
        response = as_response(reply)
        if self.usage and response.usage is None:
            prompt = sum(map(estimate_tokens, sent))
            # The answer's own fields, not to_message(): that would normalise a usage the
            # answer has none of yet, a second accounting of the call.
            answer = {"content": response.content, "tool_calls": response.tool_calls}
            completion = estimate_tokens(answer)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            response = dataclasses.replace(response, usage=usage)
        return response


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """The heuristic count of one message: 3 + ceil(chars / 4) of its texts and tool calls
    (what ``otpmem.memory.HeuristicCounter`` counts; models sit below memory, so it is
    restated here)."""
    content = message.get("content")
    chars = 0
    if isinstance(content, str):
        chars += len(content)
    elif isinstance(content, list):
        chars += sum(
            len(part["text"])
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            chars += len(str(function.get("name", ""))) + len(str(function.get("arguments", "")))
    if isinstance(message.get("name"), str):
        chars += len(message["name"])
    return 3 + math.ceil(chars / 4)


def _record_limit(record: bool | int) -> int:
    """How many calls to keep for ``record``: 0 (none), ``RECORD_LAST`` for True, or N."""
    if isinstance(record, bool):
        return RECORD_LAST if record else 0
    if not isinstance(record, int) or record < 1:
        raise ValueError(
            f"record is True, False or how many calls to keep (an int >= 1), got {record!r}"
        )
    return record


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
