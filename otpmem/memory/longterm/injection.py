"""The reading half of LongTermMemory: facts ranked for a question and put in front of the
context, for one scope or for an agent's view of several (its user's, its own, its run's,
its team's; see ``otpmem.stores.Scope``).

A view's facts are read scope by scope, each from its own cached index (a team's facts are
read once for all its agents, whichever agent asks); they are chosen together, the most
relevant first by their BM25 scores, then the most recently updated; the profile is the
view's first scope's (the user's). A fact of a scope beyond the user's shows where it is
from (``- deadline: friday (team alpha)``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from ...stores import Fact, Profile, Who
from ...stores.scopes import canonical, check_view, owner_key
from .inject import question_of, render
from .relevant import FactHit, UserFacts, check_relevant

if TYPE_CHECKING:
    from ..tokens import TokenCounter
    from .relevant import FactIndex

RENDER_CACHE = 8192
"""How many rendered contexts a LongTermMemory keeps, two a view at most (the newest
facts, the facts chosen for the last question): all dropped when full."""

Whose = Who | Sequence[Who]
"""A user id, a Scope, or a view: several scopes of one user, read together."""


class Rendered(NamedTuple):
    """A view's rendered long-term context, and the state of the records it was made of."""

    state: Any
    messages: list[dict[str, Any]]
    kept: int


class Injection:
    """``get_facts``, ``get_relevant``, ``context`` and ``inject`` of a LongTermMemory."""

    if TYPE_CHECKING:
        store: Any
        index: FactIndex
        inject_enabled: bool
        inject_mode: str
        inject_max_facts: int
        inject_max_tokens: int
        counter: TokenCounter
        _rendered: dict[tuple[Any, str], Rendered]

    def get_facts(self, user_id: Who, as_of: float | datetime | None = None) -> list[Fact]:
        """The facts of a user (or a Scope) true now, by key; ``as_of``: those true then."""
        facts: list[Fact] = self.store.get_facts(user_id, as_of=as_of)
        return facts

    def get_relevant(
        self, query: str, *, user_id: Whose, limit: int = 5, min_score: float = 0.0
    ) -> list[FactHit]:
        """The ``limit`` facts of a user, a Scope or a view most relevant to ``query``, best
        first, with their BM25 scores (over each fact's key and value); only facts scoring
        above 0 and at least ``min_score``. Never another user's fact."""
        view = check_view(user_id)
        if len(view) == 1:
            return self.index.get_relevant(query, canonical(view[0]), limit, min_score)
        query, limit, floor = check_relevant(query, limit, min_score)
        return _best([self.index.facts(s).rank(query, limit, floor) for s in view], limit)

    def context(self, user_id: Whose | None, question: str = "") -> list[dict[str, Any]]:
        """The pinned system messages that carry the profile and facts of a user, a Scope
        or a view (none for no user, or with ``inject=False``), within
        ``inject_max_tokens``; in ``relevant`` mode the facts are chosen for ``question``."""
        if user_id is None or not self.inject_enabled:
            return []
        view = check_view(user_id)
        profile = self.store.get_profile(canonical(view[0]))
        known = [self.index.facts(s) for s in view]
        # Rendering counts tokens line by line; what it renders changes only with a write
        # or another choice of facts: render once per state, not per call.
        state = (
            None if profile is None else (profile.summary, profile.updated_at),
            tuple(k.state for k in known),
        )
        slot = tuple(owner_key(s) for s in view)
        everything = _newest(known)
        total = sum(len(k) for k in known)
        newest = everything if self.inject_mode == "newest" else None
        if newest is None and not (question and total > self.inject_max_facts):
            newest = everything[: self.inject_max_facts]
        if newest is not None:
            rendered = self._render((slot, "newest"), profile, state, newest)
            if self.inject_mode == "newest" or not question or rendered.kept == len(newest):
                return [dict(message) for message in rendered.messages]
        # More facts than are sent: the question decides which ones.
        chosen = self._chosen(known, everything, question)
        keys = tuple((owner_key(f.user_id), f.key) for f in chosen)
        rendered = self._render((slot, "chosen"), profile, (state, keys), chosen)
        return [dict(message) for message in rendered.messages]

    def _chosen(
        self, known: Sequence[UserFacts], newest: Sequence[Fact], question: str
    ) -> list[Fact]:
        """Up to ``inject_max_facts`` facts: the relevant ones best first, then the newest."""
        wanted = self.inject_max_facts
        chosen = []
        if question:
            chosen = [h.fact for h in _best([k.rank(question, wanted, 0.0) for k in known], wanted)]
        taken = {(owner_key(f.user_id), f.key) for f in chosen}
        for fact in newest:
            if len(chosen) >= wanted:
                break
            if (owner_key(fact.user_id), fact.key) not in taken:
                chosen.append(fact)
        return chosen

    def _render(
        self, slot: tuple[Any, str], profile: Profile | None, state: Any, facts: Sequence[Fact]
    ) -> Rendered:
        cached = self._rendered.get(slot)
        if cached is None or cached.state != state:
            if len(self._rendered) >= RENDER_CACHE:
                self._rendered.clear()
            messages, kept = render(profile, facts, self.inject_max_tokens, self.counter)
            cached = self._rendered[slot] = Rendered(state, messages, kept)
        return cached

    def inject(
        self, messages: Sequence[Mapping[str, Any]], user_id: Whose | None
    ) -> list[Mapping[str, Any]]:
        """``messages`` with the long-term context of a user, a Scope or a view in front
        (never stored), its facts chosen for the newest user message among them."""
        question = question_of(messages) if self.inject_mode == "relevant" else ""
        found = self.context(user_id, question)
        return [*found, *messages] if found else list(messages)


def _newest(known: Sequence[UserFacts]) -> Sequence[Fact]:
    """Every fact of the view, the most recently updated first."""
    if len(known) == 1:
        return known[0].newest
    merged = heapq.merge(*(k.newest for k in known), key=lambda f: -f.updated_at)
    return tuple(merged)


def _best(rankings: Sequence[Sequence[FactHit]], limit: int) -> list[FactHit]:
    """The ``limit`` best of several scopes' rankings (each best first)."""
    if len(rankings) == 1:
        return list(rankings[0][:limit])
    merged = heapq.merge(*rankings, key=lambda h: (-h.score, -h.fact.updated_at))
    return [hit for _, hit in zip(range(limit), merged, strict=False)]
