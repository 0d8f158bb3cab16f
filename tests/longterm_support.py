"""What the long-term memory, usage and guardrail tests share: a store of either kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.stores import ChatMemory, LevelDBStoreHandle, LongTermStore, MemoryStore


def either_store(
    request: pytest.FixtureRequest,
    opened: Callable[..., LevelDBStoreHandle],
    tmp_path: Path,
) -> Iterator[Any]:
    """A MemoryStore, then a LevelDBStore: a test module makes it its ``store`` fixture
    with ``store = both_stores()``, and every test that takes it runs on both."""
    if request.param == "memory":
        memory = MemoryStore.start_link()
        yield memory
        if memory.alive:
            memory.stop()
    else:
        yield opened(tmp_path / "db")


def both_stores() -> Any:
    """The ``store`` fixture of a module: MemoryStore, then LevelDBStore."""
    return pytest.fixture(params=["memory", "leveldb"], name="store")(either_store)


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


def answered(text: str, prompt: int, completion: int, cost: str | None = None) -> dict[str, Any]:
    """An assistant message carrying usage, as an agent stores it."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cost is not None:
        usage["cost"] = cost
    return {"role": "assistant", "content": text, "metadata": {"usage": usage}}


class Unstamped:
    """A store of one's own without ``facts_stamp``: a store's members, delegated."""

    def __init__(self, store: Any) -> None:
        self._store = store


def _delegated(name: str) -> Callable[..., Any]:
    def member(self: Unstamped, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._store, name)(*args, **kwargs)

    return member


for _name in {n for p in (ChatMemory, LongTermStore) for n in dir(p) if not n.startswith("_")}:
    setattr(Unstamped, _name, _delegated(_name))
