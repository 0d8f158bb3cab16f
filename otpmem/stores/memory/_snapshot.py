"""What a MemoryStore's table holds for a conversation: a ``Snapshot``, under its
``table_key``."""

from __future__ import annotations

from typing import Any

from ...messages import Conv

TableKey = Any  # a conversation (str or Conv), a user's index, or a long-term record


def table_key(conv: Conv) -> TableKey:
    """How a conversation is keyed in the table: a conversation of no user by its id alone.

    A str key hashes once and for all (a tuple rehashes on every lookup), and most reads
    name a conversation by a plain str.
    """
    return conv.conversation_id if conv.user_id is None else conv


class Snapshot:
    """One conversation as readers see it, replaced whole by every write (never changed).

    ``messages`` is an append-only list that the snapshot shows up to ``count``: a write
    extends it in place and publishes a new snapshot, so a reader holding the old one never
    looks past its own ``count``. ``pins`` are the pinned positions (system and pinned
    messages and the newest summary), ``keys`` each idempotency key's batch position (None:
    none yet; the newest ``KEYS_KEPT``), ``pinned_count`` how many of the ``count`` messages
    are pinned, superseded summaries included, ``forked`` the key and the size of the fork
    that made the conversation (None: no keyed fork), for its retry.

    A slotted class rather than a named tuple: its fields read as fast as a tuple's index on
    the read path, and it is built faster than a named tuple on the write path (measured).
    """

    __slots__ = ("count", "forked", "keys", "messages", "pinned_count", "pins")

    def __init__(
        self,
        messages: list[dict[str, Any]],
        count: int,
        pins: tuple[int, ...],
        keys: dict[str, int] | None,
        pinned_count: int,
        forked: tuple[str, int] | None = None,
    ) -> None:
        self.messages = messages
        self.count = count
        self.pins = pins
        self.keys = keys
        self.pinned_count = pinned_count
        self.forked = forked


__all__ = ["Snapshot", "TableKey", "table_key"]
