"""The application tree: the default store as a supervised singleton, and the agents.

::

    otpmem (one_for_one, INTENSITY restarts in PERIOD s)
    ├── default_store   the store's supervisor (STORE_INTENSITY in STORE_PERIOD s) over a
    │                   TableKeeper + MemoryStore pair, a LevelDBStore under data_dir, or
    │                   a PostgresStore (store="postgres": a DSN, or embedded under data_dir)
    ├── recall_index    a RecallIndex over the default store, by name: default_store().search
    │                   is ranked, memory={"recall": True} shares it; it pulls on a query,
    │                   so a write pays nothing for it
    └── agents          simple_one_for_one: agents started with otpmem.start_agent()

Shutdown goes newest first: agents stop before the index and the store they use.

The intensities are two budgets in series. The store's supervisor absorbs a burst of store
crashes; when it gives up (no data lost: the table goes up to the root and comes back down),
the root counts one restart. So the root gives up only after 11 such escalations in 10 s,
about 230 store crashes in a burst, or when the agents' supervisor keeps failing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .actors import NoProcess, ServerExited, whereis
from .actors.runtime import lookup
from .agents import Agent, AgentAlreadyStarted, AgentHandle, AgentOptions, set_activation
from .agents.directory import AgentDirectory, option_values
from .memory.recall import default as recall
from .messages import Conv, short_repr
from .protocols import parameters_of
from .stores import (
    DEFAULT_STORE_NAME,
    STORE_INTENSITY,
    STORE_PERIOD,
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
INTENSITY = 10
PERIOD = 10.0
"""The root's and the agents' supervisors: 10 restarts in 10 s (see the module docstring)."""
logger = logging.getLogger("otpmem.app")
_lock = threading.Lock()


class AppError(RuntimeError):
    """The application is not in the state the call needs."""


Listener = Callable[[SupervisorEvent], None]


STORES = ("memory", "leveldb", "postgres")


def store_kind(store: str | None, data_dir: str | os.PathLike[str] | None, dsn: str | None) -> str:
    """The default store ``start()`` makes of its arguments: memory, leveldb or postgres."""
    if store is None:
        store = "postgres" if dsn is not None else "memory" if data_dir is None else "leveldb"
    if store not in STORES:
        raise ValueError(f"store must be one of {', '.join(STORES)}, got {short_repr(store)}")
    if dsn is not None and store != "postgres":
        raise ValueError(f"a dsn is for store='postgres', not store={store!r}")
    if store == "leveldb" and data_dir is None:
        raise ValueError("store='leveldb' needs data_dir, the directory of its LevelDB")
    if store == "memory" and data_dir is not None:
        raise ValueError("store='memory' keeps nothing on disk: drop data_dir, or choose leveldb")
    return store


def _store_spec(
    kind: str,
    data_dir: str | os.PathLike[str] | None,
    sync: bool,
    intensity: int,
    period: float,
    listeners: list[Listener],
    postgres: dict[str, Any],
) -> ChildSpec:
    if kind == "memory":
        return MemoryStore.child_spec(
            DEFAULT_STORE_NAME,
            "default_store",
            intensity=intensity,
            period=period,
            listeners=listeners,
        )
    if kind == "postgres":
        from .stores.postgres import PostgresStore  # the extra: imported only when asked for

        return PostgresStore.child_spec(
            postgres["dsn"],
            DEFAULT_STORE_NAME,
            "default_store",
            namespace=postgres["namespace"],
            pool_size=postgres["pool_size"],
            data_dir=data_dir,
            fence=postgres["fence"],
            intensity=intensity,
            period=period,
            listeners=listeners,
        )
    assert data_dir is not None
    return LevelDBStore.child_spec(
        data_dir,
        DEFAULT_STORE_NAME,
        "default_store",
        sync=sync,
        intensity=intensity,
        period=period,
        listeners=listeners,
    )


def _handle_class(kind: str) -> type[Any]:
    if kind == "postgres":
        from .stores.postgres import PostgresStoreHandle

        return PostgresStoreHandle
    return MemoryStoreHandle if kind == "memory" else LevelDBStoreHandle


def _start_agent(options: AgentOptions) -> AgentHandle | None:
    try:
        return Agent.start_link(**option_values(options))
    except AgentAlreadyStarted:
        # Activated by a call while the supervisor restarted it (or the reverse): the agent
        # runs, which is all either start wanted. OTP's ignore drops this child.
        return None


def _agents_supervisor(timeout: float | None) -> SupervisorHandle | None:
    agents: Any = whereis(AGENTS_NAME)
    if agents is None:
        # The root may be restarting the agents' supervisor: a call queued behind the exit
        # is answered once the root has dealt with it.
        root: Any = whereis(APP_NAME)
        if root is None:
            return None
        try:
            root.count_children(timeout)
        except (NoProcess, ServerExited):
            return None
        agents = whereis(AGENTS_NAME)
    return agents  # type: ignore[no-any-return]


_directory: AgentDirectory | None = None


def start(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    sync: bool = True,
    intensity: int = INTENSITY,
    period: float = PERIOD,
    store_intensity: int = STORE_INTENSITY,
    store_period: float = STORE_PERIOD,
    listeners: Iterable[Listener] = (),
    store: str | None = None,
    dsn: str | None = None,
    namespace: str = "otpmem",
    pool_size: int = 8,
    fence: Callable[[Conv], Any] | None = None,
) -> SupervisorHandle:
    """Start the application tree; the default store lives in memory, in LevelDB under
    ``data_dir``, or in PostgreSQL (``store="postgres"``, or any ``dsn``). An unsupervised
    default store started earlier hands its conversations over to the supervised one.

    ``store`` is ``"memory"`` (no ``data_dir``), ``"leveldb"`` (``data_dir``) or
    ``"postgres"``: the server at ``dsn``, or without one an embedded PostgreSQL under
    ``data_dir`` (a temporary directory if none), in the schema ``namespace`` with
    ``pool_size`` connections; many nodes may start on one schema and share it, and
    ``fence(conv)`` names the lease each add must still hold (see ``PostgresStore``).

    The root and the agents' supervisor allow ``intensity`` restarts in ``period`` s (10
    in 10 s); the store's own supervisor ``store_intensity`` in ``store_period`` s (20 in
    5 s). The two budgets multiply: with the defaults the store may crash about 230 times
    in a burst before the root gives up, which loses the in-memory conversations; a store
    crash loop still stops the application within a second. ``listeners`` hear every
    supervisor of the tree, including the ones it restarts.
    """
    listeners = list(listeners)
    kind = store_kind(store, data_dir, dsn)
    if fence is not None and kind != "postgres":
        raise ValueError(f"fence needs store='postgres' (its leases live there), not {kind!r}")
    postgres = {"dsn": dsn, "namespace": namespace, "pool_size": pool_size, "fence": fence}
    # Built (and its arguments checked) before an orphan store is stopped: a bad argument
    # must not cost the orphan's conversations.
    spec = _store_spec(kind, data_dir, sync, store_intensity, store_period, listeners, postgres)
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
                listeners=listeners,
            ),
            type="supervisor",
        )
        handle_class = _handle_class(kind)
        set_supervised(handle_class)
        recall.set_supervised(True)
        global _directory
        _directory = AgentDirectory(_agents_supervisor)
        set_activation(_directory.activate)
        try:
            root = Supervisor.start(
                [
                    spec,
                    recall.default_index_spec(handle_class),
                    agents,
                ],
                strategy="one_for_one",
                intensity=intensity,
                period=period,
                name=APP_NAME,
                listeners=listeners,
            )
        except BaseException:
            _forget_supervision(None)
            raise
        root.subscribe(_forget_supervision)
        if carried is not None and carried["conversations"]:
            default_store_handle().import_(carried)
        return root


def _forget_supervision(event: SupervisorEvent | None) -> None:
    # The root stops for good (asked to, or past its intensity): no more restarts to wait,
    # and no agent to activate.
    global _directory
    if event is None or event.kind == "shutdown":
        set_supervised(None)
        recall.set_supervised(False)
        set_activation(None)
        _directory = None


def stop(timeout: float | None = 60.0) -> None:
    """Stop the application: agents first, then the index, then the store."""
    root = whereis(APP_NAME)
    if root is None:
        raise AppError("otpmem is not running")
    root.stop("shutdown", timeout)


@parameters_of(start)
@contextmanager
def running(*args: Any, **kwargs: Any) -> Iterator[SupervisorHandle]:
    """``with otpmem.running(): ...``: start the tree, stop it on the way out (the same
    parameters as ``start``)."""
    root = start(*args, **kwargs)
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


START_TIMEOUT = 30.0
"""Seconds ``start_agent`` waits for the agent's init."""


def _known_options(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[AgentDirectory, AgentOptions]:
    directory = _directory
    if directory is None or whereis(APP_NAME) is None:
        raise AppError("otpmem is not running: otpmem.start() first, or use Agent.start_link")
    options = AgentOptions(*args, **kwargs)
    if options.conversation_id is None:
        # Fixed here, not in Agent.start_link: a restarted agent must find its conversation.
        conversation_id = f"conv-{uuid.uuid4().hex[:16]}"
        options = dataclasses.replace(options, conversation_id=conversation_id)
    return directory, options


@parameters_of(AgentOptions)
def start_agent(*args: Any, **kwargs: Any) -> AgentHandle:
    """Start an agent under the application (``Agent.start_link``'s parameters): it is
    restarted if it crashes and activated again by a call after it stopped or was lost.

    The handle is the agent's identity (its name, else its conversation): it follows the
    agent across restarts and activations. ``AgentAlreadyStarted`` if that agent runs.
    """
    directory, options = _known_options(args, kwargs)
    name, handle = directory.define(options)
    try:
        started = directory.start(name, START_TIMEOUT)
    except StartChildFailed as failure:
        directory.forget(name)
        # A bad option is the caller's mistake: raise it as Agent.start_link would.
        if isinstance(failure.reason, TypeError | ValueError):
            raise failure.reason from None
        raise
    if started is None:  # a call activated it first, or another start did
        raise AgentAlreadyStarted(name, lookup(name))
    return handle


@parameters_of(AgentOptions)
def define_agent(*args: Any, **kwargs: Any) -> AgentHandle:
    """Make an agent known without starting it (``start_agent``'s parameters): its first
    call activates it. With ``idle_timeout``, a million agents can be known while only the
    ones in use run."""
    directory, options = _known_options(args, kwargs)
    return directory.define(options)[1]


def forget_agent(agent: AgentHandle | str, timeout: float | None = 5.0) -> bool:
    """Stop the agent (a handle or a name) and forget it, so no call activates it again;
    its conversation stays in the store. False if the application did not know it."""
    directory = _directory
    if directory is None:
        raise AppError("otpmem is not running")
    name = agent if isinstance(agent, str) else agent.name
    if not isinstance(name, str):
        raise TypeError(f"forget_agent takes an AgentHandle or a name, got {short_repr(agent)}")
    known = directory.forget(name)
    process = lookup(name)
    if process is not None:
        with contextlib.suppress(NoProcess):
            AgentHandle(process).stop(timeout=timeout)
    return known


def known_agents() -> list[AgentHandle]:
    """Every agent the application knows, running or not, in the order they became known."""
    directory = _directory
    if directory is None:
        raise AppError("otpmem is not running")
    return [AgentHandle.named(name) for name in directory.names()]
