"""What a RecallIndex computes: the rankings over its tenants' partitions (numpy).

The server (``index``) loads this module on its first query, so starting an index (an
application does at ``otpmem.start()``) costs no numpy import.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ...messages import Conv, FrozenDict, short_repr
from ...stores import ChatMemory, Scope, SearchHit
from ..window import call_ids
from .base import Embedder, FilterFailed, Hit, noise_floor
from .embedders import HashingEmbedder
from .fusion import best_first, fused_scores, ranks
from .handle import Owner
from .lexical import query_terms
from .partition import Partition, document_text
from .tenants import Tenants

Predicate = Callable[[Mapping[str, Any]], bool]

FUSED = 200
"""How deep each ranking is fused (Cormack et al. fuse the top of each list, not all of
it): a query then costs a partial sort, whatever the tenant holds; a filter that refuses
that many falls back to every candidate."""


class Engine:
    """The index's state and its queries; runs on the index's process only."""

    def __init__(
        self,
        store: ChatMemory,
        embedder: Embedder | None,
        max_documents: int,
        weights: tuple[float, float],
        around: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> None:
        self.weights = weights
        self.around = around
        # Without a vector ranking, nothing is embedded and no vector held (a 256-float
        # row per message is most of what an index would otherwise cost).
        self.embedder: Embedder | None = None
        if weights[1]:
            self.embedder = embedder if embedder is not None else HashingEmbedder()
        self.floor = noise_floor(self.embedder) if self.embedder is not None else 0.0
        self.tenants = Tenants(store, self.embedder, max_documents)

    def refresh(self, owner: Owner, only: Conv | None) -> int:
        """Catch up now; the tenant's (or the conversation's) indexed message count."""
        part = self.tenants.catch_up(owner, only)
        if only is None:
            return len(part)
        state = part.convs.get(only)
        return 0 if state is None else state.indexed

    def stats(self) -> dict[str, Any]:
        """What is held, and by which embedder."""
        return {**self.tenants.stats(), "embedder": repr(self.embedder)}

    def _mask(self, part: Partition, only: Conv | None) -> np.ndarray[Any, np.dtype[np.bool_]]:
        alive = part.live_mask()
        return alive if only is None else part.conv_mask(only) & alive

    def _members(self, scopes: tuple[Scope, ...]) -> list[Conv] | None:
        """The conversations of some scopes (None: a user's own is among them, so all)."""
        if any(s.is_user for s in scopes):
            return None
        store: Any = self.tenants.store
        return sorted({c for s in scopes for c in store.scope_conversations(s)})

    def relevant(
        self,
        owner: Owner,
        only: Conv | tuple[Scope, ...] | None,
        query: str,
        limit: int,
        floor: float,
        predicate: Predicate | None,
        distinct: bool,
    ) -> list[Hit]:
        """The fused ranking of the tenant (see ``fusion``), filtered, copies once."""
        conv = only if isinstance(only, Conv) else None
        members = None if only is None or conv is not None else self._members(only)  # type: ignore[arg-type]
        if members == []:
            return []  # scopes no conversation has joined
        part = self.tenants.catch_up(owner, conv)
        if not len(part):
            return []
        mask = self._mask(part, conv)
        if members is not None:
            mask = mask & part.conv_mask(*members)  # live_mask is shared: never in place
        # A partial sort of a few times the limit first; when a filter or the duplicates
        # refuse too much of it, every candidate, best first.
        wanted = limit * (4 if distinct else 1)
        depth = max(FUSED, wanted)
        fused = self._fused(part, mask, query, depth)
        first = None if predicate is not None else wanted
        hits = self._pick(part, fused, best_first(fused, floor, first), limit, predicate, distinct)
        if len(hits) < limit:
            candidates = np.count_nonzero((fused > 0) & (fused >= floor))
            if candidates >= depth:  # a ranking was cut: rank every document
                fused = self._fused(part, mask, query, None)
            if candidates >= depth or (first is not None and candidates > first):
                hits = self._pick(part, fused, best_first(fused, floor), limit, predicate, distinct)
        return hits

    def _fused(
        self, part: Partition, mask: npt.NDArray[np.bool_], query: str, top: int | None
    ) -> npt.NDArray[np.float64]:
        """The fused scores of the tenant's documents, each ranking cut at ``top``."""
        lexical_weight, vector_weight = self.weights
        rankings = []
        if lexical_weight:
            lexical = part.text_scores(query_terms(query), mask, self.around)
            rankings.append((ranks(lexical, top), lexical_weight))
        if vector_weight:
            vector = part.similarity(self.tenants.embed([query])[0])
            vector[~mask | (vector < self.floor)] = 0.0
            rankings.append((ranks(vector, top), vector_weight))
        return fused_scores(rankings)

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
            if predicate is not None and not _kept(predicate, message):
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

    def lexical(self, owner: Owner, only: Conv | None, query: str, limit: int) -> list[SearchHit]:
        """BM25 alone, for ``store.search``: the score is the BM25 score."""
        part = self.tenants.catch_up(owner, only)
        words = query_terms(query)
        if not len(part) or not words:
            return []
        scores = part.lexical.scores(words, self._mask(part, only)).astype(np.float64)
        hits = []
        for doc in best_first(scores, 0.0, limit):
            conv, position = part.where(doc)
            score = round(float(scores[doc]), 6)
            hits.append(SearchHit(conv, position, _copy(part.messages[doc]), score))
        return hits

    def substring(self, owner: Owner, only: Conv | None, query: str, limit: int) -> list[SearchHit]:
        """bx-ai's substring search over the tenant's indexed messages."""
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

    def group(self, conv: Conv, position: int) -> list[tuple[int, dict[str, Any]]]:
        """The message at ``position`` alone, or its whole tool group; [] for an orphan."""
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


def _kept(predicate: Predicate, message: Mapping[str, Any]) -> bool:
    """Whether the caller's filter keeps ``message``. The filter is the caller's code, run
    in the index's process: what it raises is the caller's error (a ``ValueError`` that
    names it), never the index's crash."""
    try:
        return bool(predicate(message))
    except Exception as exc:
        raise FilterFailed(f"the filter raised {short_repr(exc)}") from exc


def _copy(message: Mapping[str, Any]) -> dict[str, Any]:
    # A stored message is read-only (MemoryStore) or the index's own (LevelDB): a caller
    # gets one it may change without changing what the index holds.
    if isinstance(message, FrozenDict):
        return message
    return copy.deepcopy(dict(message))
