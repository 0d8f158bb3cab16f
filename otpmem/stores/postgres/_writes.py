"""PostgresStore's writes: each one transaction, every batch whole, per conversation in turn.

Every write to a conversation first locks its ``conversations`` row (``FOR UPDATE``), so
writers on any number of nodes take turns on it: sequence numbers are assigned under the
lock (no gaps, no interleaving), an idempotency key is checked and recorded under it (a
batch retried on another node is still stored once), and the pinned index, the usage sums
and the counters change in the same transaction as the messages.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import msgpack
from psycopg import sql

from ...messages import Conv, FrozenDict, is_pinned, is_summary
from .._base import KEYS_KEPT
from .._client import CheckedAdd
from .._fact_plan import check_cursor_from, end, plan_facts, start
from .._write_rules import cleared
from ..longterm import (
    Fact,
    Profile,
    Usage,
    batch_usage,
    fact_as_list,
    fact_from_list,
)
from ..scopes import owner_key
from ._functions import FENCES_LOST
from ._leases import Fence
from ._schema import user_key
from ._scopes import ScopeWrites, stored_owner

Add = CheckedAdd
"""One add as every store takes it: the conversation, the batch, its key, the key it follows."""

_SQL = {
    # The bodies go as binary bytea (%b): no hex text to encode here and decode there.
    # The plainest add (one message; no key, follows, usage or summary) as one statement:
    # append's steps for it, without a function call or arrays to encode (a third of the
    # server's and the client's work per add, measured). The user's lock is taken first,
    # as append takes it (the gating one-time filter runs before the row is read); no row
    # yet (a first add) inserts nothing, and append makes the row.
    "append_plain": "WITH held AS (SELECT pg_advisory_xact_lock_shared(hashtext('otpmem.user.' "
    "|| %s))), moved AS (UPDATE {ns}.conversations SET next_seq = next_seq + 1, "
    "count = count + 1, pinned_count = pinned_count + %s WHERE user_key = %s AND "
    "conversation_id = %s AND EXISTS (SELECT FROM held) RETURNING user_key, conversation_id, "
    "next_seq - 1 AS seq) INSERT INTO {ns}.messages (user_key, conversation_id, seq, body, "
    "pinned) SELECT user_key, conversation_id, seq, %b, %s FROM moved",
    "append": "SELECT {ns}.append(%s, %s, %b, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
    "append_group": "SELECT {ns}.append_group(%s, %s, %s, %b, %s, %s, %s, %s, %s, %s, %s, %s, "
    "%s, %s, %s)",
    "fenced_append_group": "SELECT {ns}.fenced_append_group(%s, %s, %s, %s, %s, %s, %b, %s, "
    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
    "ensure_conv": "INSERT INTO {ns}.conversations (user_key, conversation_id) VALUES (%s, %s) "
    "ON CONFLICT DO NOTHING",
    "lock_conv": "SELECT 1 FROM {ns}.conversations WHERE user_key = %s AND conversation_id = %s "
    "FOR UPDATE",
    "lock_existing": "SELECT 1 FROM {ns}.conversations WHERE user_key = %s AND "
    "conversation_id = %s FOR UPDATE",
    "delete_messages": "DELETE FROM {ns}.messages WHERE user_key = %s AND conversation_id = %s",
    "delete_keys": "DELETE FROM {ns}.idempotency_keys WHERE user_key = %s AND conversation_id = %s",
    "delete_conv": "DELETE FROM {ns}.conversations WHERE user_key = %s AND conversation_id = %s",
    "mark_cleared": "INSERT INTO {ns}.cleared VALUES (%s, %s, %s) ON CONFLICT "
    "(user_key, conversation_id) DO UPDATE SET at = excluded.at",
    "lock_user": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "lock_user_adds": "SELECT pg_advisory_xact_lock(hashtext('otpmem.user.' || %s))",
    "lock_user_convs": "SELECT 1 FROM {ns}.conversations WHERE user_key = %s "
    "ORDER BY conversation_id FOR UPDATE",
    "facts_of": "SELECT record FROM {ns}.facts WHERE user_id = %s",
    "put_fact": "INSERT INTO {ns}.facts VALUES (%s, %s, %s) ON CONFLICT (user_id, key) "
    "DO UPDATE SET record = excluded.record",
    "delete_fact": "DELETE FROM {ns}.facts WHERE user_id = %s AND key = %s",
    "history": "INSERT INTO {ns}.fact_history (user_id, key, record, valid_from, valid_to) "
    "VALUES (%s, %s, %s, %s, %s)",
    # A key's history cut to its newest %s rows by the write that adds one (the primary
    # key's index finds the cut: no scan of the user's history).
    "trim_history": "DELETE FROM {ns}.fact_history WHERE user_id = %s AND key = %s AND n <= "
    "(SELECT n FROM {ns}.fact_history WHERE user_id = %s AND key = %s ORDER BY n DESC "
    "OFFSET %s LIMIT 1)",
    "cursor_of": "SELECT cursor_pos FROM {ns}.conversations WHERE user_key = %s AND "
    "conversation_id = %s",
    "set_cursor": "UPDATE {ns}.conversations SET cursor_pos = %s, job_upto = CASE WHEN "
    "job_upto <= %s THEN NULL ELSE job_upto END WHERE user_key = %s AND conversation_id = %s",
    "put_profile": "INSERT INTO {ns}.profiles VALUES (%s, %s) ON CONFLICT (user_id) "
    "DO UPDATE SET record = excluded.record",
    "delete_profile": "DELETE FROM {ns}.profiles WHERE user_id = %s",
    "request_job": "UPDATE {ns}.conversations SET job_upto = %s WHERE user_key = %s AND "
    "conversation_id = %s AND %s > cursor_pos AND (job_upto IS NULL OR job_upto < %s)",
}
_FORGET = (
    "messages",
    "idempotency_keys",
    "conversations",
    "user_usage",
    "usage_log",
    "cleared",
)
"""The tables of a user's conversations, keyed by the raw user id (the owner-keyed ones are
``_scopes.OWNED``)."""


class FencesLost(Exception):
    """Fenced adds of a group lost their leases (their positions in the group); nothing
    of the group was stored."""

    def __init__(self, positions: list[int]) -> None:
        super().__init__(f"fenced adds {positions} lost their leases")
        self.positions = positions


class Writes:
    """The write transactions of one namespace, composed once."""

    def __init__(self, namespace: str) -> None:
        ns = sql.Identifier(namespace)
        # As bytes: a composed query is rendered again at every execute (~5 us an add).
        self.q = {name: sql.SQL(text).format(ns=ns).as_bytes(None) for name, text in _SQL.items()}
        self.forget = [
            sql.SQL("DELETE FROM {ns}.{table} WHERE user_key = %s").format(
                ns=ns, table=sql.Identifier(table)
            )
            for table in _FORGET
        ]
        self.scopes = ScopeWrites(namespace)

    def _lock(self, cur: Any, conv: Conv) -> None:
        where = (user_key(conv.user_id), conv.conversation_id)
        cur.execute(self.q["ensure_conv"], where)
        cur.execute(self.q["lock_conv"], where)

    def append(
        self,
        cur: Any,
        conv: Conv,
        batch: Sequence[FrozenDict],
        key: str | None = None,
        follows: str | None = None,
    ) -> None:
        """Append one batch in the caller's transaction: one call of the schema's
        ``append`` function (the row lock, the key, the rows, the index and the sums), or
        one ``append_plain`` statement for one plain message."""
        if not batch:
            return
        plain = plain_arguments(conv, batch) if key is None and follows is None else None
        if plain is not None:
            cur.execute(self.q["append_plain"], plain)
            if cur.rowcount == 1:
                return  # stored: no key to have been stored before, no batch to follow
        cur.execute(self.q["append"], append_arguments(conv, batch, key, follows))
        check_appended(cur.fetchone()[0], conv, follows)

    def append_group(
        self, cur: Any, adds: Sequence[Add], fences: Sequence[Fence | None] = ()
    ) -> list[int]:
        """Append many batches in the caller's transaction, in one statement: what the
        schema's ``append`` answered for each (0: its key was stored; -1: cleared).

        With ``fences`` (one per add, None: not fenced), every fenced add's lease is
        checked first; if any lost its lease nothing is stored and ``FencesLost`` names
        them. They run sorted by conversation (a stable sort: one conversation's batches
        keep their order), so that every group takes its row locks in one order."""
        order = sorted(range(len(adds)), key=lambda i: _conv_order(adds[i][0]))
        per_add: list[list[Any]] = [[] for _ in range(11)]
        bodies: list[bytes] = []
        pins: list[bool] = []
        for i in order:
            arguments = append_arguments(*adds[i])
            u, c, add_bodies, add_pins, *rest = arguments[:12]
            bodies += add_bodies
            pins += add_pins
            for column, value in zip(per_add, (u, c, len(add_bodies), *rest), strict=True):
                column.append(value)
        users, convs, counts, *scalars = per_add
        group = (users, convs, counts, bodies, pins, *scalars, time.time(), KEYS_KEPT)
        fenced = [i for i, fence in enumerate(fences) if fence is not None]
        if fenced:
            held = [fence for fence in fences if fence is not None]
            names, owners, epochs = ([f[n] for f in held] for n in range(3))
            try:
                cur.execute(self.q["fenced_append_group"], (names, owners, epochs, *group))
            except Exception as exc:
                if getattr(exc, "sqlstate", None) != FENCES_LOST:
                    raise
                detail = exc.diag.message_detail or ""  # type: ignore[attr-defined]
                raise FencesLost([fenced[int(j) - 1] for j in detail.split(",")]) from None
        else:
            cur.execute(self.q["append_group"], group)
        answers = cur.fetchone()[0]
        unsorted = [0] * len(adds)
        for position, i in enumerate(order):
            unsorted[i] = int(answers[position])
        return unsorted

    def clear(self, cur: Any, conv: Conv) -> None:
        """Delete one conversation (its user's usage sums stay; its windows restart)."""
        where = (user_key(conv.user_id), conv.conversation_id)
        cur.execute(self.q["lock_existing"], where)
        for name in ("delete_messages", "delete_keys", "delete_conv"):
            cur.execute(self.q[name], where)
        cur.execute(self.q["mark_cleared"], (*where, time.time()))

    def forget_user(self, cur: Any, user_id: str) -> None:
        """Delete everything of one user: their conversations, their own scope's records
        and every scope of theirs."""
        own = self.scopes.lock_out(cur, user_id)
        cur.execute(self.q["lock_user"], (f"otpmem.facts.{own}",))
        if "\x00" not in user_id:  # else no conversation of theirs is held: text holds no NUL
            # No add of the user under way or to come until this commits (each add holds
            # the user's lock shared); then the conversation rows in the order a group
            # commit locks them, before the deletes lock them in whatever order they find them.
            cur.execute(self.q["lock_user_adds"], (user_id,))
            cur.execute(self.q["lock_user_convs"], (user_id,))
            for statement in self.forget:
                cur.execute(statement, (user_id,))
        self.scopes.forget(cur, user_id)

    def save_facts(
        self,
        cur: Any,
        user_id: str,
        facts: Sequence[Fact],
        deletes: Sequence[str],
        cursor: tuple[Conv, int, int | None] | None,
        max_facts: int,
        evict: bool,
        closes: Mapping[str, float],
        keep: int,
    ) -> tuple[list[Fact], list[str]]:
        """One owner's facts (``user_id``: its owner key), their history (each key's cut to
        its newest ``keep``) and a cursor (compared first, under its row lock, when
        ``cursor_from`` was given), in the caller's transaction."""
        user_id = self.scopes.enter(cur, user_id)  # from here on, as the columns hold it
        cur.execute(self.q["lock_user"], (f"otpmem.facts.{user_id}",))
        if cursor is not None:
            conv, position, expected = cursor
            self._lock(cur, conv)
            where = (user_key(conv.user_id), conv.conversation_id)
            if expected is not None:
                cur.execute(self.q["cursor_of"], where)
                row = cur.fetchone()
                check_cursor_from(conv, expected, 0 if row is None else int(row[0]))
        cur.execute(self.q["facts_of"], (user_id,))
        current = {f.key: f for f in (fact_from_list(msgpack.unpackb(r[0])) for r in cur)}
        plan = plan_facts(current, facts, deletes, time.time(), max_facts, evict, closes)
        for old in plan.superseded:
            # The times as columns too: an as_of read selects the closed rows in SQL.
            record = msgpack.packb(fact_as_list(old))
            cur.execute(self.q["history"], (user_id, old.key, record, start(old), end(old)))
        for key in {old.key for old in plan.superseded}:
            cur.execute(self.q["trim_history"], (user_id, key, user_id, key, keep))
        for key in plan.removed:
            cur.execute(self.q["delete_fact"], (user_id, key))
        for fact in plan.put.values():
            cur.execute(self.q["put_fact"], (user_id, fact.key, msgpack.packb(fact_as_list(fact))))
        if cursor is not None:
            cur.execute(self.q["set_cursor"], (position, position, *where))
        return plan.saved, plan.removed

    def save_profile(self, cur: Any, profile: Profile) -> Profile:
        """Replace a profile."""
        owner = self.scopes.enter(cur, owner_key(profile.user_id))
        record = msgpack.packb([profile.summary, dict(profile.metadata), profile.updated_at])
        cur.execute(self.q["put_profile"], (owner, record))
        return profile

    def delete_profile(self, cur: Any, user_id: str) -> bool:
        """Delete a profile (``user_id``: its owner key); whether there was one."""
        cur.execute(self.q["delete_profile"], (stored_owner(user_id),))
        return bool(cur.rowcount)

    def request_extraction(self, cur: Any, conv: Conv, upto: int) -> None:
        """Record a pending extraction, unless the cursor is already there."""
        self._lock(cur, conv)
        where = (user_key(conv.user_id), conv.conversation_id)
        cur.execute(self.q["request_job"], (upto, *where, upto, upto))


def append_arguments(
    conv: Conv, batch: Sequence[FrozenDict], key: str | None, follows: str | None = None
) -> tuple[Any, ...]:
    """The arguments of one call of the schema's ``append`` function (what needs Python:
    the msgpack bodies, which rows are pinned, the usage)."""
    bodies: list[bytes] = []
    pins: list[bool] = []
    usage = batch_usage(batch) or Usage()
    summary_at = -1
    pinned_added = 0  # the batch's pinned messages, its superseded summaries included
    for i, message in enumerate(batch):
        bodies.append(msgpack.packb(message, use_bin_type=True))
        pinned = is_pinned(message)
        if pinned:
            pinned_added += 1
            if is_summary(message):
                if summary_at >= 0:
                    pins[summary_at] = False  # an earlier summary of this very batch
                summary_at = i
        pins.append(pinned)
    return (
        user_key(conv.user_id),
        conv.conversation_id,
        bodies,
        pins,
        summary_at,
        pinned_added,
        key,
        follows,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.total_tokens,
        usage.cost,
        time.time(),
        KEYS_KEPT,
        True,  # a lone add moves its user's sums itself
    )


def plain_arguments(conv: Conv, batch: Sequence[FrozenDict]) -> tuple[Any, ...] | None:
    """The arguments of the ``append_plain`` statement for a batch of one message that
    carries no usage and is no pinned summary (None: the batch needs ``append``); the
    caller checks that the add has no key and follows none."""
    if len(batch) != 1:
        return None
    message = batch[0]
    pinned = is_pinned(message)
    if (pinned and is_summary(message)) or batch_usage(batch) is not None:
        return None
    user = user_key(conv.user_id)
    body = msgpack.packb(message, use_bin_type=True)
    return user, int(pinned), user, conv.conversation_id, body, pinned


def _conv_order(conv: Conv) -> tuple[str, str]:
    return user_key(conv.user_id), conv.conversation_id


def check_appended(stored: int, conv: Conv, follows: str | None) -> None:
    """Raise what the ``append`` function's answer means for the caller (-1: cleared; the
    function applies ``admits``'s rule in SQL)."""
    if stored < 0:
        raise cleared(conv, follows)


def as_decimal(value: Any) -> Decimal:
    """A numeric column as a Decimal."""
    return value if isinstance(value, Decimal) else Decimal(str(value))
