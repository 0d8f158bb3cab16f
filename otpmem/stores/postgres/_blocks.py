"""PostgresStore's blocks: a table of their records, edited one transaction each.

    memory_blocks (owner, label, value, max_chars, version, updated_at, edit_keys)

``owner`` is the owner key (``scopes.owner_key``) as ``_scopes.stored_owner`` holds it.

Every edit of a block first takes a transaction-scoped advisory lock on it, so edits from
any number of threads and nodes take turns (a block not yet created included); within it,
the record is read, ``apply_edit`` decides, and the new record is upserted.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from psycopg import sql

from ...actors import blocking
from .._blocks_client import BlocksClient
from ..blocks import Block, apply_edit, block_from_record, check_label, check_owner
from ..scopes import Who
from ._scopes import ScopeWrites, stored_owner

_TABLE = """
CREATE TABLE IF NOT EXISTS {ns}.memory_blocks (
    owner text NOT NULL,
    label text NOT NULL,
    value text NOT NULL,
    max_chars integer NOT NULL,
    version bigint NOT NULL,
    updated_at double precision NOT NULL,
    edit_keys text[] NOT NULL,
    PRIMARY KEY (owner, label)
);
"""
_COLUMNS = "value, max_chars, version, updated_at, edit_keys"
_READ = f"SELECT {_COLUMNS} FROM {{ns}}.memory_blocks WHERE owner = %s AND label = %s"
_LIST = f"SELECT label, {_COLUMNS} FROM {{ns}}.memory_blocks WHERE owner = %s ORDER BY label"
_UPSERT = f"""
INSERT INTO {{ns}}.memory_blocks (owner, label, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (owner, label) DO UPDATE SET value = excluded.value,
    max_chars = excluded.max_chars, version = excluded.version,
    updated_at = excluded.updated_at, edit_keys = excluded.edit_keys
"""


def ensure_blocks(conn: Any, namespace: str) -> None:
    """Create the blocks table (once, under the schema's lock)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpmem.schema.{namespace}",))
        conn.execute(sql.SQL(_TABLE).format(ns=sql.Identifier(namespace)))


class BlockWrites:
    """The edit of one block, in the caller's transaction."""

    def __init__(self, namespace: str) -> None:
        ns = sql.Identifier(namespace)
        self.namespace = namespace
        self.read = sql.SQL(_READ).format(ns=ns)
        self.upsert = sql.SQL(_UPSERT).format(ns=ns)
        self.scopes = ScopeWrites(namespace)

    def edit(self, cur: Any, arg: tuple[Any, ...]) -> Block:
        """Lock the block, read it, apply the edit, write it back (``arg[1]``: the owner
        key, listed with the edit when it is a scope's)."""
        owner, label = self.scopes.enter(cur, arg[1]), arg[2]
        lock = f"otpmem.block.{self.namespace}.{len(owner)}:{owner}/{label}"
        cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (lock,))
        row = cur.execute(self.read, (owner, label)).fetchone()
        block, record = apply_edit(None if row is None else list(row), arg)
        if record is not None:
            cur.execute(self.upsert, (owner, label, *record))
        return block


class PostgresBlocks(BlocksClient):
    """The blocks of a PostgresStore handle: the edits, and the reads."""

    __slots__ = ()

    if TYPE_CHECKING:

        def schema(self) -> str: ...

        def _reading(self) -> AbstractContextManager[tuple[Any, Any]]: ...

    def _block_rows(self, text: str, args: tuple[Any, ...]) -> list[Any]:
        def fetch() -> list[Any]:
            with self._reading() as (conn, _):
                query = sql.SQL(text).format(ns=sql.Identifier(self.schema()))
                return list(conn.execute(query, args).fetchall())

        return blocking(fetch)

    def get_block(self, owner: Who, label: str) -> Block | None:
        """The block, or None."""
        key = check_owner(owner)
        rows = self._block_rows(_READ, (stored_owner(key), check_label(label)))
        return block_from_record(key, label, rows[0]) if rows else None

    def blocks(self, owner: Who) -> list[Block]:
        """The owner's blocks, by label."""
        key = check_owner(owner)
        rows = self._block_rows(_LIST, (stored_owner(key),))
        return [block_from_record(key, row[0], row[1:]) for row in rows]
