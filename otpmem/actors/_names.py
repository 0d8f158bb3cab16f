"""The name registry: one name per process, freed before its exit is announced."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ._errors import AlreadyStarted

if TYPE_CHECKING:
    from ._process import Process

_names: dict[str, Process] = {}
_lock = threading.Lock()


def check_name(name: object) -> str:
    """Return ``name`` if it is a usable name, else raise ``TypeError``/``ValueError``."""
    if not isinstance(name, str):
        raise TypeError(f"a process name must be a str, got {type(name).__name__}: {name!r}")
    if not name:
        raise ValueError("a process name must not be empty")
    return name


def reserve(name: str, process: Process) -> None:
    """Bind ``name`` to ``process``; raise ``AlreadyStarted`` if a live process holds it."""
    check_name(name)
    with _lock:
        holder = _names.get(name)
        if holder is not None and holder is not process and not holder.dead:
            raise AlreadyStarted(name, holder)
        if process.name is not None and process.name != name:
            raise ValueError(f"{process!r} is already registered as {process.name!r}")
        if process.dead:
            from ._errors import NoProcess

            raise NoProcess(process)
        _names[name] = process
        process.name = name


def lookup(name: str) -> Process | None:
    """The live process registered under ``name``, or None."""
    process = _names.get(name)
    if process is None or process.dead:
        return None
    return process


def unregister(name: str) -> None:
    """Remove ``name``; raise ``KeyError`` naming it if it is not registered."""
    with _lock:
        process = _names.pop(name, None)
        if process is None:
            raise KeyError(f"no process is registered as {name!r}")
        process.name = None


def release(process: Process) -> None:
    """Free the name of an exiting process (only if it still holds it)."""
    name = process.name
    if name is None:
        return
    with _lock:
        if _names.get(name) is process:
            del _names[name]


def registered() -> list[str]:
    """Every registered name."""
    with _lock:
        return [n for n, p in _names.items() if not p.dead]
