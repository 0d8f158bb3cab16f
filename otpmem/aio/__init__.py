"""asyncio faces: await otpmem's stores, agents, providers and application.

::

    from otpmem import aio

    async with aio.running(data_dir="data"):
        agent = await aio.start_agent(llm=model, conversation_id="trip", user_id="ann")
        result = await agent.run("Book a table", turn_id=request_id)
        store = await aio.default_store()
        await store.get(Conv("ann", "trip"), last=5)

No call blocks the event loop and none takes a thread: each runs in a short-lived
lightweight process on the runtime's schedulers, and the answer completes an asyncio
future from that scheduler's thread (``loop.call_soon_threadsafe``). ``call(handle, msg)``
awaits one ``GenServer`` call directly (for servers of your own).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .. import app
from ..agents import AgentOptions
from ..protocols import parameters_of
from ..stores import default_store as _default_store
from ..supervisors import SupervisorHandle
from ._bridge import call, run
from ._faces import (
    AsyncAgent,
    AsyncFace,
    AsyncIndex,
    AsyncProvider,
    AsyncStore,
    awaitable,
    new_turn_id,
    wrap,
)


@parameters_of(app.start)
async def start(*args: Any, **kwargs: Any) -> SupervisorHandle:
    """``otpmem.start(...)``, awaited: the application tree (the same parameters)."""
    return await run(app.start, *args, **kwargs)


async def stop(timeout: float | None = 60.0) -> None:
    """``otpmem.stop()``, awaited: agents first, then the store."""
    await run(app.stop, timeout)


@parameters_of(app.start)
@asynccontextmanager
async def running(*args: Any, **kwargs: Any) -> AsyncIterator[SupervisorHandle]:
    """``async with aio.running(): ...``: the tree for the block (a web app's lifespan),
    with ``otpmem.start``'s parameters."""
    root = await start(*args, **kwargs)
    try:
        yield root
    finally:
        if root.alive:
            await run(root.stop, "shutdown", 60.0)


@parameters_of(AgentOptions)
async def start_agent(*args: Any, **kwargs: Any) -> AsyncAgent:
    """``otpmem.start_agent(...)``, awaited: a supervised agent, as an ``AsyncAgent``
    (``AgentOptions``' parameters)."""
    return AsyncAgent(await run(app.start_agent, *args, **kwargs))


@parameters_of(AgentOptions)
async def define_agent(*args: Any, **kwargs: Any) -> AsyncAgent:
    """``otpmem.define_agent(...)``, awaited: a known agent its first call activates."""
    return AsyncAgent(await run(app.define_agent, *args, **kwargs))


async def default_store() -> AsyncStore:
    """``otpmem.default_store()``, awaited, as an ``AsyncStore``."""
    return AsyncStore(await run(_default_store))


async def running_agents() -> list[AsyncAgent]:
    """The agents running under the application, oldest first."""
    return [AsyncAgent(a) for a in await run(app.running_agents)]


__all__ = [
    "AsyncAgent",
    "AsyncFace",
    "AsyncIndex",
    "AsyncProvider",
    "AsyncStore",
    "awaitable",
    "call",
    "default_store",
    "define_agent",
    "new_turn_id",
    "run",
    "running",
    "running_agents",
    "start",
    "start_agent",
    "stop",
    "wrap",
]
