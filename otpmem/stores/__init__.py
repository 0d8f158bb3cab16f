"""Stores: conversations owned by servers. MemoryStore (ETS analogue), LevelDBStore (DETS)."""

from ._base import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ChatMemory,
    SearchHit,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreUnavailable,
)
from .leveldb import LevelDBStore, LevelDBStoreHandle
from .memory import MemoryStore, MemoryStoreHandle

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ChatMemory",
    "LevelDBStore",
    "LevelDBStoreHandle",
    "MemoryStore",
    "MemoryStoreHandle",
    "SearchHit",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
]
