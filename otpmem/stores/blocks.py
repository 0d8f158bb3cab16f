"""Memory blocks: named, size-limited texts an agent edits through tools (Letta's core memory).

A block belongs to an ``owner``: a user id (the user's own block) or a ``Scope`` (an
agent's, a run's, a team's: ``Scope("ann", team="alpha")``).
Its ``label`` names it within the owner (``"persona"``, ``"notes"``), its ``value`` is text
of at most ``limit`` characters. Every edit is one write of the store, run by the store's
one writer, so two agents editing one block never lose an edit; an edit given an
idempotency ``key`` the block has seen already is not applied again (a retried turn)::

    team = Scope("ann", team="alpha")
    store.set_block(team, "notes", "", limit=2000)
    store.append_block(team, "notes", "ann: owns the parser", key="t1:call_1")
    store.replace_block(team, "notes", "the parser", "the lexer", key="t2:call_1")
    store.get_block(team, "notes").value   # 'ann: owns the lexer'

These are the rules every store applies (``apply_edit``): the stores keep a block's record
(``block_as_list``) and run the edit on it in one write.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..messages import short_repr
from ._base import StoreError, check_key
from .scopes import Who, owner_key, public_id

DEFAULT_BLOCK_LIMIT = 2000
MAX_BLOCK_LIMIT = 100_000
MAX_LABEL = 100
MAX_EDIT_KEY = 400
EDIT_KEYS_KEPT = 256
"""How many of its newest edits' keys a block remembers: a retry is recognised among them."""
EDIT_KINDS = ("append", "replace", "set")
BLOCK_EDIT = "block_edit"
"""The store request of every block edit: ``(BLOCK_EDIT, kind, owner, label, a, b, limit,
key)``."""


class BlockEditRefused(StoreError, ValueError):
    """A block edit was refused by the rules; the block is untouched."""


class BlockNotFound(BlockEditRefused):
    """The edit needs a block that does not exist."""


class BlockTextNotFound(BlockEditRefused):
    """``replace_block``'s old text is not in the block, or is in it more than once."""


class BlockLimitExceeded(BlockEditRefused):
    """The edit would take the block past its limit of characters."""


@dataclass(frozen=True)
class Block:
    """One block as stored: ``version`` counts its edits (1 after the first), ``updated_at``
    is seconds since the epoch."""

    owner: Who
    label: str
    value: str
    limit: int
    version: int = 0
    updated_at: float = 0.0


@runtime_checkable
class BlockStore(Protocol):
    """What memory blocks need of a store (otpmem's three stores have it)."""

    def get_block(self, owner: Who, label: str) -> Block | None:
        """The block, or None."""

    def blocks(self, owner: Who) -> list[Block]:
        """The owner's blocks, by label."""

    def append_block(
        self, owner: Who, label: str, text: str, *, limit: int | None = ..., key: str | None = ...
    ) -> Block:
        """Append a line of text (a missing block is created)."""

    def replace_block(
        self, owner: Who, label: str, old: str, new: str, *, key: str | None = ...
    ) -> Block:
        """Replace the one occurrence of ``old`` with ``new``."""

    def set_block(
        self, owner: Who, label: str, value: str, *, limit: int | None = ..., key: str | None = ...
    ) -> Block:
        """Create or overwrite the block."""


# -- validation, shared by every store ---------------------------------------------------------


def check_owner(owner: object) -> str:
    """The store key of a block's owner: a non-empty user id or a ``Scope``."""
    return owner_key(owner, "a block owner")


def check_label(label: object) -> str:
    """A block label: a non-empty str of at most 100 characters, without '/'."""
    if type(label) is not str or not label.strip() or len(label) > MAX_LABEL or "/" in label:
        raise ValueError(
            f"a block label is a non-empty str of at most {MAX_LABEL} characters without "
            f"'/', got {short_repr(label)}"
        )
    return label


def check_block_limit(limit: object) -> int | None:
    """None (keep the block's, or the default) or an int from 1 to 100,000."""
    if limit is None:
        return None
    if type(limit) is not int or not 1 <= limit <= MAX_BLOCK_LIMIT:
        raise ValueError(
            f"a block limit is an int from 1 to {MAX_BLOCK_LIMIT} characters, got "
            f"{short_repr(limit)}"
        )
    return limit


def check_text(text: object, what: str) -> str:
    """Text of an edit: a str."""
    if type(text) is not str:
        raise ValueError(f"{what} must be a str, got {short_repr(text)}")
    return text


def check_edit_key(key: object) -> str | None:
    """None or a non-empty str of at most 400 characters."""
    return check_key(key, "an edit key", MAX_EDIT_KEY)


def parse_block_edit(message: tuple[Any, ...]) -> tuple[Any, ...]:
    """Check a ``block_edit`` request (the handle's and the server's own check):
    ``(kind, owner, label, a, b, limit, key)``; ``ValueError`` names what is wrong."""
    if len(message) != 8:
        raise ValueError("block_edit takes (kind, owner, label, a, b, limit, key)")
    _, kind, owner, label, a, b, limit, key = message
    if type(kind) is not str or kind not in EDIT_KINDS:
        raise ValueError(f"a block edit is one of {EDIT_KINDS}, got {short_repr(kind)}")
    owner = check_owner(owner)
    check_label(label)
    check_text(a, "the old text" if kind == "replace" else "the text")
    if kind == "replace":
        check_text(b, "the new text")
        if not a:
            raise ValueError("replace_block needs the old text to find: it is empty")
    elif b is not None:
        raise ValueError(f"{kind}_block takes no second text")
    return kind, owner, label, a, b, check_block_limit(limit), check_edit_key(key)


def is_block_edit(message: object) -> bool:
    """True for a block edit request, told by exact types only (a store's door must not run
    a caller's ``__eq__``)."""
    return (
        type(message) is tuple
        and len(message) > 0
        and type(message[0]) is str
        and message[0] == BLOCK_EDIT
    )


# -- the stored form and the one edit rule ------------------------------------------------------

Record = list[Any]
"""A block's stored form: ``[value, limit, version, updated_at, [edit keys, oldest first]]``."""


def block_from_record(owner: str, label: str, record: Sequence[Any]) -> Block:
    """The block a stored record of the owner key ``owner`` holds."""
    who = public_id(owner)
    return Block(who, label, record[0], int(record[1]), int(record[2]), float(record[3]))


def apply_edit(
    record: Sequence[Any] | None, edit: tuple[Any, ...], now: float | None = None
) -> tuple[Block, Record | None]:
    """Run a parsed edit on a block's record: the block after it and the record to store
    (None: nothing to write, the edit's key was applied before). Raises a
    ``BlockEditRefused`` naming why, with nothing to store."""
    kind, owner, label, a, b, limit, key = edit
    keys: list[str] = [] if record is None else list(record[4])
    if record is not None and key is not None and key in keys:
        return block_from_record(owner, label, record), None
    where = f"block {label!r} of {public_id(owner)!r}"
    if record is None:
        if kind == "replace":
            raise BlockNotFound(f"{where} does not exist: there is nothing to replace in")
        value, cap, version = "", limit or DEFAULT_BLOCK_LIMIT, 0
    else:
        value, cap, version = record[0], limit or int(record[1]), int(record[2])
    if kind == "append":
        value = f"{value}\n{a}" if value else a
    elif kind == "set":
        value = a
    else:
        found = value.count(a)
        if found != 1:
            said = "is not in it" if found == 0 else f"occurs {found} times in it"
            raise BlockTextNotFound(
                f"{where}: the old text {short_repr(a)} {said}; nothing was replaced "
                "(give text that occurs exactly once)"
            )
        value = value.replace(a, b, 1)
    if len(value) > cap:
        raise BlockLimitExceeded(
            f"{where} would hold {len(value)} characters, over its limit of {cap}: "
            "nothing was written (shorten it with replace_block, or raise its limit)"
        )
    if key is not None:
        keys.append(key)
        del keys[:-EDIT_KEYS_KEPT]
    stamp = time.time() if now is None else now
    stored: Record = [value, cap, version + 1, stamp, keys]
    return block_from_record(owner, label, stored), stored


__all__ = [
    "BLOCK_EDIT",
    "DEFAULT_BLOCK_LIMIT",
    "EDIT_KEYS_KEPT",
    "MAX_BLOCK_LIMIT",
    "Block",
    "BlockEditRefused",
    "BlockLimitExceeded",
    "BlockNotFound",
    "BlockStore",
    "BlockTextNotFound",
    "apply_edit",
    "block_from_record",
    "check_label",
    "check_owner",
    "is_block_edit",
    "parse_block_edit",
]
