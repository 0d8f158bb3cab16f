"""PostgresStore's scope records, and how an owner key is held in a text column.

    scopes (user_owner, owner)              the user's scopes that hold anything
    scope_members (owner, conversation_id)  the conversations that joined a scope (of its
                                            user: ``scopes.check_member``)

``user_owner`` is the stored key of the user's own scope (``''`` for no user): the key,
not the raw user id, so that a user id PostgreSQL's text cannot hold (a NUL) still has one.
Every write to an encoded owner (facts, a profile, a block edit, a join) first takes its
user's scope lock shared and lists the owner, in its own transaction; ``forget_user`` takes
that lock exclusively, so it finds every owner of the user and no write to one of them
commits between its read of the list and its deletes. It is the first lock either takes
(then a facts lock, the user's adds' lock, conversation rows), so the store's one order of
locks, which keeps nodes from deadlocking, holds.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import msgpack
from psycopg import sql

from ...messages import Conv
from ..scopes import MARK, Scope, is_encoded, owner_key, registered_user, sorted_scopes

TABLES = """
CREATE TABLE IF NOT EXISTS {ns}.scopes (
    user_owner text NOT NULL,
    owner text NOT NULL,
    PRIMARY KEY (user_owner, owner)
);
CREATE TABLE IF NOT EXISTS {ns}.scope_members (
    owner text NOT NULL,
    conversation_id text NOT NULL,
    PRIMARY KEY (owner, conversation_id)
);
"""

OWNED = (
    ("facts", "user_id"),
    ("fact_history", "user_id"),
    ("profiles", "user_id"),
    ("memory_blocks", "owner"),
    ("scope_members", "owner"),
)
"""The tables of an owner's records, each with the column that holds the owner."""

READS = {
    "scope_members": "SELECT conversation_id FROM {ns}.scope_members WHERE owner = %s",
    "scopes": "SELECT owner FROM {ns}.scopes WHERE user_owner = %s",
}
"""The scope reads, composed with the handle's others (``_reads.compose``)."""

_WRITES = {
    "share": "SELECT pg_advisory_xact_lock_shared(hashtext(%s))",
    "lock": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "list": "INSERT INTO {ns}.scopes VALUES (%s, %s) ON CONFLICT DO NOTHING",
    "join": "INSERT INTO {ns}.scope_members VALUES (%s, %s) ON CONFLICT DO NOTHING",
    "unlist": "DELETE FROM {ns}.scopes WHERE user_owner = %s RETURNING owner",
}


def stored_owner(owner: str) -> str:
    """An owner key as a text column holds it: itself, or, for a user id with a NUL (which
    text cannot hold), its user's JSON form after ``MARK``, which no owner key is."""
    if "\x00" not in owner:
        return owner
    # An owner key is [user, None, None, None] only for a user that begins with MARK, and
    # a plain key never does: this one names no other owner. ASCII JSON escapes the NUL.
    return MARK + json.dumps([owner, None, None, None], separators=(",", ":"))


def user_owner(user: str | None) -> str:
    """Whom the ``scopes`` list is of: the stored key of the user's own scope ('' for none)."""
    return "" if user is None else stored_owner(owner_key(user))


class ScopeWrites:
    """The scope statements of one namespace, each in the caller's transaction."""

    def __init__(self, namespace: str) -> None:
        ns = sql.Identifier(namespace)
        self.namespace = namespace
        self.q = {name: sql.SQL(text).format(ns=ns) for name, text in _WRITES.items()}
        self.forget_owned = [
            sql.SQL("DELETE FROM {ns}.{table} WHERE {column} = ANY(%s)").format(
                ns=ns, table=sql.Identifier(table), column=sql.Identifier(column)
            )
            for table, column in OWNED
        ]

    def _lock_name(self, user: str) -> str:
        return f"otpmem.scopes.{self.namespace}.{user}"

    def enter(self, cur: Any, owner: str) -> str:
        """Begin a write to ``owner`` (an owner key): an encoded one is listed under its
        user, that user's scope lock held shared; what the owner's rows are keyed by."""
        if is_encoded(owner):
            user = user_owner(registered_user(owner))
            cur.execute(self.q["share"], (self._lock_name(user),))
            cur.execute(self.q["list"], (user, owner))
        return stored_owner(owner)

    def join(self, cur: Any, owner: str, conv: Conv) -> None:
        """Make ``conv`` one of the scope's (``parse_join`` checked it is of its user)."""
        cur.execute(self.q["join"], (self.enter(cur, owner), conv.conversation_id))

    def lock_out(self, cur: Any, user_id: str) -> str:
        """A forget's first step: the user's scope lock, held exclusively, so no write to a
        scope of theirs runs until it commits; the stored key of the user's own scope."""
        user = user_owner(user_id)
        cur.execute(self.q["lock"], (self._lock_name(user),))
        return user

    def forget(self, cur: Any, user_id: str) -> None:
        """Delete the records of the user's own scope and of every scope listed under the
        user, and the list (the user's scope lock taken by ``lock_out``)."""
        user = user_owner(user_id)
        owners = [user, *(row[0] for row in cur.execute(self.q["unlist"], (user,)).fetchall())]
        for statement in self.forget_owned:
            cur.execute(statement, (owners,))


class ScopeReads:
    """The scope reads of a PostgresStore handle."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _rows(self, name: str, args: tuple[Any, ...]) -> list[Any]: ...

        def conversations(self, user_id: str | None = None) -> list[Conv]: ...

    def scope_conversations(self, scope: Scope) -> list[Conv]:
        """The conversations that joined the scope, by id (a user's scope: all of theirs)."""
        if type(scope) is not Scope:
            raise ValueError(f"scope_conversations takes a Scope, got {scope!r}")
        if scope.is_user:
            return sorted(self.conversations(scope.user))
        rows = self._rows("scope_members", (stored_owner(owner_key(scope)),))
        # Sorted here: PostgreSQL's collation need not order str as Python does.
        return sorted(Conv(scope.user, row[0]) for row in rows)

    def scopes(self, user_id: str | None) -> list[Scope]:
        """The user's scopes beyond their own that hold anything, in key order."""
        if user_id is not None:
            owner_key(user_id)
        return sorted_scopes(row[0] for row in self._rows("scopes", (user_owner(user_id),)))


# -- version 4: a user id that begins with MARK has an encoded key now -------------------------

_MARKED = (
    ("facts", "user_id", ("key", "record"), True),
    ("fact_history", "user_id", ("key", "n", "record", "valid_from", "valid_to"), True),
    ("profiles", "user_id", ("record",), False),  # a profile's record names no owner
    (
        "memory_blocks",
        "owner",
        ("label", "value", "max_chars", "version", "updated_at", "edit_keys"),
        False,
    ),
)
"""The tables keyed by owner: the owner's column, the others, whether ``record`` (a fact's)
names the owner too."""


def rekey_marked(conn: Any, namespace: str) -> None:
    """Move the records a version-3 schema keeps under a user id that begins with ``MARK``
    to its owner key: read raw, such a key would be another scope's (a forgery)."""
    ns = sql.Identifier(namespace)
    for table, column, rest, owned_record in _MARKED:
        exists = conn.execute("SELECT to_regclass(%s)", (f"{namespace}.{table}",)).fetchone()
        if exists is None or exists[0] is None:
            continue  # memory_blocks is made after the schema, by ensure_blocks
        names = sql.SQL(", ").join(sql.Identifier(c) for c in (column, *rest))
        where = {"ns": ns, "table": sql.Identifier(table), "column": sql.Identifier(column)}
        # Every marked row out first, then back under its new key: a new key may be an old
        # one (it begins with MARK too), and keys move injectively, so none collide.
        delete = sql.SQL("DELETE FROM {ns}.{table} WHERE starts_with({column}, %s) RETURNING ")
        rows = conn.execute(delete.format(**where) + names, (MARK,)).fetchall()
        insert = sql.SQL("INSERT INTO {ns}.{table} ({names}) VALUES ({values})").format(
            names=names, values=sql.SQL(", ").join([sql.Placeholder()] * (1 + len(rest))), **where
        )
        for old, *values in rows:
            new = owner_key(old)
            if owned_record:
                at = rest.index("record")
                values[at] = _rekeyed(values[at], new)
            conn.execute(insert, (new, *values))
            conn.execute(
                sql.SQL(_WRITES["list"]).format(ns=ns), (user_owner(registered_user(new)), new)
            )


def _rekeyed(record: bytes, new: str) -> bytes:
    """A fact's record with its owner (its first field) made ``new``."""
    raw = msgpack.unpackb(record, raw=False)
    raw[0] = new
    packed: bytes = msgpack.packb(raw)
    return packed
