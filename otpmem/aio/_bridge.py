"""How a coroutine waits on the runtime without blocking its loop or taking a thread.

Two doors, one mechanism. ``call(handle, message)`` is ``Handle.call`` for a coroutine: the
call's reply slot is an asyncio future, so the server's own thread completes it
(``loop.call_soon_threadsafe``) when it replies. ``run(fn, *args)`` runs any synchronous
otpmem function (a store's ``add``, an agent's ``run``, ``otpmem.start``) inside a
short-lived lightweight process on the shared schedulers: the calls it makes suspend that
process's greenlet, never a thread, and its result completes the future the same way.
Neither blocks the event loop, and neither takes a thread per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from ..actors import CallTimeout, GenServer, Handle, NoProcess, Stop
from ..actors.runtime import CallEnvelope, OneShot

T = TypeVar("T")


class _FutureSlot(OneShot):
    """A reply slot whose answer completes an asyncio future, from whichever thread answers."""

    __slots__ = ("_future", "_loop", "_target", "_timeout")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        target: object,
        timeout: float | None,
    ) -> None:
        # OneShot.__init__ would pick a lock or a runner to wake: this slot wakes a loop.
        self._claim = itertools.count().__next__
        self.value: Any = None
        self.error: BaseException | None = None
        self.timed_out = False
        self._after = None
        self._runner = None
        self._lock = None
        self._loop = loop
        self._future = future
        self._target = target
        self._timeout = timeout

    def _wake(self) -> None:
        # A closed loop raises RuntimeError: nobody awaits this answer any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        future = self._future
        if future.done():
            return  # the awaiting task was cancelled: the answer is dropped, as a late reply
        if self.timed_out:
            future.set_exception(CallTimeout(self._target, self._timeout))
        elif self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(self.value)

    def wait(self, timeout: float | None) -> bool:
        raise RuntimeError("an asyncio reply slot is awaited, never waited on")


async def call(handle: Handle, message: Any, timeout: float | None = 5.0) -> Any:
    """``handle.call(message, timeout)`` for a coroutine: the server's thread completes it.

    The same errors as ``Handle.call``: ``CallTimeout``, ``NoProcess``, ``ServerExited``
    and the server's caller errors. Cancelling the awaiting task drops the reply when it
    comes; the server still handles the message (as after a ``CallTimeout``).
    """
    process = handle.resolve()
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    target = handle.name or handle
    slot = _FutureSlot(loop, future, target, timeout)
    pending = process.pending
    pending.add(slot)
    # Checked after adding, as Handle.call does: the exit path fails the slot, or we see it.
    if process.dead:
        pending.discard(slot)
        raise NoProcess(target)
    process.send(CallEnvelope(message, slot, None))
    timer = None if timeout is None else loop.call_later(timeout, slot.time_out)
    try:
        return await future
    finally:
        if timer is not None:
            timer.cancel()
        slot.time_out()  # after a cancellation: a reply that comes later is dropped
        pending.discard(slot)


class _Task(GenServer):
    """One awaited job: run it, answer its future, exit. Exits of what it links are
    trapped (messages it never reads), so a crash there cannot kill the job midway."""

    trap_exits = True

    def handle_cast(
        self, job: tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], Any]
    ) -> Any:
        if not (type(job) is tuple and len(job) == 4 and type(job[3]) is _FutureSlot):
            return super().handle_cast(job)  # not the job run() sends: a warning, no crash
        fn, args, kwargs, slot = job
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            slot.fail(exc)
            if not isinstance(exc, Exception):
                raise  # Killed and the like end the process, as they would any other
        else:
            slot.set(result)
        finally:
            # What the job started with start_link belongs to its caller, a coroutine that is
            # no process: as from a plain thread, nothing stays linked to the job.
            process = self._process
            for partner in list(process.links):
                process.unlink(partner)
        return Stop("normal")


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)``, run in a short-lived process on the schedulers.

    For any synchronous otpmem call: its own timeouts bound it, its calls suspend the
    process (no thread waits), and its result or error comes back here. Cancelling the
    awaiting task does not stop the job: it finishes, and its answer is dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    slot = _FutureSlot(loop, future, fn, None)
    task = _Task.start()
    task.cast((fn, args, kwargs, slot))
    result: T = await future
    return result
