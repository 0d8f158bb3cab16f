"""Waiting without holding a scheduler: one-shot answers, events, sleep, blocking work.

Inside a process every wait suspends its runner (the scheduler runs other processes
meanwhile) and resumes on the same thread; on a plain thread the same objects block it.
A kill wakes a suspended process at once: its wait raises ``Killed``.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from greenlet import getcurrent

from ._errors import Killed
from ._scheduler import (
    SUSPENDED,
    Runner,
    acting,
    monotonic,
    pool_lock,
    running_process,
    timer_seq,
)


class OneShot:
    """A one-shot answer: the first ``set``, ``fail`` or timeout wins, later ones are dropped.

    Made by the code that will wait on it: inside a process the wait suspends the runner,
    on a plain thread it blocks on a bare lock (the cheapest blocking primitive in CPython).
    ``itertools.count`` is an atomic test-and-set under the GIL.
    """

    __slots__ = ("_after", "_claim", "_lock", "_runner", "error", "timed_out", "value")

    def __init__(self) -> None:
        here = getcurrent()
        self._claim = itertools.count().__next__
        self._after: Callable[[], None] | object | None = None  # see when_answered
        self.value: Any = None
        self.error: BaseException | None = None
        self.timed_out = False
        if type(here) is Runner:
            self._runner: Runner | None = here
            self._lock: Any = None
        else:
            self._runner = None
            self._lock = threading.Lock()
            self._lock.acquire()

    def set(self, value: Any) -> bool:
        """Store the answer; False if the slot was already answered (or timed out)."""
        if self._claim():
            self._late()
            return False
        self.value = value
        self._wake()
        return True

    def fail(self, error: BaseException) -> bool:
        """Store an error for the waiter to raise; False if already answered."""
        if self._claim():
            self._late()
            return False
        self.error = error
        self._wake()
        return True

    def when_answered(self, fn: Callable[[], None]) -> None:
        """For a slot whose wait has ended: run ``fn`` once the work behind it answers
        (``set`` or ``fail``), also after the wait ended without an answer (a timeout, a
        kill); at once if an answer came already. ``fn`` may run on the answering
        thread: keep it short."""
        with _late_lock:
            if self.timed_out and self._after is None:
                self._after = fn
                return
        fn()

    def _late(self) -> None:
        # An answer after the wait ended (or after another answer): nobody takes it, but
        # whoever waits for the work behind it to end (when_answered) hears of it.
        with _late_lock:
            after, self._after = self._after, _ANSWERED
        if after is not None and after is not _ANSWERED:
            after()  # type: ignore[operator]

    def time_out(self) -> bool:
        """End the wait unanswered (a timer, or a kill); False if an answer came first."""
        if self._claim():
            return False
        self.timed_out = True
        self._wake()
        return True

    def _wake(self) -> None:
        runner = self._runner
        if runner is None:
            self._lock.release()
        else:
            runner.scheduler.queue.put(runner)

    def wait(self, timeout: float | None) -> bool:
        """Wait for the answer; False on timeout. ``None`` waits forever."""
        runner = self._runner
        if runner is None:
            if self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                return True
            if self.time_out():
                return False
            # An answer won the race after the lock timed out: it is being written now.
            self._lock.acquire()
            return True
        scheduler = runner.scheduler
        process = runner.process
        if process is not None:
            # Published before the check: a kill either sees this wait and ends it, or has
            # already marked the process, and the wait does not begin.
            process.waiting = self
            if process.killed:
                process.waiting = None
                if self._claim():
                    # The kill (or an answer) claimed this wait first and queued a wake-up
                    # for this runner: take it here, or it would resume a later wait.
                    scheduler.hub.switch(SUSPENDED)
                else:
                    self.timed_out = True  # ended unanswered: a later answer is late
                process.abandoned = self
                raise Killed(process)
        timer = None
        if timeout is not None:
            timer = [monotonic() + timeout, next(timer_seq), self]
            heapq.heappush(scheduler.timers, timer)
        runner.waiting = self
        scheduler.hub.switch(SUSPENDED)
        runner.waiting = None
        if timer is not None and timer[2] is not None:
            scheduler.drop_timer(timer)  # answered (or killed) before its deadline
        if process is not None:
            process.waiting = None
            if process.killed:
                process.abandoned = self
                raise Killed(process)
        return not self.timed_out


_late_lock = threading.Lock()
_ANSWERED = object()
"""``OneShot._after`` once an answer came after the wait ended."""


def sleep(seconds: float) -> None:
    """Sleep without holding a scheduler (``time.sleep`` on a plain thread)."""
    if type(getcurrent()) is Runner:
        OneShot().wait(max(seconds, 0.0))
    else:
        time.sleep(seconds)


_events_lock = threading.Lock()


class Event:
    """``threading.Event`` for both worlds: processes suspend on it, threads block on it."""

    __slots__ = ("_flag", "_thread_event", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._waiters: list[OneShot] | None = None
        self._thread_event: threading.Event | None = None

    def is_set(self) -> bool:
        """True once ``set`` was called."""
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        with _events_lock:
            if self._flag:
                return
            self._flag = True
            waiters, self._waiters = self._waiters, None
            thread_event = self._thread_event
        if thread_event is not None:
            thread_event.set()
        for waiter in waiters or ():
            waiter.set(True)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until set; False on timeout."""
        if self._flag:
            return True
        if type(getcurrent()) is Runner:
            waiter = OneShot()
            with _events_lock:
                if self._flag:
                    return True
                if self._waiters is None:
                    self._waiters = []
                self._waiters.append(waiter)
            if not waiter.wait(timeout):
                with _events_lock:
                    if self._waiters is not None and waiter in self._waiters:
                        self._waiters.remove(waiter)
            return self._flag
        return self.wait_blocking(timeout)

    def wait_blocking(self, timeout: float | None = None) -> bool:
        """Wait holding the calling thread, even inside a process (for dedicated threads
        and exit paths, where the process cannot suspend: it is already killed)."""
        with _events_lock:
            if self._flag:
                return True
            if self._thread_event is None:
                self._thread_event = threading.Event()
            thread_event = self._thread_event
        return thread_event.wait(timeout)


# -- blocking work, off the schedulers -----------------------------------------------------

BLOCKING_THREADS = int(os.environ.get("OTPMEM_BLOCKING_THREADS", "64"))
_blocking_pool: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _blocking_pool
    if _blocking_pool is None:
        with pool_lock:
            if _blocking_pool is None:
                _blocking_pool = ThreadPoolExecutor(
                    max_workers=BLOCKING_THREADS, thread_name_prefix="otpmem-blocking"
                )
    return _blocking_pool


def run_blocking(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``fn`` on the blocking pool and suspend until it returns; inline off a scheduler.

    The work runs on behalf of the calling process: if that process is killed meanwhile, it
    never sees the result, and every runtime operation the work attempts fails.
    """
    if type(getcurrent()) is not Runner:
        return fn(*args, **kwargs)
    answer = OneShot()
    owner = running_process()

    def work() -> None:
        acting.process = owner
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            answer.fail(exc)
        else:
            answer.set(result)
        finally:
            acting.process = None

    _pool().submit(work)
    answer.wait(None)
    if answer.error is not None:
        raise answer.error
    return answer.value
