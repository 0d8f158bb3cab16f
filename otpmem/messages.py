"""The message shape, its validation, and conversation keys.

A message is a plain ``dict`` in the OpenAI chat shape::

    {"role": "user", "content": "hi"}
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "lookup", "arguments": "{\\"q\\": 1}"}}]}
    {"role": "tool", "tool_call_id": "c1", "content": "42"}

plus optional ``name`` and ``metadata`` (a dict). Every value must be JSON-like (dict with
str keys, list, str, int, float, bool, None), so that what is added is what is read back
from any store, msgpack or JSON: equal dicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from operator import eq, is_, not_
from typing import Any, NamedTuple, NoReturn

# Re-exported: the read-only values are what stores keep and hand out, under these names.
from .frozen import FrozenDict as FrozenDict
from .frozen import FrozenList as FrozenList
from .frozen import thaw as thaw
from .frozen import untracked as _untracked

# Re-exported: the packages describe bad input with it by this name, as they always have.
from .reprs import SHORT_REPR_MAX as SHORT_REPR_MAX
from .reprs import short_repr as short_repr

_get = dict.get  # unbound: map(_get, dicts, repeat(key)) reads a key of each, in C
_PINNED, _TRUE = repeat("pinned"), repeat(True)  # endless: shared by every split
ROLES = ("system", "user", "assistant", "tool")
FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "metadata")
_FIELD_SET = frozenset(FIELDS)
# Real messages nest a few levels (content parts, tool-call metadata); 32 is far beyond any
# of them, and keeps every walk over a stored value (freeze, thaw, msgpack, json, deepcopy)
# far below Python's recursion limit of 1,000 even when the walk starts deep in a stack.
MAX_DEPTH = 32
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgpack can carry


class InvalidMessage(ValueError):
    """A message (or a batch) is malformed; ``index`` and ``field`` say where."""

    def __init__(self, reason: str, *, index: int | None = None, field: str | None = None) -> None:
        where = []
        if index is not None:
            where.append(f"message {index}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {reason}" if prefix else reason)
        self.index = index
        self.field = field
        self.reason = reason


class Conv(NamedTuple):
    """The key of a conversation: who it belongs to (None: nobody) and its id."""

    user_id: str | None
    conversation_id: str


ConvLike = Conv | str
"""A ``Conv``, or a plain str meaning ``Conv(None, s)``."""


def as_conv(conv: object) -> Conv:
    """Normalise a ``Conv`` or a str into a ``Conv``; ``TypeError``/``ValueError`` otherwise."""
    if type(conv) is str:
        if not conv:
            raise ValueError("a conversation id must be a non-empty str")
        return Conv(None, conv)
    if isinstance(conv, Conv):
        # The tuple's own items, as exact strs: a key is hashed and compared wherever it
        # goes, and a subclass (of Conv or of str) would bring its own __hash__ and __eq__.
        user_id, conversation_id = tuple.__iter__(conv)
        if type(conversation_id) is not str or not conversation_id:
            raise ValueError(
                f"Conv.conversation_id must be a non-empty str, got {short_repr(conversation_id)}"
            )
        if user_id is not None and (type(user_id) is not str or not user_id):
            raise ValueError(
                f"Conv.user_id must be None or a non-empty str, got {short_repr(user_id)}"
            )
        return conv if type(conv) is Conv else Conv(user_id, conversation_id)
    raise TypeError(
        "a conversation is a Conv(user_id, conversation_id) or a str, "
        f"got {type(conv).__name__}: {short_repr(conv)}"
    )


def check_user_id(user_id: object) -> str | None:
    """Return ``user_id`` if it is None or a non-empty str, else raise ``ValueError``."""
    if user_id is None or (type(user_id) is str and user_id):
        return user_id
    raise ValueError(f"user_id must be None or a non-empty str, got {short_repr(user_id)}")


class _Checked(FrozenDict):
    """What ``freeze`` returns: a FrozenDict known to be valid (a hand-built one is not)."""

    __slots__ = ()


def _fail(reason: str, index: int | None, field: str | None) -> NoReturn:
    raise InvalidMessage(reason, index=index, field=field)


Path = tuple[Any, ...]
"""Where a value sits in a message, built lazily: (parent path, key or index)."""


def _field(path: Path) -> str:
    parts: list[Any] = []
    while path:
        path, step = path
        parts.append(step)
    text = ""
    for step in reversed(parts):
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text


def _fail_at(reason: str, index: int | None, path: Path) -> NoReturn:
    raise InvalidMessage(reason, index=index, field=_field(path) or None)


def _check_text(text: str, index: int | None, path: Path) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        _fail_at(f"text is not valid Unicode (a lone surrogate at {exc.start})", index, path)


def _freeze_value(value: Any, index: int | None, path: Path, depth: int) -> Any:
    """Check that ``value`` is JSON-like and return a frozen deep copy of it."""
    kind = type(value)
    if kind is str:
        if not value.isascii():
            _check_text(value, index, path)
        return value
    if kind is bool or value is None:
        return value
    if kind is int:
        if not _INT_MIN <= value <= _INT_MAX:
            _fail_at(f"integer {short_repr(value)} does not fit in 64 bits", index, path)
        return value
    if kind is float:
        if not math.isfinite(value):
            _fail_at(f"{value!r} is not a finite number (JSON cannot carry it)", index, path)
        return value
    if depth >= MAX_DEPTH:
        _fail_at(f"nested deeper than {MAX_DEPTH} levels", index, path)
    if isinstance(value, dict):
        frozen: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                _fail_at(
                    f"dict keys must be str, got {type(key).__name__} {short_repr(key)}",
                    index,
                    path,
                )
            if not key.isascii():
                _check_text(key, index, (path, key))
            item_kind = type(item)
            # Most values are ASCII strings: keep them off the recursive (and slower) path.
            if (item_kind is str and item.isascii()) or item is None or item_kind is bool:
                frozen[key] = item
            else:
                frozen[key] = _freeze_value(item, index, (path, key), depth + 1)
        return _untracked(_Checked(frozen) if depth == 0 else FrozenDict(frozen))
    if isinstance(value, list):
        return _untracked(
            FrozenList(
                [_freeze_value(item, index, (path, i), depth + 1) for i, item in enumerate(value)]
            )
        )
    _fail_at(
        f"{kind.__name__} is not storable: use dict, list, str, int, float, bool or None",
        index,
        path,
    )


def _check_content(message: Mapping[str, Any], role: str, index: int | None) -> None:
    content = message.get("content")
    if content is None:
        calls = message.get("tool_calls")
        # Tool calls that are there (checked next), asking no caller's __bool__ whether.
        if role == "assistant" and calls is not None and (type(calls) is not list or calls):
            return
        if role == "assistant":
            _fail("an assistant message needs content or tool_calls", index, "content")
        _fail(f"a {role} message needs content (a str or a list of parts)", index, "content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        _fail(
            f"must be a str, None or a list of parts, got {type(content).__name__}",
            index,
            "content",
        )
    for i, part in enumerate(content):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            _fail(f"part {i} must be a dict with a str 'type'", index, "content")


def _check_tool_calls(calls: Any, role: str, index: int | None) -> None:
    if role != "assistant":
        _fail(f"only assistant messages carry tool_calls, not {role}", index, "tool_calls")
    if not isinstance(calls, list):
        _fail(f"must be a list, got {type(calls).__name__}", index, "tool_calls")
    seen: set[str] = set()
    for i, call in enumerate(calls):
        where = f"tool_calls[{i}]"
        if not isinstance(call, dict):
            _fail("must be a dict", index, where)
        call_id = call.get("id")
        if type(call_id) is not str or not call_id:
            _fail("'id' must be a non-empty str", index, f"{where}.id")
        if call_id in seen:
            _fail(f"duplicate tool call id {call_id!r}", index, f"{where}.id")
        seen.add(call_id)
        call_type = call.get("type")
        if type(call_type) is not str or call_type != "function":
            _fail(
                f"'type' must be 'function', got {short_repr(call_type)}",
                index,
                f"{where}.type",
            )
        function = call.get("function")
        if not isinstance(function, dict):
            _fail("must be a dict with name and arguments", index, f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str) or not name:
            _fail("must be a non-empty str", index, f"{where}.function.name")
        if not isinstance(function.get("arguments"), str):
            _fail("must be a str (JSON text)", index, f"{where}.function.arguments")


def freeze_value(value: Any, field: str) -> Any:
    """A read-only deep copy of ``value`` if it may be stored as a message's metadata may:
    JSON-like, nested at most ``MAX_DEPTH`` levels, finite numbers, 64-bit ints. Else
    ``InvalidMessage`` (a ValueError) whose ``field`` names ``field`` and where in it.

    For what is stored beside messages (profiles' metadata, adapters' values), so that
    every backend refuses the same values for the same reasons.
    """
    # Depth 1: the value nests as deep as a message's metadata may, one level in.
    return _freeze_value(value, None, ((), field), 1)


def validate(message: Any, index: int | None = None) -> dict[str, Any]:
    """Return ``message`` if well formed; else raise ``InvalidMessage`` naming the field."""
    freeze(message, index)
    result: dict[str, Any] = message
    return result


def freeze(message: Any, index: int | None = None) -> FrozenDict:
    """Validate ``message`` and return a read-only deep copy of it (what stores keep)."""
    if not isinstance(message, dict):
        _fail(f"a message is a dict, got {type(message).__name__}", index, None)
    for key in message:
        # An exact str first: any other key would bring its own __hash__ and __eq__.
        if type(key) is not str or key not in _FIELD_SET:
            name = key if type(key) is str else short_repr(key)
            _fail(f"unknown field; a message has only {', '.join(FIELDS)}", index, name)
    role = message.get("role")
    if type(role) is not str or role not in ROLES:
        _fail(f"must be one of {', '.join(ROLES)}, got {short_repr(role)}", index, "role")
    _check_content(message, role, index)
    if "tool_calls" in message and message["tool_calls"] is not None:
        _check_tool_calls(message["tool_calls"], role, index)
    tool_call_id = message.get("tool_call_id")
    if role == "tool":
        if not isinstance(tool_call_id, str) or not tool_call_id:
            _fail("a tool message needs the non-empty str id of its call", index, "tool_call_id")
    elif "tool_call_id" in message:
        _fail(f"only tool messages carry tool_call_id, not {role}", index, "tool_call_id")
    if "name" in message and not isinstance(message["name"], str):
        _fail(f"must be a str, got {type(message['name']).__name__}", index, "name")
    if "metadata" in message and not isinstance(message["metadata"], dict):
        _fail(f"must be a dict, got {type(message['metadata']).__name__}", index, "metadata")
    frozen: FrozenDict = _freeze_value(message, index, (), 0)
    return frozen


def freeze_batch(messages: Any) -> list[FrozenDict]:
    """Validate a whole batch before anything is written; return the frozen messages."""
    kind = type(messages)
    if (
        kind is not list
        and kind is not tuple
        and (isinstance(messages, dict | str | bytes) or not isinstance(messages, Iterable))
    ):
        raise InvalidMessage(
            f"a batch is a list of messages, got {type(messages).__name__}", index=None
        )
    # What freeze made (e.g. read back from a store) was validated then; anything else,
    # a hand-built FrozenDict included, is checked now.
    return [m if type(m) is _Checked else freeze(m, i) for i, m in enumerate(messages)]


def validate_batch(messages: Any) -> list[dict[str, Any]]:
    """Validate a whole batch; return it as a list (of the caller's own dicts)."""
    freeze_batch(messages)
    return list(messages)


def text_of(message: Mapping[str, Any]) -> str:
    """The text of a message: its str content, or its text parts joined by newlines."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def is_pinned(message: Mapping[str, Any]) -> bool:
    """System messages, and messages with ``metadata.pinned``, are never dropped.

    Tool traffic (tool results, assistant tool calls) cannot be pinned: pinning moves a
    message to the front, which would separate a result from its call.
    """
    role = message.get("role")
    if role == "system":
        return True
    metadata = message.get("metadata")
    if metadata is None or role == "tool" or message.get("tool_calls"):
        return False
    if isinstance(metadata, dict):  # stored and frozen metadata: no ABC check, called per turn
        return metadata.get("pinned") is True
    return isinstance(metadata, Mapping) and metadata.get("pinned") is True


def split_pinned(
    messages: Iterable[Mapping[str, Any]],
) -> tuple[list[Any], list[Any], int, int]:
    """One pass over ``messages``: (the pinned ones, the others, how many of the pinned are
    summaries, the index in the others just past their last tool result, 0 if none).

    A windowed turn splits every message of its window here. The common window (dicts, no
    tool result, nothing marked pinned: only system messages are pinned) is split by scans
    that run in C, without a bytecode per message; any other takes ``is_pinned`` on each.
    """
    messages = messages if type(messages) is list else list(messages)
    try:
        roles = list(map(_get, messages, repeat("role")))
        marked = filter(None, map(_get, messages, repeat("metadata")))  # {} pins nothing
        plain = "tool" not in roles and True not in map(is_, map(_get, marked, _PINNED), _TRUE)
    except TypeError:  # a Mapping that is not a dict: the general pass
        plain = False
    if plain:
        if "system" not in roles:
            return [], list(messages), 0, 0
        system = list(map(eq, roles, repeat("system")))
        pinned = list(compress(messages, system))
        body = list(compress(messages, map(not_, system)))
        return pinned, body, sum(map(is_summary, pinned)), 0
    pinned, body = [], []
    summaries = after_tool = 0
    for message in messages:
        if is_pinned(message):
            pinned.append(message)
            summaries += is_summary(message)
        else:
            body.append(message)
            if message.get("role") == "tool":
                after_tool = len(body)
    return pinned, body, summaries, after_tool


def is_summary(message: Mapping[str, Any]) -> bool:
    """A rolling summary: a system message with ``metadata.summary`` (the newest supersedes
    the ones before it)."""
    # Only a system message is a summary: a user's pinned note with such metadata stays.
    metadata = message.get("metadata")
    return (
        message.get("role") == "system"
        and isinstance(metadata, Mapping)
        and isinstance(metadata.get("summary"), Mapping)
    )
