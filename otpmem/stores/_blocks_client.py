"""The memory-block half of every store handle: edits as one keyed call each (see
``blocks``); each store's handle mixes in its own reads beside it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .blocks import BLOCK_EDIT, Block, parse_block_edit


class BlocksClient:
    """``append_block``, ``replace_block`` and ``set_block``, written through the server."""

    __slots__ = ()

    if TYPE_CHECKING:

        def call(self, message: Any, timeout: float | None = 5.0) -> Any: ...

    def _edit(self, message: tuple[Any, ...], timeout: float | None) -> Block:
        parse_block_edit(message)  # refused here, on the caller's thread, before any call
        block: Block = self.call(message, timeout)
        return block

    def append_block(
        self,
        owner: str,
        label: str,
        text: str,
        *,
        limit: int | None = None,
        key: str | None = None,
        timeout: float | None = 10.0,
    ) -> Block:
        """Append ``text`` as a new line (a missing block is created, with ``limit`` or
        the default); ``BlockLimitExceeded`` past the limit. An edit whose ``key`` the block
        has seen is not applied again: the block is returned as it is."""
        return self._edit((BLOCK_EDIT, "append", owner, label, text, None, limit, key), timeout)

    def replace_block(
        self,
        owner: str,
        label: str,
        old: str,
        new: str,
        *,
        key: str | None = None,
        timeout: float | None = 10.0,
    ) -> Block:
        """Replace the one occurrence of ``old`` with ``new`` (``""`` deletes it);
        ``BlockTextNotFound`` if ``old`` is absent or ambiguous, ``BlockNotFound`` without
        the block, ``BlockLimitExceeded`` past the limit."""
        return self._edit((BLOCK_EDIT, "replace", owner, label, old, new, None, key), timeout)

    def set_block(
        self,
        owner: str,
        label: str,
        value: str,
        *,
        limit: int | None = None,
        key: str | None = None,
        timeout: float | None = 10.0,
    ) -> Block:
        """Create or overwrite the block (``limit``: its new limit; None keeps it, or
        gives a new block the default)."""
        return self._edit((BLOCK_EDIT, "set", owner, label, value, None, limit, key), timeout)
