"""Stores: conversations owned by servers. MemoryStore (the ETS analogue), LevelDBStore
(DETS), PostgresStore (shared by nodes; the ``postgres`` extra, imported on first use).

One subpackage per backend: ``otpmem.stores.memory``, ``.leveldb``, ``.postgres``.
"""

from typing import TYPE_CHECKING, Any

from ._base import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    KEYS_KEPT,
    STORE_INTENSITY,
    STORE_PERIOD,
    ChatMemory,
    ConversationCleared,
    ConversationExists,
    ForkStore,
    LeaseLost,
    SearchHit,
    StoreCorrupt,
    StoredWindow,
    StoreError,
    StoreLocked,
    StoreUnavailable,
)
from ._documents import import_key, parse_import
from .default import DEFAULT_STORE_NAME, default_store
from .leveldb import LevelDBStore, LevelDBStoreHandle
from .longterm import (
    KEEP_FACT_HISTORY,
    MAX_FACTS_PER_USER,
    CursorMoved,
    Fact,
    FactLimitReached,
    FactStamps,
    LongTermStore,
    Profile,
    Usage,
    scope_usage,
    usage_of,
)
from .memory import MemoryStore, MemoryStoreHandle
from .reservations import Hold, Limit, Reservation, ReservationStore
from .scopes import Scope, ScopeStore, Who, view_of

if TYPE_CHECKING:
    from .postgres import PostgresStore, PostgresStoreHandle

_POSTGRES = ("PostgresStore", "PostgresStoreHandle")


def __getattr__(name: str) -> Any:
    """PostgresStore and its handle, imported on first use (they need psycopg)."""
    if name in _POSTGRES:
        from . import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_STORE_NAME",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "KEEP_FACT_HISTORY",
    "KEYS_KEPT",
    "MAX_FACTS_PER_USER",
    "STORE_INTENSITY",
    "STORE_PERIOD",
    "ChatMemory",
    "ConversationCleared",
    "ConversationExists",
    "CursorMoved",
    "Fact",
    "FactLimitReached",
    "FactStamps",
    "ForkStore",
    "Hold",
    "LeaseLost",
    "LevelDBStore",
    "LevelDBStoreHandle",
    "Limit",
    "LongTermStore",
    "MemoryStore",
    "MemoryStoreHandle",
    "PostgresStore",
    "PostgresStoreHandle",
    "Profile",
    "Reservation",
    "ReservationStore",
    "Scope",
    "ScopeStore",
    "SearchHit",
    "StoreCorrupt",
    "StoreError",
    "StoreLocked",
    "StoreUnavailable",
    "StoredWindow",
    "Usage",
    "Who",
    "default_store",
    "import_key",
    "parse_import",
    "scope_usage",
    "usage_of",
    "view_of",
]
