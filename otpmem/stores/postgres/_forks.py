"""PostgresStore's fork: one transaction under the target's row lock (see ``stores._fork``).

The transaction takes its user's lock shared (as every add does, so a ``forget_user``
waits for it) and then the target's ``conversations`` row, the one lock a write to the
target takes: a fork racing another fork or an add into the same target waits for it and
then finds it holding messages. The source's prefix is read by one statement, so it is
the source as some committed moment had it (an add commits whole: never half a batch),
without locking the source: its writers never wait for a fork.

``idempotency_keys.forked`` (how many messages a keyed fork copied, NULL for an add's key)
is added by ``ensure_forks``: a column an older otpmem neither reads nor writes (its
``append`` names five values, the rest take their default), so no schema version moves.
"""

from __future__ import annotations

from typing import Any

import msgpack
from psycopg import sql

from ...messages import Conv
from .._base import KEYS_KEPT
from .._fork import not_a_fork, pinned_positions, target_holds
from ._schema import user_key

_NO_END = 2**63 - 1  # a seq past every message: a fork of all of them

_SQL = {
    "lock_user": "SELECT pg_advisory_xact_lock_shared(hashtext('otpmem.user.' || %s))",
    "ensure_conv": "INSERT INTO {ns}.conversations (user_key, conversation_id) VALUES (%s, %s) "
    "ON CONFLICT DO NOTHING",
    "target": "SELECT count, key_ordinal FROM {ns}.conversations WHERE user_key = %s AND "
    "conversation_id = %s FOR UPDATE",
    "key": "SELECT forked FROM {ns}.idempotency_keys WHERE user_key = %s AND "
    "conversation_id = %s AND key = %s AND ordinal >= %s",
    "prefix": "SELECT body FROM {ns}.messages WHERE user_key = %s AND conversation_id = %s "
    "AND seq < %s ORDER BY seq",
    "copy": "INSERT INTO {ns}.messages (user_key, conversation_id, seq, body, pinned) "
    "SELECT %s, %s, i - 1, b, p FROM unnest(%s::bytea[], %s::boolean[]) WITH ORDINALITY "
    "AS t(b, p, i)",
    "counters": "UPDATE {ns}.conversations SET next_seq = %s, count = %s, pinned_count = %s, "
    "summary_seq = %s, key_ordinal = key_ordinal + %s WHERE user_key = %s AND "
    "conversation_id = %s",
    "put_key": "INSERT INTO {ns}.idempotency_keys (user_key, conversation_id, key, ordinal, "
    "position, forked) VALUES (%s, %s, %s, %s, 0, %s) ON CONFLICT (user_key, "
    "conversation_id, key) DO UPDATE SET ordinal = excluded.ordinal, position = 0, "
    "forked = excluded.forked",
}

_HAS_COLUMN = (
    "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND "
    "table_name = 'idempotency_keys' AND column_name = 'forked'"
)
_ADD_COLUMN = "ALTER TABLE {ns}.idempotency_keys ADD COLUMN IF NOT EXISTS forked bigint"


def ensure_forks(conn: Any, namespace: str) -> None:
    """Add ``idempotency_keys.forked`` once (under the schema's lock every node takes); a
    schema that has it is only read, never altered (an ALTER locks the table)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpmem.schema.{namespace}",))
        if conn.execute(_HAS_COLUMN, (namespace,)).fetchone() is None:
            conn.execute(sql.SQL(_ADD_COLUMN).format(ns=sql.Identifier(namespace)))


class Forks:
    """The fork transaction of one namespace, composed once."""

    def __init__(self, namespace: str) -> None:
        ns = sql.Identifier(namespace)
        self.q = {name: sql.SQL(text).format(ns=ns) for name, text in _SQL.items()}

    def fork(self, cur: Any, source: Conv, into: Conv, at: int | None, key: str | None) -> int:
        """Copy the first ``at`` messages of ``source`` into ``into``, in the caller's
        transaction; how many were copied (a retry: how many the first call copied)."""
        u = user_key(into.user_id)
        target = (u, into.conversation_id)
        cur.execute(self.q["lock_user"], (u,))
        cur.execute(self.q["ensure_conv"], target)
        cur.execute(self.q["target"], target)
        held, ordinal = (int(v) for v in cur.fetchone())
        if key is not None:
            cur.execute(self.q["key"], (*target, key, ordinal - KEYS_KEPT))
            row = cur.fetchone()
            if row is not None:
                if row[0] is None:
                    raise not_a_fork(into, key)
                return int(row[0])  # a retry: the fork is there already
        if held:
            raise target_holds(into, held)
        end = _NO_END if at is None else at
        cur.execute(self.q["prefix"], (u, source.conversation_id, end), binary=True)
        bodies = [bytes(row[0]) for row in cur.fetchall()]
        if not bodies:
            return 0  # the empty row ensure_conv made is listed nowhere (count 0)
        pins, pinned_count, summary = pinned_positions(
            [msgpack.unpackb(body, raw=False) for body in bodies]
        )
        pinned = set(pins)
        flags = [position in pinned for position in range(len(bodies))]
        n = len(bodies)
        cur.execute(self.q["copy"], (*target, bodies, flags))
        keyed = 0 if key is None else 1
        cur.execute(self.q["counters"], (n, n, pinned_count, summary, keyed, *target))
        if key is not None:
            cur.execute(self.q["put_key"], (*target, key, ordinal, n))
        return n


__all__ = ["Forks", "ensure_forks"]
