"""MemoryStore's fork: a prefix of one conversation published as another's snapshot, in
one table update under the store's write lock (see ``stores._fork`` for the rules)."""

from __future__ import annotations

from typing import Any

from ...actors import Table
from .._fork import CheckedFork, not_a_fork, pinned_positions, prefix_length, target_holds
from ._snapshot import Snapshot, table_key
from ._users import list_conversation


def fork(table: Table[Any, Snapshot], checked: CheckedFork) -> int:
    """Fork as ``checked`` says, under the write lock; how many messages were copied."""
    source, into, at, key = checked
    mapping = table.mapping()
    target = mapping.get(table_key(into))
    if target is not None:
        if key is not None and target.keys is not None and key in target.keys:
            if target.forked is not None and target.forked[0] == key:
                return target.forked[1]  # a retry: the fork is there already
            raise not_a_fork(into, key)
        raise target_holds(into, target.count)
    entry = mapping.get(table_key(source))
    n = 0 if entry is None else prefix_length(entry.count, at)
    if entry is None or n == 0:
        return 0  # nothing to copy: a conversation holds at least one message
    # Stored messages are read-only dicts: the copy shares them, as readers do.
    messages = entry.messages[:n]
    pins, pinned_count, _ = pinned_positions(messages)
    keys = None if key is None else {key: 0}
    forked = None if key is None else (key, n)
    table.update({table_key(into): Snapshot(messages, n, tuple(pins), keys, pinned_count, forked)})
    if into.user_id is not None:
        list_conversation(table, into)  # after the snapshot: a listed conversation exists
    return n


__all__ = ["fork"]
