"""RecallIndex: a supervised server that ranks a store's messages for a query.

It pulls, never pushes: on every query it first brings the querying tenant level with the
store through the store's public reads (``tenants.Tenants``: read-your-writes with no hook
in the write path, rebuilt lazily after any crash, restart or reopen), then ranks that
tenant's partition alone. It also answers the store's own ``search`` while it runs
(``otpmem.stores._search``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ...actors import CallTimeout, GenServer, NoProcess, on_exit
from ...actors._node import current
from ...messages import Conv, FrozenDict, short_repr
from ...stores import ChatMemory, SearchHit, StoreError
from ...stores._search import attach_index, detach_index
from ..window import call_ids
from .embedders import Embedder, EmbedderError, HashingEmbedder, noise_floor
from .fusion import Hit, best_first, fused_scores, ranks
from .handle import Owner, RecallIndexHandle, ranked_search
from .lexical import tokenize
from .partition import Partition, document_text
from .tenants import MAX_DOCUMENTS, Tenants

Predicate = Callable[[Mapping[str, Any]], bool]

LEXICAL_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0


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
        self.weights = (float(weights[0]), float(weights[1]))
        self.embedder = embedder
        self.floor = noise_floor(embedder)
        self.tenants = Tenants(store, embedder, max_documents)
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
            owner, only, query, limit, floor, predicate, distinct = args
            return self._relevant(owner, only, query, limit, floor, predicate, distinct)
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
            part = self.tenants.catch_up(owner, only)
            if only is None:
                return len(part)
            state = part.convs.get(only)
            return 0 if state is None else state.indexed
        if kind == "forget":
            (conv,) = args
            self.tenants.forget(conv)
            return None
        if kind == "forget_user":
            (owner,) = args
            self.tenants.forget_user(owner)
            return None
        if kind == "stats":
            return {**self.tenants.stats(), "embedder": repr(self.embedder)}
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
        distinct: bool,
    ) -> list[Hit]:
        part = self.tenants.catch_up(owner, only)
        if not len(part):
            return []
        mask = self._mask(part, only)
        lexical_weight, vector_weight = self.weights
        rankings = []
        if lexical_weight:
            lexical = part.lexical.scores(tokenize(query), mask)
            rankings.append((ranks(lexical), lexical_weight))
        if vector_weight:
            vector = part.similarity(self.tenants.embed([query])[0])
            vector[~mask | (vector < self.floor)] = 0.0
            rankings.append((ranks(vector), vector_weight))
        fused = fused_scores(rankings)
        # A partial sort of a few times the limit first; when a filter or the duplicates
        # refuse too much of it, every candidate, best first.
        wanted = None if predicate is not None else limit * (4 if distinct else 1)
        hits = self._pick(part, fused, best_first(fused, floor, wanted), limit, predicate, distinct)
        more = wanted is not None and np.count_nonzero((fused > 0) & (fused >= floor)) > wanted
        if len(hits) < limit and more:
            hits = self._pick(part, fused, best_first(fused, floor), limit, predicate, distinct)
        return hits

    @staticmethod
    def _pick(
        part: Partition,
        fused: np.ndarray[Any, np.dtype[np.float64]],
        ranked: list[int],
        limit: int,
        predicate: Predicate | None,
        distinct: bool,
    ) -> list[Hit]:
        """The first ``limit`` of ``ranked`` the filter keeps, each (role, text) once."""
        hits: list[Hit] = []
        seen: set[tuple[Any, str]] = set()
        for doc in ranked:
            message = part.messages[doc]
            if predicate is not None and not predicate(message):
                continue
            if distinct:
                key = (message.get("role"), document_text(message))
                if key in seen:
                    continue
                seen.add(key)
            conv, position = part.where(doc)
            hits.append(Hit(_copy(message), round(float(fused[doc]), 6), conv, position))
            if len(hits) == limit:
                break
        return hits

    def _lexical(self, owner: Owner, only: Conv | None, query: str, limit: int) -> list[SearchHit]:
        part = self.tenants.catch_up(owner, only)
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
        part = self.tenants.catch_up(owner, only)
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
        part = self.tenants.catch_up(conv.user_id, conv)
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
