"""Timers: Erlang's ``send_after``, a message delivered to a process after a delay.

One thread keeps every timer in a heap, so a thousand agents with an idle timeout cost a
thousand heap entries, not a thousand threads. A timer holds its process only until it
fires or is cancelled; a message for a process that exited meanwhile is dropped, as
Erlang drops a message sent to a dead pid.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._handle import Handle
    from ._process import Process

THREAD_NAME = "otpmem-timers"
_seq = itertools.count()
_cond = threading.Condition(threading.Lock())
_heap: list[tuple[float, int, Timer]] = []
_thread: threading.Thread | None = None


class Timer:
    """A pending ``send_after``; ``cancel_timer`` it to keep the message from being sent."""

    __slots__ = ("due", "message", "process")

    def __init__(self, due: float, process: Process | None, message: Any) -> None:
        self.due = due
        self.process = process
        self.message = message

    @property
    def pending(self) -> bool:
        """True until the timer fired or was cancelled."""
        return self.process is not None

    def __repr__(self) -> str:
        state = "pending" if self.pending else "done"
        return f"<Timer {state} due in {max(0.0, self.due - time.monotonic()):.3f} s>"


def send_after(seconds: float, target: Handle, message: Any) -> Timer:
    """Send ``message`` to ``target``'s ``handle_info`` after ``seconds`` (Erlang's
    ``erlang:send_after``); the process it resolves to now is the one that gets it."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"send_after needs a number of seconds >= 0, got {seconds!r}")
    process = target.process_or_none()
    timer = Timer(time.monotonic() + seconds, process, message)
    if process is None or process.dead:
        timer.process = None  # nobody to send to: a spent timer, as for a dead pid
        return timer
    with _cond:
        heapq.heappush(_heap, (timer.due, next(_seq), timer))
        _ensure_thread()
        if _heap[0][2] is timer:
            _cond.notify()
    return timer


def cancel_timer(timer: Timer) -> bool:
    """Cancel ``timer``; True if it had not fired yet (its message will never be sent)."""
    with _cond:
        was_pending = timer.process is not None
        # Left in the heap and skipped when due: the entry holds neither process nor message.
        timer.process = None
        timer.message = None
        return was_pending


def _ensure_thread() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_run, name=THREAD_NAME, daemon=True)
        _thread.start()


def _run() -> None:
    while True:
        with _cond:
            while not _heap:
                _cond.wait()
            due, _, timer = _heap[0]
            delay = due - time.monotonic()
            if delay > 0:
                _cond.wait(delay)
                continue
            heapq.heappop(_heap)
            process, message = timer.process, timer.message
            timer.process = None
            timer.message = None
        if process is not None:
            process.send(message)
