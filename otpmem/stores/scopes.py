"""Scopes: whose long-term memory a record is, beyond the user (mem0's user, agent and run).

A ``Scope`` names a user (or no user) and, within that user, an ``agent``, a ``run`` and a
``team`` (any of them): ``Scope("ann")`` is ann's own memory, ``Scope("ann", agent=
"planner")`` her planner's, ``Scope("ann", team="alpha")`` what her team alpha shares,
``Scope(None, team="alpha")`` the team of agents that serve no user. Facts, profiles and
memory blocks take a scope wherever they take a ``user_id`` (a str still means the user's
own scope); an agent's conversation joins its scopes, so recall and usage answer by scope.

Every scope belongs to exactly one user, as every conversation does: a scope of ann's
holds only what ann's agents wrote, only ann's conversations join it, and
``forget_user("ann")`` takes all of it. Tenancy between users so holds across every scope.

The stores key a scope by its ``owner_key``: the user id itself for a user's own scope
(what they always were, so stored data keeps its keys), else a mark no plain user id keeps
(a user id that begins with it is encoded too) followed by the scope's fields as JSON.
Different scopes have different keys whatever their ids hold: no id forges another's.

    store.save_fact(Fact(Scope("ann", agent="planner"), "plan", "step 2"))
    store.get_facts(Scope("ann", agent="planner"))
    store.scopes("ann")                                # [Scope('ann', agent='planner')]
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..messages import Conv, ConvLike, short_repr

MARK = "\x1f"
"""What every encoded owner key begins with (the ASCII unit separator)."""
MAX_SCOPE_ID = 200
SCOPE_FIELDS = ("agent", "run", "team")


def _check_id(value: object, what: str, required: bool = False) -> str | None:
    if value is None and not required:
        return None
    if type(value) is not str or not value or (what != "user" and len(value) > MAX_SCOPE_ID):
        most = "" if what == "user" else f" of at most {MAX_SCOPE_ID} characters"
        raise ValueError(
            f"a scope's {what} is None or a non-empty str{most}, got {short_repr(value)}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory: a ``user`` (None: no user) and, within it, an ``agent``, a ``run``
    and a ``team``; at least one of the four is given."""

    user: str | None = None
    agent: str | None = None
    run: str | None = None
    team: str | None = None

    def __post_init__(self) -> None:
        _check_id(self.user, "user")
        for name in SCOPE_FIELDS:
            _check_id(getattr(self, name), name)
        if self.user is None and self.agent is None and self.run is None and self.team is None:
            raise ValueError("a Scope names at least one of user, agent, run and team")

    @property
    def is_user(self) -> bool:
        """Whether this is a user's own scope (no agent, run or team)."""
        return self.agent is None and self.run is None and self.team is None

    def __repr__(self) -> str:
        parts = [repr(self.user)]
        parts += [f"{n}={getattr(self, n)!r}" for n in SCOPE_FIELDS if getattr(self, n) is not None]
        return f"Scope({', '.join(parts)})"


Who = str | Scope
"""Whose long-term records: a user id (that user's own scope) or a Scope."""


def owner_key(who: object, what: str = "user_id") -> str:
    """The store's key of ``who`` (a user id or a Scope): injective, and plain user ids
    keep their own; ``ValueError`` names what is wrong."""
    # An exact str: it becomes a key, and a subclass would bring its own __hash__ and __eq__.
    if type(who) is str:
        if not who:
            raise ValueError(f"{what} must be a non-empty str or a Scope, got ''")
        return _encoded(who, None, None, None) if who.startswith(MARK) else who
    if type(who) is Scope:
        if who.is_user and who.user is not None and not who.user.startswith(MARK):
            return who.user
        return _encoded(who.user, who.agent, who.run, who.team)
    raise ValueError(f"{what} must be a non-empty str or a Scope, got {short_repr(who)}")


@functools.lru_cache(maxsize=65_536)
def _encoded(user: str | None, agent: str | None, run: str | None, team: str | None) -> str:
    # ASCII JSON: every store keeps it as it is (PostgreSQL's text takes no lone surrogate).
    return MARK + json.dumps([user, agent, run, team], separators=(",", ":"))


def is_encoded(owner: str) -> bool:
    """Whether a stored owner key is an encoded scope (not a plain user id)."""
    return owner.startswith(MARK)


def public_id(owner: str) -> Who:
    """The inverse of ``owner_key``: a user id for a user's own scope, else the Scope."""
    if not owner.startswith(MARK):
        return owner
    return _decoded(owner)


@functools.lru_cache(maxsize=65_536)
def _decoded(owner: str) -> Who:
    # Every stored record of a scope is read back through here: a JSON decode and a Scope
    # each would cost a read of 50 facts ~200 us; a Scope is frozen, so one is shared.
    user, agent, run, team = json.loads(owner[1:])
    if agent is None and run is None and team is None:
        return str(user)
    return Scope(user, agent, run, team)


def as_scope(who: object, what: str = "user_id") -> Scope:
    """``who`` as a Scope (a user id: that user's own)."""
    if type(who) is Scope:
        return who
    owner_key(who, what)
    assert isinstance(who, str)
    return Scope(who)


def tenant_of(who: object) -> str | None:
    """The user a user id or Scope belongs to (None: no user)."""
    return as_scope(who).user


def canonical(who: object) -> Who:
    """``who`` in the form reads give it back in: a user's own scope as the user id."""
    return public_id(owner_key(who))


def registered_user(owner: str) -> str | None:
    """For an encoded owner: the user under whom the stores list it (``scopes``)."""
    user = json.loads(owner[1:])[0]
    return None if user is None else str(user)


def view_of(
    user: str | None, agent: str | None = None, run: str | None = None, team: str | None = None
) -> tuple[Scope, ...]:
    """What an agent reads: its user's scope, its own, its run's and its team's (those
    given), the user's first."""
    scopes = [] if user is None else [Scope(user)]
    for name, value in (("agent", agent), ("run", run), ("team", team)):
        if value is not None:
            scopes.append(Scope(user, **{name: value}))
    return tuple(scopes)


def check_view(scopes: object, what: str = "user_id") -> tuple[Scope, ...]:
    """A user id, a Scope, or a non-empty sequence of them, all of one user: each once."""
    if type(scopes) is str or type(scopes) is Scope:
        return (as_scope(scopes, what),)
    if not isinstance(scopes, Sequence) or isinstance(scopes, str) or not scopes:
        raise ValueError(
            f"{what} must be a non-empty str, a Scope or a list of them, got {short_repr(scopes)}"
        )
    checked = tuple(dict.fromkeys(as_scope(s, what) for s in scopes))
    users = {s.user for s in checked}
    if len(users) > 1:
        raise ValueError(
            f"{what}: one read never spans users, and these scopes belong to "
            f"{sorted(map(str, users))}"
        )
    return checked


def check_member(scope: Scope, conv: Conv) -> None:
    """A conversation joins only scopes of its own user."""
    if scope.is_user:
        raise ValueError(f"{scope!r} is a user's own scope: every conversation of it is in it")
    if conv.user_id != scope.user:
        raise ValueError(f"{conv} cannot join {scope!r}: it is another user's conversation")


@runtime_checkable
class ScopeStore(Protocol):
    """What scopes need of a store beyond keying by ``owner_key`` (otpmem's three have it)."""

    def join_scope(self, scope: Scope, conv: ConvLike) -> None:
        """Make the conversation one of the scope's (a conversation of the scope's user)."""

    def scope_conversations(self, scope: Scope) -> list[Conv]:
        """The conversations that joined the scope, by id (a user's scope: all of theirs)."""

    def scopes(self, user_id: str | None) -> list[Scope]:
        """The user's scopes beyond their own that hold anything, in key order."""


def sorted_scopes(owners: Iterable[str]) -> list[Scope]:
    """The Scopes of encoded owner keys beyond users' own, in key order."""
    found = [public_id(o) for o in sorted(owners)]
    return [s for s in found if type(s) is Scope]


__all__ = [
    "MARK",
    "Scope",
    "ScopeStore",
    "Who",
    "as_scope",
    "canonical",
    "check_member",
    "check_view",
    "is_encoded",
    "owner_key",
    "public_id",
    "registered_user",
    "sorted_scopes",
    "tenant_of",
    "view_of",
]
