"""An agent's scopes: ``agent_id``, ``run_id`` and ``team`` place its conversation in its
agent's, its run's and its team's scope (each within its user, see ``otpmem.stores.Scope``),
so that long-term memory, memory blocks, recall and usage answer for them.

The agent's view is what it reads: its user's own scope first, then its own, its run's and
its team's. Its conversation joins each of them when the agent is configured (a join is
idempotent: an agent started again joins nothing new).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import Conv, short_repr
from ..protocols import conforms
from ..stores import Scope, ScopeStore, view_of

KINDS = ("agent", "run", "team")


@dataclass(frozen=True)
class AgentScopes:
    """The scopes of one agent's conversation."""

    conv: Conv
    agent: str | None = None
    run: str | None = None
    team: str | None = None

    @property
    def view(self) -> tuple[Scope, ...]:
        """What the agent reads: its user's scope, then its own, its run's, its team's."""
        return view_of(self.conv.user_id, self.agent, self.run, self.team)

    @property
    def joined(self) -> tuple[Scope, ...]:
        """The scopes beyond the user's that the conversation is one of."""
        return tuple(s for s in self.view if not s.is_user)

    def owner(self, name: str) -> Scope:
        """The scope a block name's owner part means: ``""`` the user's own, ``agent``,
        ``run`` or ``team`` the agent's own of that kind, ``team:<name>`` (and ``agent:``,
        ``run:``) that one of the agent's user."""
        user = self.conv.user_id
        if not name:
            if user is None:
                raise ValueError(
                    "a block without an owner is the user's: give the agent a user_id, or "
                    "name a scope ('team/label', 'team:<name>/label')"
                )
            return Scope(user)
        kind, colon, value = name.partition(":")
        if kind not in KINDS:
            raise ValueError(
                f"a block's owner is agent, run or team (the agent's own) or '<kind>:<name>' "
                f"of its user, got {name!r}"
            )
        if not colon:
            mine = getattr(self, kind)
            if mine is None:
                raise ValueError(
                    f"block owner {name!r} is the agent's own {kind}, and it has none: give the "
                    f"agent {'team' if kind == 'team' else kind + '_id'}=..."
                )
            value = mine
        return Scope(user, **{kind: value})


def agent_scopes(
    conv: Conv, agent_id: object, run_id: object, team: object, store: object
) -> AgentScopes:
    """The options checked, and the conversation joined to its scopes in ``store``."""
    for what, value in (("agent_id", agent_id), ("run_id", run_id), ("team", team)):
        if value is not None and (type(value) is not str or not value):
            raise ValueError(f"{what} must be None or a non-empty str, got {short_repr(value)}")
    scopes = AgentScopes(conv, agent_id, run_id, team)  # type: ignore[arg-type]
    joined = scopes.joined
    if joined:
        if store is None or not conforms(store, ScopeStore):
            raise ValueError(
                "agent_id, run_id and team place the conversation in scopes its store keeps: "
                "give the agent memory over MemoryStore, LevelDBStore or PostgresStore, not "
                f"{short_repr(store)}"
            )
        for scope in joined:
            store.join_scope(scope, conv)  # type: ignore[attr-defined]
    return scopes
