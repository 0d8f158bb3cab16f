"""OtpmemChatMessageHistory: exact round trips, otpmem's own messages read by LangChain, and
RunnableWithMessageHistory over it with langchain-core's fake chat model, sync and async."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from otpmem.agents import Agent
from otpmem.integrations.langchain import OtpmemChatMessageHistory
from otpmem.llm import ChatResponse, ScriptedModel
from otpmem.messages import Conv, InvalidMessage
from otpmem.stores import LevelDBStore, MemoryStore

ANN = Conv("ann", "trip")
# RunnableWithMessageHistory is deprecated in favour of LangGraph; it is still what most
# LangChain code holds a chat history with, so it is what this adapter must work under.
RWMH_DEPRECATED = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")

TURN: list[BaseMessage] = [
    SystemMessage("You book trains."),
    HumanMessage("Lyon to Paris, please", id="h-1", additional_kwargs={"lang": "en"}),
    AIMessage(
        "",
        id="a-1",
        tool_calls=[{"name": "book", "args": {"from": "Lyon", "to": "Paris"}, "id": "call-1"}],
        response_metadata={"model_name": "fake", "finish_reason": "tool_calls"},
        usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
    ),
    ToolMessage('{"seat": "12A"}', tool_call_id="call-1", name="book", id="t-1"),
    AIMessage([{"type": "text", "text": "Booked: seat 12A."}], id="a-2"),
]


@pytest.fixture(params=["memory", "leveldb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    handle = (
        MemoryStore.start_link()
        if request.param == "memory"
        else LevelDBStore.start_link(tmp_path / "db")
    )
    yield handle
    handle.stop()


def test_messages_round_trip_exactly_tool_calls_results_and_metadata_included(store: Any) -> None:
    history = OtpmemChatMessageHistory(store, ANN)
    history.add_messages(TURN)
    assert history.messages == TURN
    stored = store.get(ANN)
    # otpmem's own shape, for its agents, windows and recall:
    assert [m["role"] for m in stored] == ["system", "user", "assistant", "tool", "assistant"]
    assert stored[2]["tool_calls"][0]["function"]["name"] == "book"
    assert stored[3]["tool_call_id"] == "call-1"
    history.clear()
    assert history.messages == []


async def test_the_async_methods_round_trip_too(store: Any) -> None:
    history = OtpmemChatMessageHistory(store, ANN)
    await history.aadd_messages(TURN[:2])
    await history.aadd_messages(TURN[2:])
    assert await history.aget_messages() == TURN
    await history.aclear()
    assert await history.aget_messages() == []


def test_an_otpmem_agents_turn_reads_as_langchain_messages() -> None:
    store = MemoryStore.start_link()
    replies = [
        ChatResponse(
            tool_calls=(
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                },
            )
        ),
        ChatResponse(content="5"),
    ]

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = Agent.start_link(
        llm=ScriptedModel(replies), memory={"store": store}, conversation_id="calc", tools=[add]
    )
    try:
        agent.run("2+3?")
        messages = OtpmemChatMessageHistory(store, "calc").messages
        assert [type(m).__name__ for m in messages] == [
            "HumanMessage",
            "AIMessage",
            "ToolMessage",
            "AIMessage",
        ]
        assert messages[1].tool_calls[0]["args"] == {"a": 2, "b": 3}  # type: ignore[attr-defined]
        assert messages[2].tool_call_id == "c1"  # type: ignore[attr-defined]
        assert messages[3].content == "5"
    finally:
        agent.stop()
        store.stop()


def test_a_window_never_starts_with_an_orphaned_tool_result(store: Any) -> None:
    history = OtpmemChatMessageHistory(store, ANN, window=3)
    history.add_messages(TURN)
    # The newest 3 would begin with the tool result; its call comes along, the system stays.
    assert history.messages == [TURN[0], TURN[2], TURN[3], TURN[4]]


def test_a_message_otpmem_cannot_hold_stores_nothing_of_its_batch(store: Any) -> None:
    history = OtpmemChatMessageHistory(store, ANN)
    with pytest.raises(InvalidMessage):
        history.add_messages([HumanMessage("kept?"), ChatMessage("hm", role="critic")])
    assert history.messages == []


def _chain(seen: list[list[BaseMessage]], replies: list[str]) -> Any:
    prompt = ChatPromptTemplate.from_messages(
        [MessagesPlaceholder("history"), ("human", "{question}")]
    )

    def capture(value: Any) -> Any:
        seen.append(value.to_messages())
        return value

    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))
    return prompt | RunnableLambda(capture) | model


@RWMH_DEPRECATED
def test_runnable_with_message_history_remembers_across_invocations(store: Any) -> None:
    seen: list[list[BaseMessage]] = []
    chain = RunnableWithMessageHistory(
        _chain(seen, ["Hello Ann", "You are Ann"]),
        lambda session_id: OtpmemChatMessageHistory(store, Conv("ann", session_id)),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "s1"}}
    assert chain.invoke({"question": "I am Ann"}, config).content == "Hello Ann"
    assert chain.invoke({"question": "Who am I?"}, config).content == "You are Ann"
    assert [m.content for m in seen[1]] == ["I am Ann", "Hello Ann", "Who am I?"]
    assert [m["content"] for m in store.get(Conv("ann", "s1"))] == [
        "I am Ann",
        "Hello Ann",
        "Who am I?",
        "You are Ann",
    ]
    assert store.get(Conv("bob", "s1")) == []  # the session id alone names no tenant


@RWMH_DEPRECATED
async def test_runnable_with_message_history_async(store: Any) -> None:
    seen: list[list[BaseMessage]] = []
    chain = RunnableWithMessageHistory(
        _chain(seen, ["one", "two"]),
        lambda session_id: OtpmemChatMessageHistory(store, Conv("ann", session_id)),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "s2"}}
    assert (await chain.ainvoke({"question": "first"}, config)).content == "one"
    assert (await chain.ainvoke({"question": "second"}, config)).content == "two"
    assert [m.content for m in seen[1]] == ["first", "one", "second"]
    assert len(store.get(Conv("ann", "s2"))) == 4


def test_the_constructor_refuses_what_is_not_a_store(store: Any) -> None:
    with pytest.raises(TypeError, match="ChatMemory"):
        OtpmemChatMessageHistory({}, ANN)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        OtpmemChatMessageHistory(store, ANN, window=0)
