"""Stores: conversations owned by servers. MemoryStore (ETS analogue), LevelDBStore (DETS)."""

from ._base import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    KEYS_KEPT,
    STORE_INTENSITY,
    STORE_PERIOD,
    ChatMemory,
    ConversationCleared,
    LeaseLost,
    SearchHit,
    StoreCorrupt,
    StoredWindow,
    StoreError,
    StoreLocked,
    StoreUnavailable,
)
from ._documents import parse_import
from ._memory_handle import MemoryStoreHandle
from .default import DEFAULT_STORE_NAME, default_store
from .leveldb import LevelDBStore, LevelDBStoreHandle
from .longterm import (
    MAX_FACTS_PER_USER,
    Fact,
    FactLimitReached,
    LongTermStore,
    Profile,
    Usage,
    usage_of,
)
from .memory import MemoryStore

__all__ = [
    "DEFAULT_STORE_NAME",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "KEYS_KEPT",
    "MAX_FACTS_PER_USER",
    "STORE_INTENSITY",
    "STORE_PERIOD",
    "ChatMemory",
    "ConversationCleared",
    "Fact",
    "FactLimitReached",
    "LeaseLost",
    "LevelDBStore",
    "LevelDBStoreHandle",
    "LongTermStore",
    "MemoryStore",
    "MemoryStoreHandle",
    "Profile",
    "SearchHit",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "StoredWindow",
    "Usage",
    "default_store",
    "parse_import",
    "usage_of",
]
