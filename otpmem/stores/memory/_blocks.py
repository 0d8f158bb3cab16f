"""MemoryStore's blocks: one table entry per owner, a dict of its blocks' records, replaced
whole on every edit (readers on any thread see one edit or the one before it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..blocks import Block, apply_edit, block_from_record, check_label, check_owner
from ..scopes import Who
from . import _longterm as lt


def key(owner: str) -> Any:
    """The table key of an owner's blocks (a long-term key: never listed as a conversation)."""
    return lt.key("blocks", owner)


def edit(table: Any, arg: tuple[Any, ...], listing: Mapping[Any, Any]) -> Block:
    """Run a parsed edit, under the store's write lock: the edits of a block take turns
    (``listing``: what lists a scope's owner under its user, written with the edit)."""
    owner, label = arg[1], arg[2]
    current: dict[str, Any] = table.mapping().get(key(owner), {})
    block, record = apply_edit(current.get(label), arg)
    if record is not None:
        table.update({key(owner): {**current, label: record}, **listing})
    return block


class MemoryBlockReads:
    """The block reads of a MemoryStore handle, straight from the table."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _mapping(self) -> Mapping[Any, Any]: ...

    def get_block(self, owner: Who, label: str) -> Block | None:
        """The block, or None."""
        stored = check_owner(owner)
        record = self._mapping().get(key(stored), {}).get(check_label(label))
        return None if record is None else block_from_record(stored, label, record)

    def blocks(self, owner: Who) -> list[Block]:
        """The owner's blocks, by label."""
        stored = check_owner(owner)
        records = self._mapping().get(key(stored), {})
        return [block_from_record(stored, label, records[label]) for label in sorted(records)]
