"""PostgresStore's reads, on the caller's thread with a pooled connection.

Each read is one statement, so it sees one snapshot: a ``window`` never mixes a tail and a
pinned index from two moments.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgpack
from psycopg import sql

from ...actors import blocking
from ...messages import Conv, ConvLike, as_conv, check_user_id, is_pinned
from .._base import KEYS_KEPT, StoredWindow, check_as_of, check_key, check_last
from .._fact_plan import as_seconds, facts_as_of
from ..longterm import (
    Fact,
    Profile,
    Usage,
    check_fact_key,
    check_owner,
    check_since,
    check_user,
    fact_from_list,
)
from ..scopes import Who, public_id
from ._schema import from_user_key, user_key
from ._scopes import READS, stored_owner
from ._writes import as_decimal

_SQL = {
    "all": "SELECT body FROM {ns}.messages WHERE user_key = %s AND conversation_id = %s "
    "ORDER BY seq",
    "last": "SELECT body FROM (SELECT seq, body FROM {ns}.messages WHERE user_key = %s AND "
    "conversation_id = %s ORDER BY seq DESC LIMIT %s) t ORDER BY seq",
    "as_of": "SELECT body FROM {ns}.messages WHERE user_key = %s AND conversation_id = %s "
    "AND seq < %s ORDER BY seq",
    "last_as_of": "SELECT body FROM (SELECT seq, body FROM {ns}.messages WHERE user_key = %s "
    "AND conversation_id = %s AND seq < %s ORDER BY seq DESC LIMIT %s) t ORDER BY seq",
    "count": "SELECT count FROM {ns}.conversations WHERE user_key = %s AND conversation_id = %s",
    "conversations": "SELECT user_key, conversation_id FROM {ns}.conversations WHERE count > 0 "
    "ORDER BY user_key, conversation_id",
    "user_conversations": "SELECT user_key, conversation_id FROM {ns}.conversations WHERE "
    "user_key = %s AND count > 0 ORDER BY conversation_id",
    "pinned": "SELECT seq, body FROM {ns}.messages WHERE user_key = %s AND conversation_id = %s "
    "AND pinned ORDER BY seq",
    "window": "WITH tail AS (SELECT seq, body, pinned FROM {ns}.messages WHERE user_key = %s AND "
    "conversation_id = %s ORDER BY seq DESC LIMIT %s), "
    "conv AS (SELECT count, pinned_count FROM {ns}.conversations WHERE user_key = %s AND "
    "conversation_id = %s) "
    "SELECT 't', seq, body FROM tail "
    "UNION ALL SELECT 'p', seq, body FROM {ns}.messages WHERE user_key = %s AND "
    "conversation_id = %s AND pinned AND seq < (SELECT coalesce(min(seq), "
    "(SELECT count FROM conv)) FROM tail) "
    "UNION ALL SELECT 'c', count, NULL FROM conv "
    "UNION ALL SELECT 'n', pinned_count, NULL FROM conv",
    "key_position": "SELECT k.position FROM {ns}.idempotency_keys k JOIN {ns}.conversations c "
    "USING (user_key, conversation_id) WHERE k.user_key = %s AND k.conversation_id = %s AND "
    "k.key = %s AND k.ordinal >= c.key_ordinal - %s",
    "fact": "SELECT record FROM {ns}.facts WHERE user_id = %s AND key = %s",
    "facts": "SELECT record FROM {ns}.facts WHERE user_id = %s ORDER BY key",
    # Every write of a row gives it a new xmin (the writing transaction's id), whichever
    # node or program wrote it: the facts' keys and xmins name their state, no table needed.
    "facts_stamp": "SELECT md5(string_agg(length(key) || ':' || key || ':' || xmin::text, "
    "',' ORDER BY key)) FROM {ns}.facts WHERE user_id = %s",
    "history": "SELECT record FROM {ns}.fact_history WHERE user_id = %s AND key = %s ORDER BY n",
    # One statement, one snapshot: the current facts and the history rows closed after t.
    "facts_as_of": "SELECT false, record, key, 0 FROM {ns}.facts WHERE user_id = %s "
    "UNION ALL SELECT true, record, key, n FROM {ns}.fact_history WHERE user_id = %s AND "
    "valid_to > %s AND (valid_from IS NULL OR valid_from <= %s) ORDER BY 1, 3, 4",
    "profile": "SELECT record FROM {ns}.profiles WHERE user_id = %s",
    "usage": "SELECT prompt_tokens, completion_tokens, total_tokens, cost FROM "
    "{ns}.conversations WHERE user_key = %s AND conversation_id = %s",
    "user_usage": "SELECT prompt_tokens, completion_tokens, total_tokens, cost FROM "
    "{ns}.user_usage WHERE user_key = %s",
    "usage_since": "SELECT coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0), "
    "coalesce(sum(total_tokens), 0), coalesce(sum(cost), 0) FROM {ns}.usage_log WHERE "
    "user_key = %s AND at >= %s AND (%s::text IS NULL OR conversation_id = %s) AND at >= "
    "coalesce((SELECT at FROM {ns}.cleared WHERE user_key = %s AND conversation_id = %s), 0)",
    "cursor": "SELECT cursor_pos FROM {ns}.conversations WHERE user_key = %s AND "
    "conversation_id = %s",
    "jobs": "SELECT user_key, conversation_id, job_upto FROM {ns}.conversations WHERE job_upto "
    "IS NOT NULL ORDER BY user_key, conversation_id",
}


def compose(namespace: str) -> dict[str, sql.Composed]:
    """The read statements of one namespace."""
    ns = sql.Identifier(namespace)
    return {name: sql.SQL(text).format(ns=ns) for name, text in {**_SQL, **READS}.items()}


def _unpack(raw: bytes) -> dict[str, Any]:
    message: dict[str, Any] = msgpack.unpackb(raw, raw=False)
    return message


def _owner(who: Who) -> str:
    """The column value of whose long-term records (a user id or a Scope)."""
    return stored_owner(check_owner(who))


def _usage(row: Any) -> Usage:
    if row is None:
        return Usage()
    return Usage(int(row[0]), int(row[1]), int(row[2]), as_decimal(row[3]).normalize())


class PostgresReads:
    """The reads of a PostgresStore handle (the ``ChatMemory`` and ``LongTermStore`` ones)."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _reading(self) -> AbstractContextManager[tuple[Any, dict[str, sql.Composed]]]: ...

    def _rows(self, name: str, args: tuple[Any, ...]) -> list[Any]:
        # From a process, the round trip waits on the blocking pool, not on its scheduler.
        return blocking(self._fetch, name, args)

    def _fetch(self, name: str, args: tuple[Any, ...]) -> list[Any]:
        with self._reading() as (conn, q):
            # Binary results: a bytea body arrives as its bytes, not as hex text to decode.
            return list(conn.execute(q[name], args, binary=True).fetchall())

    def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """The conversation oldest first, or its newest ``last`` (an index range scan);
        ``as_of=n``: as it was after its n-th message (one query, at most n rows)."""
        key = as_conv(conv)
        last = check_last(last)
        as_of = check_as_of(as_of)
        where = (user_key(key.user_id), key.conversation_id)
        if last == 0:
            return []
        if as_of is not None:  # a message's seq is its position: the first n are seq < n
            if last is None:
                rows = self._rows("as_of", (*where, as_of))
            else:
                rows = self._rows("last_as_of", (*where, as_of, last))
        elif last is None:
            rows = self._rows("all", where)
        else:
            rows = self._rows("last", (*where, last))
        return [_unpack(r[0]) for r in rows]

    def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        key = as_conv(conv)
        rows = self._rows("count", (user_key(key.user_id), key.conversation_id))
        return int(rows[0][0]) if rows else 0

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's."""
        check_user_id(user_id)
        rows = (
            self._rows("conversations", ())
            if user_id is None
            else self._rows("user_conversations", (user_id,))
        )
        return [Conv(from_user_key(u), c) for u, c in rows]

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """The pinned index, oldest first."""
        key = as_conv(conv)
        rows = self._rows("pinned", (user_key(key.user_id), key.conversation_id))
        return [(int(seq), _unpack(body)) for seq, body in rows]

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them, in one statement."""
        key = as_conv(conv)
        if check_last(last) is None:
            raise ValueError("window needs last: an int >= 0")
        where = (user_key(key.user_id), key.conversation_id)
        rows = self._rows("window", (*where, last, *where, *where))
        tail = sorted((int(s), _unpack(b)) for kind, s, b in rows if kind == "t")
        before = sorted((int(s), _unpack(b)) for kind, s, b in rows if kind == "p")
        total = next((int(s) for kind, s, _ in rows if kind == "c"), 0)
        pinned_count = next((int(s) for kind, s, _ in rows if kind == "n"), 0)
        messages = [m for _, m in tail]
        start = total - len(messages)
        tail_pinned = sum(1 for m in messages if is_pinned(m))
        pinned_before = pinned_count - tail_pinned
        return StoredWindow(before, messages, start, total, pinned_before, tail_pinned)

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None."""
        key = as_conv(conv)
        if check_key(idempotency_key) is None:
            raise ValueError("key_position needs an idempotency_key")
        rows = self._rows(
            "key_position",
            (user_key(key.user_id), key.conversation_id, idempotency_key, KEYS_KEPT),
        )
        return int(rows[0][0]) if rows else None

    def get_fact(self, user_id: Who, key: str) -> Fact | None:
        """The fact, or None."""
        rows = self._rows("fact", (_owner(user_id), check_fact_key(key)))
        return fact_from_list(msgpack.unpackb(rows[0][0])) if rows else None

    def get_facts(self, user_id: Who, as_of: float | datetime | None = None) -> list[Fact]:
        """Every fact of the user true now, by key; ``as_of``: those true then."""
        at = as_seconds(as_of, "as_of")
        owner = _owner(user_id)
        if at is None:
            rows = self._rows("facts", (owner,))
            return [fact_from_list(msgpack.unpackb(r[0])) for r in rows]
        rows = self._rows("facts_as_of", (owner, owner, at, at))
        current = [fact_from_list(msgpack.unpackb(r[1])) for r in rows if not r[0]]
        history = [fact_from_list(msgpack.unpackb(r[1])) for r in rows if r[0]]
        return facts_as_of(current, history, at)

    def facts_stamp(self, user_id: Who) -> bytes | None:
        """The digest of the user's fact rows' keys and versions (``FactStamps``): a write
        to them, from any node, changes it; None for a user with no facts."""
        rows = self._rows("facts_stamp", (_owner(user_id),))
        digest = rows[0][0] if rows else None
        return None if digest is None else str(digest).encode()

    def fact_history(self, user_id: Who, key: str) -> list[Fact]:
        """The values superseded or deleted, oldest first."""
        rows = self._rows("history", (_owner(user_id), check_fact_key(key)))
        return [fact_from_list(msgpack.unpackb(r[0])) for r in rows]

    def get_profile(self, user_id: Who) -> Profile | None:
        """The profile, or None."""
        owner = check_owner(user_id)
        rows = self._rows("profile", (stored_owner(owner),))
        if not rows:
            return None
        summary, metadata, updated_at = msgpack.unpackb(rows[0][0])
        return Profile(public_id(owner), summary, metadata, updated_at)

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage (one row; ``since``: a window of its log)."""
        key = as_conv(conv)
        since = check_since(since)
        user, conv_id = user_key(key.user_id), key.conversation_id
        if since is None:
            rows = self._rows("usage", (user, conv_id))
            return _usage(rows[0] if rows else None)
        rows = self._rows("usage_since", (user, since, conv_id, conv_id, user, conv_id))
        return _usage(rows[0])

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage across conversations, cleared ones included."""
        user = check_user(user_id)
        since = check_since(since)
        if since is None:
            rows = self._rows("user_usage", (user,))
            return _usage(rows[0] if rows else None)
        return _usage(self._rows("usage_since", (user, since, None, None, user, ""))[0])

    def extraction_cursor(self, conv: ConvLike) -> int:
        """How many of the conversation's messages extraction has processed."""
        key = as_conv(conv)
        rows = self._rows("cursor", (user_key(key.user_id), key.conversation_id))
        return int(rows[0][0]) if rows else 0

    def pending_extractions(self) -> list[tuple[Conv, int]]:
        """The extractions asked for and not yet done."""
        return [(Conv(from_user_key(u), c), int(n)) for u, c, n in self._rows("jobs", ())]
