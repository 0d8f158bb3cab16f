"""PostgresStore's connection pool: it reconnects by itself, so the store outlives a lost
server and serves again, on the same handle, once the server is back.

- A request waits up to ``connect_timeout`` s for a connection, then hears a retryable
  ``StoreUnavailable`` (``unavailable``): a server back within the wait costs the caller
  nothing but the wait.
- A connection lost mid-request is discarded and the pool replaces it in the background
  (psycopg_pool's reconnection, with exponential backoff). ``RECONNECT_TIMEOUT`` ends each
  series of attempts before its backoff grows past psycopg_pool's first second; while
  requests still wait, the pool starts the next series (``_keep_trying``), so a waiting
  request gets its connection within about a second of the server's return, and the first
  request after a quiet outage starts a series whose first attempt is at once.
- A connection the server dropped while it idled in the pool (a restart ends every
  session) is never handed to a request: ``pooled`` sees that its socket has something to
  read (an idle session is sent nothing but the server's farewell and its end of file),
  confirms with one round trip, and takes the next; a sound connection costs one ``poll``.

    pool = open_pool(dsn, "otpmem", pool_size=8, connect_timeout=10.0)
    pool.open(wait=True, timeout=10.0)
    with pooled(pool, 10.0) as conn:
        conn.execute("SELECT 1")
"""

from __future__ import annotations

import math
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from .._base import StoreUnavailable
from ._dsn import redact

CONNECT_TIMEOUT = 10.0
RECONNECT_TIMEOUT = 2.0  # attempts at 0, 1 and 2 s, then (requests waiting) the next series
IDLE_IN_TRANSACTION_MS = 5_000
_LAST_WAIT = 0.01  # a wait that ran out still takes a connection that is ready


def open_pool(
    dsn: str, namespace: str, pool_size: int, connect_timeout: float, read_only: bool = False
) -> Any:
    """A psycopg ``ConnectionPool`` on ``dsn``, not opened yet; ``read_only``: every
    transaction of its sessions is read-only, so the server refuses any write."""
    # A transaction whose client froze between its statements (a GC pause, a stopped VM)
    # must not hold its locks forever: the server ends it.
    options = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
    if read_only:
        options += " -c default_transaction_read_only=on"
    kwargs: dict[str, Any] = {"autocommit": True, "options": options}
    if "connect_timeout" not in conninfo_to_dict(dsn):
        # Each attempt of the pool's own, too: a host that does not answer would otherwise
        # hold one of its workers until TCP gives up, minutes later. libpq's least is 2 s.
        kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout))
    return psycopg_pool.ConnectionPool(
        dsn,
        min_size=1,
        max_size=pool_size,  # requests beyond it wait for a connection (connect_timeout)
        kwargs=kwargs,
        open=False,
        name=f"otpmem-{namespace}",
        timeout=connect_timeout,
        reconnect_timeout=RECONNECT_TIMEOUT,
        reconnect_failed=_keep_trying,
    )


def _keep_trying(pool: Any) -> None:
    # A series of reconnection attempts gave up; its slot is free again. Requests waiting
    # for a connection start no series of their own once they wait, so one starts here.
    if not pool.closed and pool.get_stats().get("requests_waiting", 0):
        pool.check()  # grows the pool by one connection: a new series, its first attempt now


@contextmanager
def pooled(pool: Any, timeout: float) -> Iterator[Any]:
    """A sound connection of ``pool`` for the block, waited for up to ``timeout`` s
    (``PoolTimeout`` then); the ones the server dropped while they idled are discarded."""
    deadline = time.monotonic() + timeout
    while True:
        with pool.connection(timeout=max(deadline - time.monotonic(), _LAST_WAIT)) as conn:
            if not dropped(conn):
                yield conn
                return
            conn.close()  # the pool sees it closed and connects a new one


def dropped(conn: Any) -> bool:
    """Whether the server ended idle ``conn`` (restarted, or ended idle sessions)."""
    if conn.closed:
        return True
    if not _readable(conn.fileno()):
        return False
    try:  # a message the server sends unasked (a changed setting) is read, and it lives
        psycopg_pool.ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return True
    return False


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):  # select() refuses descriptors past FD_SETSIZE
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))  # POLLHUP and POLLERR come unasked: dropped too
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def unavailable(exc: BaseException, dsn: str, timeout: float, doing: str) -> StoreUnavailable:
    """The retryable error of a request (``doing``: "a write" or "a read") that could not
    reach PostgreSQL, or lost it midway: the store itself carries on and reconnects."""
    where = redact(dsn)
    if isinstance(exc, psycopg_pool.PoolTimeout):
        nothing = "nothing was stored: " if doing == "a write" else ""
        return StoreUnavailable(
            f"no connection to PostgreSQL at {where} within {timeout:g} s (the server is "
            f"down, restarting or unreachable; the store reconnects by itself); {nothing}"
            "try again"
        )
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if doing == "a write":
        return StoreUnavailable(
            f"lost PostgreSQL at {where} during a write ({reason}); it may not have been "
            "stored: try again (with its idempotency key, to store it once)"
        )
    return StoreUnavailable(f"lost PostgreSQL at {where} during {doing} ({reason}); try again")


__all__ = [
    "CONNECT_TIMEOUT",
    "IDLE_IN_TRANSACTION_MS",
    "RECONNECT_TIMEOUT",
    "dropped",
    "open_pool",
    "pooled",
    "unavailable",
]
