"""PostgreSQL DSNs: checked before anything connects, and shown with their passwords hidden."""

from __future__ import annotations

import re

from ...reprs import short_repr


def redact(dsn: str) -> str:
    """A DSN fit for an error message (or run.json): any password replaced; an empty one,
    which hides nothing, kept (so the DSN still works as written)."""
    # A key=value password may be quoted, spaces and escaped quotes inside: hidden whole.
    pairs = re.sub(r"password\s*=\s*('(?:[^'\\]|\\.)*'?|\S+)", "password=***", dsn)
    return re.sub(r"(://[^:/@]*:)[^@]+@", r"\1***@", pairs)


def check_dsn(dsn: str) -> str:
    """``dsn`` if libpq can parse it (a ``postgresql://`` URI or ``key=value`` pairs), else
    a ``ValueError`` that says why (any password hidden); nothing is connected to."""
    if not isinstance(dsn, str):
        raise TypeError(f"a DSN must be a str, got {short_repr(dsn)}")
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(dsn)
    except ProgrammingError as exc:
        reason = redact(str(exc).strip()) or "libpq cannot parse it"
        raise ValueError(
            f"not a PostgreSQL DSN: {reason} (give postgresql://user@host/db, or key=value "
            "pairs such as 'host=db dbname=otpmem')"
        ) from None
    return dsn


def unredacted(dsn: str) -> str:
    """A DSN ``redact`` made (its password ``***``) with no password at all: libpq then
    takes one from ``PGPASSWORD`` or ``~/.pgpass``."""
    dsn = re.sub(r"(://[^:/@]*):\*\*\*@", r"\1@", dsn)
    return re.sub(r"\s*password=\*\*\*", "", dsn).strip()


__all__ = ["check_dsn", "redact", "unredacted"]
