"""The rules every store's writes follow, written once: which batches are stored, and what
goes back to the caller.

An add carries its conversation, its batch, and optionally an ``idempotency_key`` and the
key of the batch it ``follows``. ``admits`` decides whether the batch is stored: a batch
whose key the conversation holds already is a retry, stores nothing and returns normally;
a batch whose ``follows`` the conversation no longer holds (cleared since, or its user
forgotten) stores nothing and raises ``ConversationCleared`` (``cleared``). The key is
asked first, so a retry of a batch that was stored before its predecessor was cleared
still returns normally. MemoryStore and LevelDBStore call ``admits`` in their servers;
PostgresStore applies the same rule, in the same order, in its schema's ``append``
function, under the conversation's row lock (writers on every node must meet one rule in
one transaction), and turns that function's answer for a cleared conversation into the
same error with ``cleared``.

``CALLER_ERRORS`` are the errors a write raises that are the caller's (bad input, a batch
the rules refused, a lease another owner holds, a fact limit, a store that could not
reach its data): they go back to the caller and the store goes on. Anything else a write
raises is a bug, and crashes the store so that its supervisor restarts it.
"""

from __future__ import annotations

from collections.abc import Container

from ..messages import Conv, InvalidMessage
from ._base import ConversationCleared, LeaseLost, StoreUnavailable
from .longterm import CursorMoved, FactLimitReached

CALLER_ERRORS: tuple[type[BaseException], ...] = (
    InvalidMessage,
    ValueError,
    TypeError,
    ConversationCleared,
    LeaseLost,
    FactLimitReached,
    CursorMoved,
    StoreUnavailable,
)
"""What a write raises to its caller without crashing the store (every backend's
``caller_errors``)."""

NO_KEYS: Container[str] = frozenset()
"""The keys of a conversation that holds none (or does not exist)."""


def admits(
    conv: Conv, idempotency_key: str | None, follows: str | None, held: Container[str]
) -> bool:
    """Whether a batch is to be stored, given the keys its conversation ``held`` holds:
    False for a retry (its key is held), ``ConversationCleared`` if the batch it follows
    is gone. A batch with neither key nor ``follows`` is always stored, so a store may
    skip the call for it."""
    if idempotency_key is not None and idempotency_key in held:
        return False
    if follows is not None and follows not in held:
        raise cleared(conv, follows)
    return True


def cleared(conv: Conv, follows: str | None) -> ConversationCleared:
    """The error of a write that follows a batch ``conv`` no longer holds."""
    return ConversationCleared(
        f"conversation {conv} no longer holds the batch {follows!r} this write "
        "follows: it was cleared since; nothing was stored"
    )


__all__ = ["CALLER_ERRORS", "NO_KEYS", "admits", "cleared"]
