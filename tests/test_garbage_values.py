"""Values stored beside messages follow the messages' rules, in every backend and adapter.

Before (issue 28, part 6): adapters failed on wrong types with ``AttributeError``
(``add_messages(["str"])``, ``add_documents(["str"])``) or ``RecursionError`` (a
100,000-deep LangGraph value); NaN was refused in message metadata but stored in profiles
and LangGraph values; MemoryStore took 100,000-deep profile metadata that LevelDB and
PostgreSQL refused. Now each refuses with ``TypeError`` or ``ValueError`` naming the field,
by one rule (``otpmem.messages.freeze_value``), and stores nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.llm import ScriptedModel
from otpmem.memory import LongTermMemory
from otpmem.memory.longterm import ExtractionFailed
from otpmem.messages import MAX_DEPTH, Conv, InvalidMessage, freeze, freeze_value
from otpmem.stores import Fact, LevelDBStore, MemoryStore, Profile
from tests.garbage_support import DEEP_DICT, DEEP_LIST, RaisingEq, RaisingStr, deep_dict

BAD_VALUES: list[tuple[Any, str]] = [
    (math.nan, "not a finite number"),
    (math.inf, "not a finite number"),
    (DEEP_DICT, f"nested deeper than {MAX_DEPTH} levels"),
    (DEEP_LIST, f"nested deeper than {MAX_DEPTH} levels"),
    (RaisingEq(), "not storable"),
    (RaisingStr("x"), "not storable"),
    (b"bytes", "not storable"),
    (2**64, "does not fit in 64 bits"),
]
BAD_NAMES = ["nan", "inf", "deep dict", "deep list", "object", "str subclass", "bytes", "int"]


def refused_naming(field: str, why: str, raised: pytest.ExceptionInfo[BaseException]) -> None:
    """The refusal is a ValueError (not a RecursionError) that says what and where."""
    assert isinstance(raised.value, ValueError) and not isinstance(raised.value, RecursionError)
    assert field in str(raised.value) and why in str(raised.value)
    assert len(str(raised.value)) < 1_000


def test_freeze_value_is_the_rule_of_a_messages_metadata() -> None:
    assert freeze_value({"a": [1, 2.5, None, True, {"b": "c"}]}, "x") == {
        "a": [1, 2.5, None, True, {"b": "c"}]
    }
    # As deep as a message's metadata may nest, one level in: the same limit, not a new one.
    deepest = deep_dict(MAX_DEPTH - 1)
    assert freeze_value(deepest, "x") == deepest
    assert freeze({"role": "user", "content": "x", "metadata": deepest})["metadata"] == deepest
    with pytest.raises(InvalidMessage, match="nested deeper"):
        freeze({"role": "user", "content": "x", "metadata": deep_dict(MAX_DEPTH)})
    with pytest.raises(InvalidMessage, match="nested deeper"):
        freeze_value(deep_dict(MAX_DEPTH), "x")
    for value, why in BAD_VALUES:
        with pytest.raises(InvalidMessage) as raised:
            freeze_value({"k": value}, "metadata")
        refused_naming("metadata.k", why, raised)


# -- profiles, in every backend ----------------------------------------------------------------


@pytest.fixture(params=["memory", "leveldb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        handle: Any = MemoryStore.start_link()
    elif request.param == "leveldb":
        handle = LevelDBStore.start_link(tmp_path / "db", sync=False)
    else:
        from otpmem.stores import PostgresStore

        handle = PostgresStore.start_link(
            request.getfixturevalue("postgres_dsn"),
            namespace=request.getfixturevalue("pg_namespace"),
        )
    yield handle
    handle.stop()


def test_every_backend_refuses_the_same_profiles_and_keeps_the_one_it_holds(store: Any) -> None:
    store.save_profile(Profile("ann", "kept", {"tone": "brief"}))
    for value, why in BAD_VALUES:
        with pytest.raises(ValueError) as raised:
            store.save_profile(Profile("ann", "replaced", {"k": value}))
        refused_naming("metadata.k", why, raised)
        with pytest.raises(ValueError) as raised:  # the server's own check, raw
            store.call(("save_profile", Profile("ann", "replaced", {"k": value})))
        refused_naming("metadata.k", why, raised)
    for metadata in [DEEP_DICT, [1], "x", None]:
        with pytest.raises(ValueError, match="metadata"):
            store.save_profile(Profile("ann", "replaced", metadata))
    with pytest.raises(ValueError, match="summary"):
        store.save_profile(Profile("ann", RaisingStr("replaced")))
    profile = store.get_profile("ann")
    assert profile is not None
    assert (profile.summary, profile.metadata) == ("kept", {"tone": "brief"})


def test_every_backend_refuses_facts_of_subclassed_strs(store: Any) -> None:
    for fact in [
        Fact(RaisingStr("ann"), "k", "v"),
        Fact("ann", RaisingStr("k"), "v"),
        Fact("ann", "k", RaisingStr("v")),
    ]:
        with pytest.raises(ValueError):
            store.save_fact(fact)
        with pytest.raises(ValueError):
            store.call(("save_facts", "ann", [fact], [], None, 200, False))
    assert store.get_facts("ann") == []


def test_a_model_profile_the_stores_would_refuse_is_an_extraction_failure() -> None:
    store = MemoryStore.start_link()
    try:
        ltm = LongTermMemory(store)
        model = ScriptedModel(['{"summary": "Ann.", "metadata": {"score": NaN}}'])
        with pytest.raises(ExtractionFailed, match=r"metadata\.score"):
            ltm.update_profile("ann", model)
        assert store.get_profile("ann") is None
    finally:
        store.stop()


# -- the LangChain and LangGraph adapters ------------------------------------------------------


@pytest.fixture
def memory() -> Iterator[Any]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def test_chat_history_refuses_what_is_not_a_langchain_message_naming_its_place(
    memory: Any,
) -> None:
    from langchain_core.messages import HumanMessage

    from otpmem.integrations.langchain import OtpmemChatMessageHistory, to_otpmem

    history = OtpmemChatMessageHistory(memory, Conv("ann", "chat"))
    history.add_messages([HumanMessage("kept")])
    for given, where in [
        (["str"], "messages[0]"),
        ([HumanMessage("x"), {"role": "user", "content": "x"}], "messages[1]"),
        ("hi", "got str"),
        (None, "got NoneType"),
        (HumanMessage("x"), "got HumanMessage"),
    ]:
        with pytest.raises(TypeError, match=where.replace("[", r"\[")):
            history.add_messages(given)
    with pytest.raises(TypeError, match="BaseMessage"):
        to_otpmem("str")  # type: ignore[arg-type]
    for value, why in BAD_VALUES[:4]:
        with pytest.raises(ValueError) as raised:
            history.add_messages([HumanMessage("x", additional_kwargs={"v": value})])
        refused_naming("additional_kwargs.v", why, raised)
    assert [m.content for m in history.messages] == ["kept"]


def test_vector_store_refuses_what_is_not_a_document_naming_its_place(memory: Any) -> None:
    from langchain_core.documents import Document

    from otpmem.integrations.langchain import OtpmemVectorStore

    vectors = OtpmemVectorStore(memory, user_id="ann")
    try:
        vectors.add_documents([Document("kept", metadata={"n": 1})], ids=["kept"])
        for documents, kwargs, error, where in [
            (["str"], {}, TypeError, "documents[0]"),
            ([Document("a"), None], {}, TypeError, "documents[1]"),
            ("str", {}, TypeError, "documents must be a list"),
            ([Document("a")], {"ids": [5]}, TypeError, "ids[0]"),
            ([Document("a"), Document("b")], {"ids": ["x"]}, ValueError, "2 documents"),
        ]:
            with pytest.raises(error, match=where.replace("[", r"\[")):
                vectors.add_documents(documents, **kwargs)
        for value, why in BAD_VALUES:
            with pytest.raises(ValueError) as raised:
                vectors.add_documents([Document("kept", metadata={"n": value})], ids=["kept"])
            refused_naming("documents[0].metadata.n", why, raised)
        with pytest.raises(TypeError, match="texts"):
            vectors.add_texts("abc")
        with pytest.raises(TypeError, match=r"ids\[0\]"):
            vectors.get_by_ids([RaisingEq()])
        with pytest.raises(TypeError, match="k must be an int"):
            vectors.similarity_search("kept", k="4")
        [doc] = vectors.get_by_ids(["kept"])
        assert (doc.page_content, doc.metadata) == ("kept", {"n": 1})
        assert memory.count(vectors.conv) == 1
    finally:
        vectors.close()


def test_langgraph_store_refuses_values_by_the_message_rules_never_by_recursion(
    memory: Any,
) -> None:
    from otpmem.integrations.langgraph import OtpmemStore

    graph = OtpmemStore(memory, user_id="ann")
    try:
        graph.put(("memories",), "kept", {"food": "pears"})
        for value, why in BAD_VALUES:
            with pytest.raises(ValueError) as raised:
                graph.put(("memories",), "kept", {"food": value})
            refused_naming("value.food", why, raised)
        with pytest.raises(ValueError) as raised:
            graph.put(("memories",), "kept", DEEP_DICT)
        refused_naming("value", "nested deeper", raised)
        for value in ["pears", ["pears"], 5]:
            with pytest.raises(TypeError, match="value is a dict"):
                graph.put(("memories",), "kept", value)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="filter"):
            graph.search(("memories",), filter={"food": RaisingEq()})
        item = graph.get(("memories",), "kept")
        assert item is not None and item.value == {"food": "pears"}
        assert [fact.version for fact in memory.get_facts("ann")] == [1]
    finally:
        graph.close()
