"""One LevelDB store per directory in a process, shared by the file memories open on it.

LevelDB locks its directory: a second ``LevelDBStore`` on a path this process holds open
would fail with ``StoreLocked``. ``memory("file", path=p)`` twice (two requests of one
session, say) shares the first one's store instead; it is stopped when the last memory
on it closes.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..stores import LevelDBStore, LevelDBStoreHandle

_lock = threading.Lock()
_open: dict[str, tuple[LevelDBStoreHandle, bool, list[int]]] = {}


class FileLease:
    """A file memory's hold on its directory's store: ``stop()`` lets go (the last one
    stops the store)."""

    def __init__(self, where: str, store: LevelDBStoreHandle) -> None:
        self.where = where
        self.store = store
        self.alive = True

    def stop(self) -> None:
        """Let go of the store; stop it if no other memory holds it."""
        if not self.alive:
            return
        self.alive = False
        with _lock:
            entry = _open.get(self.where)
            if entry is None or entry[0] is not self.store:
                return
            entry[2][0] -= 1
            if entry[2][0] > 0:
                return
            del _open[self.where]
        if self.store.alive:
            self.store.stop()


def open_file_store(path: str | os.PathLike[str], sync: bool) -> tuple[Any, FileLease]:
    """The store of directory ``path`` (opened now, or the one open already) and a lease
    on it; ``ValueError`` if it is open with another ``sync``."""
    where = os.path.realpath(os.fspath(path))
    with _lock:
        entry = _open.get(where)
        if entry is not None and entry[0].alive:
            store, opened_sync, holders = entry
            if opened_sync != sync:
                raise ValueError(
                    f"the file memory at {where!r} is open with sync={opened_sync}; "
                    f"open it again with the same sync, not sync={sync}"
                )
            holders[0] += 1
            return store, FileLease(where, store)
        # Opened under the lock: two memories racing to open one directory get one store.
        store = LevelDBStore.start_link(where, sync=sync)
        _open[where] = (store, sync, [1])
        return store, FileLease(where, store)
