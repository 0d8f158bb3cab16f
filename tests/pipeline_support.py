"""What the pipeline, apply_memory and turn-order tests share: a store that counts what it
is asked to read, a chat model that records what it is asked, and conversation builders."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from otpmem.llm import ChatResponse
from otpmem.messages import ConvLike, is_summary
from otpmem.stores import StoredWindow


class CountingStore:
    """A ChatMemory over another that counts the messages each read returns: the cost of
    a turn's reads, measured without a clock. ``reads`` lists (kind, messages read)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.reads: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def _count(self, kind: str, n: int) -> None:
        with self._lock:
            self.reads.append((kind, n))

    def read_since(self, mark: int) -> int:
        """Messages read since ``len(self.reads)`` was ``mark``."""
        with self._lock:
            return sum(n for _, n in self.reads[mark:])

    def add(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        self.store.add(conv, messages, idempotency_key, follows=follows)

    def get(self, conv: ConvLike, last: int | None = None) -> list[dict[str, Any]]:
        found = self.store.get(conv, last)
        self._count("get", len(found))
        return found

    def window(self, conv: ConvLike, last: int) -> StoredWindow:
        found = self.store.window(conv, last)
        self._count("window", len(found.tail) + len(found.pinned))
        return found

    def clear(self, conv: ConvLike) -> None:
        self.store.clear(conv)

    def conversations(self, user_id: str | None = None) -> list[Any]:
        return self.store.conversations(user_id)

    def count(self, conv: ConvLike) -> int:
        return self.store.count(conv)

    def forget_user(self, user_id: str) -> None:
        self.store.forget_user(user_id)

    def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        found = self.store.pinned(conv)
        self._count("pinned", len(found))
        return found

    def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        return self.store.key_position(conv, idempotency_key)


class RecordingModel:
    """A ChatModel named ``name`` that answers ``reply(messages)`` and records the options
    of every call (thread-safe)."""

    def __init__(self, name: str = "fake", reply: str = "a summary") -> None:
        self.name = name
        self.reply = reply
        self.options: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        with self._lock:
            self.options.append(options)
        return ChatResponse(content=f"{self.reply} by {self.name}/{options.get('model')}")


SYSTEM = {"role": "system", "content": "You are a careful assistant."}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def exchanges(n: int, start: int = 0) -> list[dict[str, Any]]:
    """``n`` messages, question and answer in turn, of varied length."""
    return [
        user(f"question {i}? " + "detail " * (i % 5))
        if i % 2 == 0
        else assistant(f"answer {i}. " + "more " * (i % 3))
        for i in range(start, start + n)
    ]


def summaries(store: Any, conv: ConvLike) -> list[dict[str, Any]]:
    """The summaries stored in the conversation, oldest first."""
    return [m for m in store.get(conv) if is_summary(m)]
