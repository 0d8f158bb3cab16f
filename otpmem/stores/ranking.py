"""Where a store's ``search`` finds a ranked index: indexes attach themselves here.

The stores layer cannot import the index (``otpmem.memory`` sits above it), so the index
comes to the store: ``RecallIndex`` attaches a ranked search for the store it serves when
it starts and detaches when it exits, however it exits. ``StoreClient.search`` asks
``attached(handle)`` on every call and falls back to its substring scan when nothing is
attached.

A search is keyed by the store's registered name when the index was given a named handle
(so it serves every incarnation under that name), else by the store process's pid (that
incarnation only). A handle finds it by either: a named handle by its name and the pid it
resolves to, a handle to one process by that pid and the name the process holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from ..messages import Conv
from ._base import SearchHit

RankedSearch = Callable[[str, str | None, Conv | None, int, str, float | None], list[SearchHit]]
"""``(query, owner, conversation or None, limit, mode, timeout) -> hits``: the scope was
checked by the store (``search_scope``) before the call."""

_lock = threading.Lock()
# key -> the searches attached under it, newest last. Replaced whole on every change, so
# readers on any thread read it without the lock.
_attached: dict[Hashable, tuple[tuple[object, RankedSearch], ...]] = {}


def store_key(store: Any) -> Hashable:
    """The key ``store`` is known by here: ("name", its name) for a named handle, else
    ("pid", its process's pid); ``ValueError`` if it is neither."""
    name = getattr(store, "_name", None)
    if isinstance(name, str):
        return ("name", name)
    pid = getattr(store, "pid", None)
    if pid is None:
        raise ValueError(f"a search attaches to a store handle, got {store!r}")
    return ("pid", int(pid))


def attach_index(store: Any, search: RankedSearch) -> object:
    """Make ``search`` answer ``store``'s searches; return a token for ``detach_index``."""
    key = store_key(store)
    token = object()
    with _lock:
        _attached[key] = (*_attached.get(key, ()), (token, search))
    return token


def detach_index(token: object) -> None:
    """Undo one ``attach_index`` (a token already detached is ignored)."""
    with _lock:
        for key, entries in list(_attached.items()):
            kept = tuple(e for e in entries if e[0] is not token)
            if len(kept) == len(entries):
                continue
            if kept:
                _attached[key] = kept
            else:
                del _attached[key]


def attached(handle: Any) -> RankedSearch | None:
    """The newest search attached for the store behind ``handle``, or None."""
    if not _attached:
        return None
    name = getattr(handle, "name", None)
    entries = _attached.get(("name", name)) if name is not None else None
    if not entries:
        pid = getattr(handle, "pid", None)
        entries = _attached.get(("pid", int(pid))) if pid is not None else None
    return entries[-1][1] if entries else None
