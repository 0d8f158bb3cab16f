"""The embedded PostgreSQL: a server of our own (pgserver, PostgreSQL 16 with pgvector)
under a directory, for users and tests with no server to point at.

pgserver counts the processes that opened a directory's server (``.handle_pids.json``) and
stops it when the last lets go; ``embedded_server`` first forgets the ones that died
without letting go (a SIGKILLed run), which would otherwise keep it running forever.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._base import StoreUnavailable

NOT_INSTALLED = (
    "no DSN was given and the embedded PostgreSQL is not installed: "
    "pip install 'otpmem[postgres]', or pass a DSN"
)


def _pgserver() -> Any:
    with _quiet():
        try:
            import pgserver
        except ImportError:
            raise StoreUnavailable(NOT_INSTALLED) from None
    return pgserver


@contextmanager
def _quiet() -> Iterator[None]:
    # Importing pgserver, or starting a server, platformdirs warns that XDG_RUNTIME_DIR is
    # unset; pgserver then puts its lock under /tmp, which is fine: not the user's news.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        yield


def embedded_dir(data_dir: str | os.PathLike[str] | None) -> str:
    """The directory of an embedded server: ``data_dir``, or a new temporary one."""
    return os.fspath(data_dir) if data_dir is not None else tempfile.mkdtemp(prefix="otpmem-pg-")


def embedded_dsn(data_dir: str | os.PathLike[str] | None) -> str:
    """Start (or join) a PostgreSQL server of our own under ``data_dir``; its DSN. It runs
    until this process exits (none: a new temporary directory)."""
    pgserver = _pgserver()
    where = embedded_dir(data_dir)
    with _quiet():
        server = pgserver.get_server(where, cleanup_mode="stop")
    uri: str = server.get_uri()
    return uri


@contextmanager
def embedded_server(where: Path) -> Iterator[str]:
    """PostgreSQL under ``where`` for the block; its DSN. Stopped at the end unless another
    process still uses it."""
    pgserver = _pgserver()
    where.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(where)
    with _quiet():
        server = pgserver.get_server(where, cleanup_mode="stop")
    try:
        yield str(server.get_uri())
    finally:
        server.cleanup()


def _forget_dead_handles(where: Path) -> None:
    handles = where / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["embedded_dir", "embedded_dsn", "embedded_server"]
