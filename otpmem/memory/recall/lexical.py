"""BM25 over a growing set of documents: exact scores after every add and every delete.

The formula is Lucene's (and bm25s's default, ``method="lucene"``), so the two agree to
float precision on the same tokens (a test checks it against bm25s)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d, q) = sum over tokens t of q:  idf(t) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))

with N the live documents, df(t) the live documents holding t, |d| the document's length
in tokens and avgdl the mean of |d| over live documents. bm25s bakes idf and avgdl into an
eager matrix when it indexes a static corpus; a conversation grows by one message at a
time, and a read must see every write, so here the statistics are kept as counts and the
score is computed at query time from postings (``array`` buffers read by numpy without a
copy). A deleted document leaves the statistics at once and its postings at the next
``compact``.
"""

from __future__ import annotations

import math
import re
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import Stemmer

TOKEN = re.compile(r"(?u)\b\w\w+\b")

ANALYZER_VERSION = 3
"""Bump when ``tokenize`` gives other terms for the same text: persisted recall snapshots
hold its terms, and one made by another version is ignored (see ``recall.snapshots``)."""

_LUCENE_STOP = (
    "a an and are as at be but by for if in into is it no not of on or such that the "
    "their then there these they this to was will with"
)
LUCENE_STOPWORDS = frozenset(_LUCENE_STOP.split())
"""Lucene's English stop set, the one bm25s uses for ``stopwords="en"``."""

_FUNCTION_WORDS = (
    "about above after again against all am any because been before being below between "
    "both can could did do does doing down during each few from further had has have "
    "having he her here hers herself him himself his how i its itself just me more most my "
    "myself nor now off once only other our ours ourselves out over own same she should so "
    "some than those through too under until up very we were what when where which while "
    "who whom why would you your yours yourself yourselves im ive id ill dont didnt doesnt "
    "isnt wasnt cant thats whats"
)
STOPWORDS = LUCENE_STOPWORDS | frozenset(_FUNCTION_WORDS.split())
"""Lucene's set and the other English function words ("what", "do", "my"...)."""

QUERY_STOPWORDS = STOPWORDS
"""What a query drops before it is scored: a question is mostly function words ("what do I
do for a living?"). Documents keep every word: their function words cost nothing when no
query asks for them, and "may" the month or "us" the country stay findable. Measured on
four conversations of benchmarks/recall_eval, recall@10: 0.587 with this set dropped from
queries, 0.528 with nothing dropped, 0.518 with Lucene's short set; dropping it from
documents too, 0.582."""

_stemmers = threading.local()


def _stemmer() -> Any:
    # PyStemmer's Stemmer is not safe to share between threads (catch-ups run on the
    # blocking pool as well as on the index's own thread): one per thread, each with
    # the library's own cache of stemmed words.
    found = getattr(_stemmers, "english", None)
    if found is None:
        found = _stemmers.english = Stemmer.Stemmer("english", 1 << 16)
    return found


def stem(word: str) -> str:
    """Snowball's English stem of a lowercased word ("living" -> "live", "moved" ->
    "move"), by PyStemmer, the Snowball project's C library, then ``fold``-ed."""
    return fold(_stemmer().stemWord(word))


def fold(stemmed: str) -> str:
    """A Snowball stem with its final -i folded away when five letters or more remain.

    Snowball ends a noun in -y with i and leaves its adjective the bare root ("allergy",
    "allergies" -> "allergi"; "allergic" -> "allerg"), so "which allergies do I have?"
    never found "I'm allergic to peanuts". Short stems keep their -i ("parti" is not
    "part", "stori" not "stor"). Measured on benchmarks/recall_eval: recall unchanged
    (0.601 at 10 with and without), the "allergic" question answered.
    """
    if len(stemmed) > 5 and stemmed[-1] == "i":
        return stemmed[:-1]
    return stemmed


def tokenize(text: str, stopwords: frozenset[str] = frozenset(), stemmed: bool = True) -> list[str]:
    """Lowercased words of two or more characters (bm25s's pattern), minus ``stopwords``,
    then Snowball-stemmed; apostrophes go first, so "I'm" is "im" and "Anna's" "annas"."""
    words = TOKEN.findall(text.lower().replace("'", "").replace("\u2019", ""))
    if stopwords:
        words = [t for t in words if t not in stopwords]
    if not stemmed:
        return words
    return [fold(w) for w in _stemmer().stemWords(words)]


def query_terms(text: str) -> list[str]:
    """A query's terms: ``tokenize`` without ``QUERY_STOPWORDS``; all of them when the
    query holds nothing else ("who are you?" still finds something)."""
    terms = tokenize(text, QUERY_STOPWORDS)
    return terms if terms else tokenize(text)


class Posting(NamedTuple):
    """A term's postings: the documents it is in, and how often it is in each."""

    docs: array[int]
    tfs: array[float]


class LexicalIndex:
    """Documents are numbered 0, 1, 2... in the order added; ``remove`` takes one out.

    ::

        index = LexicalIndex()
        index.add(tokenize("my sister lives in Lyon"))
        ids, scores = index.scores(tokenize("where does my sister live"), np.ones(1, bool))
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self.postings: dict[str, Posting] = {}
        self.df: Counter[str] = Counter()
        self.lengths: array[float] = array("f")
        self.live = 0
        self.total_length = 0

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, tokens: Sequence[str]) -> int:
        """Index one document; return its number."""
        doc = len(self.lengths)
        # A plain dict, not a Counter: a chat turn is a dozen words, and Counter's
        # construction was most of an add (most meta documents are empty: no work at all).
        counts: dict[str, int] = {}
        for term in tokens:
            counts[term] = counts.get(term, 0) + 1
        postings, df = self.postings, self.df
        for term, tf in counts.items():
            posting = postings.get(term)
            if posting is None:
                posting = postings[term] = Posting(array("i"), array("f"))
            posting.docs.append(doc)
            posting.tfs.append(tf)
            df[term] += 1
        self.lengths.append(len(tokens))
        self.live += 1
        self.total_length += len(tokens)
        return doc

    def remove(self, tokens: Sequence[str]) -> None:
        """Take a document (given by its tokens) out of the statistics; the caller masks it."""
        self.df.subtract(set(tokens))
        self.live -= 1
        self.total_length -= len(tokens)

    def scores(self, query: Iterable[str], alive: npt.NDArray[np.bool_]) -> npt.NDArray[np.float32]:
        """BM25 of every document for ``query`` (0 for deleted ones and non-matches)."""
        n = len(self.lengths)
        out = np.zeros(n, dtype=np.float32)
        if not self.live or not n:
            return out
        lengths = np.frombuffer(self.lengths, dtype=np.float32)
        avgdl = self.total_length / self.live
        norm = self.k1 * (1 - self.b + self.b * lengths / avgdl) if avgdl else None
        for term in query:
            posting = self.postings.get(term)
            df = self.df.get(term, 0)
            if posting is None or df <= 0:
                continue
            idf = math.log(1 + (self.live - df + 0.5) / (df + 0.5))
            ids = np.frombuffer(posting.docs, dtype=np.int32)
            tfs = np.frombuffer(posting.tfs, dtype=np.float32)
            assert norm is not None  # a posting means a token, so avgdl > 0
            # A term's postings name each document once: plain fancy-index add is exact.
            out[ids] += np.float32(idf) * tfs / (tfs + norm[ids])
        out[~alive[:n]] = 0.0
        return out
