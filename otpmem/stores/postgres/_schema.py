"""PostgresStore's schema: created on start, its version recorded, a newer one refused.

One schema per ``namespace``, so many stores (and tests) share a server. A conversation of no
user is stored under the user key ``''`` (user ids are non-empty, so it cannot collide).

- ``conversations``: one row per conversation, the row every write to it locks first (so
  writers from any number of processes take turns, and sequence numbers have no gaps), with
  its counters, usage sums, extraction cursor and pending extraction;
- ``messages``: one row per message, msgpack bodies (exact round trip), ``pinned`` for the
  pinned index (system and pinned messages and the newest summary);
- ``idempotency_keys``: the keys of each conversation, with their batch's position (those
  older than its newest ``KEYS_KEPT`` are forgotten);
- ``facts``, ``fact_history``, ``profiles``, ``user_usage``, ``usage_log``, ``cleared``;
- ``scopes``, ``scope_members`` (see ``_scopes``): each user's scopes, and who joined one.

Facts, their history, profiles and memory blocks are keyed by owner key (``scopes.owner_key``,
as ``_scopes.stored_owner`` holds it), conversations and usage by the raw user id.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import sql

from .._base import StoreUnavailable
from ._functions import create_functions
from ._scopes import TABLES as SCOPE_TABLES
from ._scopes import rekey_marked

SCHEMA_VERSION = 4
"""2: the append function of group commits; 3: ``fact_history`` has the times of its
facts as columns (``valid_from``, ``valid_to``; NULL for rows from before); 4: scopes
(their tables, and a user id that begins with ``scopes.MARK`` keyed by its owner key)."""
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

# Version 1 also indexed the keys by (user_key, conversation_id, ordinal) to forget the
# oldest: with young statistics the planner could look a key up through that index,
# scanning every kept key of the conversation (0.5 ms an add at 3,000 keys). Version 2
# forgets by ordinal at lookup and deletes in bulk, through the primary key alone.
_MIGRATE_TO_2 = """
DROP INDEX IF EXISTS {ns}.idempotency_keys_order;
DROP FUNCTION IF EXISTS {ns}.append(text, text, bytea[], boolean[], integer, integer, text,
    text, bigint, bigint, bigint, numeric, double precision, integer);
"""

_MIGRATE_TO_3 = """
ALTER TABLE {ns}.fact_history ADD COLUMN IF NOT EXISTS valid_from double precision,
    ADD COLUMN IF NOT EXISTS valid_to double precision;
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
    "scopes",
    "scope_members",
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
        conn.execute(sql.SQL(SCOPE_TABLES).format(ns=ns))
        row = conn.execute(
            sql.SQL("SELECT max(version) FROM {ns}.schema_version").format(ns=ns)
        ).fetchone()
        version = row[0] if row else None
        if version is not None and version > SCHEMA_VERSION:
            raise StoreUnavailable(
                f"the PostgreSQL schema {namespace!r} has version {version}, made by a newer "
                f"otpmem; this one knows versions up to {SCHEMA_VERSION}"
            )
        create_functions(conn, namespace)
        if version != SCHEMA_VERSION:
            # A new schema takes every step; an older one the steps after its version.
            if version is None or version < 2:
                conn.execute(sql.SQL(_MIGRATE_TO_2).format(ns=ns))
            conn.execute(sql.SQL(_MIGRATE_TO_3).format(ns=ns))
            if version is not None and version < 4:
                rekey_marked(conn, namespace)
            conn.execute(sql.SQL("DELETE FROM {ns}.schema_version").format(ns=ns))
            conn.execute(
                sql.SQL("INSERT INTO {ns}.schema_version VALUES (%s)").format(ns=ns),
                (SCHEMA_VERSION,),
            )


def check_schema(conn: Any, namespace: str) -> None:
    """Refuse, touching nothing, a schema ``namespace`` that is missing or of another
    version than this otpmem's (what a store opened read-only checks instead of
    ``ensure_schema``, which would create or migrate it)."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{namespace}.schema_version",)
    ).fetchone()
    if not (row and row[0]):
        raise StoreUnavailable(f"there is no otpmem schema {namespace!r} on this server")
    ns = sql.Identifier(namespace)
    row = conn.execute(sql.SQL("SELECT max(version) FROM {ns}.schema_version").format(ns=ns))
    version = row.fetchone()[0]
    if version != SCHEMA_VERSION:
        made = "a newer otpmem" if (version or 0) > SCHEMA_VERSION else "an older otpmem"
        raise StoreUnavailable(
            f"the PostgreSQL schema {namespace!r} has version {version}, made by {made}; "
            f"read-only, this one reads version {SCHEMA_VERSION} only (a store opened to "
            "write migrates an older one)"
        )


def user_key(user_id: str | None) -> str:
    """How a conversation's user is stored: ``''`` for no user."""
    return "" if user_id is None else user_id


def from_user_key(key: str) -> str | None:
    """The inverse of ``user_key``."""
    return None if key == "" else key
