"""One writer per conversation: two turns never interleave their writes.

A claim belongs to the process that made it (or the thread, outside any process) and is
released when it ends its turn, or when that process exits, however it exits: a killed
agent stuck in a tool frees its conversation at the moment it is declared dead, not when
its thread returns. Keys are dropped once released, so nothing grows with the number of
conversations ever written.

One exception: an agent killed while a write of its turn was in flight (a call queued at
the store, or work on the blocking pool) keeps its conversation until that write has
answered, or ``LINGER_LIMIT`` s have passed. The write may still land, and a turn that
started meanwhile would read the conversation without it: a retry of the same turn would
store its step again (its key refused as a duplicate, so the retry would answer with
messages the store does not hold), and another turn would put its own messages before it.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from ..actors import Event, current
from ..messages import Conv

logger = logging.getLogger("otpmem.agents")

LINGER_LIMIT = 30.0
"""At most this long (s) a dead agent's claim waits for its write in flight to answer;
past it, the next turn takes the conversation (and a warning is logged)."""


@dataclass
class _Claim:
    holder: object  # a Process, or a Thread outside any process
    cleanup: Callable[[], None] | None  # registered on the holder process's exit
    lingers_until: float | None = None  # monotonic deadline while a dead write is awaited


class Writers:
    """The registry of claims (see the module docstring); one for the whole Python process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[Hashable, _Claim] = {}
        self._waiters: dict[Hashable, list[Event]] = {}

    def acquire(self, key: Hashable, timeout: float) -> bool:
        """Claim ``key`` for the caller, waiting up to ``timeout`` s (0: do not wait)."""
        process = current()
        me: object = process if process is not None else threading.current_thread()
        with self._lock:
            if key not in self._holders:  # free, the common case: no clock, no loop
                self._take(key, me, process)
                return True
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                now = time.monotonic()
                held = self._holders.get(key)
                if held is not None and _overdue(held, now):
                    logger.warning(
                        "conversation %s: the write a killed turn had in flight did not "
                        "answer within %s s; the next turn goes ahead without it",
                        key,
                        LINGER_LIMIT,
                    )
                    del self._holders[key]
                    held = None
                if held is None:
                    self._take(key, me, process)
                    return True
                remaining = deadline - now
                if remaining <= 0:
                    return False
                if held.lingers_until is not None:
                    remaining = min(remaining, held.lingers_until - now)
                freed = Event()
                self._waiters.setdefault(key, []).append(freed)
            freed.wait(remaining)

    def _take(self, key: Hashable, me: object, process: Any) -> None:
        # Under the lock: the claim, and its release at the holder process's exit.
        cleanup = None
        if process is not None:
            cleanup = functools.partial(self.release, key, me)
            process.cleanups.append(cleanup)
        self._holders[key] = _Claim(me, cleanup)

    def release(self, key: Hashable, holder: object | None = None) -> None:
        """Release ``key`` if ``holder`` (default: the caller) holds it; wake its waiters.
        A claim kept for a write in flight (``linger``) is released when that write
        answers, not here."""
        if holder is None:
            process = current()
            holder = process if process is not None else threading.current_thread()
        self._release(key, holder, lingering=False)

    def linger(self, key: Hashable) -> None:
        """Keep the calling process's claim on ``key`` until the write a kill cut short
        answers: call it as ``Killed`` leaves that write."""
        process = current()
        in_flight = None if process is None else process.abandoned
        if in_flight is None:
            return  # nothing was sent: the claim goes as usual
        with self._lock:
            held = self._holders.get(key)
            if held is None or held.holder is not process:
                return
            held.lingers_until = time.monotonic() + LINGER_LIMIT
        in_flight.when_answered(functools.partial(self._release, key, process, True))

    def _release(self, key: Hashable, holder: object, lingering: bool) -> None:
        with self._lock:
            held = self._holders.get(key)
            if held is None or held.holder is not holder:
                return  # released already (e.g. at the holder's exit): never free another's
            if (held.lingers_until is not None) != lingering:
                return
            del self._holders[key]
            waiters = self._waiters.pop(key, [])
        if held.cleanup is not None:
            try:  # noqa: SIM105 - contextlib.suppress is three calls more on every turn
                holder.cleanups.remove(held.cleanup)  # type: ignore[attr-defined]
            except ValueError:
                pass  # run (and dropped) at the holder's exit already
        for freed in waiters:
            freed.set()

    def held(self) -> int:
        """How many conversations are claimed right now."""
        with self._lock:
            return len(self._holders)


def _overdue(held: _Claim, now: float) -> bool:
    return held.lingers_until is not None and now >= held.lingers_until


writers = Writers()


def writer_key(conv: Conv) -> Hashable:
    """What two turns must not write at once: the conversation itself.

    Not the provider or its store: two agents may reach one conversation through provider
    objects of their own (a user's provider need not expose a store at all). Two stores
    holding a conversation of the same key serialise their turns needlessly, never wrongly.
    """
    return conv
