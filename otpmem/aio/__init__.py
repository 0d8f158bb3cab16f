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

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from .. import app
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


async def start(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> SupervisorHandle:
    """``otpmem.start(...)``, awaited: the application tree (same arguments)."""
    return await run(app.start, data_dir, **options)


async def stop(timeout: float | None = 60.0) -> None:
    """``otpmem.stop()``, awaited: agents first, then the store."""
    await run(app.stop, timeout)


@asynccontextmanager
async def running(
    data_dir: str | os.PathLike[str] | None = None, **options: Any
) -> AsyncIterator[SupervisorHandle]:
    """``async with aio.running(): ...``: the tree for the block (a web app's lifespan)."""
    root = await start(data_dir, **options)
    try:
        yield root
    finally:
        if root.alive:
            await run(root.stop, "shutdown", 60.0)


async def start_agent(**options: Any) -> AsyncAgent:
    """``otpmem.start_agent(...)``, awaited: a supervised agent, as an ``AsyncAgent``."""
    return AsyncAgent(await run(app.start_agent, **options))


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
    "new_turn_id",
    "run",
    "running",
    "running_agents",
    "start",
    "start_agent",
    "stop",
    "wrap",
]
