"""PostgresStore: conversations in PostgreSQL, shared by every otpmem node that opens it.

The server owns a connection pool. Writes and reads run on the caller's thread with a
pooled connection (in the blocking pool when the caller is a process, so no scheduler
thread waits on the network): PostgreSQL, not a mailbox, orders them. Each write is one
transaction that locks its conversation's row first, so writers on any number of nodes
take turns per conversation (see ``_writes``); it returns once it committed. Reads are
one statement each.

A lost server (stopped, restarted, crashed) costs the store nothing: a request that cannot
reach it, or loses it midway, hears a retryable ``StoreUnavailable`` and the store carries
on, its pool reconnecting by itself (see ``_pool``), so the same handle serves again once
the server is back, supervised or not. Nothing acknowledged is lost (it was committed),
and a batch retried with its idempotency key is stored once. A fenced add needs no restart
either: its lease is checked in the transaction that commits it, whenever that is.

    store = PostgresStore.start_link("postgresql://app@db/otpmem")   # or no DSN: embedded
    store.add(Conv("ann", "c1"), [{"role": "user", "content": "hi"}])

Needs ``pip install 'otpmem[postgres]'`` (psycopg 3, psycopg_pool, and pgserver for the
embedded server).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ...actors import GenServer, Handle, blocking, on_exit
from ...actors.faults import FaultPlan
from ...messages import short_repr
from ...supervisors import ChildSpec, SupervisorEvent
from .._base import STORE_INTENSITY, STORE_PERIOD, StoreError, StoreUnavailable
from .._client import CheckedAdd
from .._supervised import spawn_store, supervised_store
from .._write_rules import CALLER_ERRORS
from ..reservations import abandoned_hold
from ._commit import Committing, FencedAdd, FenceOf
from ._dsn import check_dsn, redact
from ._embedded import embedded_dir, embedded_dsn
from ._group_commit import GroupCommit
from ._handle import WRITES, PostgresStoreHandle, _psycopg
from ._pool import CONNECT_TIMEOUT, open_pool, pooled
from ._prepare import prepare_schema
from ._reads import compose
from ._requests import Requests
from ._schema import check_namespace

logger = logging.getLogger("otpmem.stores")

GROUP_MAX = 64  # adds committed in one transaction at most


@contextmanager
def connected(dsn: str) -> Iterator[Any]:
    """An autocommit connection to the server at ``dsn`` for the block; ``StoreUnavailable``,
    naming the server (its password hidden), if it cannot be reached."""
    psycopg, _ = _psycopg()
    try:
        conn = _connect(dsn)
    except psycopg.OperationalError as exc:  # libpq's reason says what to do
        raise StoreUnavailable(f"cannot reach PostgreSQL at {redact(dsn)}: {exc}") from None
    try:
        yield conn
    finally:
        conn.close()


def _connect(dsn: str) -> Any:
    psycopg, _ = _psycopg()
    check_dsn(dsn)
    return psycopg.connect(dsn, autocommit=True, connect_timeout=int(CONNECT_TIMEOUT))


def _check_dsn(dsn: str | None) -> None:
    if dsn is not None:
        _psycopg()
        check_dsn(dsn)  # a TypeError for what is not a str


def _check_connect_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < math.inf
    ):
        raise ValueError(
            f"connect_timeout must be a number of seconds > 0, got {short_repr(timeout)}"
        )
    return float(timeout)


def _unreachable_because(dsn: str) -> str | None:
    """libpq's reason for refusing a connection to ``dsn`` now (None: it connects)."""
    psycopg, _ = _psycopg()
    try:
        _connect(dsn).close()
    except psycopg.OperationalError as exc:
        return str(exc)
    return None


def schema_exists(dsn: str, namespace: str) -> bool:
    """Whether the server at ``dsn`` holds an otpmem schema ``namespace`` (made by a store)."""
    with connected(dsn) as conn:
        row = conn.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{namespace}.schema_version",)
        ).fetchone()
    return bool(row and row[0])


class PostgresStore(Committing, GenServer):
    """Conversations, long-term records and usage in a PostgreSQL schema (``namespace``)."""

    caller_errors = CALLER_ERRORS
    handle_class = PostgresStoreHandle

    @classmethod
    def start_link(
        cls,
        dsn: str | None = None,
        *,
        namespace: str = "otpmem",
        name: str | None = None,
        pool_size: int = 8,
        data_dir: str | os.PathLike[str] | None = None,
        faults: FaultPlan | None = None,
        start_timeout: float | None = 60.0,
        fence: FenceOf | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_only: bool = False,
    ) -> PostgresStoreHandle:
        """Connect to ``dsn`` (none: an embedded server under ``data_dir``), create or check
        the schema ``namespace``, and start the store linked to the caller.

        A request waits up to ``connect_timeout`` s for a connection (the server down or
        restarting), then raises a retryable ``StoreUnavailable``; the store carries on and
        reconnects by itself, so the same handle works again once the server is back.

        ``fence(conv)``, if given, names the lease (in ``<namespace>.leases``, see
        ``Leases``) an add to ``conv`` must still hold when it commits, or None for an
        unfenced add; an add whose lease moved on stores nothing and raises ``LeaseLost``.

        ``read_only=True`` creates and migrates nothing: the schema must be there, of this
        otpmem's version; every write is refused (``StoreError``) and the server itself
        refuses any statement that would write (its sessions are read-only).

        Raises ``StoreUnavailable`` naming the server if it cannot be reached, or if its
        schema is newer than this otpmem.
        """
        check_namespace(namespace)
        _check_dsn(dsn)
        if type(pool_size) is not int or pool_size < 1:
            raise ValueError(f"pool_size must be an int >= 1, got {short_repr(pool_size)}")
        if fence is not None and not callable(fence):
            raise TypeError(f"fence must be a callable of a Conv, got {short_repr(fence)}")
        connect_timeout = _check_connect_timeout(connect_timeout)
        if type(read_only) is not bool:
            raise TypeError(f"read_only must be a bool, got {short_repr(read_only)}")
        handle = spawn_store(
            cls,
            (dsn, namespace, pool_size, data_dir, fence, connect_timeout, read_only),
            name,
            faults,
            start_timeout,
        )
        assert isinstance(handle, PostgresStoreHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        dsn: str | None,
        name: str,
        child_id: str | None = None,
        *,
        namespace: str = "otpmem",
        pool_size: int = 8,
        data_dir: str | os.PathLike[str] | None = None,
        intensity: int = STORE_INTENSITY,
        period: float = STORE_PERIOD,
        listeners: Iterable[Callable[[SupervisorEvent], None]] = (),
        fence: FenceOf | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> ChildSpec:
        """A store named ``name`` under its own supervisor (child ``"store"``), as
        ``LevelDBStore.child_spec``. A lost server does not restart it (it reconnects in
        place, as a bare store does); a crash does, with a fresh pool."""
        check_namespace(namespace)
        _check_dsn(dsn)  # before anything starts: a restart would not mend it
        _check_connect_timeout(connect_timeout)
        where = data_dir

        def start_store() -> Handle:
            nonlocal where
            if dsn is None and where is None:
                # Chosen once: a restarted store must come back to the embedded server
                # holding its conversations, not start an empty one somewhere new.
                where = embedded_dir(None)
            return cls.start_link(
                dsn,
                namespace=namespace,
                name=name,
                pool_size=pool_size,
                data_dir=where,
                fence=fence,
                connect_timeout=connect_timeout,
            )

        return supervised_store(child_id or name, start_store, intensity, period, listeners)

    def init(
        self,
        dsn: str | None,
        namespace: str,
        pool_size: int,
        data_dir: str | os.PathLike[str] | None,
        fence: FenceOf | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_only: bool = False,
    ) -> None:
        psycopg, pool_module = _psycopg()
        self._psycopg_errors = (psycopg.OperationalError, pool_module.PoolTimeout)
        self._data_error = psycopg.DataError
        if dsn is None:
            dsn = blocking(embedded_dsn, data_dir)
        self.dsn = dsn
        self.connect_timeout = connect_timeout
        self.read_only = read_only
        self.pool = open_pool(dsn, namespace, pool_size, connect_timeout, read_only)
        try:
            blocking(self.pool.open, True, connect_timeout)
            with pooled(self.pool, connect_timeout) as conn:
                blocking(prepare_schema, conn, namespace, read_only, fence is not None)
        except self._psycopg_errors as exc:
            self.pool.close()
            # The pool says only that it timed out; one plain connection says why. It is
            # asked after the pool's wait, not before: failing at once would let a server
            # restarting for a few seconds exhaust the store supervisor's restarts.
            reason = blocking(_unreachable_because, dsn) or str(exc)
            raise StoreUnavailable(
                f"cannot reach PostgreSQL at {redact(dsn)} within {connect_timeout:g} s: {reason}"
            ) from exc
        except BaseException:
            self.pool.close()
            raise
        self.namespace = namespace
        self.fence = fence
        self.requests = Requests(namespace)
        self.writes = self.requests.writes
        self.reads = compose(namespace)
        self._pool_closed = pool_module.PoolClosed
        self._rollback = psycopg.errors.TransactionRollback
        # One group at a time, as LevelDB's writer queue: two lanes committing side by
        # side made smaller groups and fewer adds a second on two cores (measured).
        self.group: GroupCommit[FencedAdd, BaseException | None] = GroupCommit(
            self._commit_adds, max_group=GROUP_MAX
        )
        on_exit(self.pool.close)

    def handle_info(self, message: Any) -> Any:
        abandoned = abandoned_hold(message)
        if abandoned is not None:
            try:
                blocking(self.perform, ("release", abandoned), self.handle)
            except Exception as exc:  # never worth a restart: the hold expires instead
                logger.warning("could not drop the abandoned hold %s: %s", abandoned, exc)
            return None
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        # perform's first step is the door (parse_request): garbage never reaches the pool.
        return blocking(self.perform, message, self.handle)

    def perform(self, message: tuple[Any, ...], owner: object) -> Any:
        """Run one store request as one transaction, on the calling thread (an add joins
        the adds of other threads in one, as a group commit)."""
        work, args = self.requests.work(message)  # a checked request: message[0] its kind
        if self.read_only and message[0] in WRITES:
            raise self._read_only(message[0])
        if work == self.writes.append:
            return self.add_checked(args)
        with self._caller_errors(owner), self._cursor() as (conn, cur):
            return self._in_transaction(conn, lambda: work(cur, *args))

    def add_checked(self, add: CheckedAdd) -> None:
        """Commit an add its handle (or the door) already checked, in a group commit with
        the adds of other threads; returns once it is stored."""
        if self.read_only:
            raise self._read_only("add")
        self.group.submit((add, None if self.fence is None else self.fence(add[0])))

    def _read_only(self, kind: str) -> StoreError:
        return StoreError(
            f"this PostgresStore (schema {self.namespace!r}) was opened read_only=True: "
            f"it does not {kind}"
        )


__all__ = ["PostgresStore", "PostgresStoreHandle", "connected", "schema_exists"]
