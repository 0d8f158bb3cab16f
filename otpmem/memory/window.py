"""Tool-call safety: what a window may cut, and what must go if it does.

A tool result is only valid after the assistant message that asked for it (matched by
``tool_call_id``); a provider answers 400 to anything else. Every policy here keeps that
true by construction: windows drop orphaned results, truncation moves whole tool groups.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

# The rule lives with messages: stores index pinned messages by it.
from ..messages import is_pinned as is_pinned
from ..messages import is_summary, split_pinned

Message = Mapping[str, Any]
_get: Callable[..., Any] = dict.get  # unbound: map(_get, dicts, repeat(key)) runs in C

CANCELLED = json.dumps(
    {"error": {"type": "cancelled", "message": "the turn that made this call ended before it ran"}}
)
"""The content of the result that stands in for a tool call that never got one."""


def call_ids(message: Message) -> set[str]:
    """The ids of the tool calls an assistant message makes (empty for others)."""
    calls = message.get("tool_calls")
    if not calls:
        return set()
    return {c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)}


def drop_orphans(messages: Sequence[Message]) -> list[Any]:
    """The messages minus every tool result whose call is not among the earlier ones kept."""
    asked: set[str] = set()
    kept = []
    for message in messages:
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in asked:
                continue
        elif message.get("tool_calls"):
            asked |= call_ids(message)
        kept.append(message)
    return kept


def safe_window(messages: Sequence[Message], n: int) -> list[Any]:
    """Pinned messages (system, ``metadata.pinned``) first, in their order, then the newest
    ``n`` others minus any tool result whose calling assistant message is not kept
    (beamai's window, matched by id). Of several rolling summaries only the newest is
    kept: it supersedes the others, as in the stores' pinned index."""
    if type(n) is not int or n < 0:
        raise ValueError(f"window size must be an int >= 0, got {n!r}")
    # One pass: a windowed provider runs this every turn.
    pinned, body, summaries, after_tool = split_pinned(messages)
    if summaries > 1:
        newest = next(m for m in reversed(pinned) if is_summary(m))
        pinned = [m for m in pinned if m is newest or not is_summary(m)]
    cut = len(body) - n if len(body) > n else 0
    if after_tool <= cut:  # no tool result in the window: none can be an orphan
        return pinned + body[cut:]
    return pinned + drop_orphans(body[cut:])


def units(messages: Sequence[Message]) -> list[list[Any]]:
    """Split into the spans a cut may fall between: a tool group (an assistant message with
    tool calls and the results right after it that answer them) is one span."""
    spans: list[list[Any]] = []
    open_ids: set[str] = set()
    for message in messages:
        if message.get("role") == "tool" and spans and message.get("tool_call_id") in open_ids:
            spans[-1].append(message)
            continue
        spans.append([message])
        open_ids = call_ids(message)
    return spans


def newest_user_index(messages: Sequence[Message]) -> int | None:
    """Index of the newest user message, or None."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def valid_context(messages: Sequence[Message]) -> list[Any]:
    """``messages`` made valid to send: every tool call followed by exactly its results.

    The one place the invariant is enforced, just before a model call, whatever memory
    form built the list. A call left without a result (a turn that crashed, then other
    messages) gets a ``cancelled`` result right after it; a result not right behind its
    call (its call cleared, or cut by a window) is dropped, as is a second result for one
    call. Everything that is not tool traffic is kept, in order. Linear in the messages.
    """
    try:  # no tool traffic, the common case, is valid as it is: found by scans in C
        if "tool" not in map(_get, messages, repeat("role")) and not any(
            map(_get, messages, repeat("tool_calls"))
        ):
            return list(messages)
    except TypeError:
        pass  # a Mapping that is not a dict: the general pass answers
    repaired: list[Any] = []
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        i += 1
        role = message.get("role")
        if role == "tool":
            continue  # no call right before it
        repaired.append(message)
        calls = message.get("tool_calls") if role == "assistant" else None
        if not calls:
            continue
        results: dict[Any, Message] = {}
        while i < n and messages[i].get("role") == "tool":
            results.setdefault(messages[i].get("tool_call_id"), messages[i])
            i += 1
        for call in calls:
            found = results.get(call.get("id"))
            if found is None:
                function = call.get("function") or {}
                found = {
                    "role": "tool",
                    "tool_call_id": call.get("id"),
                    "name": str(function.get("name", "")),
                    "content": CANCELLED,
                }
            repaired.append(found)
    return repaired
