"""LevelDBStore's blocks: one entry per block, its record in msgpack.

    B <owner> <label, UTF-8>  ->  msgpack([value, limit, version, updated_at, edit keys])

``<owner>`` is the owner key (``scopes.owner_key``: a user id, or an encoded ``Scope``).

An edit runs on the server (its one writer): what is queued is written first, the record is
read, and the new one goes to the committer as one write, answered once it is durable.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import msgpack

from ...actors import NO_REPLY, blocking
from ..blocks import Block, apply_edit, block_from_record, check_label, check_owner
from ..scopes import Who
from . import keys
from ._committer import Op

BLOCK = b"B"


def block_key(owner: str, label: str) -> bytes:
    """Where one block lives."""
    return keys.user_prefix(BLOCK, owner) + label.encode("utf-8", "surrogatepass")


def edit(server: Any, arg: tuple[Any, ...], listing: Sequence[Op] = ()) -> Any:
    """Run a parsed edit on the server: read after every queued write, then one write
    (``listing``: what lists a scope's owner under its user, written with the edit)."""
    blocking(server.committer.flush)
    entry = block_key(arg[1], arg[2])
    raw = server.db.get(entry)
    block, record = apply_edit(None if raw is None else msgpack.unpackb(raw), arg)
    if record is None:
        return block  # a retry: its edit is on disk already
    ops = [(entry, msgpack.packb(record)), *listing]
    server.committer.submit(ops, server.caller(), answer=block)
    return NO_REPLY


class LevelDBBlockReads:
    """The block reads of a LevelDB store handle, on the caller's thread."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _db(self) -> AbstractContextManager[Any]: ...

    def get_block(self, owner: Who, label: str) -> Block | None:
        """The block, or None."""
        stored = check_owner(owner)
        entry = block_key(stored, check_label(label))
        with self._db() as db:
            raw = db.get(entry)
        return None if raw is None else block_from_record(stored, label, msgpack.unpackb(raw))

    def blocks(self, owner: Who) -> list[Block]:
        """The owner's blocks, by label (one range scan)."""
        stored = check_owner(owner)
        prefix = keys.user_prefix(BLOCK, stored)
        with self._db() as db:
            rows = list(db.iterator(prefix=prefix))
        return [
            block_from_record(
                stored, k[len(prefix) :].decode("utf-8", "surrogatepass"), msgpack.unpackb(v)
            )
            for k, v in rows
        ]
