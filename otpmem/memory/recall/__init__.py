"""Recall: a ranked, tenant-safe index of a store's messages, and hybrid memory over it.

Names are imported on first use (``__getattr__``): the ranking needs numpy, and an
application starts its index (``otpmem.start()``) without paying for that import, which
waits for the first query.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Embedder, EmbedderError, FilterFailed, Hit
    from .embedders import HashingEmbedder, SentenceTransformerEmbedder
    from .fusion import RRF_K
    from .handle import RecallIndexHandle, ranked_search
    from .hybrid import HybridProvider
    from .index import RecallIndex
    from .openai_embedder import OpenAIEmbedder
    from .partition import STANDALONE

_WHERE = {
    "Embedder": ".base",
    "EmbedderError": ".base",
    "FilterFailed": ".base",
    "Hit": ".base",
    "HashingEmbedder": ".embedders",
    "SentenceTransformerEmbedder": ".embedders",
    "RRF_K": ".fusion",
    "RecallIndexHandle": ".handle",
    "ranked_search": ".handle",
    "HybridProvider": ".hybrid",
    "RecallIndex": ".index",
    "OpenAIEmbedder": ".openai_embedder",
    "STANDALONE": ".partition",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "RRF_K",
    "STANDALONE",
    "Embedder",
    "EmbedderError",
    "FilterFailed",
    "HashingEmbedder",
    "Hit",
    "HybridProvider",
    "OpenAIEmbedder",
    "RecallIndex",
    "RecallIndexHandle",
    "SentenceTransformerEmbedder",
    "ranked_search",
]
