"""What a RecallIndex holds: every tenant's partition, kept level with the store by pulling.

Nothing is pushed: the stores stay as they are, and before every query the querying
tenant is caught up through the store's public reads (``conversations(user_id)``,
``count(conv)``, ``get(conv, last=k)``), so a query sees every ``add`` that returned
before it (read-your-writes) with no hook in the write path. What is held is a cache of
the store, rebuilt lazily: after a crash of the index, a restart of the store or a reopen
of a LevelDB directory, a tenant's first query re-indexes that tenant, and nobody else.

Per conversation it remembers how many messages it indexed and a digest of the newest one.
On a query: fewer messages than indexed, or a different message at the last indexed
position, means the conversation was cleared (and perhaps rewritten): it is re-indexed
from scratch. A conversation no longer listed for its user was cleared or forgotten: it
leaves the index. Only a clear followed by a rewrite that is at least as long and repeats
the old newest message at the same position, all between two queries, goes unseen; use
``forget``/``forget_user`` (the ``Memory`` facade and ``HybridProvider`` do) to close it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...actors import blocking
from ...messages import Conv
from ...stores import ChatMemory
from .base import Embedder
from .embedders import HashingEmbedder, as_matrix
from .handle import Owner
from .lexical import tokenize
from .partition import Partition, document_text

INLINE_BATCH = 256
"""Catch-ups of more new messages than this run on the blocking pool (never a scheduler)."""


class Tenants:
    """The partitions of one index, least recently queried first; run on its process."""

    def __init__(self, store: ChatMemory, embedder: Embedder | None, max_documents: int) -> None:
        self.store = store
        self.embedder = embedder  # None: no vector ranking, nothing embedded
        self.dim = 0 if embedder is None else int(embedder.dim)
        # HashingEmbedder is a few µs a message: small catch-ups stay inline. Anything
        # else (a model, a server) may block: it always runs on the blocking pool.
        self.inline = embedder is None or isinstance(embedder, HashingEmbedder)
        self.max_documents = max_documents
        self.partitions: OrderedDict[Owner, Partition] = OrderedDict()
        # Live documents in all partitions, kept as they change: a query's cost must not
        # grow with the number of tenants.
        self.documents = 0

    def forget(self, conv: Conv) -> None:
        """Drop one conversation now."""
        holder = self.partitions.get(conv.user_id)
        if holder is not None:
            before = len(holder)
            holder.drop(conv)
            self.documents += len(holder) - before

    def forget_user(self, owner: Owner) -> None:
        """Drop one tenant now."""
        gone = self.partitions.pop(owner, None)
        if gone is not None:
            self.documents -= len(gone)

    def stats(self) -> dict[str, int]:
        """Tenants, conversations, live and dead documents held."""
        parts = self.partitions.values()
        return {
            "tenants": len(self.partitions),
            "conversations": sum(len(p.convs) for p in parts),
            "documents": self.documents,
            "dead": sum(p.dead for p in parts),
        }

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """One unit row per text; an embedder that may block runs on the blocking pool."""
        if self.embedder is None:
            return np.zeros((len(texts), 0), dtype=np.float32)
        if self.inline:
            vectors = self.embedder.embed(texts)
        else:
            vectors = blocking(self.embedder.embed, texts)
        return as_matrix(vectors, self.dim, len(texts))

    def catch_up(self, owner: Owner, only: Conv | None) -> Partition:
        """Bring the tenant's partition (or one conversation of it) level with the store."""
        found = self.partitions.get(owner)
        part = found if found is not None else Partition(self.dim)
        self.partitions[owner] = part
        self.partitions.move_to_end(owner)
        before = len(part)
        if only is not None:
            convs = [only]
        else:
            convs = [c for c in self.store.conversations(owner) if c.user_id == owner]
            listed = set(convs)
            for gone in [c for c in part.convs if c not in listed]:
                part.drop(gone)  # cleared or forgotten in the store
        counts = {conv: self.store.count(conv) for conv in convs}
        pending = 0
        for conv, n in counts.items():
            state = part.convs.get(conv)
            pending += n - (0 if state is None else state.indexed)
        if pending > INLINE_BATCH or (pending and not self.inline):
            blocking(self._index, part, counts)
        else:
            self._index(part, counts)
        self.documents += len(part) - before
        self._evict(owner)
        return part

    def _index(self, part: Partition, counts: Mapping[Conv, int]) -> None:
        batches = []
        for conv, n in counts.items():
            reset, fresh = self._read(part, conv, n)
            if reset:
                part.drop(conv)
            if fresh:
                batches.append((conv, fresh))
        texts = [document_text(m) for _, fresh in batches for m in fresh]
        if not texts:
            return
        if self.embedder is None:
            vectors = np.zeros((len(texts), 0), dtype=np.float32)
        else:
            vectors = as_matrix(self.embedder.embed(texts), self.dim, len(texts))
        start = 0
        for conv, fresh in batches:
            tokens = [tokenize(t) for t in texts[start : start + len(fresh)]]
            part.append(conv, fresh, tokens, vectors[start : start + len(fresh)])
            start += len(fresh)

    def _read(
        self, part: Partition, conv: Conv, counted: int
    ) -> tuple[bool, Sequence[Mapping[str, Any]]]:
        """(start over?, the messages to index next) for one conversation, ``counted``
        messages long when the caller counted: a conversation with nothing new costs one
        more read (its newest message, still the one indexed last?)."""
        state = part.convs.get(conv)
        if state is None:
            return False, self.store.get(conv)
        n = counted
        for _ in range(3):
            if n < state.indexed:
                break
            tail = self.store.get(conv, last=n - state.indexed + 1)
            if len(tail) == n - state.indexed + 1 and state.holds_last(tail[0]):
                return False, tail[1:]
            recounted = self.store.count(conv)
            if recounted == n:
                break  # not a write meanwhile: the conversation was rewritten
            n = recounted
        return True, self.store.get(conv)

    def _evict(self, keep: Owner) -> None:
        while self.documents > self.max_documents and len(self.partitions) > 1:
            owner, part = next(iter(self.partitions.items()))
            if owner == keep:
                break
            del self.partitions[owner]
            self.documents -= len(part)
