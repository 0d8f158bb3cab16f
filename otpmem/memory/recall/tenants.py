"""What a RecallIndex holds: every tenant's partition, kept level with the store by pulling.

Nothing is pushed: the stores stay as they are, and before every query the querying
tenant is caught up through the store's public reads (``conversations(user_id)``,
``count(conv)``, ``get(conv, last=k)``), so a query sees every ``add`` that returned
before it (read-your-writes) with no hook in the write path. What is held is a cache of
the store, loaded lazily: after a crash of the index, a restart of the store or a reopen
of its directory, a tenant's first query reloads that tenant, and nobody else, from its
snapshot (``snapshots``: then only what is newer is indexed) or, with none, re-indexes it.

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
from .chunks import Piece, Terms
from .embedders import HashingEmbedder, as_matrix
from .handle import Owner
from .lexical import tokenize
from .partition import Partition, analyze_meta, document_text, fingerprint
from .restore import build
from .snapshots import Snapshots

INLINE_BATCH = 256
"""Catch-ups of more new messages than this run on the blocking pool (never a scheduler)."""


class Tenants:
    """The partitions of one index, least recently queried first; run on its process."""

    def __init__(
        self,
        store: ChatMemory,
        embedder: Embedder | None,
        max_documents: int,
        snapshots: Snapshots | None = None,
    ) -> None:
        self.store = store
        # Where partitions are kept beside the store (None: nowhere), see ``snapshots``.
        self.snapshots = snapshots
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
        """Drop one conversation now (its snapshot chunks too, written before this returns)."""
        holder = self.partitions.get(conv.user_id)
        if holder is not None:
            before = len(holder)
            holder.drop(conv)
            self.documents += len(holder) - before
        if self.snapshots is not None:
            blocking(self.snapshots.forget, conv.user_id, conv)

    def forget_user(self, owner: Owner) -> None:
        """Drop one tenant now (its snapshot chunks too, written before this returns)."""
        gone = self.partitions.pop(owner, None)
        if gone is not None:
            self.documents -= len(gone)
        if self.snapshots is not None:
            blocking(self.snapshots.forget, owner, None)

    def stats(self) -> dict[str, int]:
        """Tenants, conversations, live and dead documents held; tenants reopened from
        snapshots and messages whose chunks are not written yet."""
        parts = self.partitions.values()
        snapshots = self.snapshots
        return {
            "tenants": len(self.partitions),
            "conversations": sum(len(p.convs) for p in parts),
            "documents": self.documents,
            "dead": sum(p.dead for p in parts),
            "restored": 0 if snapshots is None else snapshots.restored,
            "unwritten": 0 if snapshots is None else snapshots.unwritten,
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
        if found is None and self.snapshots is not None and not self.snapshots.off:
            found = blocking(self._reopen, owner, only)
            if found is not None:  # caught up already, from its snapshot and the store
                self.partitions[owner] = found
                self.documents += len(found)
                self._evict(owner)
                return found
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
                if self.snapshots is not None:
                    self.snapshots.reset(owner, gone)
        counts = {conv: self.store.count(conv) for conv in convs}
        pending = 0
        for conv, n in counts.items():
            state = part.convs.get(conv)
            pending += n - (0 if state is None else state.indexed)
        if pending > INLINE_BATCH or (pending and not self.inline):
            blocking(self._index, owner, part, counts)
        else:
            self._index(owner, part, counts)
        self.documents += len(part) - before
        self._evict(owner)
        return part

    def _index(self, owner: Owner, part: Partition, counts: Mapping[Conv, int]) -> None:
        batches = []
        for conv, n in counts.items():
            state = part.convs.get(conv)
            if state is None:
                reset, fresh = self._read(conv, 0, None)
            else:
                reset, fresh = self._read(conv, state.indexed, state.last, n, state.newest)
            if reset:
                part.drop(conv)
                if self.snapshots is not None:
                    self.snapshots.reset(owner, conv)
            if fresh:
                batches.append((conv, fresh))
        texts = [document_text(m) for _, fresh in batches for m in fresh]
        if not texts:
            return
        vectors = self._vectors(texts)
        start = 0
        for conv, fresh in batches:
            tokens = [tokenize(t) for t in texts[start : start + len(fresh)]]
            meta = [analyze_meta(m) for m in fresh]
            rows = vectors[start : start + len(fresh)]
            part.append(conv, fresh, tokens, rows, meta)
            if self.snapshots is not None:
                state = part.convs[conv]
                at = state.indexed - len(fresh)
                assert state.last is not None
                self.snapshots.appended(owner, conv, at, fresh, tokens, meta, rows, state.last)
            start += len(fresh)

    def _reopen(self, owner: Owner, only: Conv | None) -> Partition | None:
        """The tenant's partition from its snapshot, caught up with the store; None when
        it has none (then it is indexed as usual). Runs on the blocking pool."""
        assert self.snapshots is not None
        stored = self.snapshots.load(owner)
        if not stored:
            return None
        if only is not None:
            convs = [only]
        else:
            convs = [c for c in self.store.conversations(owner) if c.user_id == owner]
        # In the store's order, each conversation whole: numbered as a rebuild numbers it.
        segments: list[tuple[Conv, list[Piece], bytes]] = []
        fresh: list[tuple[int, int, Sequence[Mapping[str, Any]]]] = []
        for conv in convs:
            found = stored.pop(conv, None)
            if found is None:
                reset, tail = self._read(conv, 0, None)
            else:
                reset, tail = self._read(conv, found.count, found.last)
            if reset or found is None:
                self.snapshots.reset(owner, conv)  # what is stored of it (if any) goes
                segments.append((conv, [], b""))
                at = 0
            else:
                segments.append((conv, found.pieces, found.last))
                at = found.count
            if tail:
                fresh.append((len(segments) - 1, at, tail))
        for conv, left in stored.items():
            if only is None:
                self.snapshots.reset(owner, conv)  # no longer in the store
            else:
                segments.append((conv, left.pieces, left.last))  # checked at a full catch-up
        texts = [document_text(m) for _, _, tail in fresh for m in tail]
        vectors = self._vectors(texts)
        offset = 0
        for i, at, tail in fresh:
            conv, pieces, _ = segments[i]
            tokens = [tokenize(t) for t in texts[offset : offset + len(tail)]]
            meta = [analyze_meta(m) for m in tail]
            rows = vectors[offset : offset + len(tail)]
            last = fingerprint(tail[-1])
            piece = Piece(list(tail), Terms.of(tokens), Terms.of(meta), rows)
            segments[i] = (conv, [*pieces, piece], last)
            self.snapshots.appended(owner, conv, at, tail, tokens, meta, rows, last)
            offset += len(tail)
        return build(self.dim, segments)

    def _read(
        self,
        conv: Conv,
        indexed: int,
        last: bytes | None,
        counted: int | None = None,
        newest: Mapping[str, Any] | None = None,
    ) -> tuple[bool, Sequence[Mapping[str, Any]]]:
        """(start over?, the messages to index next) for one conversation of which
        ``indexed`` messages are indexed, the newest with fingerprint ``last`` (or that
        very object, ``newest``: a store handing out read-only messages is checked by
        identity), ``counted`` messages long if the caller counted. A conversation with
        nothing new costs one more read: its newest message, still the one indexed last?"""
        if not indexed:
            return False, self.store.get(conv)
        n = self.store.count(conv) if counted is None else counted
        for _ in range(3):
            if n < indexed:
                break
            tail = self.store.get(conv, last=n - indexed + 1)
            if len(tail) == n - indexed + 1 and (tail[0] is newest or fingerprint(tail[0]) == last):
                return False, tail[1:]
            recounted = self.store.count(conv)
            if recounted == n:
                break  # not a write meanwhile: the conversation was rewritten
            n = recounted
        return True, self.store.get(conv)

    def _vectors(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """The texts' rows, embedded here (the caller is off the scheduler already)."""
        if self.embedder is None or not texts:
            return np.zeros((len(texts), self.dim), dtype=np.float32)
        return as_matrix(self.embedder.embed(texts), self.dim, len(texts))

    def _evict(self, keep: Owner) -> None:
        while self.documents > self.max_documents and len(self.partitions) > 1:
            owner, part = next(iter(self.partitions.items()))
            if owner == keep:
                break
            del self.partitions[owner]
            self.documents -= len(part)
            if self.snapshots is not None:
                self.snapshots.evicted(owner)
