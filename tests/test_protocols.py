"""``conforms`` answers as ``isinstance`` does; an agent keys its writes when its provider
keeps the exactly-once contract (``MemoryProvider``), whatever form the provider has, and
refuses one that keeps part of it; every provider otpmem ships takes what the protocols
say, signatures and all (``signature_mismatches``)."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import pytest

from otpmem.agents import Agent
from otpmem.llm import ChatModel, ScriptedModel
from otpmem.memory import (
    BasicMemoryProvider,
    DefaultProvider,
    HybridProvider,
    MemoryProvider,
    PipelineProvider,
    RecallIndex,
    memory,
)
from otpmem.protocols import conforms, signature_mismatches
from otpmem.stores import MemoryStore, MemoryStoreHandle


@runtime_checkable
class Sized(Protocol):
    """A protocol with a data member: no class check is possible."""

    size: int


class Answers:
    def chat(self, messages: Any, tools: Any = None, **options: Any) -> Any:
        return None


class Silent:
    pass


def test_conforms_agrees_with_isinstance_for_classes_instances_and_data_members() -> None:
    with_attribute = Silent()
    with_attribute.chat = lambda messages, tools=None: None  # type: ignore[attr-defined]
    sized = types.SimpleNamespace(size=3)
    cases: list[tuple[object, Any]] = [
        (Answers(), ChatModel),
        (Silent(), ChatModel),
        (with_attribute, ChatModel),  # the method on the instance, not the class
        (ScriptedModel(["x"]), ChatModel),
        (None, ChatModel),
        ("chat", ChatModel),
        (sized, Sized),
        (Silent(), Sized),
    ]
    for value, protocol in cases:
        assert conforms(value, protocol) is isinstance(value, protocol), (value, protocol)
    # The answers differ among the cases: the check is not constant.
    assert {conforms(v, p) for v, p in cases} == {True, False}


class Unkeyed:
    """A provider of the protocol's bare shape (a ``BasicMemoryProvider``): append without
    keys, none of the exactly-once reads."""

    def __init__(self, store: MemoryStoreHandle) -> None:
        self.inner = DefaultProvider(store)
        self.appended: list[Any] = []

    def history(self, conv: Any) -> list[dict[str, Any]]:
        return self.inner.history(conv)

    def append(self, conv: Any, messages: Sequence[Mapping[str, Any]]) -> None:
        self.appended.append(list(messages))
        self.inner.append(conv, messages)

    def prepare(self, conv: Any, messages: Sequence[Mapping[str, Any]]) -> list[Any]:
        return list(messages)

    def clear(self, conv: Any) -> None:
        self.inner.clear(conv)


@pytest.fixture
def store() -> Any:
    handle = MemoryStore.start_link()
    try:
        yield handle
    finally:
        handle.stop()


def test_an_agent_keys_its_writes_exactly_when_its_provider_keeps_the_contract(
    store: MemoryStoreHandle,
) -> None:
    # An instance that keeps the contract through members set on it, not on its class.
    odd = Unkeyed(store)
    odd.append = lambda conv, messages, idempotency_key=None, *, follows=None: (  # type: ignore[method-assign]
        odd.inner.append(conv, messages, idempotency_key, follows=follows)
    )
    odd.key_position = odd.inner.key_position  # type: ignore[attr-defined]
    odd.window = odd.inner.window  # type: ignore[attr-defined]
    odd.count = odd.inner.count  # type: ignore[attr-defined]
    providers = {"keyed": DefaultProvider(store), "plain": Unkeyed(store), "odd": odd}
    expected = {"keyed": True, "plain": False, "odd": True}
    for _ in range(2):  # the second start of each kind answers from what the first learned
        for conv, provider in providers.items():
            turns: list[str] = []
            agent = Agent.start_link(
                llm=ScriptedModel(["ok"]),
                memory=provider,
                conversation_id=conv,
                callbacks={"on_turn_start": lambda meta, seen=turns: seen.append(meta["run_id"])},
            )
            try:
                agent.run("hello")
            finally:
                agent.stop()
            keyed = store.key_position(conv, f"turn:{turns[0]}:0") is not None
            assert keyed is expected[conv], conv
    assert len(store.get("plain")) == 4


def test_a_provider_keeping_part_of_the_contract_is_refused_naming_what_it_lacks(
    store: MemoryStoreHandle,
) -> None:
    half = Unkeyed(store)
    half.key_position = half.inner.key_position  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"lacks window, count"):
        Agent.start_link(llm=ScriptedModel(["ok"]), memory=half)
    with pytest.raises(TypeError, match=r"lacks append, prepare, clear$"):
        Agent.start_link(llm=ScriptedModel(["ok"]), memory=types.SimpleNamespace(history=list))


def test_every_shipped_provider_takes_what_the_protocol_says(store: MemoryStoreHandle) -> None:
    index = RecallIndex.start_link(store)
    try:
        shipped = [
            DefaultProvider(store),
            DefaultProvider(store, window=3),
            PipelineProvider(store, "summarize"),
            HybridProvider(store, index),
            memory("window", store=store).provider,
        ]
        for provider in shipped:
            assert conforms(provider, MemoryProvider), provider
            assert signature_mismatches(provider, MemoryProvider) == [], provider
        assert signature_mismatches(Unkeyed(store), BasicMemoryProvider) == []
    finally:
        index.stop()


def test_signature_mismatches_sees_what_isinstance_cannot(store: MemoryStoreHandle) -> None:
    plain = Unkeyed(store)
    assert isinstance(plain, BasicMemoryProvider)
    plain.key_position = lambda conv, key, extra: None  # type: ignore[attr-defined]
    plain.window = lambda conv, last=5: None  # type: ignore[attr-defined]
    plain.count = lambda conv: 0  # type: ignore[attr-defined]
    assert isinstance(plain, MemoryProvider)  # names only
    assert signature_mismatches(plain, MemoryProvider) == [
        "append: takes (conv, messages), not 'idempotency_key' at place 2",
        "append: takes (conv, messages), without 'follows'",
        "key_position: takes (conv, key, extra), not 'idempotency_key' at place 1",
        "key_position: 'key' is required, and the protocol does not pass it",
        "key_position: 'extra' is required, and the protocol does not pass it",
        "window: 'last' defaults to 5, not nothing",
    ]
