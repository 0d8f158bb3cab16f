"""PostgresStore's holds on budgets: a table of the calls in flight, and the function that
checks a call's limits and takes its hold in one transaction (see ``reservations``).

    budget_holds (hold_id, user_key, conversation_id, tokens, cost, expires_at)

Every reservation of a user (of a conversation, for one of no user) first takes a
transaction-scoped advisory lock on it, so reservations on any number of nodes take turns;
within it, the holds are read before the recorded usage, each by a statement of its own
(a snapshot taken after the lock was granted): a hold released between the two reads had
its answer committed before the release, so the second read sees the answer's usage. A
release is a plain delete. Holds expire by the database's clock, never a node's.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from psycopg import sql

from ...messages import Conv
from ..reservations import Hold, Limit, Reservation
from ._schema import user_key
from ._writes import as_decimal

_TABLE = """
CREATE TABLE IF NOT EXISTS {ns}.budget_holds (
    hold_id text PRIMARY KEY,
    user_key text NOT NULL,
    conversation_id text NOT NULL,
    tokens bigint NOT NULL,
    cost numeric,  -- NULL: a call of unknown cost
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS budget_holds_owner ON {ns}.budget_holds (user_key, conversation_id);
"""

# Answers [0, 0, 0] when the hold was taken, else [the refusing limit's 1-based index,
# what its scope recorded, what other calls hold there (NULL: a call of unknown cost)].
_RESERVE = """
CREATE OR REPLACE FUNCTION {ns}.reserve(
    h text, u text, c text, tokens bigint, cost numeric, ttl double precision,
    scopes text[], measures text[], maxes numeric[], owns numeric[], sinces double precision[]
) RETURNS numeric[] LANGUAGE plpgsql AS $fn$
DECLARE
    held numeric;
    unknown boolean;
    recorded numeric;
    by_tokens boolean;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext({lock_prefix} || u || '/' ||
        CASE WHEN u = '' THEN c ELSE '' END));
    DELETE FROM {ns}.budget_holds WHERE hold_id = h OR (user_key = u AND expires_at < now());
    FOR i IN 1 .. coalesce(cardinality(scopes), 0) LOOP
        by_tokens := measures[i] = 'tokens';
        SELECT coalesce(sum(CASE WHEN by_tokens THEN b.tokens ELSE b.cost END), 0),
               coalesce(bool_or(NOT by_tokens AND b.cost IS NULL), false)
            INTO held, unknown
            FROM {ns}.budget_holds b
            WHERE b.user_key = u AND (scopes[i] = 'user' OR b.conversation_id = c);
        recorded := NULL;
        IF sinces[i] IS NULL AND scopes[i] = 'user' THEN
            SELECT CASE WHEN by_tokens THEN total_tokens ELSE s.cost END INTO recorded
                FROM {ns}.user_usage s WHERE user_key = u;
        ELSIF sinces[i] IS NULL THEN
            SELECT CASE WHEN by_tokens THEN total_tokens ELSE s.cost END INTO recorded
                FROM {ns}.conversations s WHERE user_key = u AND conversation_id = c;
        ELSE
            SELECT CASE WHEN by_tokens THEN sum(total_tokens) ELSE sum(l.cost) END
                INTO recorded FROM {ns}.usage_log l
                WHERE user_key = u AND at >= sinces[i]
                AND (scopes[i] = 'user' OR conversation_id = c)
                AND at >= coalesce((SELECT k.at FROM {ns}.cleared k WHERE k.user_key = u
                    AND k.conversation_id = c AND scopes[i] = 'conversation'), 0);
        END IF;
        recorded := coalesce(recorded, 0);
        IF unknown OR recorded + held + owns[i] > maxes[i] THEN
            RETURN ARRAY[i, recorded, CASE WHEN unknown THEN NULL ELSE held END];
        END IF;
    END LOOP;
    INSERT INTO {ns}.budget_holds
        VALUES (h, u, c, tokens, cost, now() + make_interval(secs => ttl));
    RETURN ARRAY[0, 0, 0];
END
$fn$;
"""


def ensure_holds(conn: Any, namespace: str) -> None:
    """Create the holds table and the reserve function (once, under the schema's lock)."""
    ns = sql.Identifier(namespace)
    prefix = sql.Literal(f"otpmem.budget.{namespace}.")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpmem.schema.{namespace}",))
        conn.execute(sql.SQL(_TABLE).format(ns=ns))
        conn.execute(sql.SQL(_RESERVE).format(ns=ns, lock_prefix=prefix))


class Holds:
    """The reservation statements of one namespace, composed once."""

    def __init__(self, namespace: str) -> None:
        ns = sql.Identifier(namespace)
        self.reserve_sql = sql.SQL(
            "SELECT {ns}.reserve(%s, %s, %s, %s, %s::numeric, %s, %s::text[], %s::text[], "
            "%s::numeric[], %s::numeric[], %s::double precision[])"
        ).format(ns=ns)
        self.release_sql = sql.SQL("DELETE FROM {ns}.budget_holds WHERE hold_id = %s").format(
            ns=ns
        )

    def reserve(
        self, cur: Any, conv: Conv, hold_id: str, hold: Hold, limits: list[Limit], ttl: float
    ) -> Reservation:
        """Check the limits and take the hold, in the caller's transaction."""
        arguments = (
            hold_id,
            user_key(conv.user_id),
            conv.conversation_id,
            hold.tokens,
            hold.cost,
            ttl,
            [limit.scope for limit in limits],
            [limit.measure for limit in limits],
            [Decimal(limit.max) for limit in limits],
            [Decimal(limit.own) for limit in limits],
            [limit.since for limit in limits],
        )
        cur.execute(self.reserve_sql, arguments)
        refused, recorded, held = cur.fetchone()[0]
        if not refused:
            return Reservation(hold_id)
        limit = limits[int(refused) - 1]
        return Reservation(
            hold_id, int(refused) - 1, _amount(limit, recorded), _amount(limit, held)
        )

    def release(self, cur: Any, hold_id: str) -> bool:
        """Drop one hold; whether there was one."""
        cur.execute(self.release_sql, (hold_id,))
        return bool(cur.rowcount)


def _amount(limit: Limit, value: Any) -> Any:
    if value is None:
        return None
    if limit.measure == "tokens":
        return int(value)
    return as_decimal(value).normalize()
