"""Export documents, their validated import, and the substring search every store offers."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..messages import (
    Conv,
    ConvLike,
    FrozenDict,
    InvalidMessage,
    as_conv,
    check_user_id,
    freeze_batch,
    short_repr,
    text_of,
)
from ._base import EXPORT_FORMAT, EXPORT_VERSION, SearchHit


def export_document(
    conversations: Iterable[tuple[Conv, Sequence[Mapping[str, Any]]]],
) -> dict[str, Any]:
    """Build the documented export: JSON-serialisable, re-importable, exact."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "conversations": [
            {
                "user_id": conv.user_id,
                "conversation_id": conv.conversation_id,
                "messages": [dict(m) for m in messages],
            }
            for conv, messages in conversations
        ],
    }


def parse_import(data: object) -> list[tuple[Conv, list[FrozenDict]]]:
    """Validate a whole export document before anything is written; raise naming the fault."""
    if not isinstance(data, Mapping):
        raise InvalidMessage(f"an import is a dict from export(), got {type(data).__name__}")
    if data.get("format") != EXPORT_FORMAT:
        raise InvalidMessage(
            f"'format' must be {EXPORT_FORMAT!r}, got {short_repr(data.get('format'))}"
        )
    if data.get("version") != EXPORT_VERSION:
        raise InvalidMessage(
            f"unsupported export version {short_repr(data.get('version'))} "
            f"(this otpmem reads {EXPORT_VERSION})"
        )
    entries = data.get("conversations")
    if not isinstance(entries, list):
        raise InvalidMessage("'conversations' must be a list")
    parsed = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise InvalidMessage(f"conversations[{i}] must be a dict")
        try:
            conv = as_conv(Conv(entry.get("user_id"), entry.get("conversation_id")))  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise InvalidMessage(f"conversations[{i}]: {exc}") from None
        try:
            messages = freeze_batch(entry.get("messages"))
        except InvalidMessage as exc:
            raise InvalidMessage(f"conversations[{i}] ({conv.conversation_id}): {exc}") from None
        parsed.append((conv, messages))
    return parsed


def search_scope(user_id: str | None, conv: ConvLike | None) -> tuple[str | None, Conv | None]:
    """Check that a search names one tenant: a conversation's user must be ``user_id``."""
    user_id = check_user_id(user_id)
    if conv is None:
        return user_id, None
    key = as_conv(conv)
    if user_id is not None and key.user_id != user_id:
        raise ValueError(
            f"conversation {key.conversation_id!r} belongs to {key.user_id!r}, not {user_id!r}"
        )
    return key.user_id, key


def rank_matches(
    query: str, conversations: Iterable[tuple[Conv, Sequence[Mapping[str, Any]]]], limit: int
) -> list[SearchHit]:
    """Case-insensitive substring search: most occurrences first, then newest first."""
    if not isinstance(query, str) or not query:
        raise ValueError(f"a search query must be a non-empty str, got {short_repr(query)}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {short_repr(limit)}")
    needle = query.casefold()
    hits = []
    for order, (conv, messages) in enumerate(conversations):
        for index, message in enumerate(messages):
            score = text_of(message).casefold().count(needle)
            if score:
                hits.append((score, order, index, conv, message))
    # Newest first among equal scores: later messages, and later conversations, win.
    hits.sort(key=lambda h: (-h[0], -h[2], -h[1]))
    return [
        SearchHit(conv, index, dict(message), score)
        for score, _, index, conv, message in hits[:limit]
    ]


def import_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """The idempotency key of one conversation of an import: a digest of its messages, so
    importing the same document twice stores it once."""
    canonical = json.dumps(list(messages), sort_keys=True, ensure_ascii=False, default=str)
    return "import:" + hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
