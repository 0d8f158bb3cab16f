"""Ranking: reciprocal-rank fusion of the lexical and the vector ranking, and filters.

For a document d ranked r_lex(d) by BM25 and r_vec(d) by cosine (1 = best; a ranking
counts only documents with a positive score there)::

    fused(d) = (w_lex / (K + r_lex(d)) + w_vec / (K + r_vec(d))) / ((w_lex + w_vec) / (K + 1))

with K = 60 (Cormack et al.'s constant) and a term left out where d is not ranked (BM25
0, or a cosine under the embedder's noise floor). The
denominator makes the best possible document (first in both) score exactly 1.0, so scores
lie in (0, 1], compare within a call and across calls, and ``min_score`` has one meaning
whatever the embedder. Ranks, not raw scores, are fused: BM25 is unbounded and cosine is
not, and ranks need no calibration between them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .base import Filter, Hit, check_filter

RRF_K = 60

__all__ = ["RRF_K", "Filter", "Hit", "best_first", "check_filter", "fused_scores", "ranks"]


def ranks(scores: npt.NDArray[np.float32], top: int | None = None) -> npt.NDArray[np.float64]:
    """Each document's 1-based rank by ``scores`` (0 where its score is not positive);
    with ``top``, only the best ``top`` are ranked (a partial sort: what a query's cost
    must not grow with), the rest count as unranked.

    Ties go to the newer document (the higher number): recency breaks what text cannot.
    """
    positive = np.flatnonzero(scores > 0)
    if top is not None and len(positive) > top:
        kth = np.partition(scores[positive], len(positive) - top)[len(positive) - top]
        positive = positive[scores[positive] >= kth]
    order = positive[np.lexsort((-positive, -scores[positive]))]
    result = np.zeros(len(scores), dtype=np.float64)
    result[order] = np.arange(1, len(order) + 1)
    return result


def fused_scores(
    rankings: list[tuple[npt.NDArray[np.float64], float]], k: int = RRF_K
) -> npt.NDArray[np.float64]:
    """Reciprocal-rank fusion of (ranks, weight) pairs, scaled so the best possible is 1."""
    best = sum(weight for _, weight in rankings) / (k + 1)
    total = np.zeros(len(rankings[0][0]), dtype=np.float64)
    for ranked, weight in rankings:
        total += np.where(ranked > 0, weight / (k + ranked), 0.0)
    result: npt.NDArray[np.float64] = total / best
    return result


def best_first(scores: npt.NDArray[np.float64], floor: float, k: int | None = None) -> list[int]:
    """Documents scoring above 0 and at least ``floor``, best first, newer first on ties;
    only the best ``k`` of them when ``k`` is given (a partial sort: cheaper)."""
    chosen = np.flatnonzero((scores > 0) & (scores >= floor))
    if k is not None and len(chosen) > k:
        # Keep every document tied with the k-th, so the tie rule still decides.
        kth = np.partition(scores[chosen], len(chosen) - k)[len(chosen) - k]
        chosen = chosen[scores[chosen] >= kth]
    order: list[int] = chosen[np.lexsort((-chosen, -scores[chosen]))].tolist()
    return order[:k] if k is not None else order
