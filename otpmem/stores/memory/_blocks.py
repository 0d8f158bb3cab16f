"""MemoryStore's blocks: one table entry per owner, a dict of its blocks' records, replaced
whole on every edit (readers on any thread see one edit or the one before it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..blocks import Block, apply_edit, block_from_record, check_label, check_owner
from . import _longterm as lt


def key(owner: str) -> Any:
    """The table key of an owner's blocks (a long-term key: never listed as a conversation)."""
    return lt.key("blocks", owner)


def edit(table: Any, arg: tuple[Any, ...]) -> Block:
    """Run a parsed edit, under the store's write lock: the edits of a block take turns."""
    owner, label = arg[1], arg[2]
    current: dict[str, Any] = table.mapping().get(key(owner), {})
    block, record = apply_edit(current.get(label), arg)
    if record is not None:
        table.update({key(owner): {**current, label: record}})
    return block


class MemoryBlockReads:
    """The block reads of a MemoryStore handle, straight from the table."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _mapping(self) -> Mapping[Any, Any]: ...

    def get_block(self, owner: str, label: str) -> Block | None:
        """The block, or None."""
        records = self._mapping().get(key(check_owner(owner)), {})
        record = records.get(check_label(label))
        return None if record is None else block_from_record(owner, label, record)

    def blocks(self, owner: str) -> list[Block]:
        """The owner's blocks, by label."""
        records = self._mapping().get(key(check_owner(owner)), {})
        return [block_from_record(owner, label, records[label]) for label in sorted(records)]
