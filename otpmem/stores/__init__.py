"""Stores: conversations owned by servers. MemoryStore (ETS analogue), LevelDBStore (DETS)."""

from ._base import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    KEYS_KEPT,
    STORE_INTENSITY,
    STORE_PERIOD,
    ChatMemory,
    ConversationCleared,
    SearchHit,
    StoreCorrupt,
    StoredWindow,
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
    "KEYS_KEPT",
    "STORE_INTENSITY",
    "STORE_PERIOD",
    "ChatMemory",
    "ConversationCleared",
    "LevelDBStore",
    "LevelDBStoreHandle",
    "MemoryStore",
    "MemoryStoreHandle",
    "SearchHit",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "StoredWindow",
    "default_store",
]
