"""Scopes on the user's path (issue 30, item 1): agents placed in their agent's, run's and
team's scopes, long-term memory read over an agent's view, recall and usage by scope, many
agents joining at once, a crashed agent's handle, and tenancy as a property over adversarial
ids on every kind of record."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.actors import faults
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import LongTermMemory, RecallIndex
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, MemoryStore, Profile, Scope, view_of
from otpmem.stores.scopes import MARK

WAIT = 30.0


@pytest.fixture
def store(each_store: Any) -> Any:
    """Each of the three stores (conftest's ``each_store``)."""
    return each_store


def _answer(total: int) -> Any:
    return {"content": "ok", "usage": {"prompt_tokens": total, "completion_tokens": 0}}


def test_an_agent_reads_its_users_its_own_and_its_teams_facts(store: Any) -> None:
    store.save_fact(Fact("ann", "city", "Lyon"))
    store.save_fact(Fact(Scope("ann", agent="planner"), "style", "terse"))
    store.save_fact(Fact(Scope("ann", team="alpha"), "deadline", "friday"))
    store.save_fact(Fact(Scope("ann", team="beta"), "secret", "beta's"))
    store.save_fact(Fact(Scope("bob", team="alpha"), "secret", "bob's"))
    ltm = LongTermMemory(store)
    model = ScriptedModel(["ok"], record=True)
    agent = Agent.start_link(
        model,
        memory={"store": store},
        user_id="ann",
        agent_id="planner",
        team="alpha",
        long_term_memory=ltm,
    )
    try:
        agent.run("hello")
        sent = "\n".join(str(m.get("content")) for m in model.calls[0][0])
        assert "- city: Lyon" in sent
        assert "- style: terse (agent planner)" in sent
        assert "- deadline: friday (team alpha)" in sent
        assert "secret" not in sent, "another team's, or another user's team's"
    finally:
        agent.stop()
    view = view_of("ann", agent="planner", team="alpha")
    hits = ltm.get_relevant("when is the deadline", user_id=view)
    assert [h.fact.value for h in hits] == ["friday"]
    assert ltm.get_relevant("secret", user_id=view) == []
    with pytest.raises(ValueError, match="never spans users"):
        ltm.get_relevant("x", user_id=[Scope("ann"), Scope("bob", team="alpha")])


def test_agents_join_their_scopes_once_and_usage_answers_by_scope(store: Any) -> None:
    def start(agent_id: str, conversation_id: str, total: int) -> Any:
        return Agent.start_link(
            ScriptedModel([_answer(total)] * 2),
            memory={"store": store},
            user_id="ann",
            conversation_id=conversation_id,
            agent_id=agent_id,
            run_id="r1",
            team="alpha",
        )

    first, second = start("writer", "w", 10), start("reader", "r", 5)
    try:
        first.run("go")
        second.run("go")
        first.stop()
        first = start("writer", "w", 10)  # the same agent, started again: joins nothing new
    finally:
        first.stop()
        second.stop()
    w, r = Conv("ann", "w"), Conv("ann", "r")
    assert store.scope_conversations(Scope("ann", team="alpha")) == [r, w]
    assert store.scope_conversations(Scope("ann", run="r1")) == [r, w]
    assert store.scope_conversations(Scope("ann", agent="writer")) == [w]
    assert store.scope_usage(Scope("ann", team="alpha")).total_tokens == 15
    assert store.scope_usage(Scope("ann", agent="reader")).total_tokens == 5
    assert store.scope_usage("ann").total_tokens == 15
    assert set(store.scopes("ann")) == {
        Scope("ann", agent="reader"),
        Scope("ann", agent="writer"),
        Scope("ann", run="r1"),
        Scope("ann", team="alpha"),
    }


def test_recall_by_scope_keeps_to_the_scopes_conversations(store: Any) -> None:
    team = Scope("ann", team="alpha")
    store.add(Conv("ann", "t1"), [{"role": "user", "content": "the lexer is done"}])
    store.add(Conv("ann", "solo"), [{"role": "user", "content": "the lexer is mine alone"}])
    store.add(Conv("bob", "t1"), [{"role": "user", "content": "bob's lexer"}])
    store.join_scope(team, Conv("ann", "t1"))
    store.join_scope(Scope("bob", team="alpha"), Conv("bob", "t1"))
    index = RecallIndex.start_link(store)
    try:
        hits = index.get_relevant("lexer", scope=team)
        assert [h.conv for h in hits] == [Conv("ann", "t1")]
        both = index.get_relevant("lexer", scope=[team, Scope("ann")])
        assert {h.conv for h in both} == {Conv("ann", "t1"), Conv("ann", "solo")}
        assert index.get_relevant("lexer", scope=Scope("ann", run="none")) == []
        with pytest.raises(ValueError, match="no query crosses users"):
            index.get_relevant("lexer", user_id="bob", scope=team)
        with pytest.raises(ValueError, match="not both"):
            index.get_relevant("lexer", conversation=Conv("ann", "t1"), scope=team)
        with pytest.raises(ValueError, match="scope must be"):
            index.get_relevant("lexer", scope=7)  # type: ignore[arg-type]
    finally:
        index.stop()


def test_many_agents_of_one_team_join_at_once_each_once() -> None:
    store = MemoryStore.start_link()
    team = Scope("ann", team="swarm")
    errors: list[BaseException] = []

    def join(n: int) -> None:
        try:
            for _ in range(3):  # a restarted agent joins again
                store.join_scope(team, Conv("ann", f"c{n}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=join, args=(n,)) for n in range(40)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert not errors
        members = store.scope_conversations(team)
        assert members == sorted(Conv("ann", f"c{n}") for n in range(40))
    finally:
        store.stop()


def test_a_killed_agents_handle_keeps_its_scopes() -> None:
    """The handle of an agent the application restarts after a kill goes on reading its
    team's facts, and its conversation is in its team once."""
    import otpmem

    with otpmem.running():
        store = otpmem.default_store()
        store.save_fact(Fact(Scope("ann", team="alpha"), "deadline", "friday"))
        ltm = LongTermMemory(store)
        model = ScriptedModel(lambda messages, tools: "ok", record=True)
        handle = otpmem.start_agent(
            llm=model,
            user_id="ann",
            conversation_id="c",
            team="alpha",
            long_term_memory=ltm,
        )
        handle.run("one")
        faults.kill(handle)
        handle.run("two", timeout=WAIT)  # the handle follows the agent's next incarnation
        assert "deadline: friday (team alpha)" in str(model.calls[-1][0])
        assert store.scope_conversations(Scope("ann", team="alpha")) == [Conv("ann", "c")]
        handle.stop()


# -- the property: no id of one user reaches another's records, in any scope -------------------

IDS = st.sampled_from(["ann", "bob", MARK, MARK + '["ann",null,null,"t"]', "team:t", 'a","b', "é"])
FIELDS = st.sampled_from([None, "t", MARK, 'x"]', "ann"])


def _scope(user: str, agent: str | None, run: str | None, team: str | None) -> Any:
    if agent is None and run is None and team is None:
        return user
    return Scope(user, agent=agent, run=run, team=team)


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(st.tuples(IDS, FIELDS, FIELDS, FIELDS, st.text(max_size=4)), max_size=12),
    forget=IDS,
)
def test_records_never_cross_users_in_any_scope(
    writes: list[tuple[str, str | None, str | None, str | None, str]], forget: str
) -> None:
    root = Path(tempfile.mkdtemp(prefix="otpmem-scopes-"))
    stores = [MemoryStore.start_link(), LevelDBStore.start_link(root / "db")]
    try:
        model: dict[Any, str] = {}
        for user, agent, run, team, value in writes:
            who = _scope(user, agent, run, team)
            for store in stores:
                store.save_fact(Fact(who, "k", value))
                store.save_profile(Profile(who, value))
                store.set_block(who, "notes", value)
                if type(who) is Scope:
                    store.join_scope(who, Conv(user, "c"))
            model[who] = value
        for store in stores:
            store.forget_user(forget)
        model = {w: v for w, v in model.items() if (w if type(w) is str else w.user) != forget}
        everyone = {_scope(*w[:4]) for w in writes} | {forget}
        for store in stores:
            for who in everyone:
                value = model.get(who)
                facts = store.get_facts(who)
                assert [f.value for f in facts] == ([] if value is None else [value]), who
                assert all(f.user_id == who for f in facts)
                profile = store.get_profile(who)
                assert (None if profile is None else profile.summary) == value
                block = store.get_block(who, "notes")
                assert (None if block is None else block.value) == value
                if type(who) is Scope:
                    joined = store.scope_conversations(who)
                    assert joined == ([] if value is None else [Conv(who.user, "c")])
            for user in {w[0] for w in writes} | {forget}:
                listed = set(store.scopes(user))
                expected = {w for w in model if type(w) is Scope and w.user == user}
                assert listed == {s for s in expected if not s.is_user}
    finally:
        for store in stores:
            store.stop()
        shutil.rmtree(root, ignore_errors=True)
