"""Holds on budgets, the two halves MemoryStore and LevelDBStore share: the ledger their
servers keep (``Ledger``), and the handles' side (``ReservationClient``, PostgresStore's
handle too). See ``reservations`` for the contract.

A ledger is changed one request at a time, so a reservation's check and its hold are one
step: under MemoryStore's write lock (on the callers' threads, as its adds), by
LevelDBStore's server. It lives where the store's data lives in the Python process
(MemoryStore's table, a registry per LevelDB directory), so a crashed and restarted
server keeps the holds of the calls in flight.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..messages import Conv, ConvLike
from .longterm import Usage
from .reservations import (
    ABANDON,
    Amount,
    Hold,
    Limit,
    Reservation,
    ReserveArgs,
    check_hold_id,
    check_reserve,
    held_in,
    measure,
    refuses,
)

RESERVE_TIMEOUT = 10.0

Recorded = Callable[[Conv, Limit], Usage]
"""What a store has recorded in a limit's scope (and window) for a call in a conversation."""


@dataclass(frozen=True, slots=True)
class _Entry:
    conv: Conv
    hold: Hold
    expires: float


class Ledger:
    """The holds of a store's calls in flight, by user (a conversation of no user: by
    conversation), each with its expiry on this process's monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Its store takes requests one at a time; this lock is for a zombie incarnation's
        # last request meeting its successor's first.
        self._lock = threading.Lock()
        self._holds: dict[str, _Entry] = {}
        self._owners: dict[Any, dict[str, _Entry]] = {}
        self._expiries: list[tuple[float, str]] = []

    def reserve(
        self,
        conv: Conv,
        hold_id: str,
        hold: Hold,
        limits: Sequence[Limit],
        ttl: float,
        recorded: Recorded,
    ) -> Reservation:
        """Check every limit against ``recorded`` plus the unexpired holds in its scope, and
        take the hold if all pass (one of the same id is replaced first). Its caller makes
        one request at a time (the write lock, or the server): that makes the reads and
        the hold one step (``recorded`` may wait on the blocking pool, so it is read
        outside the ledger's own lock)."""
        spent = [measure(recorded(conv, limit), limit.measure) for limit in limits]
        with self._lock:
            now = self._clock()
            self._expire(now)
            self._drop(hold_id)
            for index, limit in enumerate(limits):
                held = self._held(conv, limit)
                if refuses(limit, spent[index], held):
                    return Reservation(hold_id, index, spent[index], held)
            entry = _Entry(conv, hold, now + ttl)
            self._holds[hold_id] = entry
            self._owners.setdefault(_owner(conv), {})[hold_id] = entry
            heapq.heappush(self._expiries, (entry.expires, hold_id))
            return Reservation(hold_id)

    def release(self, hold_id: str) -> bool:
        """Drop a hold; False if there was none."""
        with self._lock:
            self._expire(self._clock())
            return self._drop(hold_id)

    def count(self) -> int:
        """How many holds are kept (expired ones included until the next request)."""
        with self._lock:
            return len(self._holds)

    def _held(self, conv: Conv, limit: Limit) -> Amount | None:
        total: Amount = 0
        for entry in self._owners.get(_owner(conv), {}).values():
            if limit.scope == "conversation" and entry.conv != conv:
                continue
            amount = held_in(limit, entry.hold)
            if amount is None:
                return None
            total += amount
        return total

    def _drop(self, hold_id: str) -> bool:
        entry = self._holds.pop(hold_id, None)
        if entry is None:
            return False
        owner = _owner(entry.conv)
        mine = self._owners[owner]
        del mine[hold_id]
        if not mine:
            del self._owners[owner]
        return True

    def _expire(self, now: float) -> None:
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            expires, hold_id = heapq.heappop(expiries)
            entry = self._holds.get(hold_id)
            if entry is not None and entry.expires == expires:
                self._drop(hold_id)
        if len(expiries) > 2 * len(self._holds) + 64:
            # Released holds leave their expiries behind: rebuild from the live ones, so
            # the heap stays the size of the calls in flight (amortised O(1) a request).
            self._expiries = [(e.expires, i) for i, e in self._holds.items()]
            heapq.heapify(self._expiries)


def _owner(conv: Conv) -> Any:
    return conv.user_id if conv.user_id is not None else conv


_ledgers: dict[str, Ledger] = {}
_ledgers_lock = threading.Lock()


def ledger_for(key: str) -> Ledger:
    """The ledger of one store's data in this Python process (a LevelDB directory): the
    same for every incarnation of its server."""
    with _ledgers_lock:
        ledger = _ledgers.get(key)
        if ledger is None:
            ledger = _ledgers[key] = Ledger()
        return ledger


class ReservationClient:
    """``reserve``, ``release`` and ``abandon``, as every store handle makes them: the first
    two as calls its server answers (``("reserve", ...)``, ``("release", hold_id)``), the
    last as a message to its ``handle_info``, sent even by a process being killed."""

    __slots__ = ()

    if TYPE_CHECKING:

        def call(self, message: Any, timeout: float | None = 5.0) -> Any: ...

        def process_or_none(self) -> Any: ...

    def reserve(
        self,
        conv: ConvLike,
        hold_id: str,
        hold: Hold,
        limits: Sequence[Limit],
        ttl: float,
        timeout: float | None = RESERVE_TIMEOUT,
    ) -> Reservation:
        """Check ``limits`` and take the hold ``hold_id`` as one step (see
        ``otpmem.stores.reservations``); a refusal is an answer, not an error."""
        return self._reserve_checked(check_reserve((conv, hold_id, hold, limits, ttl)), timeout)

    def release(self, hold_id: str, timeout: float | None = RESERVE_TIMEOUT) -> bool:
        """Drop the hold; False if it was gone (released, expired, forgotten)."""
        return self._release_checked(check_hold_id(hold_id), timeout)

    def _reserve_checked(self, checked: ReserveArgs, timeout: float | None) -> Reservation:
        # A store that can take a checked reservation without a call overrides this.
        answer: Reservation = self.call(("reserve", *checked), timeout)
        return answer

    def _release_checked(self, hold_id: str, timeout: float | None) -> bool:
        released: bool = self.call(("release", hold_id), timeout)
        return released

    def abandon(self, hold_id: str) -> None:
        """Drop the hold without waiting (never raises): a dying process's release."""
        process = self.process_or_none()
        if process is not None and not process.dead:
            # Not Handle.send: that refuses a killed caller, and the killed are who abandon.
            process.send((ABANDON, hold_id))
