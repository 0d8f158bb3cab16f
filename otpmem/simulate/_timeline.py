"""What a simulation did over time: each turn's end and latency, each fault, each restart.

Recorded by ``Simulation`` as the run goes (cheap counts under a lock), read after it as
buckets of equal width for plots::

    for bucket in simulation.timeline.buckets():
        bucket.start, bucket.turns_per_s, bucket.faults, bucket.restarts, bucket.p99_ms

Nothing is kept per event: events are counted in slots of one width, and latencies in a
histogram per slot (bins 1% wide). The width grows with the run, slots merging as it does,
so a timeline holds at most ``MAX_SLOTS`` slots whether the run lasts a minute or a week.
The width is always one that divides every bucket width ``buckets`` may pick later, so the
buckets count exactly what a list of every event would give; only p50 and p99 are read from
the histogram: within 0.5% of the exact value (exact when a bucket's share falls on its
fastest or slowest turn).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

NICE_WIDTHS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Bucket widths ``buckets`` picks from (about 60 buckets a run); past 600 s they double."""
_TENTHS = tuple(round(w * 10) for w in NICE_WIDTHS)  # integer arithmetic: 0.1 is not exact
BUCKETS = 60
MAX_SLOTS = 2 * BUCKETS + 1
"""The most slots a timeline holds: a slot is at least half the bucket width in use."""
_FLOOR = 1e-6  # s: a latency below it counts as it (the histogram's log scale needs > 0)
_STEP = math.log(1.01)


def _width(level: int) -> int:
    """The ``level``-th bucket width, in tenths of a second."""
    if level < len(_TENTHS):
        return _TENTHS[level]
    return _TENTHS[-1] << (level - len(_TENTHS) + 1)  # doubling past the table


def _resolution(level: int) -> int:
    """The widest slot (tenths) that divides every bucket width from ``level`` on."""
    if level >= len(_TENTHS) - 1:
        return _width(level)
    return math.gcd(*_TENTHS[level:])


def _level(end: float) -> int:
    """The first bucket width that cuts ``end`` seconds into at most ``BUCKETS`` buckets."""
    level = 0
    while end / (_width(level) / 10) > BUCKETS:
        level += 1
    return level


@dataclass
class Bucket:
    """One slice of the run: ``[start, start + width)`` seconds after it began."""

    start: float
    width: float
    turns: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None

    @property
    def turns_per_s(self) -> float:
        """Turns finished in the bucket, per second."""
        return self.turns / self.width


def percentile(ordered: list[float], share: float) -> float:
    """The nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


class _Slot:
    """What happened in one slot: turns and their latencies, faults by kind, restarts."""

    __slots__ = ("faults", "high", "latencies", "low", "restarts", "turns")

    def __init__(self) -> None:
        self.turns = 0
        self.latencies: dict[int, int] = {}  # histogram bin -> turns
        self.low = math.inf
        self.high = -math.inf
        self.faults: dict[str, int] = {}
        self.restarts = 0

    def turn(self, latency: float) -> None:
        """Count a turn of ``latency`` s."""
        self.turns += 1
        key = int(math.log(max(latency, _FLOOR) / _FLOOR) / _STEP)
        self.latencies[key] = self.latencies.get(key, 0) + 1
        self.low = min(self.low, latency)
        self.high = max(self.high, latency)

    def merge(self, other: _Slot) -> None:
        """Add ``other``'s counts to this slot's."""
        self.turns += other.turns
        for key, count in other.latencies.items():
            self.latencies[key] = self.latencies.get(key, 0) + count
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        for kind, count in other.faults.items():
            self.faults[kind] = self.faults.get(kind, 0) + count
        self.restarts += other.restarts

    def clear_turns(self) -> None:
        """Forget the turns (they are about to be replaced)."""
        self.turns, self.latencies, self.low, self.high = 0, {}, math.inf, -math.inf

    def percentile(self, share: float) -> float:
        """The nearest-rank percentile of the latencies (s), from the histogram."""
        rank = max(1, math.ceil(share * self.turns))
        if rank == 1:
            return self.low
        if rank == self.turns:
            return self.high
        seen = 0
        for key in sorted(self.latencies):
            seen += self.latencies[key]
            if seen >= rank:
                middle = _FLOOR * math.exp((key + 0.5) * _STEP)
                return min(max(middle, self.low), self.high)
        return self.high


class Timeline:
    """Events of one run, in seconds since ``Timeline()`` was made (or since ``start``, a
    reading of ``clock``: a node counts from its run's start to line up with it)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, start: float | None = None
    ) -> None:
        self._clock = clock
        self.t0 = clock() if start is None else start
        self._lock = threading.Lock()
        self._slots: dict[int, _Slot] = {}
        self._resolution = _resolution(0)  # tenths of a second
        self._last = 0.0

    def now(self) -> float:
        """Seconds since the timeline began."""
        return self._clock() - self.t0

    @property
    def resolution(self) -> float:
        """The width of a slot now, in seconds (it grows with the run)."""
        return self._resolution / 10

    @property
    def slots(self) -> int:
        """How many slots the timeline holds: at most ``MAX_SLOTS``, however long the run."""
        return len(self._slots)

    def turn(self, latency: float) -> None:
        """A turn was acknowledged just now, ``latency`` s after its first attempt began."""
        with self._lock:
            self._slot(self.now()).turn(latency)

    def fault(self, kind: str) -> None:
        """A fault of ``kind`` was injected just now."""
        with self._lock:
            self._count_fault(self._slot(self.now()), kind, 1)

    def restart(self) -> None:
        """A supervisor restarted a child just now."""
        with self._lock:
            self._slot(self.now()).restarts += 1

    def add_events(self, faults: Iterable[tuple[float, str]], restarts: Iterable[float]) -> None:
        """Faults and restarts recorded elsewhere (a node's), in this timeline's seconds."""
        with self._lock:
            for t, kind in faults:
                self._count_fault(self._slot(t), kind, 1)
            for t in restarts:
                self._slot(t).restarts += 1

    def set_turns(self, turns: Iterable[tuple[float, float]]) -> None:
        """The run's turns as ``(end, latency)``, read back from elsewhere (the nodes'
        ledgers), in this timeline's seconds: they replace those recorded here."""
        with self._lock:
            for slot in self._slots.values():
                slot.clear_turns()
            for t, latency in turns:
                self._slot(t).turn(latency)

    def event_counts(self) -> dict[str, Any]:
        """The faults and restarts counted, JSON-ready, for ``add_event_counts`` of another
        timeline (a node's summary to its run): ``{"resolution": s, "faults": [[slot,
        kind, n], ...], "restarts": [[slot, n], ...]}``."""
        with self._lock:
            return {
                "resolution": self._resolution / 10,
                "faults": [
                    [index, kind, count]
                    for index, slot in sorted(self._slots.items())
                    for kind, count in sorted(slot.faults.items())
                ],
                "restarts": [
                    [index, slot.restarts]
                    for index, slot in sorted(self._slots.items())
                    if slot.restarts
                ],
            }

    def add_event_counts(self, counts: Mapping[str, Any]) -> None:
        """Add another timeline's ``event_counts``; exact when both count from the same
        start (their slots then nest: one width always divides the other)."""
        theirs = round(float(counts.get("resolution", 0.1)) * 10)
        with self._lock:
            self._coarsen(max(self._resolution, theirs))
            for index, kind, count in counts.get("faults", ()):
                self._count_fault(self._slot(index * theirs / 10), str(kind), int(count))
            for index, count in counts.get("restarts", ()):
                self._slot(index * theirs / 10).restarts += int(count)

    def buckets(self, width: float | None = None, end: float | None = None) -> list[Bucket]:
        """The run cut into buckets of ``width`` s (about 60 of them by default); a width
        given must be a multiple of ``resolution``."""
        with self._lock:
            end = max(end if end is not None else 0.0, self._last)
            if width is None:
                level = _level(end)
                while _width(level) % self._resolution:  # only after add_event_counts
                    level += 1
                tenths = _width(level)
            else:
                tenths = round(width * 10)
                if width <= 0 or abs(width * 10 - tenths) > 1e-6 or tenths % self._resolution:
                    raise ValueError(
                        f"a bucket width must be a multiple of the timeline's resolution, "
                        f"{self._resolution / 10:g} s now; got {width!r}"
                    )
            width = tenths / 10
            count = max(1, math.floor(end / width) + 1)
            merged = [_Slot() for _ in range(count)]
            per_bucket = tenths // self._resolution
            for index, slot in self._slots.items():
                merged[min(index // per_bucket, count - 1)].merge(slot)
        buckets = []
        for i, slot in enumerate(merged):
            bucket = Bucket(start=i * width, width=width, turns=slot.turns)
            bucket.faults, bucket.restarts = slot.faults, slot.restarts
            if slot.turns:
                bucket.p50_ms = slot.percentile(0.50) * 1000
                bucket.p99_ms = slot.percentile(0.99) * 1000
            buckets.append(bucket)
        return buckets

    # -- slots (under the lock) ---------------------------------------------------------------

    def _slot(self, t: float) -> _Slot:
        t = max(t, 0.0)  # an event stamped a hair before the start (another clock)
        if t > self._last:
            self._last = t
            self._coarsen(_resolution(_level(t)))
        index = int(t * 10 // self._resolution)
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot()
        return slot

    def _coarsen(self, resolution: int) -> None:
        """Widen the slots to ``resolution`` tenths (a multiple of the width now)."""
        if resolution <= self._resolution:
            return
        if resolution % self._resolution:
            raise ValueError(
                f"timeline slots of {resolution / 10:g} s do not nest in slots of "
                f"{self._resolution / 10:g} s"
            )
        ratio = resolution // self._resolution
        slots: dict[int, _Slot] = {}
        for index, slot in self._slots.items():
            wider = slots.get(index // ratio)
            if wider is None:
                slots[index // ratio] = slot
            else:
                wider.merge(slot)
        self._slots, self._resolution = slots, resolution

    @staticmethod
    def _count_fault(slot: _Slot, kind: str, count: int) -> None:
        slot.faults[kind] = slot.faults.get(kind, 0) + count


__all__ = ["BUCKETS", "MAX_SLOTS", "NICE_WIDTHS", "Bucket", "Timeline", "percentile"]
