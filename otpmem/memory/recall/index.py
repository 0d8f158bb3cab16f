"""RecallIndex: a supervised server that ranks a store's messages for a query.

It pulls, never pushes: the stores stay as they are, and on every query the index first
catches up on the querying tenant's conversations through the store's public reads
(``conversations(user_id)``, ``count(conv)``, ``get(conv, last=k)``), so a query sees
every ``add`` that returned before it (read-your-writes) with no hook in the write path.
What the index holds is a cache of the store, rebuilt lazily: after a crash of the index,
a restart of the store or a reopen of a LevelDB directory, a tenant's first query
re-indexes that tenant's conversations, and nobody else's.

Per conversation it remembers how many messages it indexed and a digest of the newest one.
On a query: fewer messages than indexed, or a different message at the last indexed
position, means the conversation was cleared (and perhaps rewritten): it is re-indexed
from scratch. A conversation no longer listed for its user was cleared or forgotten: it
leaves the index. Only a clear followed by a rewrite that is at least as long and repeats
the old newest message at the same position, all between two queries, goes unseen; use
``forget``/``forget_user`` (the ``Memory`` facade and ``HybridProvider`` do) to close it.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...actors import CallTimeout, GenServer, NoProcess, blocking, on_exit
from ...actors._node import current
from ...messages import Conv, FrozenDict, short_repr
from ...stores import ChatMemory, SearchHit, StoreError
from ...stores._search import attach_index, detach_index
from ..window import call_ids
from .embedders import Embedder, EmbedderError, HashingEmbedder, as_matrix, noise_floor
from .fusion import Hit, best_first, fused_scores, ranks
from .handle import Owner, RecallIndexHandle, ranked_search
from .lexical import tokenize
from .partition import Partition, document_text, fingerprint

Predicate = Callable[[Mapping[str, Any]], bool]

INLINE_BATCH = 256
"""Catch-ups of more new messages than this run on the blocking pool (never a scheduler)."""

LEXICAL_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
MAX_DOCUMENTS = 5_000_000
"""Past this many indexed messages, the least recently queried tenants are evicted (and
re-indexed on their next query)."""


class RecallIndex(GenServer):
    """Ranked, tenant-safe recall over a store::

        store = MemoryStore.start_link()
        index = RecallIndex.start_link(store)
        store.add(Conv("ann", "c1"), [{"role": "user", "content": "I'm allergic to peanuts"}])
        index.get_relevant("what allergies do I have?", user_id="ann")[0].message

    ``weights=(lexical, vector)`` weighs the two rankings in the fusion: ``(1, 0)`` is BM25
    alone, ``(0, 1)`` the embedder alone. Give it a named handle of a supervised store
    (``MemoryStore.named("memory")``) so its reads follow the store across restarts;
    supervise it with ``child_spec``.
    """

    caller_errors = (ValueError, TypeError, EmbedderError, NoProcess, StoreError, CallTimeout)
    handle_class = RecallIndexHandle

    @classmethod
    def start_link(  # type: ignore[override]
        cls,
        store: ChatMemory,
        embedder: Embedder | None = None,
        name: str | None = None,
        *,
        max_documents: int = MAX_DOCUMENTS,
        weights: tuple[float, float] = (LEXICAL_WEIGHT, VECTOR_WEIGHT),
        start_timeout: float | None = 5.0,
    ) -> RecallIndexHandle:
        """Start an index over ``store`` (default embedder: ``HashingEmbedder()``), linked to
        the caller."""
        args = _checked(store, embedder, max_documents, weights)
        handle = cls._spawn(args, {}, current(), name, None, start_timeout)
        assert isinstance(handle, RecallIndexHandle)
        return handle

    @classmethod
    def start(  # type: ignore[override]
        cls,
        store: ChatMemory,
        embedder: Embedder | None = None,
        name: str | None = None,
        *,
        max_documents: int = MAX_DOCUMENTS,
        weights: tuple[float, float] = (LEXICAL_WEIGHT, VECTOR_WEIGHT),
        start_timeout: float | None = 5.0,
    ) -> RecallIndexHandle:
        """Like ``start_link``, without the link (nobody is told when it exits)."""
        args = _checked(store, embedder, max_documents, weights)
        handle = cls._spawn(args, {}, None, name, None, start_timeout)
        assert isinstance(handle, RecallIndexHandle)
        return handle

    @classmethod
    def child_spec(
        cls,
        store: ChatMemory,
        name: str,
        embedder: Embedder | None = None,
        child_id: str | None = None,
    ) -> Any:
        """A ChildSpec for a supervisor: the index named ``name`` over ``store``."""
        from ...supervisors import ChildSpec

        return ChildSpec(child_id or name, start=lambda: cls.start_link(store, embedder, name))

    def init(
        self,
        store: ChatMemory,
        embedder: Embedder,
        max_documents: int,
        weights: tuple[float, float] = (LEXICAL_WEIGHT, VECTOR_WEIGHT),
    ) -> None:
        self.store = store
        self.weights = (float(weights[0]), float(weights[1]))
        self.embedder = embedder
        self.dim = int(embedder.dim)
        # HashingEmbedder is a few µs a message: small catch-ups stay inline. Anything
        # else (a model, a server) may block: it always runs on the blocking pool.
        self.inline = isinstance(embedder, HashingEmbedder)
        self.floor = noise_floor(embedder)
        self.max_documents = max_documents
        self.partitions: OrderedDict[Owner, Partition] = OrderedDict()
        self._attach(store)

    def _attach(self, store: ChatMemory) -> None:
        """Answer ``store.search`` from this incarnation until it exits (see stores._search)."""
        me = RecallIndexHandle(current())

        def search(
            query: str,
            owner: Owner,
            only: Conv | None,
            limit: int,
            mode: str,
            timeout: float | None,
        ) -> list[SearchHit]:
            return ranked_search(me, query, owner, only, limit, mode=mode, timeout=timeout)

        try:
            token = attach_index(store, search)
        except ValueError:
            return  # not a store handle: its search (if any) is not StoreClient's
        on_exit(lambda: detach_index(token))

    def handle_call(self, message: Any) -> Any:
        if not isinstance(message, tuple) or not message:
            raise ValueError(f"RecallIndex does not understand {short_repr(message)}")
        kind, *args = message
        if kind == "relevant":
            owner, only, query, limit, floor, predicate = args
            return self._relevant(owner, only, query, limit, floor, predicate)
        if kind == "lexical":
            owner, only, query, limit = args
            return self._lexical(owner, only, query, limit)
        if kind == "substring":
            owner, only, query, limit = args
            return self._substring(owner, only, query, limit)
        if kind == "group":
            conv, position = args
            return self._group(conv, position)
        if kind == "refresh":
            owner, only = args
            part = self._catch_up(owner, only)
            if only is None:
                return len(part)
            state = part.convs.get(only)
            return 0 if state is None else state.indexed
        if kind == "forget":
            (conv,) = args
            holder = self.partitions.get(conv.user_id)
            if holder is not None:
                holder.drop(conv)
            return None
        if kind == "forget_user":
            (owner,) = args
            self.partitions.pop(owner, None)
            return None
        if kind == "stats":
            return {
                "tenants": len(self.partitions),
                "conversations": sum(len(p.convs) for p in self.partitions.values()),
                "documents": sum(len(p) for p in self.partitions.values()),
                "dead": sum(p.dead for p in self.partitions.values()),
                "embedder": repr(self.embedder),
            }
        raise ValueError(f"RecallIndex does not understand {short_repr(message)}")

    # -- queries ------------------------------------------------------------------------

    def _mask(self, part: Partition, only: Conv | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
        alive = part.live_mask()
        return alive if only is None else part.conv_mask(only) & alive

    def _relevant(
        self,
        owner: Owner,
        only: Conv | None,
        query: str,
        limit: int,
        floor: float,
        predicate: Predicate | None,
    ) -> list[Hit]:
        part = self._catch_up(owner, only)
        if not len(part):
            return []
        mask = self._mask(part, only)
        lexical_weight, vector_weight = self.weights
        rankings = []
        if lexical_weight:
            lexical = part.lexical.scores(tokenize(query), mask)
            rankings.append((ranks(lexical), lexical_weight))
        if vector_weight:
            vector = part.similarity(self._embed([query])[0])
            vector[~mask | (vector < self.floor)] = 0.0
            rankings.append((ranks(vector), vector_weight))
        fused = fused_scores(rankings)
        # A partial sort first; a filter that refuses most of it falls back to all of them.
        first = best_first(fused, floor, None if predicate is not None else limit)
        hits: list[Hit] = []
        for doc in first:
            message = part.messages[doc]
            if predicate is not None and not predicate(message):
                continue
            conv, position = part.where(doc)
            hits.append(Hit(_copy(message), round(float(fused[doc]), 6), conv, position))
            if len(hits) == limit:
                break
        return hits

    def _lexical(self, owner: Owner, only: Conv | None, query: str, limit: int) -> list[SearchHit]:
        part = self._catch_up(owner, only)
        words = tokenize(query)
        if not len(part) or not words:
            return []
        scores = part.lexical.scores(words, self._mask(part, only)).astype(np.float64)
        hits = []
        for doc in best_first(scores, 0.0, limit):
            conv, position = part.where(doc)
            score = round(float(scores[doc]), 6)
            hits.append(SearchHit(conv, position, _copy(part.messages[doc]), score))
        return hits

    def _substring(
        self, owner: Owner, only: Conv | None, query: str, limit: int
    ) -> list[SearchHit]:
        # bx-ai's semantics (case-insensitive substring, most occurrences first, then
        # newest), over this tenant's indexed messages: no store scan.
        part = self._catch_up(owner, only)
        needle = query.casefold()
        mask = self._mask(part, only)
        found = []
        for doc in np.flatnonzero(mask).tolist():
            message = part.messages[doc]
            score = document_text(message).casefold().count(needle)
            if score:
                conv, position = part.where(doc)
                found.append((score, position, doc, conv, message))
        found.sort(key=lambda f: (-f[0], -f[1], -f[2]))
        return [SearchHit(c, p, _copy(m), s) for s, p, _, c, m in found[:limit]]

    def _group(self, conv: Conv, position: int) -> list[tuple[int, dict[str, Any]]]:
        part = self._catch_up(conv.user_id, conv)
        state = part.convs.get(conv)
        if state is None or position >= state.indexed:
            return []
        messages = [part.messages[d] for d in state.docs]
        start = position
        while start > 0 and messages[start].get("role") == "tool":
            start -= 1  # a group's results follow its call without a gap
        end = start + 1
        asked = call_ids(messages[start])
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        if messages[position].get("role") == "tool" and (
            messages[position].get("tool_call_id") not in asked
        ):
            return []  # an orphaned result: never sent, so never recalled
        span = [
            (p, messages[p])
            for p in range(start, end)
            if p == start or messages[p].get("tool_call_id") in asked
        ]
        return [(p, _copy(m)) for p, m in span]

    def _embed(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        if self.inline:
            vectors = self.embedder.embed(texts)
        else:
            vectors = blocking(self.embedder.embed, texts)
        return as_matrix(vectors, self.dim, len(texts))

    # -- catching up ----------------------------------------------------------------------

    def _catch_up(self, owner: Owner, only: Conv | None) -> Partition:
        """Bring the tenant's partition (or one conversation of it) level with the store."""
        found = self.partitions.get(owner)
        part = found if found is not None else Partition(self.dim)
        self.partitions[owner] = part
        self.partitions.move_to_end(owner)
        if only is not None:
            convs = [only]
        else:
            convs = [c for c in self.store.conversations(owner) if c.user_id == owner]
            listed = set(convs)
            for gone in [c for c in part.convs if c not in listed]:
                part.drop(gone)  # cleared or forgotten in the store
        pending = 0
        for conv in convs:
            state = part.convs.get(conv)
            pending += self.store.count(conv) - (0 if state is None else state.indexed)
        if pending > INLINE_BATCH or (pending and not self.inline):
            blocking(self._index, part, convs)
        else:
            self._index(part, convs)
        self._evict(owner)
        return part

    def _index(self, part: Partition, convs: Sequence[Conv]) -> None:
        batches = []
        for conv in convs:
            reset, fresh = self._read(part, conv)
            if reset:
                part.drop(conv)
            if fresh:
                batches.append((conv, fresh))
        texts = [document_text(m) for _, fresh in batches for m in fresh]
        if not texts:
            return
        vectors = as_matrix(self.embedder.embed(texts), self.dim, len(texts))
        start = 0
        for conv, fresh in batches:
            tokens = [tokenize(t) for t in texts[start : start + len(fresh)]]
            part.append(conv, fresh, tokens, vectors[start : start + len(fresh)])
            start += len(fresh)

    def _read(self, part: Partition, conv: Conv) -> tuple[bool, Sequence[Mapping[str, Any]]]:
        """(start over?, the messages to index next) for one conversation."""
        state = part.convs.get(conv)
        if state is None:
            return False, self.store.get(conv)
        for _ in range(3):
            n = self.store.count(conv)
            if n < state.indexed:
                break
            tail = self.store.get(conv, last=n - state.indexed + 1)
            if self.store.count(conv) != n:
                continue  # written meanwhile: the tail is not the one counted
            if len(tail) == n - state.indexed + 1 and fingerprint(tail[0]) == state.last:
                return False, tail[1:]
            break
        return True, self.store.get(conv)

    def _evict(self, keep: Owner) -> None:
        total = sum(len(p) for p in self.partitions.values())
        while total > self.max_documents and len(self.partitions) > 1:
            owner, part = next(iter(self.partitions.items()))
            if owner == keep:
                break
            del self.partitions[owner]
            total -= len(part)


def _checked(
    store: object, embedder: object, max_documents: object, weights: object
) -> tuple[ChatMemory, Embedder, int, tuple[float, float]]:
    """``start_link``'s arguments, checked in the caller's thread (default embedder filled)."""
    if not isinstance(store, ChatMemory):
        raise TypeError(f"store must implement ChatMemory, got {short_repr(store)}")
    if embedder is None:
        embedder = HashingEmbedder()
    elif not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must have dim and embed(texts), got {short_repr(embedder)}")
    if type(max_documents) is not int or max_documents < 1:
        raise ValueError(f"max_documents must be an int >= 1, got {max_documents!r}")
    if (
        not isinstance(weights, tuple)
        or len(weights) != 2
        or not all(isinstance(w, int | float) and w >= 0 for w in weights)
        or not sum(weights) > 0
    ):
        raise ValueError(
            f"weights must be (lexical, vector) numbers >= 0, not both 0, got {weights!r}"
        )
    return store, embedder, max_documents, (float(weights[0]), float(weights[1]))


def _copy(message: Mapping[str, Any]) -> dict[str, Any]:
    # A stored message is read-only (MemoryStore) or the index's own (LevelDB): a caller
    # gets one it may change without changing what the index holds.
    if isinstance(message, FrozenDict):
        return message
    return copy.deepcopy(dict(message))
