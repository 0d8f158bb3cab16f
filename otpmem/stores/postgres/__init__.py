"""PostgresStore: conversations in PostgreSQL, shared by every otpmem node that opens it.

::

    store = PostgresStore.start_link("postgresql://localhost/otpmem")
    store.add("c1", [{"role": "user", "content": "hi"}])  # committed when it returns

Needs the ``postgres`` extra (psycopg 3 and its pool; pgserver for the embedded server).
Leases decide which node owns which conversation; ``Fence`` is what a fenced write carries.
"""

from .._base import LeaseLost
from ._dsn import check_dsn, redact, unredacted
from ._embedded import embedded_dsn, embedded_server
from ._leases import Fence, Heartbeat, Lease, Leases, ensure_leases, lease_lock_prefix
from ._schema import check_namespace
from ._server import PostgresStore, PostgresStoreHandle, connected, schema_exists

__all__ = [
    "Fence",
    "Heartbeat",
    "Lease",
    "LeaseLost",
    "Leases",
    "PostgresStore",
    "PostgresStoreHandle",
    "check_dsn",
    "check_namespace",
    "connected",
    "embedded_dsn",
    "embedded_server",
    "ensure_leases",
    "lease_lock_prefix",
    "redact",
    "schema_exists",
    "unredacted",
]
