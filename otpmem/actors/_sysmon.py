"""The system monitor: finds handlers that hog a scheduler, reports them, moves work away.

As Erlang's and Go's system monitors do, a thread of its own looks at every scheduler a few
times per ``HOG_THRESHOLD``: a scheduler whose handler has run that long without suspending
is reported (to the log and the hog listeners) and marked stuck, the processes queued on it
move to the others, and one more scheduler starts if every scheduler is stuck.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import _scheduler as sched
from ._scheduler import Runner, Scheduler, monotonic

logger = logging.getLogger("otpmem.actors")


@dataclass(frozen=True, slots=True)
class HogReport:
    """A handler held a scheduler for ``seconds`` (and counting) without suspending."""

    process: Any
    scheduler: int
    seconds: float


_hog_listeners: list[Callable[[HogReport], None]] = []


def add_hog_listener(listener: Callable[[HogReport], None]) -> None:
    """Call ``listener(report)`` whenever a handler hogs a scheduler."""
    _hog_listeners.append(listener)


def remove_hog_listener(listener: Callable[[HogReport], None]) -> None:
    """Stop calling ``listener``."""
    if listener in _hog_listeners:
        _hog_listeners.remove(listener)


class SystemMonitor(threading.Thread):
    """Erlang's and Go's system monitor: finds stuck schedulers and moves work off them."""

    def __init__(self) -> None:
        super().__init__(name="otpmem-sysmon", daemon=True)

    def run(self) -> None:
        interval = max(0.005, min(0.05, sched.HOG_THRESHOLD / 4))
        while True:
            time.sleep(interval)
            try:
                self._check()
            except Exception:
                logger.exception("scheduler monitor failed")

    def _check(self) -> None:
        now = monotonic()
        for scheduler in list(sched.pool):
            runner = scheduler.running
            if runner is None or now - scheduler.since < sched.HOG_THRESHOLD:
                continue
            if not scheduler.reported:
                scheduler.reported = True
                _report(scheduler, runner, now - scheduler.since)
            scheduler.stuck = True
            self._move_queued(scheduler)
        if all(s.stuck for s in sched.pool) and len(sched.pool) < sched.MAX_SCHEDULERS:
            with sched.pool_lock:
                sched.pool.append(Scheduler(len(sched.pool)))
            logger.warning("every scheduler is stuck; started scheduler %d", len(sched.pool) - 1)

    def _move_queued(self, stuck: Scheduler) -> None:
        # Suspended runners must stay (a greenlet cannot change threads); queued processes
        # have no stack yet and can run anywhere.
        keep = []
        while True:
            try:
                item = stuck.queue.get_nowait()
            except queue.Empty:
                break
            if type(item) is Runner:
                keep.append(item)
            else:
                free = [s for s in sched.pool if not s.stuck]
                if not free:
                    keep.append(item)
                    continue
                target = free[next(sched.round_robin) % len(free)]
                item.home = target
                target.queue.put(item)
        for item in keep:
            stuck.queue.put(item)


def _report(scheduler: Scheduler, runner: Runner, seconds: float) -> None:
    report = HogReport(runner.process, scheduler.index, seconds)
    logger.warning(
        "%r has held scheduler %d for %.3f s without yielding; run blocking work with "
        "otpmem.actors.blocking() so other processes are not held up",
        runner.process,
        scheduler.index,
        seconds,
    )
    for listener in list(_hog_listeners):
        try:
            listener(report)
        except Exception:
            logger.exception("hog listener %r failed", listener)
