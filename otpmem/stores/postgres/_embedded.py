"""The embedded PostgreSQL: a server of our own (pgserver, PostgreSQL 16 with pgvector)
under a directory, for users and tests with no server to point at.

pgserver counts the processes that opened a directory's server (``.handle_pids.json``) and
stops it when the last lets go; ``embedded_server`` first forgets the ones that died
without letting go (a SIGKILLed run), which would otherwise keep it running forever.

A temporary directory (no ``data_dir``: ~39 MB of cluster) belongs to the process that made
it, a bare store or the supervisor of a ``child_spec`` store, and is used by each store
process that started a server in it. It is stopped and removed when its maker and every
user have exited (a crashed store's restart finds it still there, holding its
conversations), and at interpreter exit whatever is left.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...actors import current, on_exit
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


@dataclass
class _Temporary:
    """Who still needs a temporary directory: its maker, and the store processes in it."""

    maker_alive: bool = True
    users: int = 0
    server: Any = field(default=None, repr=False)


_temporary: dict[str, _Temporary] = {}
_temporary_lock = threading.Lock()


def embedded_dir(data_dir: str | os.PathLike[str] | None) -> str:
    """The directory of an embedded server: ``data_dir``, or a new temporary one, removed
    once the calling process and every store that used it have exited."""
    if data_dir is not None:
        return os.fspath(data_dir)
    where = tempfile.mkdtemp(prefix="otpmem-pg-")
    with _temporary_lock:
        _temporary[where] = _Temporary()
    if current() is not None:
        on_exit(lambda: _let_go(where, maker=True))
    return where


def embedded_dsn(data_dir: str | os.PathLike[str] | None) -> str:
    """Start (or join) a PostgreSQL server of our own under ``data_dir``; its DSN. It runs
    until this process exits (none: a new temporary directory, stopped and removed when the
    calling process exits)."""
    pgserver = _pgserver()
    where = embedded_dir(data_dir)
    with _temporary_lock:
        temporary = _temporary.get(where)
        if temporary is not None:
            temporary.users += 1
    if temporary is not None and current() is not None:
        on_exit(lambda: _let_go(where, maker=False))
    with _quiet():
        server = pgserver.get_server(where, cleanup_mode="stop")
    if temporary is not None:
        temporary.server = server
    uri: str = server.get_uri()
    return uri


def _let_go(where: str, *, maker: bool) -> None:
    """One holder of a temporary directory is gone; the last one stops and removes it."""
    with _temporary_lock:
        temporary = _temporary.get(where)
        if temporary is None:
            return
        if maker:
            temporary.maker_alive = False
        else:
            temporary.users -= 1
        if temporary.maker_alive or temporary.users > 0:
            return
        del _temporary[where]
    _remove(where, temporary.server)


def _remove(where: str, server: Any) -> None:
    if server is not None:
        # pgserver stops the server only if this process is the last in its handle list.
        server.cleanup()
    shutil.rmtree(where, ignore_errors=True)


@atexit.register
def _remove_all_at_exit() -> None:
    # Registered before any server's own atexit (this module loads first), so it runs after
    # theirs: each server is stopped by then, only the directories are left.
    with _temporary_lock:
        left = list(_temporary.items())
        _temporary.clear()
    for where, temporary in left:
        _remove(where, temporary.server)


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
