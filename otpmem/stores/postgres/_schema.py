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

from .. import longterm
from .._base import StoreUnavailable
from ._leases import lease_lock_prefix
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

# One round trip per add: the lock, the key check, the rows, the index, the sums. The
# caller computes what needs Python (msgpack bodies, which rows are pinned, the usage).
# Returns how many messages it stored: 0 for a key already stored, -1 when the batch it
# follows is gone (cleared), so a group of adds in one transaction is not aborted by one.
# The common add (no key, no summary) takes its row lock with the UPDATE that moves the
# counters: one statement where a SELECT ... FOR UPDATE and an UPDATE would be two.
_APPEND = """
CREATE OR REPLACE FUNCTION {ns}.append(
    u text, c text, bodies bytea[], pins boolean[], summary_at integer, pinned_added integer,
    k text, f text, pt bigint, ct bigint, tt bigint, spent numeric, at double precision,
    kept integer, user_sums boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    n integer := cardinality(bodies);
    base bigint;
    ord bigint;
    old_summary bigint := -1;
    newest_keys bigint := 0;  -- the ordinals of the kept keys start here
    keyed integer := (k IS NOT NULL)::integer;
BEGIN
    -- Shared with every add of this user, exclusive in forget_user: a forget waits for the
    -- adds under way and then sees them all (else an add committing between its deletes
    -- could leave messages behind a deleted conversation row).
    PERFORM pg_advisory_xact_lock_shared(hashtext('otpmem.user.' || u));
    IF k IS NOT NULL OR f IS NOT NULL OR summary_at >= 0 THEN
        -- The checks below must see the conversation as it stands under its lock.
        SELECT summary_seq, key_ordinal - kept INTO old_summary, newest_keys
            FROM {ns}.conversations WHERE user_key = u AND conversation_id = c FOR UPDATE;
        IF k IS NOT NULL AND EXISTS (SELECT 1 FROM {ns}.idempotency_keys WHERE user_key = u
                AND conversation_id = c AND key = k AND ordinal >= newest_keys) THEN
            RETURN 0;
        END IF;
        IF f IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {ns}.idempotency_keys WHERE user_key = u
                AND conversation_id = c AND key = f AND ordinal >= newest_keys) THEN
            RETURN -1;
        END IF;
    END IF;
    UPDATE {ns}.conversations SET next_seq = next_seq + n, count = count + n,
        pinned_count = pinned_count + pinned_added,
        summary_seq = CASE WHEN summary_at >= 0 THEN next_seq + summary_at
            ELSE summary_seq END,
        key_ordinal = key_ordinal + keyed, prompt_tokens = prompt_tokens + pt,
        completion_tokens = completion_tokens + ct, total_tokens = total_tokens + tt,
        cost = cost + spent
        WHERE user_key = u AND conversation_id = c
        RETURNING next_seq - n, key_ordinal - keyed INTO base, ord;
    IF NOT FOUND THEN  -- the first add: make the row (another node may race us to it), again
        INSERT INTO {ns}.conversations (user_key, conversation_id) VALUES (u, c)
            ON CONFLICT DO NOTHING;
        RETURN {ns}.append(u, c, bodies, pins, summary_at, pinned_added, k, f, pt, ct, tt,
            spent, at, kept, user_sums);
    END IF;
    INSERT INTO {ns}.messages (user_key, conversation_id, seq, body, pinned)
        SELECT u, c, base + i - 1, b, p FROM unnest(bodies, pins) WITH ORDINALITY AS t(b, p, i);
    IF summary_at >= 0 AND old_summary >= 0 THEN
        UPDATE {ns}.messages SET pinned = false
            WHERE user_key = u AND conversation_id = c AND seq = old_summary;
    END IF;
    IF k IS NOT NULL THEN
        INSERT INTO {ns}.idempotency_keys VALUES (u, c, k, ord, base);
        -- A key older than the newest ``kept`` is forgotten at once (every lookup asks for
        -- ordinal >= key_ordinal - kept) and its row deleted with the rest of its kind once
        -- per ``kept`` keys: one short scan of the conversation's keys in 1,024 adds.
        IF ord >= kept AND ord % kept = 0 THEN
            DELETE FROM {ns}.idempotency_keys
                WHERE user_key = u AND conversation_id = c AND ordinal <= ord - kept;
        END IF;
    END IF;
    IF tt > 0 OR pt > 0 OR ct > 0 OR spent > 0 THEN
        IF user_sums THEN
            INSERT INTO {ns}.user_usage VALUES (u, pt, ct, tt, spent) ON CONFLICT (user_key)
                DO UPDATE SET prompt_tokens = user_usage.prompt_tokens + pt,
                completion_tokens = user_usage.completion_tokens + ct,
                total_tokens = user_usage.total_tokens + tt, cost = user_usage.cost + spent;
        END IF;
        INSERT INTO {ns}.usage_log VALUES (u, at, c, pt, ct, tt, spent);
        -- Past the horizon (USAGE_LOG_HORIZON): what expired since the user's last add,
        -- found by the (user_key, at) index.
        DELETE FROM {ns}.usage_log WHERE user_key = u AND usage_log.at < append.at - {horizon};
    END IF;
    RETURN n;
END
$fn$;

-- Many adds in one transaction (a group commit), in the order given, which the caller
-- sorts by conversation. Every transaction that takes more than one lock takes them in one
-- order: by user_key, its user lock and then its conversation rows by conversation_id;
-- then the user_usage rows by user_key. So groups on any number of nodes, forget_user and
-- imports never deadlock. Returns append's answer for
-- each add.
CREATE OR REPLACE FUNCTION {ns}.append_group(
    us text[], cs text[], counts integer[], bodies bytea[], pins boolean[],
    summary_ats integer[], pinned_addeds integer[], ks text[], fs text[], pts bigint[],
    cts bigint[], tts bigint[], spents numeric[], at double precision, kept integer
) RETURNS integer[] LANGUAGE plpgsql AS $fn$
DECLARE
    answers integer[] := '{{}}';
    first integer := 1;
BEGIN
    FOR i IN 1 .. cardinality(us) LOOP
        answers := answers || {ns}.append(us[i], cs[i],
            bodies[first : first + counts[i] - 1], pins[first : first + counts[i] - 1],
            summary_ats[i], pinned_addeds[i], ks[i], fs[i], pts[i], cts[i], tts[i],
            spents[i], at, kept, false);
        first := first + counts[i];
    END LOOP;
    INSERT INTO {ns}.user_usage
        SELECT u, sum(pt), sum(ct), sum(tt), sum(spent)
        FROM unnest(us, pts, cts, tts, spents, answers) AS t(u, pt, ct, tt, spent, answer)
        WHERE answer > 0 AND (pt > 0 OR ct > 0 OR tt > 0 OR spent > 0)
        GROUP BY u ORDER BY u
        ON CONFLICT (user_key) DO UPDATE SET
            prompt_tokens = user_usage.prompt_tokens + excluded.prompt_tokens,
            completion_tokens = user_usage.completion_tokens + excluded.completion_tokens,
            total_tokens = user_usage.total_tokens + excluded.total_tokens,
            cost = user_usage.cost + excluded.cost;
    RETURN answers;
END
$fn$;
"""

# Which of the fenced writes lost their lease: the leases' locks shared first (in one
# order), then the rows read by a statement of its own, whose snapshot is taken after the
# locks were granted, so a claim that committed while this waited is seen (see Fence).
_FENCE = """
CREATE OR REPLACE FUNCTION {ns}.fence_lost(names text[], owners text[], epochs bigint[])
RETURNS integer[] LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(k) FROM (
        SELECT DISTINCT hashtext({lock_prefix} || n) AS k FROM unnest(names) AS n ORDER BY 1
    ) AS keys;
    RETURN ARRAY(
        SELECT f.i::integer FROM unnest(names, owners, epochs) WITH ORDINALITY
            AS f(name, owner, epoch, i)
        WHERE NOT EXISTS (
            SELECT 1 FROM {ns}.leases l
            WHERE l.name = f.name AND l.owner = f.owner AND l.epoch = f.epoch
        )
        ORDER BY f.i
    );
END
$fn$;
"""

# A group of adds, some fenced, in one statement (one round trip): the fences first (their
# locks then held to the commit); if any lost its lease, nothing is stored and the error
# names which (its DETAIL: their 1-based positions in names), so the rest go again alone.
FENCES_LOST = "OTL01"
_FENCED_GROUP = """
CREATE OR REPLACE FUNCTION {ns}.fenced_append_group(
    names text[], owners text[], epochs bigint[],
    us text[], cs text[], counts integer[], bodies bytea[], pins boolean[],
    summary_ats integer[], pinned_addeds integer[], ks text[], fs text[], pts bigint[],
    cts bigint[], tts bigint[], spents numeric[], at double precision, kept integer
) RETURNS integer[] LANGUAGE plpgsql AS $fn$
DECLARE
    lost integer[];
BEGIN
    lost := {ns}.fence_lost(names, owners, epochs);
    IF cardinality(lost) > 0 THEN
        RAISE EXCEPTION 'fenced adds lost their leases' USING ERRCODE = {code},
            DETAIL = array_to_string(lost, ',');
    END IF;
    RETURN {ns}.append_group(us, cs, counts, bodies, pins, summary_ats, pinned_addeds, ks,
        fs, pts, cts, tts, spents, at, kept);
END
$fn$;
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
        horizon = sql.Literal(float(longterm.USAGE_LOG_HORIZON))
        conn.execute(sql.SQL(_APPEND).format(ns=ns, horizon=horizon))
        prefix = sql.Literal(lease_lock_prefix(namespace))
        conn.execute(sql.SQL(_FENCE).format(ns=ns, lock_prefix=prefix))
        conn.execute(sql.SQL(_FENCED_GROUP).format(ns=ns, code=sql.Literal(FENCES_LOST)))
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
