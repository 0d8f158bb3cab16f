"""TurnMeter: agents' turns per second and turn latencies, from the agents' own callbacks.

    meter = TurnMeter()
    otpmem.start_agent(llm=model, callbacks=meter.callbacks())
    meter.stats()   # {"turns": ..., "turns_per_s": ..., "p50_ms": ..., "p99_ms": ...}

The hooks run in each agent's process and only append under a lock: a turn never waits on
the observer.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ..agents import Callbacks

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the latency histogram exported to Prometheus."""
KEPT = 2048
"""Latencies kept for the percentiles: the newest turns."""
RATE_WINDOW = 5.0
"""Seconds over which turns per second are counted."""


class TurnMeter:
    """Counts agents' turns and their latencies (from ``on_turn_start`` to the end)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: dict[tuple[Any, Any], float] = {}
        self._recent: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (end, latency)
        self._buckets = [0] * (len(BUCKETS) + 1)
        self.turns = 0
        self.errors = 0
        self.seconds_total = 0.0

    def callbacks(self) -> Callbacks:
        """Agent callbacks that feed this meter (``start_agent(..., callbacks=...)``)."""
        return Callbacks(
            on_turn_start=self._start, on_turn_end=self._end, on_turn_error=self._error
        )

    def _key(self, meta: dict[str, Any]) -> tuple[Any, Any]:
        return (meta.get("agent_pid"), meta.get("run_id"))

    def _start(self, meta: dict[str, Any]) -> None:
        with self._lock:
            self._started[self._key(meta)] = self._clock()

    def _end(self, meta: dict[str, Any], result: Any) -> None:
        now = self._clock()
        with self._lock:
            began = self._started.pop(self._key(meta), None)
        if began is not None:
            self.record(now - began, now)

    def _error(self, meta: dict[str, Any], error: BaseException) -> None:
        with self._lock:
            self._started.pop(self._key(meta), None)
            self.errors += 1

    def record(self, seconds: float, end: float | None = None) -> None:
        """Count one finished turn that took ``seconds``."""
        end = self._clock() if end is None else end
        with self._lock:
            self.turns += 1
            self.seconds_total += seconds
            self._recent.append((end, seconds))
            self._buckets[bisect.bisect_left(BUCKETS, seconds)] += 1

    def stats(self) -> dict[str, Any]:
        """Turns and errors so far, turns per second lately, p50/p99 of the newest turns."""
        now = self._clock()
        with self._lock:
            recent = list(self._recent)
            turns, errors, buckets = self.turns, self.errors, list(self._buckets)
            in_flight = len(self._started)
            seconds_total = self.seconds_total
        lately = sum(1 for end, _ in recent if end >= now - RATE_WINDOW)
        ordered = sorted(latency for _, latency in recent)
        return {
            "turns": turns,
            "errors": errors,
            "in_flight": in_flight,
            "turns_per_s": round(lately / RATE_WINDOW, 2),
            "p50_ms": _percentile_ms(ordered, 0.50),
            "p99_ms": _percentile_ms(ordered, 0.99),
            "buckets": list(zip([*BUCKETS, "+Inf"], buckets, strict=True)),
            "seconds_total": seconds_total,
        }


def _percentile_ms(ordered: list[float], share: float) -> float | None:
    if not ordered:
        return None
    rank = max(1, math.ceil(share * len(ordered)))
    return round(ordered[rank - 1] * 1000.0, 3)
