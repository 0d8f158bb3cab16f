"""Spawning from a plain thread: the thread runs the new process's ``init`` itself.

Spawning from a plain thread otherwise costs two thread hand-offs (init on a scheduler, the
answer back), most of a spawn's time. Each plain thread that spawns keeps a guest scheduler
of its own (its runners are reused), whose idle runners end on that thread when it ends.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from ._scheduler import Runnable, Runner, Scheduler, monotonic, wake

_guests = threading.local()


class _GuestEnd:
    """Held by the thread-local alone: dropped when its thread ends, on that thread, it
    ends the idle runners of the thread's guest scheduler there (see ``end_runners``)."""

    __slots__ = ("scheduler",)

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def __del__(self) -> None:
        self.scheduler.end_runners()


def run_here(process: Runnable, timeout: float | None, on_timeout: Callable[[], None]) -> bool:
    """Run a new process's first batch (its ``init``) on the calling plain thread.

    The thread serves its guest scheduler until the batch is over, waits included; the
    process, idle and stackless by then, moves to the shared schedulers. False if
    ``timeout`` passed first (``on_timeout`` is then called, and the process given a second
    to unwind).
    """
    guest: Scheduler | None = getattr(_guests, "scheduler", None)
    if guest is None:
        guest = _guests.scheduler = Scheduler(-1, guest=True)  # kept: its runners are reused
        _guests.end = _GuestEnd(guest)
    process.home = guest
    guest.queue.put(process)
    done = guest.serve(None if timeout is None else monotonic() + timeout)
    if not done:
        on_timeout()
        guest.serve(monotonic() + 1.0)
    with process.run_lock:
        process.home = None
    if guest.parked:
        _guests.scheduler = None  # runners still parked on it: never serve it again
        _guests.end = None  # its idle runners end now, on this thread
    while True:
        try:
            item = guest.queue.get_nowait()
        except queue.Empty:
            break
        if type(item) is not Runner:
            wake(item)
    return done
