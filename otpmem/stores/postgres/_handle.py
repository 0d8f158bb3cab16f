"""The handle of a PostgresStore: its requests run on the caller's thread, with a pooled
connection (in the blocking pool when the caller is a process, so no scheduler thread waits
on the network); an add goes straight to the store's group commit, validated once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...actors import Handle, NoProcess, blocking
from .._base import StoreUnavailable
from .._client import CheckedAdd, StoreClient
from .._holds import ReservationClient
from .._longterm_client import LONGTERM_KINDS, LongTermClient
from ..blocks import BLOCK_EDIT
from ..reservations import RESERVATION_KINDS
from ._blocks import PostgresBlocks
from ._commit import refused
from ._pool import pooled, unavailable
from ._reads import PostgresReads
from ._scopes import ScopeReads

READY_TIMEOUT = 30.0
WRITES = frozenset(
    {
        "add",
        "fork",
        "import",
        "clear",
        "forget_user",
        *LONGTERM_KINDS,
        *RESERVATION_KINDS,
        BLOCK_EDIT,
    }
)


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # the extra is not installed
        raise StoreUnavailable(
            "PostgresStore needs psycopg: pip install 'otpmem[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class PostgresStoreHandle(
    PostgresReads,
    StoreClient,
    LongTermClient,
    ReservationClient,
    PostgresBlocks,
    ScopeReads,
    Handle,
):
    """The ``ChatMemory`` (and ``LongTermStore``, ``ReservationStore``, ``BlockStore``,
    ``ScopeStore``) face of a PostgresStore."""

    __slots__ = ()

    def _server(self) -> Any:
        process = self.resolve()
        if not process.wait_ready(READY_TIMEOUT):
            raise NoProcess(self._target())
        return process.server

    def schema(self) -> str:
        """The PostgreSQL schema (``namespace``) the store's tables are in."""
        namespace: str = self._server().namespace
        return namespace

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled autocommit connection to the store's server for the block, for tables
        of one's own in its schema (a RecallIndex's snapshots); errors as a read's."""
        with self._reading() as (conn, _):
            yield conn

    def call(self, message: Any, timeout: float | None = 5.0) -> Any:
        """A store request runs here, on this thread, as one transaction; anything else is
        a call to the server."""
        if (
            type(message) is tuple
            and message
            and type(message[0]) is str
            and (message[0] in WRITES)
        ):
            server = self._server()
            return blocking(server.perform, message, self._target())
        return super().call(message, timeout)

    def _add_checked(self, add: CheckedAdd, timeout: float | None) -> None:
        # Validated by ``add`` in this thread: straight to the group commit, not through
        # ``call`` and the server's door, which would freeze and check the batch again.
        blocking(self._server().add_checked, add)

    @contextmanager
    def _reading(self) -> Iterator[tuple[Any, Any]]:
        server = self._server()
        psycopg, pool_module = _psycopg()
        try:
            with pooled(server.pool, server.connect_timeout) as conn:
                yield conn, server.reads
        except psycopg.DataError as exc:
            raise refused(exc) from None
        except (psycopg.OperationalError, pool_module.PoolTimeout) as exc:
            raise unavailable(exc, server.dsn, server.connect_timeout, "a read") from exc
        except pool_module.PoolClosed:
            raise NoProcess(self._target()) from None
