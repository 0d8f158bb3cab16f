"""What a PostgresStore does to its schema before it serves: every part's tables and
functions made or brought to this version, or, opened read-only, only checked."""

from __future__ import annotations

from typing import Any

from ._blocks import ensure_blocks
from ._forks import ensure_forks
from ._holds import ensure_holds
from ._leases import ensure_leases
from ._schema import check_schema, ensure_schema


def prepare_schema(conn: Any, namespace: str, read_only: bool, fenced: bool) -> None:
    """Make (or migrate) the schema and every part's objects; ``read_only``: create and
    migrate nothing, only check the schema is there at this version; ``fenced``: the
    leases' tables too."""
    if read_only:
        check_schema(conn, namespace)
        return
    ensure_schema(conn, namespace)
    ensure_holds(conn, namespace)
    ensure_blocks(conn, namespace)
    ensure_forks(conn, namespace)
    if fenced:
        ensure_leases(conn, namespace)
