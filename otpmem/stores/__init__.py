"""Stores: conversations owned by servers. MemoryStore (ETS analogue), LevelDBStore (DETS)."""

from ._base import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    STORE_INTENSITY,
    STORE_PERIOD,
    ChatMemory,
    SearchHit,
    StoreCorrupt,
    StoreError,
    StoreLocked,
    StoreUnavailable,
)
from .default import DEFAULT_STORE_NAME, default_store
from .leveldb import LevelDBStore, LevelDBStoreHandle
from .memory import MemoryStore, MemoryStoreHandle

__all__ = [
    "DEFAULT_STORE_NAME",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "STORE_INTENSITY",
    "STORE_PERIOD",
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
    "default_store",
]
