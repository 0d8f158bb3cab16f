"""MemoryStore's per-user index: each user's conversations, in the same table, so
``conversations(user)`` costs that user's conversations, whatever everybody else holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...actors import Table
from ...messages import Conv

# A user's conversations, oldest first, as a snapshot over an append-only list like the
# messages': (conversations, n). It lives in the store's table under ``UserKey``.
UserIndex = tuple[list[Conv], int]


@dataclass(frozen=True, slots=True)
class UserKey:
    """The table key of one user's conversation index: never equal to a conversation's
    key (a str, or a Conv, which equals any 2-tuple), so the two cannot collide."""

    user_id: str


def list_conversation(table: Table[Any, Any], conv: Conv) -> None:
    """Add a new conversation to its user's index (appended in place, published whole)."""
    key = UserKey(str(conv.user_id))
    index: UserIndex | None = table.get(key)
    if index is None:
        table[key] = ([conv], 1)
        return
    convs, n = index
    del convs[n:]  # readers never look past n
    convs.append(conv)
    table[key] = (convs, n + 1)


def unlist_conversation(table: Table[Any, Any], conv: Conv) -> None:
    """Take a cleared conversation out of its user's index (a new list: readers keep theirs)."""
    key = UserKey(str(conv.user_id))
    index: UserIndex | None = table.get(key)
    if index is None:
        return
    kept = [c for c in index[0][: index[1]] if c != conv]
    if kept:
        table[key] = (kept, len(kept))
    else:
        del table[key]


def reindex_users(table: Table[Any, Any]) -> None:
    """Rebuild every user's index from the conversations the table holds, in their order."""
    found: dict[str, list[Conv]] = {}
    for key in list(table):
        if type(key) is Conv and key.user_id is not None:
            found.setdefault(key.user_id, []).append(key)
    for key in [k for k in table if type(k) is UserKey]:
        del table[key]
    for user_id, convs in found.items():
        table[UserKey(user_id)] = (convs, len(convs))
