"""A user's facts ranked for a question: BM25 over each fact's key and value, per user,
kept while the store's stamp of the user's facts stays.

::

    ltm.get_relevant("what food allergy do I have", user_id="ann")
    # [FactHit(fact=Fact("ann", "allergy", "peanuts", ...), score=1.2), ...]

Facts and questions are analysed by recall's tokenizer (``otpmem.memory.recall.lexical``)
and scored by its BM25 (Lucene's formula), the user's own facts being the corpus: a key
counts as words (``favorite_food`` is "favorite food"), a rare word weighs more than a
common one, and a fact that shares no word with the question is not returned.

What a question costs: one read of the user's stamp (``FactStamps.facts_stamp``, a point
read in otpmem's stores) and a score over the user's cached index. Only a write that
changed the user's facts moves the stamp; the next question then reads the facts again
and tokenizes only the facts whose key or value changed. Without stamps (a store of one's
own) every question reads the facts and compares their versions: correct, O(facts).

The cache holds at most ``max_cached`` facts over all users, the least recently asked user
going first; a user with more facts than that is ranked without being kept. Entries are
keyed by the exact user id, and an entry holds only that user's facts.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from ...messages import short_repr
from ...stores import Fact, FactStamps
from ...stores.scopes import Who, canonical, owner_key

MAX_CACHED = 50_000
"""How many facts, over all users, a LongTermMemory keeps indexed: about 0.6 KiB each
beside the facts themselves (measured in benchmarks/bench_longterm.py), some 30 MB full."""
_KEY_WORDS = re.compile(r"[_\W]+|(?<=[a-z])(?=[A-Z])")
Tokens = dict[str, tuple[str, list[str]]]


class FactHit(NamedTuple):
    """A fact found for a question, and its BM25 score (higher is more relevant)."""

    fact: Fact
    score: float


def fact_text(fact: Fact) -> str:
    """What a fact is searched by: its key as words, then its value."""
    return f"{_KEY_WORDS.sub(' ', fact.key)} {fact.value}"


def newest_first(facts: Sequence[Fact]) -> list[Fact]:
    """The most recently updated first; ties by key."""
    return sorted(facts, key=lambda f: (-f.updated_at, f.key))


def check_relevant(query: object, limit: object, min_score: object) -> tuple[str, int, float]:
    """``get_relevant``'s query, limit and min_score, checked; ``ValueError`` names the field."""
    if type(query) is not str:
        raise ValueError(f"a query must be a str, got {short_repr(query)}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {short_repr(limit)}")
    if isinstance(min_score, bool) or not isinstance(min_score, int | float):
        raise ValueError(f"min_score must be a number >= 0, got {short_repr(min_score)}")
    if not 0.0 <= float(min_score) < float("inf"):
        raise ValueError(f"min_score must be a finite number >= 0 (BM25), got {min_score!r}")
    return query, limit, float(min_score)


class UserFacts:
    """One user's facts as read under one state of the store, and their index once a
    question needed it (built once, then only read: safe to share between threads)."""

    __slots__ = ("_index", "_lock", "_reuse", "facts", "newest", "state")

    def __init__(
        self, user_id: Who, state: Hashable, facts: Sequence[Fact], before: UserFacts | None
    ) -> None:
        self.state = state
        self.facts = tuple(f for f in facts if f.user_id == user_id)  # never another's
        self.newest = tuple(newest_first(self.facts))
        # The tokens of the last index built for this user, to tokenize only what changed;
        # nothing is tokenized (nor numpy imported) until a question needs the index.
        self._reuse: Tokens = {} if before is None else before.tokens()
        self._index: Any = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.facts)

    def tokens(self) -> Tokens:
        """Each fact's (value, tokens) by key: of the index, or of the one before it."""
        index = self._index
        return self._reuse if index is None else index[2]

    def rank(self, query: str, limit: int, floor: float) -> list[FactHit]:
        """The ``limit`` facts scoring above 0 and at least ``floor``, best first; ties go
        to the more recently updated, then by key."""
        from ..recall.lexical import tokenize

        terms = tokenize(query)
        if not terms or not self.facts:
            return []
        import numpy as np

        lexical, alive, _ = self._built()
        scores = lexical.scores(terms, alive)
        chosen = np.flatnonzero((scores > 0) & (scores >= floor))
        if len(chosen) > limit:
            # Keep every fact tied with the limit-th, so the tie rule still decides.
            kth = np.partition(scores[chosen], len(chosen) - limit)[len(chosen) - limit]
            chosen = chosen[scores[chosen] >= kth]
        facts = self.facts
        order = sorted(
            chosen.tolist(), key=lambda i: (-scores[i], -facts[i].updated_at, facts[i].key)
        )
        return [FactHit(facts[i], float(scores[i])) for i in order[:limit]]

    def _built(self) -> tuple[Any, Any, Tokens]:
        index = self._index
        if index is None:
            with self._lock:  # one build per state, however many ask at once
                index = self._index
                if index is None:
                    index = self._index = _build(self.facts, self._reuse)
                    self._reuse = {}
        return index  # type: ignore[no-any-return]


def _build(facts: Sequence[Fact], reuse: Tokens) -> tuple[Any, Any, Tokens]:
    """(the BM25 index of ``facts``, its all-alive mask, their tokens by key)."""
    import numpy as np

    from ..recall.lexical import LexicalIndex, tokenize  # numpy comes with it

    tokens: Tokens = {}
    lexical = LexicalIndex()
    for fact in facts:
        seen = reuse.get(fact.key)
        if seen is None or seen[0] != fact.value:
            seen = (fact.value, tokenize(fact_text(fact)))
        tokens[fact.key] = seen
        lexical.add(seen[1])
    return lexical, np.ones(len(facts), dtype=bool), tokens


class FactIndex:
    """Per-user ranked facts of one store, cached while each user's stamp stays.

    ::

        index = FactIndex(store)
        index.get_relevant("what food allergy do I have", "ann", limit=5)
    """

    def __init__(self, store: Any, max_cached: int = MAX_CACHED) -> None:
        if type(max_cached) is not int or max_cached < 0:
            raise ValueError(f"max_cached must be an int >= 0, got {short_repr(max_cached)}")
        self.store = store
        self.stamped = isinstance(store, FactStamps)
        self.max_cached = max_cached
        self.reads = 0
        """How many times a user's facts were read and tokenized (a question that found
        them cached reads none): what the cost tests count."""
        self._lock = threading.Lock()
        self._users: OrderedDict[str, UserFacts] = OrderedDict()
        self._cached = 0

    def __repr__(self) -> str:
        return f"FactIndex({self.store!r}, {len(self._users)} users, {self._cached} facts)"

    def facts(self, user_id: Who) -> UserFacts:
        """The facts of a user (or a Scope) as they stand now: the cached ones while the
        stamp holds."""
        who, owner = canonical(user_id), owner_key(user_id)
        stamp = self.store.facts_stamp(who) if self.stamped else None
        cached = self._get(owner)
        if stamp is not None:
            if cached is not None and cached.state == stamp:
                return cached
            # Read after the stamp: the facts are at least as new as it, never older.
            found = self.store.get_facts(who)
            state: Hashable = stamp
        else:
            found = self.store.get_facts(who)
            state = tuple((f.key, f.version, f.updated_at) for f in found)
            if cached is not None and cached.state == state:
                return cached
        return self._put(owner, UserFacts(who, state, found, cached))

    def get_relevant(
        self, query: str, user_id: Who, limit: int = 5, min_score: float = 0.0
    ) -> list[FactHit]:
        """The ``limit`` facts of a user (or a Scope) most relevant to ``query``, best
        first."""
        query, limit, floor = check_relevant(query, limit, min_score)
        return self.facts(user_id).rank(query, limit, floor)

    def forget(self, user_id: Who) -> None:
        """Drop the entry of a user (or a Scope): the next question reads the facts again."""
        with self._lock:
            entry = self._users.pop(owner_key(user_id), None)
            if entry is not None:
                self._cached -= len(entry)

    def cached(self) -> tuple[int, int]:
        """(users, facts) held now."""
        with self._lock:
            return len(self._users), self._cached

    def _get(self, user_id: str) -> UserFacts | None:
        with self._lock:
            entry = self._users.get(user_id)
            if entry is not None:
                self._users.move_to_end(user_id)
            return entry

    def _put(self, user_id: str, entry: UserFacts) -> UserFacts:
        with self._lock:
            self.reads += 1
            old = self._users.pop(user_id, None)
            if old is not None:
                self._cached -= len(old)
            if len(entry) > self.max_cached:
                return entry  # more than the whole cache: ranked, not kept
            self._users[user_id] = entry
            self._cached += len(entry)
            while self._cached > self.max_cached:
                _, evicted = self._users.popitem(last=False)
                self._cached -= len(evicted)
        return entry
