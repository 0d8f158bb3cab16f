"""The conformance tests of scopes (see ``scopes``): facts, profiles, blocks, members and
usage by scope, and tenancy between users across every scope, whatever their ids hold."""

from __future__ import annotations

from typing import Any

import pytest

from ..messages import Conv
from .longterm import Fact, Profile, Usage
from .scopes import MARK, Scope

ANN, BOB = Conv("ann", "c1"), Conv("bob", "c1")
PLANNER = Scope("ann", agent="planner")
TEAM = Scope("ann", team="alpha")
RUN = Scope("ann", run="r1")

FORGERS = (
    "team:alpha",
    MARK,
    MARK + '["ann","planner",null,null]',
    MARK + '["ann",null,null,"alpha"]',
    '["ann","planner",null,null]',
    'ann","planner',
    "ann\x00",
    "ann" + MARK,
    MARK + "ann",
)
"""User ids made to pass for another scope's key, or for ann."""


def _answer(total: int) -> dict[str, Any]:
    usage = {"prompt_tokens": total, "completion_tokens": 0, "total_tokens": total}
    return {"role": "assistant", "content": "ok", "metadata": {"usage": usage}}


class ScopesConformance:
    """Subclass with a ``store`` fixture; every test here must pass for any ScopeStore."""

    def test_each_scope_keeps_its_own_facts(self, store: Any) -> None:
        for who in ("ann", PLANNER, TEAM, RUN, Scope(None, team="alpha")):
            store.save_fact(Fact(who, "plan", f"{who!r}'s"))
        for who in ("ann", PLANNER, TEAM, RUN, Scope(None, team="alpha")):
            facts = store.get_facts(who)
            assert [(f.user_id, f.value) for f in facts] == [(who, f"{who!r}'s")]
            assert store.get_fact(who, "plan") == facts[0]
        assert store.get_facts(Scope("ann", agent="other")) == []
        assert store.get_facts(Scope("bob", agent="planner")) == []

    def test_a_users_own_scope_is_the_user_id(self, store: Any) -> None:
        saved = store.save_fact(Fact(Scope("ann"), "city", "Lyon"))
        assert saved.user_id == "ann" and type(saved.user_id) is str
        assert store.get_facts("ann") == store.get_facts(Scope("ann")) == [saved]

    def test_scoped_facts_version_close_and_keep_history(self, store: Any) -> None:
        store.save_fact(Fact(PLANNER, "step", "one"))
        second = store.save_fact(Fact(PLANNER, "step", "two"))
        assert second.version == 2
        assert [f.value for f in store.fact_history(PLANNER, "step")] == ["one"]
        assert store.close_fact(PLANNER, "step") is True
        assert store.get_facts(PLANNER) == []
        assert store.get_facts("ann") == [], "the user's own facts were never touched"
        assert store.delete_fact(PLANNER, "step") is False

    def test_save_facts_refuses_a_fact_of_another_scope(self, store: Any) -> None:
        with pytest.raises(ValueError, match="another user's"):
            store.save_facts(PLANNER, [Fact("ann", "k", "v")])
        with pytest.raises(ValueError, match="another user's conversation"):
            store.save_fact(Fact(PLANNER, "k", "v", source=(BOB, 0)))
        assert store.get_facts(PLANNER) == [] and store.get_facts("ann") == []

    def test_a_scoped_fact_may_come_from_its_users_conversation(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "x"}])
        saved = store.save_facts(
            PLANNER, [Fact(PLANNER, "k", "v", source=(ANN, 0))], cursor=(ANN, 1)
        )
        assert saved[0].source == (ANN, 0)
        assert store.extraction_cursor(ANN) == 1

    def test_profiles_and_blocks_by_scope(self, store: Any) -> None:
        store.save_profile(Profile(PLANNER, "plans things"))
        assert store.get_profile(PLANNER).summary == "plans things"
        assert store.get_profile(PLANNER).user_id == PLANNER
        assert store.get_profile("ann") is None
        store.append_block(TEAM, "notes", "ann owns the parser")
        store.append_block("ann", "notes", "mine")
        assert store.get_block(TEAM, "notes").value == "ann owns the parser"
        assert store.get_block(TEAM, "notes").owner == TEAM
        assert [b.value for b in store.blocks("ann")] == ["mine"]
        assert store.get_block(Scope("bob", team="alpha"), "notes") is None
        assert store.delete_profile(PLANNER) is True and store.get_profile(PLANNER) is None

    def test_scopes_lists_what_holds_anything(self, store: Any) -> None:
        assert store.scopes("ann") == []
        store.save_fact(Fact(PLANNER, "k", "v"))
        store.append_block(TEAM, "notes", "x")
        store.save_profile(Profile(RUN, "a run"))
        store.save_fact(Fact(Scope("bob", agent="planner"), "k", "v"))
        assert store.scopes("ann") == sorted([PLANNER, TEAM, RUN], key=_owner)
        assert store.scopes("bob") == [Scope("bob", agent="planner")]
        store.save_fact(Fact(Scope(None, team="t"), "k", "v"))
        assert store.scopes(None) == [Scope(None, team="t")]

    def test_conversations_join_only_their_users_scopes(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "x"}])
        store.join_scope(PLANNER, ANN)
        store.join_scope(PLANNER, ANN)  # again: still once
        store.join_scope(TEAM, Conv("ann", "c2"))  # joins before its first message
        assert store.scope_conversations(PLANNER) == [ANN]
        assert store.scope_conversations(TEAM) == [Conv("ann", "c2")]
        assert store.scope_conversations(Scope("ann")) == [ANN]
        with pytest.raises(ValueError, match="another user's conversation"):
            store.join_scope(PLANNER, BOB)
        with pytest.raises(ValueError, match="another user's conversation"):
            store.join_scope(Scope(None, team="t"), ANN)
        with pytest.raises(ValueError, match="own scope"):
            store.join_scope(Scope("ann"), ANN)
        assert store.scope_conversations(PLANNER) == [ANN]
        anonymous = Conv(None, "sim-1")
        store.join_scope(Scope(None, team="t"), anonymous)
        assert store.scope_conversations(Scope(None, team="t")) == [anonymous]

    def test_usage_by_scope_sums_its_conversations(self, store: Any) -> None:
        c2, c3 = Conv("ann", "c2"), Conv("ann", "c3")
        for conv, total in ((ANN, 10), (c2, 20), (c3, 40)):
            store.add(conv, [_answer(total)])
        store.join_scope(TEAM, ANN)
        store.join_scope(TEAM, c2)
        store.join_scope(PLANNER, c3)
        assert store.scope_usage(TEAM).total_tokens == 30
        assert store.scope_usage(PLANNER).total_tokens == 40
        assert store.scope_usage("ann").total_tokens == 70
        assert store.scope_usage(RUN) == Usage()
        assert store.scope_usage(TEAM, since=0.0).total_tokens == 30

    def test_forget_user_takes_every_scope_of_the_user_and_no_other(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "x"}])
        store.add(BOB, [{"role": "user", "content": "y"}])
        bobs = Scope("bob", agent="planner")
        for who in ("ann", PLANNER, TEAM, RUN, "bob", bobs):
            store.save_fact(Fact(who, "k", "v"))
            store.save_profile(Profile(who, "p"))
            store.append_block(who, "notes", "n")
        store.join_scope(PLANNER, ANN)
        store.join_scope(bobs, BOB)
        store.forget_user("ann")
        for who in ("ann", PLANNER, TEAM, RUN):
            assert store.get_facts(who) == [] and store.fact_history(who, "k") == []
            assert store.get_profile(who) is None and store.blocks(who) == []
        assert store.scopes("ann") == [] and store.scope_conversations(PLANNER) == []
        for who in ("bob", bobs):
            assert [f.value for f in store.get_facts(who)] == ["v"]
            assert store.get_profile(who) is not None and len(store.blocks(who)) == 1
        assert store.scopes("bob") == [bobs] and store.scope_conversations(bobs) == [BOB]

    def test_no_user_id_forges_another_scope(self, store: Any) -> None:
        store.save_fact(Fact(PLANNER, "k", "planner's"))
        store.append_block(TEAM, "notes", "team's")
        store.save_fact(Fact("ann", "k", "ann's"))
        for forger in FORGERS:
            assert store.get_facts(forger) == [], forger
            assert store.blocks(forger) == [], forger
            store.save_fact(Fact(forger, "k", f"{forger!r}'s"))
            store.append_block(forger, "notes", "forged")
        assert [f.value for f in store.get_facts(PLANNER)] == ["planner's"]
        assert store.get_block(TEAM, "notes").value == "team's"
        assert [f.value for f in store.get_facts("ann")] == ["ann's"]
        for forger in FORGERS:
            assert [(f.user_id, f.value) for f in store.get_facts(forger)] == [
                (forger, f"{forger!r}'s")
            ]
            store.forget_user(forger)
            assert store.get_facts(forger) == [] and store.blocks(forger) == []
        assert [f.value for f in store.get_facts(PLANNER)] == ["planner's"]
        assert [f.value for f in store.get_facts("ann")] == ["ann's"]
        assert store.get_block(TEAM, "notes").value == "team's"

    def test_bad_scopes_are_refused_by_name(self, store: Any) -> None:
        with pytest.raises(ValueError, match="at least one"):
            Scope()
        with pytest.raises(ValueError, match="scope's agent"):
            Scope("ann", agent="")
        with pytest.raises(ValueError, match="scope's team"):
            Scope("ann", team=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="user_id must be a non-empty str or a Scope"):
            store.get_facts(("ann", "planner"))
        with pytest.raises(ValueError, match="takes a Scope"):
            store.join_scope("ann", ANN)


def _owner(scope: Scope) -> str:
    from .scopes import owner_key

    return owner_key(scope)
