"""A LevelDB store's directory seen from outside any store: is it one, can it be read.

Opening a LevelDB directory writes to it: LevelDB replays its log (``NNNNNN.log``) into a
new table file, writes a new ``MANIFEST``, rotates ``LOG`` and deletes obsolete files. So
the commands that only read (``otpmem inspect``, ``export``, ``search``) open a *snapshot*:
while they hold the directory's lock, the table files (``.ldb``/``.sst``, which LevelDB
never changes once written) are hard-linked into a private temporary directory and the few
files LevelDB rewrites (``CURRENT``, ``MANIFEST-*``, the logs) are copied; the snapshot is
opened, read and deleted. The store's own directory is never written, which also makes
read-only media and directories without write permission readable::

    with snapshot(Path("run")) as copy:
        store = LevelDBStore.start_link(copy, create=False)
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import plyvel

from .. import StoreCorrupt, StoreError, StoreLocked, StoreUnavailable

TABLE = re.compile(r"^\d+\.(ldb|sst)$")
REWRITTEN = re.compile(r"^(CURRENT|MANIFEST-\d+|\d+\.log)$")
LOCK_POLL = 0.02


def is_store(path: Path) -> bool:
    """True when ``path`` is a directory holding a LevelDB store (it has ``CURRENT``)."""
    return (path / "CURRENT").is_file()


def listing(path: Path, most: int = 4) -> str:
    """A few of the names in directory ``path``, for messages: ``'a', 'b' and 3 more``."""
    names = sorted(os.listdir(path))
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def corrupt(path: Path, detail: str) -> StoreCorrupt:
    """The one message for a damaged store, whatever part of it is damaged."""
    where = os.fspath(path)
    return StoreCorrupt(
        f"the LevelDB store at {where!r} is corrupt ({detail}); back it up, "
        f"then try plyvel.repair_db({where!r})"
    )


def locked(path: Path, waited: float) -> StoreLocked:
    """The one message for a store another process holds."""
    after = f" after waiting {waited:g} s" if waited else ""
    return StoreLocked(
        f"the LevelDB store at {os.fspath(path)!r} is locked by another process (a "
        f"simulation still running?){after}"
    )


def error_text(exc: BaseException) -> str:
    """LevelDB's message (plyvel's errors carry it as bytes), or ``Type: message``."""
    if isinstance(exc, plyvel.Error):
        first = exc.args[0] if exc.args else ""
        text = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@contextmanager
def held(path: Path, timeout: float) -> Iterator[None]:
    """Hold the store's ``LOCK`` for the block, the way LevelDB does (an fcntl lock, here
    a shared one, so the file is only opened for reading).

    Raises ``StoreLocked`` when another process keeps it for ``timeout`` s. Only for a
    process that has no store open at ``path`` itself: fcntl locks belong to the process,
    and closing this one would drop that store's lock too.
    """
    try:
        fd = os.open(path / "LOCK", os.O_RDONLY)
    except FileNotFoundError:
        yield  # a store copied without its LOCK: nobody can hold it
        return
    except OSError as exc:
        raise StoreUnavailable(f"cannot read {os.fspath(path)!r}: {exc.strerror}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise locked(path, timeout) from None
                time.sleep(LOCK_POLL)  # another process's lock has no event to wait on
        yield
    finally:
        os.close(fd)


@contextmanager
def snapshot(path: Path, lock_timeout: float = 1.0) -> Iterator[Path]:
    """A private copy of the store at ``path`` to open and read, deleted afterwards."""
    if not path.exists():
        raise StoreUnavailable(f"{os.fspath(path)} does not exist")
    if not path.is_dir():
        raise StoreUnavailable(f"{os.fspath(path)} is a file, not a store's directory")
    if not is_store(path):
        raise StoreUnavailable(f"there is no LevelDB store at {os.fspath(path)!r}")
    copy = Path(tempfile.mkdtemp(prefix="otpmem-snapshot-"))
    try:
        with held(path, lock_timeout):
            for entry in os.scandir(path):
                if not entry.is_file(follow_symlinks=False):
                    continue
                source, target = Path(entry.path), copy / entry.name
                try:
                    if TABLE.match(entry.name):
                        _link_or_copy(source, target)
                    elif REWRITTEN.match(entry.name):
                        shutil.copyfile(source, target)
                except OSError as exc:
                    raise StoreUnavailable(
                        f"cannot read {os.fspath(source)!r}: {exc.strerror or exc}"
                    ) from None
        yield copy
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)  # another file system, or links not allowed


def store_error_in(exc: BaseException) -> StoreError | None:
    """The StoreError a failed start carries, through ``reason`` and ``__cause__`` links."""
    seen: list[BaseException] = []
    current: Any = exc
    while isinstance(current, BaseException) and current not in seen:
        if isinstance(current, StoreError):
            return current
        seen.append(current)
        current = getattr(current, "reason", None) or current.__cause__
    return None


def check_readable(path: Path) -> None:
    """Open the store at ``path`` with LevelDB's paranoid checks and read every block with
    its checksum verified (about 0.2 s per million messages).

    Raises ``StoreLocked`` at once if another process holds it, ``StoreCorrupt`` naming
    ``path`` if any part is damaged: bit flips included, which plain reads (checksums not
    verified) would return as garbage. Opening writes (see the module docstring): use it on
    a snapshot, or on a store about to be written anyway.
    """
    try:
        db = plyvel.DB(os.fspath(path), create_if_missing=False, paranoid_checks=True)
    except plyvel.IOError as exc:
        text = error_text(exc)
        if "lock" in text:
            raise locked(path, 0) from None
        where = os.fspath(path)
        raise StoreUnavailable(f"cannot open the LevelDB store at {where!r}: {text}") from None
    except plyvel.Error as exc:
        raise corrupt(path, error_text(exc)) from None
    try:
        # The raw iterator, because plyvel's plain one ends quietly at a damaged block
        # (LevelDB's status unread): a check that found nothing wrong, and half the data.
        entries = db.raw_iterator(verify_checksums=True, fill_cache=False)
        entries.seek_to_first()
        while entries.valid():
            entries.next()
    except plyvel.Error as exc:
        raise corrupt(path, error_text(exc)) from None
    finally:
        db.close()


__all__ = [
    "check_readable",
    "corrupt",
    "held",
    "is_store",
    "listing",
    "locked",
    "snapshot",
    "store_error_in",
]
