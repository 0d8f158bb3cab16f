"""Async faces of otpmem's objects: every method awaitable, the sync object untouched.

``wrap(obj)`` returns the face that fits: ``AsyncStore`` for a store, ``AsyncAgent`` for an
agent, ``AsyncIndex`` for a recall index, ``AsyncProvider`` for a memory provider, and
``AsyncFace`` (any method, awaited) for anything else. Each method runs the object's own
synchronous method through ``run``, so the semantics, validation and timeouts are exactly
the sync ones, and a method added to the sync class is awaitable here at once.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..agents import AgentHandle, TurnResult
from ..agents.agent import RUN_TIMEOUT
from ..memory import BasicMemoryProvider
from ..memory.recall import Hit, RecallIndexHandle
from ..messages import Conv, ConvLike
from ..stores import ChatMemory, Fact, SearchHit, StoredWindow
from ._bridge import run

T = TypeVar("T")


class AsyncFace(Generic[T]):
    """Any otpmem object, every method awaited: ``await AsyncFace(obj).method(...)``.

    Attributes that are not methods read through unchanged; ``.sync`` is the object itself.
    """

    __slots__ = ("_target",)

    def __init__(self, target: T) -> None:
        self._target = target

    @property
    def sync(self) -> T:
        """The synchronous object behind this face."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await run(attr, *args, **kwargs)

        return functools.update_wrapper(method, attr)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._target!r})"

    async def _run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return await run(getattr(self._target, name), *args, **kwargs)


class AsyncStore(AsyncFace[ChatMemory]):
    """A store, awaited: ``await AsyncStore(store).add(conv, messages)``.

    The ``ChatMemory`` protocol and the long-term records are typed here; every other
    method of the store (``export``, ``usage``, ``fact_history``, ...) is awaitable too.
    """

    __slots__ = ()

    async def add(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Append ``messages``; returns once they are stored (see ``ChatMemory.add``)."""
        await self._run("add", conv, messages, idempotency_key, follows=follows)

    async def get(
        self, conv: ConvLike, last: int | None = None, as_of: int | None = None
    ) -> list[dict[str, Any]]:
        """The conversation oldest first; ``last=n``: only the newest n; ``as_of=n``: as it
        was after its n-th message (a store that takes ``as_of``: a ``ForkStore``)."""
        if as_of is None:  # a ChatMemory that knows no as_of is still awaited as it is
            result: list[dict[str, Any]] = await self._run("get", conv, last)
        else:
            result = await self._run("get", conv, last, as_of)
        return result

    async def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` messages and the pinned ones before them."""
        result: StoredWindow = await self._run("window", conv, last)
        return result

    async def pinned(self, conv: ConvLike) -> list[tuple[int, dict[str, Any]]]:
        """(position, message) of every pinned message, oldest first."""
        result: list[tuple[int, dict[str, Any]]] = await self._run("pinned", conv)
        return result

    async def clear(self, conv: ConvLike) -> None:
        """Delete the conversation."""
        await self._run("clear", conv)

    async def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's."""
        result: list[Conv] = await self._run("conversations", user_id)
        return result

    async def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        result: int = await self._run("count", conv)
        return result

    async def forget_user(self, user_id: str) -> None:
        """Delete every conversation of ``user_id``."""
        await self._run("forget_user", user_id)

    async def search(self, query: str, **kwargs: Any) -> list[SearchHit]:
        """Text search within one tenant (``store.search``'s arguments)."""
        result: list[SearchHit] = await self._run("search", query, **kwargs)
        return result

    async def save_fact(self, fact: Fact, **kwargs: Any) -> Fact:
        """Upsert a fact on (user_id, key)."""
        result: Fact = await self._run("save_fact", fact, **kwargs)
        return result

    async def get_fact(self, user_id: str, key: str) -> Fact | None:
        """The fact, or None."""
        result: Fact | None = await self._run("get_fact", user_id, key)
        return result

    async def get_facts(self, user_id: str) -> list[Fact]:
        """Every fact of the user."""
        result: list[Fact] = await self._run("get_facts", user_id)
        return result

    async def delete_fact(self, user_id: str, key: str) -> bool:
        """Delete the fact; False if there was none."""
        result: bool = await self._run("delete_fact", user_id, key)
        return result


def new_turn_id() -> str:
    """A fresh turn id: keep it to retry the turn exactly after a cancel or a failure."""
    return f"turn-{uuid.uuid4().hex}"


class AsyncAgent(AsyncFace[AgentHandle]):
    """An agent, awaited: ``await AsyncAgent(agent).run("hello", turn_id=request_id)``.

    Every awaited turn has a turn id (a fresh one when none is given), so the turn is
    keyed from its first write: a task cancelled mid-turn leaves the turn running in the
    agent, and a retry with the same id answers from what was stored, storing nothing twice.
    """

    __slots__ = ()

    async def run(
        self, text: str, *, turn_id: str | None = None, timeout: float | None = RUN_TIMEOUT
    ) -> TurnResult:
        """Run one turn (``AgentHandle.run``); give ``turn_id`` to retry it exactly."""
        result: TurnResult = await self._run(
            "run", text, timeout=timeout, turn_id=turn_id or new_turn_id()
        )
        return result

    async def messages(self) -> list[dict[str, Any]]:
        """The conversation's stored messages."""
        result: list[dict[str, Any]] = await self._run("messages")
        return result

    async def add_message(self, message: Mapping[str, Any]) -> None:
        """Store one message in the conversation."""
        await self._run("add_message", message)

    async def clear_messages(self) -> None:
        """Forget the conversation."""
        await self._run("clear_messages")

    async def info(self) -> dict[str, Any]:
        """Conversation, turn count and settings."""
        result: dict[str, Any] = await self._run("info")
        return result

    async def stop(self, reason: Any = "normal", timeout: float | None = 5.0) -> None:
        """Stop the agent after the messages already queued."""
        await self._run("stop", reason, timeout)


class AsyncIndex(AsyncFace[RecallIndexHandle]):
    """A recall index, awaited: ``await AsyncIndex(index).get_relevant(query, user_id=u)``."""

    __slots__ = ()

    async def get_relevant(self, query: str, **kwargs: Any) -> list[Hit]:
        """The messages most relevant to ``query`` within one tenant, best first."""
        result: list[Hit] = await self._run("get_relevant", query, **kwargs)
        return result


class AsyncProvider(AsyncFace[BasicMemoryProvider]):
    """A memory provider, awaited: ``await AsyncProvider(provider).history(conv)``; the
    exactly-once members (keys, ``key_position``, ``window``, ``count``) are a
    ``MemoryProvider``'s."""

    __slots__ = ()

    async def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The stored messages a turn needs, oldest first."""
        result: list[dict[str, Any]] = await self._run("history", conv)
        return result

    async def append(
        self,
        conv: ConvLike,
        messages: Sequence[Mapping[str, Any]],
        idempotency_key: str | None = None,
        *,
        follows: str | None = None,
    ) -> None:
        """Store ``messages``; returns once they are stored (see ``MemoryProvider.append``)."""
        if idempotency_key is None and follows is None:
            await self._run("append", conv, messages)  # what a BasicMemoryProvider takes
        else:
            await self._run("append", conv, messages, idempotency_key, follows=follows)

    async def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """What to send of ``messages``."""
        result: list[Mapping[str, Any]] = await self._run("prepare", conv, messages)
        return result

    async def clear(self, conv: ConvLike) -> None:
        """Forget the conversation."""
        await self._run("clear", conv)

    async def key_position(self, conv: ConvLike, idempotency_key: str) -> int | None:
        """Where the batch stored with ``idempotency_key`` begins, or None."""
        result: int | None = await self._run("key_position", conv, idempotency_key)
        return result

    async def window(self, conv: ConvLike, last: int) -> StoredWindow:
        """The newest ``last`` stored messages and the pinned ones before them."""
        result: StoredWindow = await self._run("window", conv, last)
        return result

    async def count(self, conv: ConvLike) -> int:
        """How many messages the conversation holds."""
        result: int = await self._run("count", conv)
        return result


def wrap(target: Any) -> AsyncFace[Any]:
    """The async face that fits ``target``: store, agent, index, provider, or any object."""
    if isinstance(target, AsyncFace):
        return target
    if isinstance(target, AgentHandle):
        return AsyncAgent(target)
    if isinstance(target, RecallIndexHandle):
        return AsyncIndex(target)
    if isinstance(target, ChatMemory):
        return AsyncStore(target)
    if isinstance(target, BasicMemoryProvider):
        return AsyncProvider(target)
    return AsyncFace(target)


def awaitable(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """``fn`` as a coroutine function that runs it through ``run`` (for one-off calls)."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        return await run(fn, *args, **kwargs)

    return wrapper
