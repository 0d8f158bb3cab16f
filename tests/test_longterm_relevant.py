"""A user's facts ranked for a question (``LongTermMemory.get_relevant``) and injected by
relevance: the right fact first, only the asking user's, read again only after a write,
and every acknowledged fact there after a crash and a restart."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors import faults
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import (
    FactHit,
    LongTermMemory,
    Pipeline,
    PipelineProvider,
    RuleFactExtractor,
    SlidingWindow,
)
from otpmem.memory.longterm import is_injected
from otpmem.messages import Conv
from otpmem.stores import Fact, FactStamps, LevelDBStore, LevelDBStoreHandle, MemoryStore, Profile
from otpmem.supervisors import Supervisor
from tests.longterm_support import Unstamped, both_stores, user

store_fixture = both_stores()
QUESTION = "what food allergy do I have"
ANN_FACTS = {
    "name": "Ann",
    "location": "Lyon",
    "allergy": "peanuts",
    "favorite_food": "pizza",
    "employer": "Acme",
    "favorite_color": "green",
}


def save(store: Any, user_id: str, facts: dict[str, str]) -> None:
    for key, value in facts.items():
        store.save_fact(Fact(user_id, key, value))


def keys(hits: list[FactHit]) -> list[str]:
    return [hit.fact.key for hit in hits]


# -- ranking ----------------------------------------------------------------------------------


def test_the_peanut_allergy_ranks_first_for_the_food_allergy_question(store: Any) -> None:
    save(store, "ann", ANN_FACTS)
    save(store, "bob", {"allergy": "cats", "favorite_food": "curry"})
    ltm = LongTermMemory(store)
    hits = ltm.get_relevant(QUESTION, user_id="ann", limit=5, min_score=0.0)
    assert hits[0].fact.value == "peanuts"
    assert all(hit.fact.user_id == "ann" for hit in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)
    assert "name" not in keys(hits), "a fact sharing no word with the question is left out"
    assert ltm.get_relevant(QUESTION, user_id="bob")[0].fact.value == "cats"


def test_facts_extracted_in_a_conversation_are_found_by_a_later_question(store: Any) -> None:
    ltm = LongTermMemory(store, RuleFactExtractor(), trigger="per_turn")
    agent = Agent.start_link(llm=ScriptedModel(lambda messages: "Noted."),
                             memory={"store": store}, user_id="ann", conversation_id="chat",
                             long_term_memory=ltm)  # fmt: skip
    try:
        agent.run("Hi, my name is Ann and I live in Lyon.")
        agent.run("I'm allergic to peanuts. My favorite food is pizza.")
    finally:
        agent.stop()
    hits = ltm.get_relevant(QUESTION, user_id="ann")
    assert hits[0].fact.key == "allergy"
    assert hits[0].fact.value.startswith("peanuts")


def test_limit_and_min_score_cut_the_ranking(store: Any) -> None:
    save(store, "ann", ANN_FACTS)
    ltm = LongTermMemory(store)
    everything = ltm.get_relevant("favorite food color allergy", user_id="ann", limit=10)
    assert len(everything) == 3
    assert keys(ltm.get_relevant("favorite food color allergy", user_id="ann", limit=1)) == [
        keys(everything)[0]
    ]
    floor = everything[1].score
    above = ltm.get_relevant("favorite food color allergy", user_id="ann", min_score=floor)
    assert keys(above) == keys(everything)[:2]
    assert ltm.get_relevant("the and of", user_id="ann") == [], "stopwords match nothing"
    assert ltm.get_relevant(QUESTION, user_id="nobody") == []


def test_a_key_counts_as_words(store: Any) -> None:
    save(store, "ann", {"favoriteDrink": "tea", "home-town": "Lyon", "shoe.size": "38"})
    ltm = LongTermMemory(store)
    assert keys(ltm.get_relevant("which drink", user_id="ann")) == ["favoriteDrink"]
    assert keys(ltm.get_relevant("my town", user_id="ann")) == ["home-town"]
    assert keys(ltm.get_relevant("shoe", user_id="ann")) == ["shoe.size"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"query": 3, "user_id": "ann"}, "query"),
        ({"query": None, "user_id": "ann"}, "query"),
        ({"query": "x", "user_id": ""}, "user_id"),
        ({"query": "x", "user_id": None}, "user_id"),
        ({"query": "x", "user_id": 7}, "user_id"),
        ({"query": "x", "user_id": "ann", "limit": 0}, "limit"),
        ({"query": "x", "user_id": "ann", "limit": True}, "limit"),
        ({"query": "x", "user_id": "ann", "limit": 2.0}, "limit"),
        ({"query": "x", "user_id": "ann", "min_score": -1}, "min_score"),
        ({"query": "x", "user_id": "ann", "min_score": math.nan}, "min_score"),
        ({"query": "x", "user_id": "ann", "min_score": math.inf}, "min_score"),
        ({"query": "x", "user_id": "ann", "min_score": "1"}, "min_score"),
        ({"query": "x", "user_id": "ann", "min_score": False}, "min_score"),
    ],
)
def test_bad_arguments_are_refused_by_name_and_change_nothing(
    store: Any, args: dict[str, Any], named: str
) -> None:
    save(store, "ann", ANN_FACTS)
    ltm = LongTermMemory(store)
    args = dict(args)
    query = args.pop("query")
    with pytest.raises(ValueError, match=named):
        ltm.get_relevant(query, **args)
    assert {f.key: f.value for f in store.get_facts("ann")} == ANN_FACTS


# -- cost: read again only after a change ---------------------------------------------------


def test_questions_read_the_facts_again_only_after_a_change(store: Any) -> None:
    save(store, "ann", ANN_FACTS)
    ltm = LongTermMemory(store)
    for _ in range(5):
        assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "peanuts"
    assert ltm.index.reads == 1, "five questions, one read of the facts"
    store.save_fact(Fact("ann", "allergy", "peanuts"))  # the same value: nothing changed
    ltm.get_relevant(QUESTION, user_id="ann")
    assert ltm.index.reads == 1
    store.save_fact(Fact("ann", "allergy", "shellfish"))
    assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "shellfish"
    assert ltm.index.reads == 2
    store.save_fact(Fact("bob", "allergy", "cats"))  # another user's write
    ltm.get_relevant(QUESTION, user_id="ann")
    assert ltm.index.reads == 2
    assert store.delete_fact("ann", "allergy")
    assert "allergy" not in keys(ltm.get_relevant(QUESTION, user_id="ann"))
    assert ltm.index.reads == 3
    store.forget_user("ann")
    assert ltm.get_relevant(QUESTION, user_id="ann") == []


def test_a_store_without_stamps_is_ranked_right_reading_its_facts_each_time(
    store: Any,
) -> None:
    plain = Unstamped(store)
    assert not isinstance(plain, FactStamps)
    ltm = LongTermMemory(plain)
    assert not ltm.index.stamped
    save(store, "ann", ANN_FACTS)
    assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "peanuts"
    ltm.get_relevant(QUESTION, user_id="ann")
    assert ltm.index.reads == 1, "unchanged versions: not tokenized again"
    store.delete_fact("ann", "allergy")
    assert "allergy" not in keys(ltm.get_relevant(QUESTION, user_id="ann"))


def test_the_cache_is_bounded_and_an_evicted_user_is_still_ranked(store: Any) -> None:
    ltm = LongTermMemory(store, max_cached_facts=10)
    for i in range(6):
        save(store, f"u{i}", {"allergy": f"pollen{i}", "pet": "dog", "city": "Lyon"})
    for i in range(6):
        assert ltm.get_relevant("allergy", user_id=f"u{i}")[0].fact.value == f"pollen{i}"
        users, facts = ltm.index.cached()
        assert facts <= 10 and users <= 3
    assert ltm.get_relevant("allergy", user_id="u0")[0].fact.value == "pollen0"
    big = LongTermMemory(store, max_cached_facts=2)
    assert big.get_relevant("allergy", user_id="u1")[0].fact.value == "pollen1"
    assert big.index.cached() == (0, 0), "more facts than the whole cache: ranked, not kept"
    with pytest.raises(ValueError, match="max_cached"):
        LongTermMemory(store, max_cached_facts=-1)


def test_a_stamp_moves_with_every_change_and_names_one_state_of_the_facts(store: Any) -> None:
    assert store.facts_stamp("ann") is None
    seen: list[tuple[bytes, list[Fact]]] = []

    def stamp() -> bytes:
        found = store.facts_stamp("ann")
        assert found is not None, "a user with facts has a stamp"
        seen.append((found, store.get_facts("ann")))
        return found

    store.save_fact(Fact("ann", "pet", "cat"))  # kept to the end: a user with facts
    stamp()
    store.save_fact(Fact("ann", "city", "Lyon"))
    first = stamp()
    store.save_fact(Fact("ann", "city", "Lyon"))
    assert stamp() == first, "an unchanged value changes nothing"
    store.save_facts("ann", [], cursor=(Conv("ann", "c"), 0))
    assert stamp() == first, "nor does a cursor moved alone"
    store.save_fact(Fact("bob", "city", "Rome"))
    assert stamp() == first, "nor another user's write"
    for change in (
        lambda: store.save_fact(Fact("ann", "city", "Paris")),
        lambda: store.delete_fact("ann", "city"),
        lambda: store.save_fact(Fact("ann", "city", "Lyon")),
        lambda: store.save_facts("ann", [Fact("ann", "age", "40")], ["city"]),
    ):
        before = seen[-1][0]
        change()
        assert stamp() != before
    for one, facts in seen:  # a stamp seen twice (PostgreSQL's can) names the same facts
        assert all(facts == other for again, other in seen if again == one)
    store.forget_user("ann")
    assert store.facts_stamp("ann") is None
    with pytest.raises(ValueError, match="user_id"):
        store.facts_stamp("")


def test_postgres_stamps_and_ranks_like_the_others(postgres_dsn: str, pg_namespace: str) -> None:
    from otpmem.stores import PostgresStore

    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        assert isinstance(store, FactStamps)
        test_a_stamp_moves_with_every_change_and_names_one_state_of_the_facts(store)
        store.forget_user("bob")
        test_questions_read_the_facts_again_only_after_a_change(store)
    finally:
        store.stop()


# -- injection by relevance ---------------------------------------------------------------------


def many_facts(store: Any, n: int) -> None:
    """The allergy first (so the oldest), then n - 1 facts about other things."""
    store.save_fact(Fact("ann", "allergy", "peanuts"))
    store.save_facts("ann", [Fact("ann", f"hobby_{i}", f"hobby number {i}") for i in range(n - 1)])


def injected_facts(messages: list[Any]) -> list[str]:
    found = [m for m in messages if is_injected(m) and m["metadata"]["long_term_memory"] == "facts"]
    return found[0]["content"].splitlines()[1:] if found else []


def test_injection_picks_the_facts_relevant_to_the_newest_user_message(store: Any) -> None:
    many_facts(store, 40)
    store.save_profile(Profile("ann", "Ann writes Elixir."))
    ltm = LongTermMemory(store, inject_max_facts=5)
    assert ltm.inject_mode == "relevant", "the default"
    history = [user("hello"), {"role": "assistant", "content": "hi"}, user(QUESTION)]
    sent = ltm.inject(history, "ann")
    assert sent[0]["content"] == "User profile:\nAnn writes Elixir.", "the profile as before"
    lines = injected_facts(sent)
    assert "- allergy: peanuts" in lines, "the oldest fact, but the one asked about"
    assert len(lines) == 5, "the rest filled with the newest"
    assert sent[2:] == history
    newest = LongTermMemory(store, inject_mode="newest", inject_max_tokens=60)
    assert "- allergy: peanuts" not in injected_facts(newest.inject(history, "ann"))


def test_injection_falls_back_to_the_newest_when_nothing_matches(store: Any) -> None:
    many_facts(store, 12)
    ltm = LongTermMemory(store, inject_max_facts=3)
    lines = injected_facts(ltm.inject([user("tell me a joke")], "ann"))
    newest = sorted(store.get_facts("ann"), key=lambda f: (-f.updated_at, f.key))[:3]
    assert lines == [f"- {f.key}: {f.value}" for f in newest]
    assert injected_facts(ltm.inject([], "ann")) == lines, "no question: the newest"


def test_a_user_with_few_facts_gets_the_same_text_whatever_the_question(store: Any) -> None:
    save(store, "ann", ANN_FACTS)
    relevant, newest = LongTermMemory(store), LongTermMemory(store, inject_mode="newest")
    for question in (QUESTION, "where do I work?", "hello"):
        assert relevant.inject([user(question)], "ann") == newest.inject([user(question)], "ann")


def test_the_relevant_fact_survives_a_tight_token_cap(store: Any) -> None:
    save(store, "ann", ANN_FACTS)
    store.save_fact(Fact("ann", "notes", "a long note " * 20))
    ltm = LongTermMemory(store, inject_max_tokens=40)
    lines = injected_facts(ltm.inject([user(QUESTION)], "ann"))
    assert "- allergy: peanuts" in lines
    assert len(lines) < len(ANN_FACTS) + 1
    newest = LongTermMemory(store, inject_mode="newest", inject_max_tokens=40)
    assert "- allergy: peanuts" not in injected_facts(newest.inject([user(QUESTION)], "ann"))


def test_an_agent_and_a_pipeline_send_the_relevant_facts(store: Any) -> None:
    many_facts(store, 30)
    ltm = LongTermMemory(store, inject_max_facts=4)
    model = ScriptedModel(["You are allergic to peanuts."], record=True)
    agent = Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                             conversation_id="chat", long_term_memory=ltm)  # fmt: skip
    try:
        agent.run(QUESTION)
    finally:
        agent.stop()
    assert "- allergy: peanuts" in injected_facts(model.calls[0][0])
    assert not any(is_injected(m) for m in store.get(Conv("ann", "chat")))
    provider = PipelineProvider(store, Pipeline([SlidingWindow(last=2)]), long_term_memory=ltm)
    prepared = provider.prepare(Conv("ann", "chat"), [user("hi"), user(QUESTION)])
    assert "- allergy: peanuts" in injected_facts(prepared)


def test_injecting_facts_that_all_fit_tokenizes_nothing_and_imports_no_numpy() -> None:
    script = textwrap.dedent(
        """
        import sys
        from otpmem.memory import LongTermMemory
        from otpmem.stores import Fact, MemoryStore
        store = MemoryStore.start_link()
        store.save_fact(Fact("ann", "allergy", "peanuts"))
        ltm = LongTermMemory(store)
        sent = ltm.inject([{"role": "user", "content": "what food allergy do I have"}], "ann")
        assert "allergy: peanuts" in sent[0]["content"], sent
        print("numpy" in sys.modules)
        ltm.get_relevant("allergy", user_id="ann")
        print("numpy" in sys.modules)
        store.stop()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_injection_options_are_checked() -> None:
    store = MemoryStore.start_link()
    try:
        with pytest.raises(ValueError, match="inject_mode"):
            LongTermMemory(store, inject_mode="random")
        with pytest.raises(ValueError, match="inject_max_facts"):
            LongTermMemory(store, inject_max_facts=0)
    finally:
        store.stop()


# -- concurrency ---------------------------------------------------------------------------------


def test_writers_and_askers_on_threads_see_their_own_writes_and_no_one_elses(
    store: Any,
) -> None:
    save(store, "bob", {"allergy": "cats", "pet": "parrot"})
    ltm = LongTermMemory(store)
    stop = threading.Event()
    errors: list[str] = []

    def writer(n: int) -> None:
        for i in range(15):
            key = f"pet_{n}_{i}"
            store.save_fact(Fact("ann", key, f"parrot {n} {i}"))
            if key not in keys(ltm.get_relevant("parrot", user_id="ann", limit=1000)):
                errors.append(f"{key} saved, not found")
            if i % 3 == 0:
                store.delete_fact("ann", key)
                if key in keys(ltm.get_relevant("parrot", user_id="ann", limit=1000)):
                    errors.append(f"{key} deleted, found")

    def asker(user_id: str) -> None:
        while not stop.is_set():
            for hit in ltm.get_relevant("parrot allergy", user_id=user_id, limit=1000):
                if hit.fact.user_id != user_id:
                    errors.append(f"{user_id} was given {hit.fact}")

    askers = [threading.Thread(target=asker, args=(u,)) for u in ("ann", "bob", "ann")]
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for thread in [*askers, *writers]:
        thread.start()
    for thread in writers:
        thread.join(timeout=60)
    stop.set()
    for thread in askers:
        thread.join(timeout=10)
    assert not any(t.is_alive() for t in [*askers, *writers])
    assert errors == []
    expected = {f"pet_{n}_{i}" for n in range(3) for i in range(15) if i % 3}
    assert set(keys(ltm.get_relevant("parrot", user_id="ann", limit=1000))) == expected
    assert keys(ltm.get_relevant("parrot", user_id="bob")) == ["pet"]


# -- crashes and restarts ------------------------------------------------------------------------


def test_a_killed_memory_store_restarts_with_every_fact_ranked() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("relevant-crash")])
    try:
        store = MemoryStore.named("relevant-crash")
        ltm = LongTermMemory(store)
        save(store, "ann", ANN_FACTS)
        assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "peanuts"
        faults.kill(store, grace=5.0)
        sup.sync_tree()
        store.save_fact(Fact("ann", "allergy_2", "sesame"))
        found = keys(ltm.get_relevant(QUESTION, user_id="ann", limit=10))
        assert {"allergy", "allergy_2", "favorite_food"} <= set(found)
    finally:
        sup.stop()


def test_a_killed_leveldb_store_restarts_with_every_fact_ranked(tmp_path: Path) -> None:
    sup = Supervisor.start_link([LevelDBStore.child_spec(tmp_path / "db", "relevant-db")])
    try:
        store = LevelDBStore.named("relevant-db")
        ltm = LongTermMemory(store)
        save(store, "ann", ANN_FACTS)
        assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "peanuts"
        faults.kill(store, grace=5.0)
        sup.sync_tree()
        assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "peanuts"
        store.delete_fact("ann", "allergy")
        store.save_fact(Fact("ann", "allergy_2", "sesame"))
        assert ltm.get_relevant(QUESTION, user_id="ann")[0].fact.value == "sesame"
    finally:
        sup.stop()


def test_after_a_kill_9_every_acknowledged_fact_is_ranked(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    path = tmp_path / "db"
    script = textwrap.dedent(
        f"""
        import os, signal
        from otpmem.memory import LongTermMemory
        from otpmem.stores import Fact, LevelDBStore
        store = LevelDBStore.start_link({str(path)!r})
        ltm = LongTermMemory(store)
        for i in range(30):
            store.save_fact(Fact("ann", f"allergy_{{i}}", f"peanut kind {{i}}"))
            ltm.get_relevant("peanut", user_id="ann")
            print(i, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == -9, result.stderr
    acknowledged = {f"allergy_{i}" for i in map(int, result.stdout.split())}
    assert len(acknowledged) == 30
    store = opened(path)
    ltm = LongTermMemory(store)
    assert set(keys(ltm.get_relevant("peanut", user_id="ann", limit=100))) == acknowledged
