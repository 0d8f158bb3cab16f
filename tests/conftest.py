"""Every test must stop what it starts: the leak check runs after each one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors.testing import no_leaks  # noqa: F401 - autouse fixture
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
