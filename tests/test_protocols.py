"""``conforms`` answers as ``isinstance`` does, and an agent learns whether its provider
takes keys from the provider's own ``append``, whatever form it has."""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import pytest

from otpmem.agents import Agent
from otpmem.llm import ChatModel, ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.protocols import conforms
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
    """A provider of the protocol's bare shape: append without keys."""

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


def test_an_agent_keys_its_writes_only_when_its_providers_append_takes_keys(
    store: MemoryStoreHandle,
) -> None:
    # An instance whose append is a function set on it, not a method of its class.
    odd = Unkeyed(store)
    odd.append = lambda conv, messages, idempotency_key=None, *, follows=None: (  # type: ignore[method-assign]
        odd.inner.append(conv, messages, idempotency_key, follows=follows)
    )
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
