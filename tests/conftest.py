"""Every test must stop what it starts: the leak check runs after each one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors.testing import no_leaks  # noqa: F401 - autouse fixture
from otpmem.stores import LevelDBStore, LevelDBStoreHandle


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
