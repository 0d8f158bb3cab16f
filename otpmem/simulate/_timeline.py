"""What a simulation did over time: each turn's end and latency, each fault, each restart.

Recorded by ``Simulation`` as the run goes (cheap appends under a lock), read after it as
buckets of equal width for plots::

    for bucket in simulation.timeline.buckets():
        bucket.start, bucket.turns_per_s, bucket.faults, bucket.restarts, bucket.p99_ms
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

NICE_WIDTHS = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)


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


class Timeline:
    """Events of one run, in seconds since ``Timeline()`` was made."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.t0 = clock()
        self._lock = threading.Lock()
        self.turns: list[tuple[float, float]] = []  # (end, latency in s)
        self.faults: list[tuple[float, str]] = []
        self.restarts: list[float] = []

    def now(self) -> float:
        """Seconds since the timeline began."""
        return self._clock() - self.t0

    def turn(self, latency: float) -> None:
        """A turn was acknowledged just now, ``latency`` s after its first attempt began."""
        with self._lock:
            self.turns.append((self.now(), latency))

    def fault(self, kind: str) -> None:
        """A fault of ``kind`` was injected just now."""
        with self._lock:
            self.faults.append((self.now(), kind))

    def restart(self) -> None:
        """A supervisor restarted a child just now."""
        with self._lock:
            self.restarts.append(self.now())

    def add_events(self, faults: Iterable[tuple[float, str]], restarts: Iterable[float]) -> None:
        """Faults and restarts recorded elsewhere (a node's), in this timeline's seconds."""
        with self._lock:
            self.faults += faults
            self.restarts += restarts

    def set_turns(self, turns: Iterable[tuple[float, float]]) -> None:
        """The run's turns as ``(end, latency)``, read back from elsewhere (the nodes'
        ledgers), in this timeline's seconds: they replace those recorded here."""
        with self._lock:
            self.turns = list(turns)

    def buckets(self, width: float | None = None, end: float | None = None) -> list[Bucket]:
        """The run cut into buckets of ``width`` s (about 60 of them by default)."""
        with self._lock:
            turns, faults, restarts = list(self.turns), list(self.faults), list(self.restarts)
        last = max([t for t, _ in turns] + [t for t, _ in faults] + restarts + [0.0])
        end = max(end if end is not None else 0.0, last)
        if width is None:
            width = next((w for w in NICE_WIDTHS if end / w <= 60), NICE_WIDTHS[-1])
        count = max(1, math.floor(end / width) + 1)
        buckets = [Bucket(start=i * width, width=width) for i in range(count)]
        latencies: list[list[float]] = [[] for _ in buckets]
        for t, latency in turns:
            index = min(int(t / width), count - 1)
            buckets[index].turns += 1
            latencies[index].append(latency)
        kinds: list[Counter[str]] = [Counter() for _ in buckets]
        for t, kind in faults:
            kinds[min(int(t / width), count - 1)][kind] += 1
        for t in restarts:
            buckets[min(int(t / width), count - 1)].restarts += 1
        for bucket, values, counted in zip(buckets, latencies, kinds, strict=True):
            bucket.faults = dict(counted)
            if values:
                values.sort()
                bucket.p50_ms = percentile(values, 0.50) * 1000
                bucket.p99_ms = percentile(values, 0.99) * 1000
        return buckets


__all__ = ["Bucket", "Timeline", "percentile"]
