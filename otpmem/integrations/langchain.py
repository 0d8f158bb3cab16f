"""LangChain faces of otpmem: a chat message history and a vector store (``otpmem[langchain]``).

::

    from otpmem.integrations.langchain import OtpmemChatMessageHistory

    history = OtpmemChatMessageHistory(store, Conv("ann", "trip"))
    chain = RunnableWithMessageHistory(model, lambda session: history_for(session))

A message is stored in otpmem's own shape (the OpenAI chat dict that agents, windows and
recall read), converted by langchain-core's ``convert_to_openai_messages``; LangChain's
whole message (``message_to_dict``: ids, ``additional_kwargs``, ``response_metadata``,
content blocks) rides along in ``metadata["langchain"]``, so what is added is what is read
back. Messages written by otpmem itself (an agent's turns) have none, and are read back
with ``convert_to_messages``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    BaseMessage,
    convert_to_messages,
    convert_to_openai_messages,
    message_to_dict,
    messages_from_dict,
)

from .. import aio
from ..memory import safe_window
from ..messages import ConvLike, as_conv, short_repr, thaw
from ..stores import ChatMemory
from .langchain_vectorstore import LangChainEmbedder, OtpmemVectorStore

LANGCHAIN_KEY = "langchain"
"""The metadata field that keeps LangChain's own form of a message."""


def to_otpmem(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message as an otpmem message (OpenAI shape, LangChain's dict in metadata).

    ``TypeError`` for anything but a LangChain message; what it holds is checked as every
    message is when stored (``InvalidMessage`` names the field: NaN, nesting, types).
    """
    if not isinstance(message, BaseMessage):
        raise TypeError(
            f"a LangChain message (a BaseMessage) is expected, got {type(message).__name__}: "
            f"{short_repr(message)}"
        )
    converted = convert_to_openai_messages(message)
    assert isinstance(converted, dict)
    stored: dict[str, Any] = {k: v for k, v in converted.items() if v is not None}
    stored.setdefault("content", "")
    stored["metadata"] = {LANGCHAIN_KEY: message_to_dict(message)}
    return stored


def from_otpmem(message: Mapping[str, Any]) -> BaseMessage:
    """An otpmem message as a LangChain message: exact when LangChain wrote it."""
    plain = thaw(message) if not isinstance(message, dict) else dict(message)
    metadata = plain.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get(LANGCHAIN_KEY), Mapping):
        return messages_from_dict([thaw(metadata[LANGCHAIN_KEY])])[0]
    plain.pop("metadata", None)
    return convert_to_messages([plain])[0]


class OtpmemChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history kept by an otpmem store: supervised, durable, per tenant::

        history = OtpmemChatMessageHistory(otpmem.default_store(), Conv("ann", "trip"))
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])
        history.messages          # [HumanMessage("hi"), AIMessage("hello")]
        await history.aget_messages()

    ``window=n`` reads only the pinned messages and the newest ``n`` others, never a tool
    result without the assistant message that called it (``safe_window``). The async
    methods run through ``otpmem.aio``: no executor thread, no blocked loop.
    """

    def __init__(self, store: ChatMemory, conv: ConvLike, *, window: int | None = None) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must be an otpmem store (ChatMemory), got {store!r}")
        if window is not None and (type(window) is not int or window < 1):
            raise ValueError(f"window must be None or an int >= 1, got {window!r}")
        self.store = store
        self.conv = as_conv(conv)
        self.window = window

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The conversation as LangChain messages, oldest first."""
        stored = self.store.get(self.conv)
        if self.window is not None:
            stored = safe_window(stored, self.window)
        return [from_otpmem(m) for m in stored]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store ``messages`` as one batch: all of them, or none if one is invalid
        (``TypeError`` for what is not a LangChain message, naming its position)."""
        if isinstance(messages, str | bytes | Mapping | BaseMessage) or not isinstance(
            messages, Iterable
        ):
            raise TypeError(
                "add_messages takes a sequence of LangChain messages, got "
                f"{type(messages).__name__}: {short_repr(messages)}"
            )
        batch = []
        for n, message in enumerate(messages):
            if not isinstance(message, BaseMessage):
                raise TypeError(
                    f"add_messages: messages[{n}] is a {type(message).__name__}, not a "
                    f"LangChain message (BaseMessage): {short_repr(message)}"
                )
            batch.append(to_otpmem(message))
        if batch:
            self.store.add(self.conv, batch)

    def clear(self) -> None:
        """Delete the conversation."""
        self.store.clear(self.conv)

    async def aget_messages(self) -> list[BaseMessage]:
        """``messages``, awaited."""
        return await aio.run(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """``add_messages``, awaited."""
        await aio.run(self.add_messages, messages)

    async def aclear(self) -> None:
        """``clear``, awaited."""
        await aio.run(self.clear)


__all__ = [
    "LANGCHAIN_KEY",
    "LangChainEmbedder",
    "OtpmemChatMessageHistory",
    "OtpmemVectorStore",
    "from_otpmem",
    "to_otpmem",
]
