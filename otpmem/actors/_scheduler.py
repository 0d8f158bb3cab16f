"""Schedulers: lightweight processes run by a few threads, as Erlang's schedulers run them.

A process is not a thread. It is a mailbox and a state; when a message arrives at an idle
process, the process is queued on a scheduler, whose thread runs a batch of its messages
inside a *runner* greenlet. An idle process holds no greenlet and no stack, so a million of
them cost only their objects. A handler that waits (a ``call``, ``sleep``, an ``Event``,
``blocking`` work) suspends its runner and frees the scheduler for other processes; the
runner resumes on the same thread when the wait ends (a greenlet cannot change threads).
Callers that are plain threads block as before. The waits themselves are in ``_waits``;
a spawn from a plain thread runs its ``init`` on that thread (``_guest``).

The trap this design avoids: a handler blocking its scheduler thread on a callee that needs
the same thread to run. Every wait of the runtime suspends instead of blocking; work that
must block (HTTP, tools, fsync) runs on the bounded blocking pool (``blocking``). A handler
that hogs a scheduler past ``HOG_THRESHOLD`` is reported, and the processes queued behind it
move to another scheduler (one is added if every scheduler is stuck): the system monitor,
``_sysmon``, watches for that.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from greenlet import error as greenlet_error
from greenlet import getcurrent, greenlet

if TYPE_CHECKING:
    from ._waits import OneShot

logger = logging.getLogger("otpmem.actors")

monotonic = time.monotonic
IDLE, QUEUED, RUNNING = 0, 1, 2
BATCH = 64
"""Messages a process handles before it yields its scheduler to the next in line."""
HOG_THRESHOLD = float(os.environ.get("OTPMEM_HOG_THRESHOLD", "0.5"))
"""Seconds a handler may hold a scheduler before it is reported and work moves away."""
MAX_SCHEDULERS = 64
_IDLE_RUNNERS = 16  # runners kept for reuse per scheduler: creating one costs ~8 us
SUSPENDED = object()  # what a runner tells the hub when it parks
_FREE = object()
_STOP = object()  # ends a dedicated scheduler's thread
timer_seq = itertools.count()  # tie-breaker of timers due at the same instant
_MIN_DROPPED_TIMERS = 64  # a heap this small is cheaper to keep than to rebuild
acting = threading.local()  # .process: whom blocking work on a pool thread runs for


class Runnable(Protocol):
    """What a scheduler runs: a process with a run state and a batch to run."""

    run_state: int
    run_lock: threading.Lock
    home: Scheduler | None
    killed: bool
    waiting: OneShot | None

    def run_batch(self) -> None:
        """Handle queued messages until the mailbox is empty or the batch is spent."""


class Runner(greenlet):  # type: ignore[misc]
    """A greenlet that runs process batches on one scheduler; suspended ones hold a stack."""

    __slots__ = ("process", "scheduler", "waiting")


def _run() -> None:
    runner: Runner = getcurrent()
    hub = runner.scheduler.hub
    # The first process comes in an attribute, not as an argument: greenlet holds the
    # arguments of a greenlet's first switch until it ends, and a runner lives for good.
    process: Runnable | None = runner.process
    while True:
        runner.process = process
        try:
            process.run_batch()  # type: ignore[union-attr]
        except BaseException:  # run_batch catches handler errors; this is a runtime bug
            logger.exception("scheduler: %r failed outside its handlers", process)
        # An idle runner holds no process: a dead one would keep its server alive, and
        # through its links and parent a tree of dead processes.
        runner.process = process = None
        process = hub.switch(_FREE)


class Scheduler:
    """One thread that runs queued processes and resumes suspended runners, in turn."""

    def __init__(self, index: int, dedicated_to: str | None = None, guest: bool = False) -> None:
        self.index = index
        self.dedicated = dedicated_to is not None or guest
        self.guest = guest
        self.parked = 0  # runners suspended on this scheduler's thread
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # [deadline, seq, slot] heap, touched by this thread only; slot None: dropped
        self.timers: list[list[Any]] = []
        self.dropped_timers = 0
        self.free_runners: list[Runner] = []
        self.running: Runner | None = None
        self.since = 0.0
        self.stuck = False
        self.reported = False
        self.hub: Any = None
        if guest:
            # No thread of its own: the thread that made it serves it (see ``_guest.run_here``).
            self.hub = getcurrent()
            self.thread = threading.current_thread()
            return
        started = threading.Event()
        name = f"otpmem-scheduler-{index}" if dedicated_to is None else dedicated_to
        self.thread = threading.Thread(target=self._main, args=(started,), name=name, daemon=True)
        self.thread.start()
        started.wait()

    def __repr__(self) -> str:
        return f"<Scheduler {self.index}>"

    def _main(self, started: threading.Event) -> None:
        self.hub = getcurrent()
        started.set()
        get = self.queue.get
        timers = self.timers
        while True:
            if timers:
                delay = timers[0][0] - monotonic()
                if delay <= 0:
                    self._fire_timers()
                    continue
                try:
                    item = get(timeout=delay)
                except queue.Empty:
                    continue
            else:
                item = get()
            if type(item) is Runner:
                self.parked -= 1
                self._switch(item, None)
            elif item is _STOP:
                self.end_runners()
                return
            else:
                runner = self.free_runners.pop() if self.free_runners else self._new_runner(item)
                self._switch(runner, item)
                item = None  # not kept alive while the thread waits for the next one

    def _new_runner(self, first: Runnable) -> Runner:
        runner = Runner(_run, self.hub)
        runner.scheduler = self
        runner.process = first
        runner.waiting = None
        return runner

    def _switch(self, runner: Runner, arg: Any) -> None:
        self.since = monotonic()
        self.running = runner
        # A new runner starts without an argument (it finds its process on itself, see _run).
        outcome = runner.switch(arg) if runner else runner.switch()
        self.running = None
        self.stuck = False
        self.reported = False
        if outcome is _FREE:
            if len(self.free_runners) < _IDLE_RUNNERS:
                self.free_runners.append(runner)
        elif outcome is SUSPENDED:
            self.parked += 1

    def serve(self, deadline: float | None) -> bool:
        """A guest's loop: run what is queued here until nothing is left, parked or queued.

        False if ``deadline`` passed first.
        """
        get = self.queue.get
        timers = self.timers
        while self.parked or not self.queue.empty():
            now = monotonic()
            if deadline is not None and now >= deadline:
                return False
            due = [t for t in (timers[0][0] if timers else None, deadline) if t is not None]
            try:
                item = get(timeout=max(0.0, min(due) - now)) if due else get()
            except queue.Empty:
                self._fire_timers()
                continue
            self._fire_timers()
            if type(item) is Runner:
                self.parked -= 1
                self._switch(item, None)
            else:
                runner = self.free_runners.pop() if self.free_runners else self._new_runner(item)
                self._switch(runner, item)
                item = None
        return True

    def end_runners(self) -> None:
        """End the idle runners, on this scheduler's thread, before that thread ends.

        A greenlet still suspended when its thread exits is never unwound: what its stack
        held stays alive for good (greenlet cannot run it again to let go). Thrown into
        here, each runner returns from its ``_run`` and its stack is freed.
        """
        runners, self.free_runners = self.free_runners, []
        for runner in runners:
            try:
                runner.throw()  # GreenletExit at its hub.switch: _run returns, to us
            except greenlet_error:  # not this thread's after all: nothing can be done
                logger.debug("scheduler: %r cannot end %r from this thread", self, runner)
        if not self.parked:
            self.hub = None  # the thread's main greenlet, dead once the thread is gone

    def _fire_timers(self) -> None:
        timers = self.timers
        now = monotonic()
        while timers and timers[0][0] <= now:
            timer = heapq.heappop(timers)
            slot: OneShot | None = timer[2]
            if slot is None:
                self.dropped_timers -= 1
                continue
            timer[2] = None  # fired: its waiter has nothing to drop
            slot.time_out()

    def drop_timer(self, timer: list[Any]) -> None:
        """Forget the timer of a wait that ended before its deadline.

        A call's timeout is seconds; its answer comes in microseconds. Left in the heap
        until its deadline, the timer would keep the reply slot, and the answer in it,
        alive that long: thousands of answers a second, each held for seconds, for the
        cyclic GC to walk again and again. As asyncio does with cancelled timer handles,
        the heap is rebuilt without dropped timers once they are half of it.
        """
        timer[2] = None
        self.dropped_timers += 1
        timers = self.timers
        while timers and timers[0][2] is None:
            heapq.heappop(timers)
            self.dropped_timers -= 1
        if self.dropped_timers > _MIN_DROPPED_TIMERS and 2 * self.dropped_timers > len(timers):
            timers[:] = [t for t in timers if t[2] is not None]
            heapq.heapify(timers)
            self.dropped_timers = 0


# -- the pool of schedulers ----------------------------------------------------------------

pool: list[Scheduler] = []  # the shared schedulers (the system monitor may add some)
pool_lock = threading.Lock()
round_robin = itertools.count()


def _default_count() -> int:
    configured = os.environ.get("OTPMEM_SCHEDULERS")
    if configured:
        return max(1, min(MAX_SCHEDULERS, int(configured)))
    return max(1, min(4, os.cpu_count() or 1))


def schedulers() -> list[Scheduler]:
    """The running schedulers, started on first use (``OTPMEM_SCHEDULERS`` sets how many)."""
    if not pool:
        with pool_lock:
            if not pool:
                for index in range(_default_count()):
                    pool.append(Scheduler(index))
                from ._sysmon import SystemMonitor

                SystemMonitor().start()
    return pool


def scheduler_count() -> int:
    """How many shared schedulers run now (none before the first process ran); the
    dedicated threads of ``dedicated_thread`` servers are not counted."""
    return len(pool)


def _pick() -> Scheduler:
    running = pool or schedulers()
    for _ in range(len(running)):
        candidate = running[next(round_robin) % len(running)]
        if not candidate.stuck:
            return candidate
    return running[next(round_robin) % len(running)]


def wake(process: Runnable) -> None:
    """Queue a process that just became runnable (its run_state is already QUEUED).

    A process woken by another process runs on the waker's scheduler: a call between the
    two is then a greenlet switch, not a thread hand-off. An idle process has no stack, so
    it may run on any scheduler, except one with a dedicated thread, which runs only there.
    """
    home = process.home
    if home is not None and home.dedicated:
        home.queue.put(process)
        return
    here = getcurrent()
    if type(here) is Runner and not here.scheduler.stuck and not here.scheduler.dedicated:
        target = here.scheduler
    else:
        target = home if home is not None and not home.stuck else _pick()
    process.home = target
    target.queue.put(process)


def dedicated_scheduler(label: str) -> Scheduler:
    """A scheduler whose thread runs one process only (``GenServer.dedicated_thread``)."""
    return Scheduler(-1, dedicated_to=f"otpmem-dedicated-{label}")


def retire(scheduler: Scheduler) -> None:
    """End a dedicated scheduler's thread once its current activation is over."""
    if not scheduler.guest:  # a guest's thread is its caller's, and not ours to end
        scheduler.queue.put(_STOP)


def poke(process: Runnable) -> None:
    """Queue ``process`` if it is idle (a message or a signal arrived for it)."""
    if process.run_state == IDLE:
        with process.run_lock:
            if process.run_state != IDLE:
                return
            process.run_state = QUEUED
            # Under the lock, so that run_here's hand-over of a process to the shared
            # schedulers cannot miss a wake aimed at its guest scheduler.
            wake(process)


def requeue(process: Runnable) -> None:
    """Put a running process at the back of its scheduler's queue (fairness)."""
    process.run_state = QUEUED
    here = getcurrent()
    home = process.home
    if home is not None and home.dedicated:
        target = home
    else:
        target = here.scheduler if type(here) is Runner else _pick()
    target.queue.put(process)


def in_runner() -> bool:
    """True when the calling code runs inside a process on a scheduler (it may suspend)."""
    return type(getcurrent()) is Runner


def running_process() -> Any:
    """The process this code runs for: on a scheduler, or in blocking work it started."""
    here = getcurrent()
    if type(here) is Runner:
        return here.process
    return getattr(acting, "process", None)


def runtime_thread(thread: threading.Thread) -> bool:
    """True for the runtime's own long-lived threads (schedulers, monitor, blocking pool,
    timers)."""
    return thread.name.startswith(
        ("otpmem-scheduler-", "otpmem-sysmon", "otpmem-blocking", "otpmem-timers")
    )
