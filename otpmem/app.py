"""The application tree: the default store as a supervised singleton, and the agents.

::

    otpmem (one_for_one)
    ├── default_store   MemoryStore + its heir (or a LevelDBStore under data_dir)
    └── agents          simple_one_for_one: agents started with otpmem.start_agent()

Shutdown goes newest first: agents stop before the store they write to.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .actors import whereis
from .agents import Agent, AgentHandle
from .stores import (
    DEFAULT_STORE_NAME,
    LevelDBStore,
    LevelDBStoreHandle,
    MemoryStore,
    MemoryStoreHandle,
)
from .stores.default import set_supervised
from .supervisors import (
    ChildSpec,
    StartChildFailed,
    Supervisor,
    SupervisorEvent,
    SupervisorHandle,
)

APP_NAME = "otpmem"
AGENTS_NAME = "otpmem.agents"
logger = logging.getLogger("otpmem.app")
_lock = threading.Lock()


class AppError(RuntimeError):
    """The application is not in the state the call needs."""


def _store_spec(
    data_dir: str | os.PathLike[str] | None, sync: bool, intensity: int, period: float
) -> ChildSpec:
    if data_dir is None:
        return MemoryStore.child_spec(
            DEFAULT_STORE_NAME, "default_store", intensity=intensity, period=period
        )
    path = os.fspath(data_dir)
    return ChildSpec(
        "default_store",
        start=lambda: LevelDBStore.start_link(path, name=DEFAULT_STORE_NAME, sync=sync),
    )


def _start_agent(options: dict[str, Any]) -> AgentHandle:
    return Agent.start_link(**options)


def start(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    sync: bool = True,
    intensity: int = 10,
    period: float = 10.0,
) -> SupervisorHandle:
    """Start the application tree; the default store lives in memory, or in LevelDB under
    ``data_dir``. Every supervisor of the tree allows ``intensity`` restarts in ``period``
    seconds. An unsupervised default store started earlier hands its conversations over
    to the supervised one."""
    with _lock:
        if whereis(APP_NAME) is not None:
            raise AppError("otpmem is already running; otpmem.stop() it first")
        orphan: Any = whereis(DEFAULT_STORE_NAME)
        carried = None
        if orphan is not None:
            carried = orphan.export(all_users=True)
            orphan.stop()
            logger.warning(
                "an unsupervised default store was running: its %d conversation(s) move "
                "to the supervised one",
                len(carried["conversations"]),
            )
        agents = ChildSpec(
            "agents",
            start=lambda: Supervisor.start_link(
                [ChildSpec("agent", start=_start_agent, restart="transient")],
                strategy="simple_one_for_one",
                intensity=intensity,
                period=period,
                name=AGENTS_NAME,
            ),
            type="supervisor",
        )
        set_supervised(MemoryStoreHandle if data_dir is None else LevelDBStoreHandle)
        try:
            root = Supervisor.start(
                [_store_spec(data_dir, sync, intensity, period), agents],
                strategy="one_for_one",
                intensity=intensity,
                period=period,
                name=APP_NAME,
            )
        except BaseException:
            set_supervised(None)
            raise
        root.subscribe(_forget_supervision)
        if carried is not None and carried["conversations"]:
            default_store_handle().import_(carried)
        return root


def _forget_supervision(event: SupervisorEvent) -> None:
    # The root stops for good (asked to, or past its intensity): no more restarts to wait.
    if event.kind == "shutdown":
        set_supervised(None)


def stop(timeout: float | None = 60.0) -> None:
    """Stop the application: agents first, then the store."""
    root = whereis(APP_NAME)
    if root is None:
        raise AppError("otpmem is not running")
    root.stop("shutdown", timeout)


@contextmanager
def running(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    sync: bool = True,
    intensity: int = 10,
    period: float = 10.0,
) -> Iterator[SupervisorHandle]:
    """``with otpmem.running(): ...``: start the tree, stop it on the way out."""
    root = start(data_dir, sync=sync, intensity=intensity, period=period)
    try:
        yield root
    finally:
        if root.alive:
            root.stop("shutdown", 60.0)


def default_store_handle() -> Any:
    """The running default store, by name."""
    handle = whereis(DEFAULT_STORE_NAME)
    if handle is None:
        raise AppError("no default store is running")
    return type(handle).named(DEFAULT_STORE_NAME)


def running_agents() -> list[AgentHandle]:
    """The agents running under the application, oldest first."""
    agents: Any = whereis(AGENTS_NAME)
    if agents is None:
        raise AppError("otpmem is not running")
    return [c.handle for c in agents.which_children() if c.handle is not None]


def start_agent(**options: Any) -> AgentHandle:
    """Start an agent under the application's agent supervisor (restarted if it crashes)."""
    agents = whereis(AGENTS_NAME)
    if agents is None:
        raise AppError("otpmem is not running: otpmem.start() first, or use Agent.start_link")
    # Fixed here, not in Agent.start_link: a restarted agent must find its conversation.
    options.setdefault("conversation_id", f"conv-{uuid.uuid4().hex[:16]}")
    try:
        handle = agents.start_child((options,))  # type: ignore[attr-defined]
    except StartChildFailed as failure:
        # A bad option is the caller's mistake: raise it as Agent.start_link would.
        if isinstance(failure.reason, TypeError | ValueError):
            raise failure.reason from None
        raise
    assert isinstance(handle, AgentHandle)
    return handle
