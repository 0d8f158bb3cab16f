"""Leases in PostgreSQL: which node owns which name (a conversation), decided by the database.

A lease is a row ``(name, owner, expires_at, epoch, progress)`` in ``<namespace>.leases``.
Claiming is one statement that succeeds only on a lease nobody holds or whose holder let it
expire, by the database's clock (``now()``), so no node trusts another's word or clock::

    INSERT ... ON CONFLICT (name) DO UPDATE SET owner = ... WHERE leases.expires_at < now()

The owner renews its leases well before they expire (``renew()``, every ``ttl / 4`` from a
heartbeat); a node that dies stops renewing, and once its leases expire any other node (or
its own restarted self, under a new owner id) claims them. ``progress`` is the owner's
count of finished work (turns done), advanced only by the current owner under the epoch it
claimed with, so a successor continues exactly where the database says the work stands.

Locally, ``held(name)`` is true until ``ttl - margin`` seconds after the renewal that
confirmed the lease was *sent* (the database's expiry is later still): a node stops
starting work on a lease it may have lost, without comparing clocks across machines::

    leases = Leases(dsn, "otpmem", owner="n0-3f2a", ttl=2.0)
    leases.add(["sim-0", "sim-1"])
    got = leases.claim("sim-0")        # a Lease, or None while another owner holds it
    leases.advance("sim-0", 1)         # False once it was lost: stop working on it
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from .._base import StoreUnavailable
from ._dsn import check_dsn
from ._pool import dropped

CONNECT_TIMEOUT = 10
STATEMENT_TIMEOUT_MS = 10_000

_TABLE = """
CREATE TABLE IF NOT EXISTS {ns}.leases (
    name text PRIMARY KEY,
    owner text,
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    epoch bigint NOT NULL DEFAULT 0,
    progress bigint NOT NULL DEFAULT 0
)
"""
_TTL = "now() + make_interval(secs => %(ttl)s)"
# A claim takes the lease's lock (exclusive, until it commits), so a fenced write that
# holds it shared commits first and its successor reads the conversation after it (see
# Fence). It only tries: a lease whose write is in flight is not taken this time (its
# writer may be frozen mid-transaction until PostgreSQL ends that transaction).
_LOCKED = "pg_try_advisory_xact_lock(hashtext(%(lock_prefix)s || {name}))"
_CLAIM = f"""
INSERT INTO {{ns}}.leases AS l (name, owner, expires_at, epoch)
    VALUES (%(name)s, %(owner)s, {_TTL}, 1)
ON CONFLICT (name) DO UPDATE
    SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, epoch = l.epoch + 1
    WHERE l.expires_at < now() AND {_LOCKED.format(name="l.name")}
RETURNING l.progress, l.epoch
"""
# Two nodes claiming at once get disjoint sets: rows another claimer locked are skipped.
_CLAIM_FREE = f"""
WITH free AS (
    SELECT name FROM {{ns}}.leases
    WHERE expires_at < now() AND progress < %(below)s AND {_LOCKED.format(name="name")}
    ORDER BY name LIMIT %(limit)s FOR UPDATE SKIP LOCKED
)
UPDATE {{ns}}.leases AS l
    SET owner = %(owner)s, expires_at = {_TTL}, epoch = l.epoch + 1
    FROM free WHERE l.name = free.name
RETURNING l.name, l.progress, l.epoch
"""
# Only the leases this owner knows it holds: one it let go stays let go.
_RENEW = f"""
UPDATE {{ns}}.leases SET expires_at = {_TTL}
    WHERE owner = %(owner)s AND progress < %(below)s AND name = ANY(%(names)s::text[])
RETURNING name
"""
# Many leases advanced in one statement, one commit: a node's workers group their advances.
_ADVANCE_MANY = f"""
UPDATE {{ns}}.leases AS l
    SET progress = greatest(l.progress, v.progress), expires_at = {_TTL}
    FROM unnest(%(names)s::text[], %(epochs)s::bigint[], %(progress)s::bigint[])
        AS v(name, epoch, progress)
    WHERE l.name = v.name AND l.owner = %(owner)s AND l.epoch = v.epoch
RETURNING l.name
"""
_ADVANCE = f"""
UPDATE {{ns}}.leases SET progress = greatest(progress, %(progress)s), expires_at = {_TTL}
    WHERE name = %(name)s AND owner = %(owner)s AND epoch = %(epoch)s
RETURNING name
"""


class Fence(NamedTuple):
    """A lease a write must still hold when it commits: the lease ``name``, its ``owner``
    and the ``epoch`` it was claimed with (``Leases.fence`` gives one).

    A fenced add takes the lease's lock shared, then checks the lease row in a new
    snapshot: if a claim committed meanwhile (its epoch moved on), nothing is stored and
    the writer hears ``LeaseLost``. A claim takes that lock exclusive before it commits,
    so a fenced write that passed its check commits before the claim does, and the
    successor, which reads the conversation after its claim, sees it. A writer frozen
    past its lease (a GC pause, a stopped VM) thaws to refusals, never to writes beside
    its successor's.
    """

    name: str
    owner: str
    epoch: int


def lease_lock_prefix(namespace: str) -> str:
    """What a lease's lock key is hashed from, before the lease's name."""
    return f"otpmem.lease.{namespace}."


@dataclass(frozen=True)
class Lease:
    """A lease this owner holds: its name, the work done on it so far, its epoch."""

    name: str
    progress: int
    epoch: int


def ensure_leases(conn: Any, namespace: str) -> None:
    """Create ``<namespace>.leases`` if it is missing (the schema must exist)."""
    from psycopg import sql

    conn.execute(sql.SQL(_TABLE).format(ns=sql.Identifier(namespace)))


class Leases:
    """One owner's view of the leases table, over a connection of its own (thread-safe)."""

    def __init__(
        self, dsn: str, namespace: str, owner: str, ttl: float = 2.0, margin: float | None = None
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"a lease's ttl must be > 0 s, got {ttl}")
        self.dsn = check_dsn(dsn)
        self.namespace = namespace
        self.owner = owner
        self.ttl = float(ttl)
        self.margin = self.ttl / 4 if margin is None else margin
        self._lock = threading.Lock()
        self._conn: Any = None
        # name -> (epoch, valid until, sent at): what this owner knows it holds.
        self._held: dict[str, tuple[int, float, float]] = {}
        self._state = threading.Lock()
        self._lock_prefix = lease_lock_prefix(namespace)
        from psycopg import sql

        ns = sql.Identifier(namespace)
        self._sql = {
            name: sql.SQL(text).format(ns=ns)
            for name, text in {
                "claim": _CLAIM,
                "claim_free": _CLAIM_FREE,
                "renew": _RENEW,
                "advance": _ADVANCE,
                "advance_many": _ADVANCE_MANY,
                "add": "INSERT INTO {ns}.leases (name) SELECT unnest(%(names)s::text[]) "
                "ON CONFLICT (name) DO NOTHING",
                "release": "UPDATE {ns}.leases SET expires_at = '-infinity' "
                "WHERE name = %(name)s AND owner = %(owner)s",
                "owners": "SELECT DISTINCT owner FROM {ns}.leases "
                "WHERE expires_at >= now() AND owner IS NOT NULL",
                "remaining": "SELECT count(*) FROM {ns}.leases WHERE progress < %(below)s",
                "progress": "SELECT coalesce(sum(least(progress, %(below)s)), 0) FROM {ns}.leases",
            }.items()
        }

    # -- the connection ---------------------------------------------------------------------

    def _execute(self, statement: str, /, **params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        params.setdefault("owner", self.owner)
        params.setdefault("ttl", self.ttl)
        params.setdefault("lock_prefix", self._lock_prefix)
        with self._lock:
            try:
                if self._conn is not None and dropped(self._conn):
                    self._close_quietly()  # the server ended it while it idled (a restart)
                if self._conn is None:
                    self._conn = psycopg.connect(
                        self.dsn,
                        autocommit=True,
                        connect_timeout=CONNECT_TIMEOUT,
                        options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
                    )
                cur = self._conn.execute(self._sql[statement], params)
                return list(cur.fetchall()) if cur.description is not None else []
            except psycopg.OperationalError as exc:
                self._close_quietly()  # the next call connects again
                raise StoreUnavailable(f"the leases' PostgreSQL is unreachable: {exc}") from exc

    def _close_quietly(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                conn.close()

    def close(self) -> None:
        """Close the connection (the leases stay until they expire, or are released)."""
        with self._lock:
            self._close_quietly()

    # -- the leases -------------------------------------------------------------------------

    def add(self, names: Iterable[str]) -> None:
        """Make leases for ``names`` that nobody holds yet (names already there are kept)."""
        self._execute("add", names=list(names))

    def _took(self, name: str, epoch: int, sent: float) -> None:
        with self._state:
            self._held[name] = (epoch, sent + self.ttl - self.margin, sent)

    def _lost(self, name: str, before: float | None = None) -> bool:
        with self._state:
            held = self._held.get(name)
            # A claim sent after the statement that missed it is not lost by it.
            if held is not None and (before is None or held[2] < before):
                del self._held[name]
                return True
            return False

    def claim(self, name: str) -> Lease | None:
        """Take ``name`` if nobody holds it or its lease expired; None if another holds it."""
        sent = time.monotonic()
        rows = self._execute("claim", name=name)
        if not rows:
            return None
        progress, epoch = rows[0]
        self._took(name, int(epoch), sent)
        return Lease(name, int(progress), int(epoch))

    def claim_within(self, name: str, timeout: float, poll: float = 0.05) -> Lease | None:
        """``claim(name)`` again every ``poll`` s until it succeeds or ``timeout`` passed: a
        successor waiting for a dead owner's lease to expire."""
        deadline = time.monotonic() + timeout
        while True:
            lease = self.claim(name)
            if lease is not None or time.monotonic() >= deadline:
                return lease
            time.sleep(poll)  # the database's clock decides expiry: nothing to wait on here

    def claim_free(self, limit: int, below: int) -> list[Lease]:
        """Take up to ``limit`` leases that nobody holds (or whose holder let them expire)
        with ``progress < below``: the unfinished work of a node that is gone."""
        if limit < 1:
            return []
        sent = time.monotonic()
        rows = self._execute("claim_free", limit=limit, below=below)
        taken = [Lease(str(n), int(p), int(e)) for n, p, e in rows]
        for lease in taken:
            self._took(lease.name, lease.epoch, sent)
        return sorted(taken, key=lambda lease: lease.name)

    def renew(self, below: int) -> set[str]:
        """Push back the expiry of every unfinished lease (``progress < below``) this owner
        holds; returns the names it held and lost (another owner took them)."""
        sent = time.monotonic()
        with self._state:
            known = dict(self._held)
        if not known:
            return set()
        kept = {str(r[0]) for r in self._execute("renew", below=below, names=list(known))}
        lost = set()
        for name, (epoch, _, _) in known.items():
            if name in kept:
                self._took(name, epoch, sent)
            elif self._lost(name, before=sent):
                lost.add(name)
        return lost

    def advance(self, name: str, progress: int) -> bool:
        """Record ``progress`` on a lease this owner holds (and renew it); False if it was
        lost meanwhile, when the caller must stop working on it."""
        held = self._held.get(name)
        if held is None:
            return False
        sent = time.monotonic()
        rows = self._execute("advance", name=name, epoch=held[0], progress=progress)
        if rows:
            self._took(name, held[0], sent)
            return True
        self._lost(name)
        return False

    def advance_many(self, progress: dict[str, int]) -> set[str]:
        """``advance`` for many leases in one statement (one commit); returns the names
        still held, whose progress was recorded. The others were lost."""
        sent = time.monotonic()
        with self._state:
            held = {name: self._held[name] for name in progress if name in self._held}
        if held:
            names = sorted(held)
            rows = self._execute(
                "advance_many",
                names=names,
                epochs=[held[n][0] for n in names],
                progress=[progress[n] for n in names],
            )
        else:
            rows = []
        kept = {str(row[0]) for row in rows}
        for name in progress:
            if name in kept:
                self._took(name, held[name][0], sent)
            else:
                self._lost(name)
        return kept

    def release(self, name: str) -> None:
        """Let ``name`` go at once (another owner may claim it now, if it is unfinished)."""
        self._lost(name)
        self._execute("release", name=name)

    def fence(self, name: str) -> Fence:
        """The fence of a write to ``name``'s work: the epoch this owner claimed it with
        (0, which no claim has, once it knows it lost it: every such write is refused)."""
        with self._state:
            held = self._held.get(name)
        return Fence(name, self.owner, held[0] if held is not None else 0)

    def held(self, name: str) -> bool:
        """Whether this owner certainly still holds ``name`` (see the module docstring)."""
        held = self._held.get(name)
        return held is not None and time.monotonic() < held[1]

    def names(self) -> list[str]:
        """The names this owner holds, as far as it knows."""
        with self._state:
            return sorted(self._held)

    def owners(self) -> set[str]:
        """The owners holding a lease that has not expired."""
        return {str(row[0]) for row in self._execute("owners")}

    def remaining(self, below: int) -> int:
        """How many leases still have ``progress < below`` (work not finished)."""
        return int(self._execute("remaining", below=below)[0][0])

    def progress(self, below: int) -> int:
        """The sum of every lease's progress, each counted up to ``below``."""
        return int(self._execute("progress", below=below)[0][0])


class Heartbeat:
    """A thread renewing an owner's leases every ``ttl / 4`` s until ``stop()``;
    ``on_lost(names)`` hears of leases another owner took, ``on_error(exc)`` of a renewal
    that failed (the database unreachable: the leases run out unless it comes back)."""

    def __init__(
        self,
        leases: Leases,
        below: int,
        on_lost: Callable[[list[str]], None] | None = None,
        on_error: Callable[[StoreUnavailable], None] | None = None,
        every: float | None = None,
    ) -> None:
        self.leases = leases
        self.below = below
        self.every = leases.ttl / 4 if every is None else every
        self.on_lost = on_lost
        self.on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="otpmem-leases", daemon=True)

    def start(self) -> Heartbeat:
        """Start renewing; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                lost = self.leases.renew(self.below)
            except StoreUnavailable as exc:
                if self.on_error is not None:
                    self.on_error(exc)
                continue
            if lost and self.on_lost is not None:
                self.on_lost(sorted(lost))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop renewing (the leases run out ``ttl`` s later unless released)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)


__all__ = ["Fence", "Heartbeat", "Lease", "Leases", "ensure_leases", "lease_lock_prefix"]
