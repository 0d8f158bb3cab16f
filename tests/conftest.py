"""Every test must stop what it starts: the leak check runs after each one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors.testing import no_leaks  # noqa: F401 - autouse fixture
from otpmem.agents import AgentHandle
from otpmem.stores import LevelDBStore, LevelDBStoreHandle
from tests.cli_support import LockHolder, make_store


@pytest.fixture
def opened() -> Iterator[Callable[..., LevelDBStoreHandle]]:
    """Open LevelDB stores in the test; every one still alive is stopped at the end."""
    stores: list[LevelDBStoreHandle] = []

    def open_store(path: Path, **kwargs: Any) -> LevelDBStoreHandle:
        store = LevelDBStore.start_link(path, **kwargs)
        stores.append(store)
        return store

    yield open_store
    for store in stores:
        if store.alive:
            store.stop()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """A LevelDB store holding ``tests.cli_support.CONVERSATIONS``, closed again."""
    return make_store(tmp_path / "store")


@pytest.fixture
def lock_holder() -> Iterator[list[LockHolder]]:
    """``holders.append(LockHolder(path))`` holds a store's lock; all released at the end."""
    holders: list[LockHolder] = []
    yield holders
    for holder in holders:
        if holder.proc.poll() is None:
            holder.release()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One embedded PostgreSQL (pgserver) for the whole session; its DSN.

    Its directory is made with mkdtemp, not pytest's tmp_path: run as root, pgserver runs
    the server as another user, who cannot enter pytest's 0700 base directory.
    """
    import shutil
    import tempfile
    import warnings

    with warnings.catch_warnings():  # XDG_RUNTIME_DIR unset: pgserver's lock goes to /tmp
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        import pgserver

    where = tempfile.mkdtemp(prefix="otpmem-test-pg-")
    server = pgserver.get_server(where, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run directory for the embedded PostgreSQL: made with mkdtemp, since pgserver (run
    as root) runs the server as another user, who cannot enter pytest's 0700 base."""
    import shutil
    import tempfile

    from tests.cli_support import servers_under

    where = Path(tempfile.mkdtemp(prefix="otpmem-run-test-"))
    try:
        yield where / "run"
    finally:
        for server in servers_under(where):  # only after a failure: the command stops it
            server.kill()
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def postgres_dsn(postgres_server: str) -> str:
    """The session's PostgreSQL DSN."""
    return postgres_server


@pytest.fixture
def pg_namespace(request: pytest.FixtureRequest) -> str:
    """A schema of this test's own: tests share one server, never one schema."""
    import re
    import uuid

    stem = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    return f"t_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=["memory", "leveldb", "postgres"])
def each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each of the three stores (the test runs once per store), stopped at the end."""
    if request.param == "memory":
        from otpmem.stores import MemoryStore

        handle: Any = MemoryStore.start_link()
    elif request.param == "leveldb":
        handle = LevelDBStore.start_link(str(tmp_path / "db"))
    else:
        from otpmem.stores.postgres import PostgresStore

        dsn = request.getfixturevalue("postgres_dsn")
        handle = PostgresStore.start_link(dsn, namespace=request.getfixturevalue("pg_namespace"))
    yield handle
    handle.stop()


@pytest.fixture
def agents() -> Iterator[list[AgentHandle]]:
    """Agents to stop at the end of the test (append what you start)."""
    started: list[AgentHandle] = []
    try:
        yield started
    finally:
        for agent in started:
            if agent.alive:
                agent.stop()
