"""Tenancy of ``get_relevant``, as a property: whatever the users, facts, questions,
deletes and forgets, and in whatever order, every fact returned is the asking user's as it
stands now (a deleted or superseded one never comes back), and every fact that shares a
word with the question is found. On stamped stores and on a store without stamps, with
caches small enough to evict."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.memory import LongTermMemory
from otpmem.stores import Fact, LevelDBStore, MemoryStore
from tests.longterm_support import Unstamped

USERS = st.sampled_from(["ann", "ann ", "a\x00b"])
KEYS = st.sampled_from(["k0", "k1", "k2"])
# Words no analyser drops: a word matches itself however it is stemmed (so do the keys,
# which questions may name too).
WORDS = ["zebra", "quartz", "violin", "tundra", "cobalt", "mango", "harbor", "falcon"]
VALUES = st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join)
QUERIES = st.lists(st.sampled_from([*WORDS, "what", "the", "k0"]), min_size=1, max_size=4)
OPS = st.one_of(
    st.tuples(st.just("save"), USERS, KEYS, VALUES),
    st.tuples(
        st.just("save_facts"), USERS, st.dictionaries(KEYS, VALUES, max_size=3), st.lists(KEYS)
    ),
    st.tuples(st.just("delete"), USERS, KEYS),
    st.tuples(st.just("forget"), USERS),
    st.tuples(st.just("ask"), USERS, QUERIES),
)
Model = dict[str, dict[str, str]]


def apply(store: Any, op: tuple[Any, ...]) -> None:
    kind, user = op[0], op[1]
    if kind == "save":
        store.save_fact(Fact(user, op[2], op[3]))
    elif kind == "save_facts":
        store.save_facts(user, [Fact(user, k, v) for k, v in op[2].items()], op[3])
    elif kind == "delete":
        store.delete_fact(user, op[2])
    elif kind == "forget":
        store.forget_user(user)


def apply_model(model: Model, op: tuple[Any, ...]) -> None:
    kind, user = op[0], op[1]
    facts = model.setdefault(user, {})
    if kind == "save":
        facts[op[2]] = op[3]
    elif kind == "save_facts":
        facts.update(op[2])
        for key in op[3]:
            facts.pop(key, None)
    elif kind == "delete":
        facts.pop(op[2], None)
    elif kind == "forget":
        facts.clear()


def check_answer(ltm: LongTermMemory, model: Model, user: str, words: list[str]) -> None:
    hits = ltm.get_relevant(" ".join(words), user_id=user, limit=50)
    current = model.get(user, {})
    assert all(hit.fact.user_id == user for hit in hits), "another user's fact"
    found = {hit.fact.key: hit.fact.value for hit in hits}
    assert len(found) == len(hits), "a fact twice"
    assert found.items() <= current.items(), "a deleted or superseded fact came back"
    wanted = {k for k, v in current.items() if {k, *v.split()} & set(words)}
    assert set(found) == wanted, "a fact sharing a word with the question was missed"
    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(OPS, min_size=1, max_size=30), cached=st.sampled_from([2, 4, 100]))
def test_a_question_returns_only_the_askers_current_facts(
    ops: list[tuple[Any, ...]], cached: int
) -> None:
    root = Path(tempfile.mkdtemp(prefix="otpmem-relevant-"))
    memory, disk, plain = (
        MemoryStore.start_link(),
        LevelDBStore.start_link(root),
        MemoryStore.start_link(),
    )
    stores = [memory, disk, plain]
    try:
        ltms = [LongTermMemory(store, max_cached_facts=cached) for store in (memory, disk)] + [
            LongTermMemory(Unstamped(plain), max_cached_facts=cached)
        ]
        model: Model = {}
        for op in ops:
            if op[0] != "ask":
                for store in stores:
                    apply(store, op)
                apply_model(model, op)
            # Every write is followed by a question of its user, so the caches are full of
            # what the next write must replace; the random questions come in between.
            words = op[2] if op[0] == "ask" else WORDS
            for ltm in ltms:
                check_answer(ltm, model, op[1], words)
        for ltm in ltms:
            for user in model:
                check_answer(ltm, model, user, WORDS)
            _, held = ltm.index.cached()
            assert held <= cached, "the cache stays within its bound"
    finally:
        for store in stores:
            store.stop()
        shutil.rmtree(root, ignore_errors=True)
