"""PostgresStore's schema: created on start, its version recorded, a newer one refused.

One schema per ``namespace``, so many stores (and tests) share a server. A conversation of no
user is stored under the user key ``''`` (user ids are non-empty, so it cannot collide).

- ``conversations``: one row per conversation, the row every write to it locks first (so
  writers from any number of processes take turns, and sequence numbers have no gaps), with
  its counters, usage sums, extraction cursor and pending extraction;
- ``messages``: one row per message, msgpack bodies (exact round trip), ``pinned`` for the
  pinned index (system and pinned messages and the newest summary);
- ``idempotency_keys``: the newest keys of each conversation, with their batch's position;
- ``facts``, ``fact_history``, ``profiles``, ``user_usage``, ``usage_log``, ``cleared``.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import sql

from ._base import StoreUnavailable

SCHEMA_VERSION = 1
_NAMESPACE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

_TABLES = """
CREATE TABLE IF NOT EXISTS {ns}.schema_version (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS {ns}.conversations (
    user_key text NOT NULL,
    conversation_id text NOT NULL,
    next_seq bigint NOT NULL DEFAULT 0,
    count bigint NOT NULL DEFAULT 0,
    pinned_count bigint NOT NULL DEFAULT 0,
    summary_seq bigint NOT NULL DEFAULT -1,
    key_ordinal bigint NOT NULL DEFAULT 0,
    prompt_tokens bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    total_tokens bigint NOT NULL DEFAULT 0,
    cost numeric NOT NULL DEFAULT 0,
    cursor_pos bigint NOT NULL DEFAULT 0,
    job_upto bigint,
    PRIMARY KEY (user_key, conversation_id)
);
CREATE TABLE IF NOT EXISTS {ns}.messages (
    user_key text NOT NULL,
    conversation_id text NOT NULL,
    seq bigint NOT NULL,
    body bytea NOT NULL,
    pinned boolean NOT NULL DEFAULT false,
    PRIMARY KEY (user_key, conversation_id, seq)
);
CREATE INDEX IF NOT EXISTS messages_pinned
    ON {ns}.messages (user_key, conversation_id, seq) WHERE pinned;
CREATE TABLE IF NOT EXISTS {ns}.idempotency_keys (
    user_key text NOT NULL,
    conversation_id text NOT NULL,
    key text NOT NULL,
    ordinal bigint NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (user_key, conversation_id, key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_order
    ON {ns}.idempotency_keys (user_key, conversation_id, ordinal);
CREATE TABLE IF NOT EXISTS {ns}.facts (
    user_id text NOT NULL,
    key text NOT NULL,
    record bytea NOT NULL,
    PRIMARY KEY (user_id, key)
);
CREATE TABLE IF NOT EXISTS {ns}.fact_history (
    user_id text NOT NULL,
    key text NOT NULL,
    n bigserial,
    record bytea NOT NULL,
    PRIMARY KEY (user_id, key, n)
);
CREATE TABLE IF NOT EXISTS {ns}.profiles (
    user_id text PRIMARY KEY,
    record bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS {ns}.user_usage (
    user_key text PRIMARY KEY,
    prompt_tokens bigint NOT NULL DEFAULT 0,
    completion_tokens bigint NOT NULL DEFAULT 0,
    total_tokens bigint NOT NULL DEFAULT 0,
    cost numeric NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS {ns}.usage_log (
    user_key text NOT NULL,
    at double precision NOT NULL,
    conversation_id text NOT NULL,
    prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    total_tokens bigint NOT NULL,
    cost numeric NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_log_at ON {ns}.usage_log (user_key, at);
CREATE TABLE IF NOT EXISTS {ns}.cleared (
    user_key text NOT NULL,
    conversation_id text NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (user_key, conversation_id)
);
"""

# One round trip per add: the lock, the key check, the rows, the index, the sums. The
# caller computes what needs Python (msgpack bodies, which rows are pinned, the usage).
_APPEND = """
CREATE OR REPLACE FUNCTION {ns}.append(
    u text, c text, bodies bytea[], pins boolean[], summary_at integer, pinned_added integer,
    k text, f text, pt bigint, ct bigint, tt bigint, spent numeric, at double precision,
    kept integer
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    n integer := array_length(bodies, 1);
    base bigint;
    ord bigint;
    newest_summary bigint;
BEGIN
    SELECT next_seq, summary_seq, key_ordinal INTO r FROM {ns}.conversations
        WHERE user_key = u AND conversation_id = c FOR UPDATE;
    IF NOT FOUND THEN  -- the first add: make the row (another node may race us to it)
        INSERT INTO {ns}.conversations (user_key, conversation_id) VALUES (u, c)
            ON CONFLICT DO NOTHING;
        SELECT next_seq, summary_seq, key_ordinal INTO r FROM {ns}.conversations
            WHERE user_key = u AND conversation_id = c FOR UPDATE;
    END IF;
    IF k IS NOT NULL AND EXISTS (SELECT 1 FROM {ns}.idempotency_keys
            WHERE user_key = u AND conversation_id = c AND key = k) THEN
        RETURN 0;
    END IF;
    IF f IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {ns}.idempotency_keys
            WHERE user_key = u AND conversation_id = c AND key = f) THEN
        RAISE EXCEPTION 'otpmem: cleared' USING ERRCODE = 'P0001';
    END IF;
    base := r.next_seq;
    INSERT INTO {ns}.messages (user_key, conversation_id, seq, body, pinned)
        SELECT u, c, base + i - 1, bodies[i], pins[i] FROM generate_subscripts(bodies, 1) AS i;
    newest_summary := r.summary_seq;
    IF summary_at >= 0 THEN
        IF r.summary_seq >= 0 THEN
            UPDATE {ns}.messages SET pinned = false
                WHERE user_key = u AND conversation_id = c AND seq = r.summary_seq;
        END IF;
        newest_summary := base + summary_at;
    END IF;
    ord := r.key_ordinal;
    IF k IS NOT NULL THEN
        INSERT INTO {ns}.idempotency_keys VALUES (u, c, k, ord, base);
        IF ord >= kept THEN
            DELETE FROM {ns}.idempotency_keys
                WHERE user_key = u AND conversation_id = c AND ordinal <= ord - kept;
        END IF;
        ord := ord + 1;
    END IF;
    UPDATE {ns}.conversations SET next_seq = base + n, count = count + n,
        pinned_count = pinned_count + pinned_added, summary_seq = newest_summary,
        key_ordinal = ord, prompt_tokens = prompt_tokens + pt,
        completion_tokens = completion_tokens + ct, total_tokens = total_tokens + tt,
        cost = cost + spent
        WHERE user_key = u AND conversation_id = c;
    IF tt > 0 OR pt > 0 OR ct > 0 OR spent > 0 THEN
        INSERT INTO {ns}.user_usage VALUES (u, pt, ct, tt, spent) ON CONFLICT (user_key)
            DO UPDATE SET prompt_tokens = user_usage.prompt_tokens + pt,
            completion_tokens = user_usage.completion_tokens + ct,
            total_tokens = user_usage.total_tokens + tt, cost = user_usage.cost + spent;
        INSERT INTO {ns}.usage_log VALUES (u, at, c, pt, ct, tt, spent);
    END IF;
    RETURN n;
END
$fn$;
"""

TABLES = (
    "conversations",
    "messages",
    "idempotency_keys",
    "facts",
    "fact_history",
    "profiles",
    "user_usage",
    "usage_log",
    "cleared",
)


def check_namespace(namespace: object) -> str:
    """A schema name: lowercase letters, digits and underscores, at most 63."""
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(
            "namespace must be a PostgreSQL schema name: lowercase letters, digits and "
            f"underscores, starting with a letter or _, at most 63; got {namespace!r}"
        )
    return namespace


def ensure_schema(conn: Any, namespace: str) -> None:
    """Create the schema (once, under a lock every node takes) or check its version."""
    ns = sql.Identifier(namespace)
    with conn.transaction():
        # Two nodes starting at once must not both create the tables.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otpmem.schema.{namespace}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {ns}").format(ns=ns))
        conn.execute(sql.SQL(_TABLES).format(ns=ns))
        conn.execute(sql.SQL(_APPEND).format(ns=ns))
        row = conn.execute(
            sql.SQL("SELECT max(version) FROM {ns}.schema_version").format(ns=ns)
        ).fetchone()
        version = row[0] if row else None
        if version is None:
            conn.execute(
                sql.SQL("INSERT INTO {ns}.schema_version VALUES (%s)").format(ns=ns),
                (SCHEMA_VERSION,),
            )
        elif version > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"the PostgreSQL schema {namespace!r} has version {version}, made by a newer "
                f"otpmem; this one knows versions up to {SCHEMA_VERSION}"
            )


def user_key(user_id: str | None) -> str:
    """How a conversation's user is stored: ``''`` for no user."""
    return "" if user_id is None else user_id


def from_user_key(key: str) -> str | None:
    """The inverse of ``user_key``."""
    return None if key == "" else key
