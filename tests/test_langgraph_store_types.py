"""OtpmemStore refuses a value, filter or index of the wrong type with a TypeError that names
it (issue 33, point 12), and what is stored stays as it was."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from otpmem.integrations.langgraph import OtpmemStore
from otpmem.stores import MemoryStore

NS = ("memories", "ann")


@pytest.fixture
def memories() -> Iterator[OtpmemStore]:
    store = MemoryStore.start_link()
    adapter = OtpmemStore(store, tenant_index=1)
    adapter.put(NS, "k", {"text": "allergic to peanuts"})
    yield adapter
    adapter.close()
    store.stop()


def _unchanged(memories: OtpmemStore) -> None:
    item = memories.get(NS, "k")
    assert item is not None and item.value == {"text": "allergic to peanuts"}


@pytest.mark.parametrize("value", ["str", ["text", "x"], 3])
def test_put_of_a_value_that_is_no_dict_names_it(memories: OtpmemStore, value: object) -> None:
    with pytest.raises(TypeError, match=r"put\('k'\): a LangGraph item's value is a dict, got"):
        memories.put(NS, "k", value)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=repr(value).replace("[", r"\[")):
        asyncio.run(memories.aput(NS, "k", value))  # type: ignore[arg-type]
    _unchanged(memories)


def test_search_with_a_filter_that_is_no_dict_names_it(memories: OtpmemStore) -> None:
    with pytest.raises(TypeError, match="search filter is a dict of field -> value, got str 'str'"):
        memories.search(NS, filter="str")  # type: ignore[arg-type]
    assert [i.key for i in memories.search(NS, filter={"text": "allergic to peanuts"})] == ["k"]


def test_index_given_as_one_str_is_refused_not_split_into_letters(memories: OtpmemStore) -> None:
    with pytest.raises(
        TypeError, match=r"index is a list of field paths such as \['text'\], got 'text'"
    ):
        memories.put(NS, "k", {"text": "allergic to shellfish"}, index="text")  # type: ignore[arg-type]
    _unchanged(memories)
    with pytest.raises(TypeError, match="fields is a list of field paths"):
        OtpmemStore(memories.store, tenant_index=1, fields="text")
    memories.put(NS, "k2", {"text": "likes the window seat"}, index=["text"])
    assert [i.key for i in memories.search(NS, query="window seat")][:1] == ["k2"]
