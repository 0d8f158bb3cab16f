"""LevelDBStore: every conversation on disk (plyvel + msgpack), the DETS analogue.

::

    store = LevelDBStore.start_link("data/store")
    store.add("c1", [{"role": "user", "content": "hi"}])  # fsynced when it returns

``keys`` writes the key layout down; ``files`` is about store directories (is this one,
is it locked, a snapshot to read from).
"""

from . import files, keys
from ._server import READY_TIMEOUT, LevelDBStore, LevelDBStoreHandle

__all__ = ["READY_TIMEOUT", "LevelDBStore", "LevelDBStoreHandle", "files", "keys"]
