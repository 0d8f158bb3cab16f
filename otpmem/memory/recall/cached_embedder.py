"""CachedEmbedder: an embedder's vectors cached by text, so a repeated text is not embedded
again (bx-ai's vector ``cache: true``; ``cacheName`` names the cache).

A cache is shared by every memory that names it (``embedding_cache(name)``, one per name
in the process), and keyed by the embedder as well as the text: two embedders of other
models, or of another size, never read each other's vectors. An embedder is told apart by
its class and ``repr``; one whose ``repr`` is the default (``<... at 0x...>``) is its own.
The cache holds the newest ``max_entries`` texts (least recently used go first)::

    embedder = CachedEmbedder(OpenAIEmbedder("text-embedding-3-small", dim=1536))
    index = RecallIndex.start_link(store, embedder)
    embedder.cache.stats()   # {"hits": ..., "misses": ..., "entries": ...}
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ...messages import short_repr
from .base import Embedder, EmbedderError, noise_floor

MAX_ENTRIES = 10_000
"""Texts a cache holds by default: 60 MB of 1,536-float vectors, 10 MB at 256."""


class EmbeddingCache:
    """Vectors by (embedder, text), the newest ``max_entries``; safe across threads."""

    def __init__(self, name: str = "default", max_entries: int = MAX_ENTRIES) -> None:
        if type(max_entries) is not int or max_entries < 1:
            raise ValueError(f"max_entries must be an int >= 1, got {short_repr(max_entries)}")
        self.name = name
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()
        self._vectors: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def __repr__(self) -> str:
        return f"EmbeddingCache({self.name!r}, entries={len(self._vectors)})"

    def lookup(self, owner: str, texts: Sequence[str]) -> list[Any]:
        """The cached vector of each text (None where there is none), counted."""
        found: list[Any] = []
        with self._lock:
            for text in texts:
                vector = self._vectors.get((owner, text))
                if vector is None:
                    self.misses += 1
                else:
                    self._vectors.move_to_end((owner, text))
                    self.hits += 1
                found.append(vector)
        return found

    def keep(self, owner: str, texts: Sequence[str], vectors: Sequence[Any]) -> None:
        """Cache ``vectors`` (one per text), dropping the least recently used past the bound."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._vectors[(owner, text)] = vector
                self._vectors.move_to_end((owner, text))
            while len(self._vectors) > self.max_entries:
                self._vectors.popitem(last=False)

    def stats(self) -> dict[str, int]:
        """Hits, misses and entries so far."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "entries": len(self._vectors)}

    def clear(self) -> None:
        """Forget every vector and the counts."""
        with self._lock:
            self._vectors.clear()
            self.hits = self.misses = 0


_caches: dict[str, EmbeddingCache] = {}
_caches_lock = threading.Lock()


def embedding_cache(name: str = "default") -> EmbeddingCache:
    """The process's cache called ``name`` (made on first use): memories naming the same
    cache share its vectors."""
    if type(name) is not str or not name:
        raise ValueError(f"a cache name is a non-empty str, got {short_repr(name)}")
    with _caches_lock:
        cache = _caches.get(name)
        if cache is None:
            cache = _caches[name] = EmbeddingCache(name)
        return cache


def embedder_identity(embedder: Embedder) -> str:
    """What tells an embedder's vectors apart in a cache: its class, its repr and size."""
    kind = type(embedder)
    shown = repr(embedder)
    if shown.startswith("<") and " at 0x" in shown:
        shown = f"instance-{id(embedder)}"  # no repr of its own: nobody else shares its vectors
    return f"{kind.__module__}.{kind.__qualname__}:{shown}:dim={embedder.dim}"


class CachedEmbedder:
    """``embedder``, with its vectors cached by text in ``cache`` (a private one if None);
    the texts it has not seen are embedded together, in one call."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None = None) -> None:
        if not isinstance(embedder, Embedder):
            raise TypeError(f"embedder must be an Embedder, got {short_repr(embedder)}")
        if cache is not None and not isinstance(cache, EmbeddingCache):
            raise TypeError(f"cache must be an EmbeddingCache, got {short_repr(cache)}")
        self.embedder = embedder
        self.cache = cache if cache is not None else EmbeddingCache("private")
        self.dim = embedder.dim
        self.noise_floor = noise_floor(embedder)
        self.owner = embedder_identity(embedder)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, cache={self.cache.name!r})"

    def embed(self, texts: Sequence[str]) -> list[Any]:
        """One vector per text: the cached ones as they are, the others embedded now."""
        vectors = self.cache.lookup(self.owner, texts)
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if missing:
            # A text twice in one batch is embedded once.
            fresh = list(dict.fromkeys(texts[i] for i in missing))
            made = list(self.embedder.embed(fresh))
            if len(made) != len(fresh):
                raise EmbedderError(
                    f"{self.embedder!r} returned {len(made)} vectors for {len(fresh)} texts"
                )
            self.cache.keep(self.owner, fresh, made)
            by_text = dict(zip(fresh, made, strict=True))
            for i in missing:
                vectors[i] = by_text[texts[i]]
        return vectors

    def close(self) -> None:
        """Close the wrapped embedder if it can be closed."""
        close = getattr(self.embedder, "close", None)
        if callable(close):
            close()


__all__ = [
    "MAX_ENTRIES",
    "CachedEmbedder",
    "EmbeddingCache",
    "embedder_identity",
    "embedding_cache",
]
