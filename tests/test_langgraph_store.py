"""OtpmemStore: LangGraph's BaseStore over facts and recall, in a graph that runs offline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore

from otpmem.integrations.langgraph import OtpmemStore
from otpmem.stores import LevelDBStore, MemoryStore


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


@pytest.fixture
def memories(store: MemoryStore) -> Iterator[OtpmemStore]:
    adapter = OtpmemStore(store, tenant_index=1)
    yield adapter
    adapter.close()


def test_put_get_delete_and_dates(memories: OtpmemStore) -> None:
    ns = ("memories", "ann")
    memories.put(ns, "food", {"text": "allergic to peanuts"})
    item = memories.get(ns, "food")
    assert item is not None and item.value == {"text": "allergic to peanuts"}
    assert item.namespace == ns and item.key == "food"
    memories.put(ns, "food", {"text": "allergic to shellfish"})
    updated = memories.get(ns, "food")
    assert updated is not None and updated.value == {"text": "allergic to shellfish"}
    assert updated.created_at == item.created_at and updated.updated_at >= item.updated_at
    memories.delete(ns, "food")
    assert memories.get(ns, "food") is None


def test_items_are_facts_of_their_tenant_and_never_cross(
    memories: OtpmemStore, store: MemoryStore
) -> None:
    memories.put(("memories", "ann", "prefs"), "seat", {"text": "window seat"})
    memories.put(("memories", "bob", "prefs"), "seat", {"text": "aisle seat"})
    assert [f.user_id for f in store.get_facts("ann")] == ["ann"]
    assert [i.value["text"] for i in memories.search(("memories", "bob"), query="seat")] == [
        "aisle seat"
    ]
    with pytest.raises(ValueError, match="names no tenant"):
        memories.search(("memories",), query="seat")
    with pytest.raises(ValueError, match="crosses tenants"):
        memories.list_namespaces(prefix=("memories",))
    store.forget_user("bob")  # not the chat only: bob's long-term memory goes with it
    assert memories.get(("memories", "bob", "prefs"), "seat") is None
    assert memories.search(("memories", "bob"), query="seat") == []


def test_semantic_search_ranks_current_versions_only(memories: OtpmemStore) -> None:
    ns = ("memories", "ann")
    memories.put(ns, "a", {"text": "I am allergic to peanuts"})
    memories.put(ns, "b", {"text": "I live in Lyon by the river"})
    memories.put(ns, "c", {"text": "my cat is called Pixel"}, index=False)
    found = memories.search(ns, query="which allergies do I have?")
    assert found[0].key == "a" and found[0].score is not None
    assert {i.key for i in found} == {"a", "b", "c"}  # the rest pad the limit, unscored
    memories.put(ns, "a", {"text": "I like hiking"})  # the old text is no longer found
    assert memories.search(ns, query="peanuts", limit=1)[0].score is None
    memories.delete(ns, "b")
    assert "b" not in {i.key for i in memories.search(ns, query="Lyon river")}


def test_filters_offsets_and_field_indexing(memories: OtpmemStore) -> None:
    ns = ("docs", "ann")
    for n in range(5):
        memories.put(ns, f"d{n}", {"n": n, "title": f"note {n}", "body": "shared words"})
    memories.put(ns, "x", {"n": 9, "title": "other", "body": "zebra"}, index=["body"])
    assert {i.key for i in memories.search(ns, filter={"n": {"$gte": 3}})} == {"d3", "d4", "x"}
    assert [i.key for i in memories.search(ns, filter={"title": "note 2"})] == ["d2"]
    assert len(memories.search(ns, limit=2, offset=1)) == 2
    assert memories.search(ns, query="zebra", limit=1)[0].key == "x"


def test_list_namespaces_with_prefix_suffix_and_depth(memories: OtpmemStore) -> None:
    memories.put(("memories", "ann", "prefs"), "k", {"v": 1})
    memories.put(("memories", "ann", "trips", "2026"), "k", {"v": 1})
    memories.put(("memories", "bob", "prefs"), "k", {"v": 1})
    assert memories.list_namespaces(prefix=("memories", "ann")) == [
        ("memories", "ann", "prefs"),
        ("memories", "ann", "trips", "2026"),
    ]
    assert memories.list_namespaces(prefix=("memories", "ann"), max_depth=3) == [
        ("memories", "ann", "prefs"),
        ("memories", "ann", "trips"),
    ]
    assert memories.list_namespaces(prefix=("memories", "ann"), suffix=("prefs",)) == [
        ("memories", "ann", "prefs")
    ]


async def test_the_async_methods_and_batch(memories: OtpmemStore) -> None:
    ns = ("memories", "ann")
    await memories.aput(ns, "k", {"text": "async peanuts"})
    assert (await memories.aget(ns, "k")).value == {"text": "async peanuts"}  # type: ignore[union-attr]
    assert (await memories.asearch(ns, query="peanuts"))[0].key == "k"
    assert await memories.alist_namespaces(prefix=ns) == [ns]
    await memories.adelete(ns, "k")
    assert await memories.aget(ns, "k") is None


def test_a_fixed_tenant_holds_every_namespace(store: MemoryStore) -> None:
    mine = OtpmemStore(store, user_id="ann")
    try:
        mine.put(("prefs",), "seat", {"text": "window"})
        assert mine.list_namespaces() == [("prefs",)]
        assert store.get_facts("ann")[0].key == 'langgraph:["prefs","seat"]'
    finally:
        mine.close()
    with pytest.raises(ValueError, match="exactly one"):
        OtpmemStore(store)


def test_items_survive_a_reopen_of_the_leveldb_store(tmp_path: Path) -> None:
    store = LevelDBStore.start_link(tmp_path / "db")
    memories = OtpmemStore(store, tenant_index=1)
    memories.put(("memories", "ann"), "food", {"text": "allergic to peanuts"})
    memories.close()
    store.stop()
    store = LevelDBStore.start_link(tmp_path / "db")
    memories = OtpmemStore(store, tenant_index=1)
    try:
        assert memories.search(("memories", "ann"), query="peanuts")[0].key == "food"
    finally:
        memories.close()
        store.stop()


def test_a_langgraph_agent_remembers_across_threads_through_the_store(
    memories: OtpmemStore,
) -> None:
    """Thread 1 tells the graph a fact; thread 2 (a new conversation) is answered with it
    in its prompt: the graph's long-term memory lives in otpmem."""
    prompts: list[list[BaseMessage]] = []
    model = GenericFakeChatModel(
        messages=iter([AIMessage("Noted."), AIMessage("You are allergic to peanuts.")])
    )

    def call_model(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> Any:
        user = config["configurable"]["user_id"]
        namespace = ("memories", user)
        last = state["messages"][-1]
        text = str(last.content)
        if text.lower().startswith("remember"):
            store.put(namespace, f"m{len(store.search(namespace))}", {"text": text})
        found = store.search(namespace, query=text, limit=3)
        system = "Known: " + "; ".join(i.value["text"] for i in found)
        prompt = [SystemMessage(system), *state["messages"]]
        prompts.append(prompt)
        return {"messages": [model.invoke(prompt)]}

    builder = StateGraph(MessagesState)
    builder.add_node("call_model", call_model)
    builder.add_edge(START, "call_model")
    graph = builder.compile(checkpointer=InMemorySaver(), store=memories)
    first: Any = {"configurable": {"thread_id": "1", "user_id": "ann"}}
    graph.invoke({"messages": [HumanMessage("Remember: I am allergic to peanuts")]}, first)
    second: Any = {"configurable": {"thread_id": "2", "user_id": "ann"}}
    answer = graph.invoke({"messages": [HumanMessage("What am I allergic to?")]}, second)
    assert answer["messages"][-1].content == "You are allergic to peanuts."
    assert "allergic to peanuts" in str(prompts[1][0].content)
    assert len(prompts[1]) == 2  # a new thread: only its own message, plus what was recalled
    stranger: Any = {"configurable": {"thread_id": "3", "user_id": "bob"}}
    model.messages = iter([AIMessage("I know nothing about you.")])
    graph.invoke({"messages": [HumanMessage("What am I allergic to?")]}, stranger)
    assert prompts[2][0].content == "Known: "
