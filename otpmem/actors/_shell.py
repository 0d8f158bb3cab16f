"""pykka's Actor on the runtime's schedulers: the concurrency model behind its extension points.

pykka leaves three things to an implementation (``_create_actor_inbox``, ``_create_future``,
``_start_actor_loop``); ``ThreadingActor`` fills them with a queue, a condition and a thread.
``GreenletActor`` fills them with a mailbox whose ``get`` suspends, a future whose ``get``
suspends, and a loop that runs as a runner on a scheduler, so any pykka actor (``tell``,
``ask``, proxies) runs as a lightweight process. ``tests/test_pykka_contract.py`` pins what
is relied on.
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

import pykka

from ._scheduler import IDLE, QUEUED, Scheduler, wake
from ._waits import Event, OneShot

if TYPE_CHECKING:
    from pykka._envelope import Envelope
    from pykka._types import OptExcInfo

_urns = itertools.count(1)


class GreenletInbox:
    """A FIFO whose ``get`` suspends the calling process until something arrives."""

    __slots__ = ("_items", "_lock", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._lock = threading.Lock()
        self._waiter: OneShot | None = None

    def put(self, envelope: Envelope[Any], /) -> None:
        """Append ``envelope`` and wake the actor if it waits."""
        with self._lock:
            self._items.append(envelope)
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            waiter.set(None)

    def get(self) -> Envelope[Any]:
        """The oldest envelope, waiting for one if there is none."""
        while True:
            with self._lock:
                if self._items:
                    envelope: Envelope[Any] = self._items.popleft()
                    return envelope
                waiter = self._waiter = OneShot()
            waiter.wait(None)

    def empty(self) -> bool:
        """True when nothing is queued."""
        return not self._items


class GreenletFuture(pykka.Future[Any]):
    """pykka's Future for lightweight processes: ``get`` suspends a process, blocks a thread."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._done = Event()
        self._result: tuple[Any, OptExcInfo | None] | None = None

    def get(self, *, timeout: float | None = None) -> Any:
        """The value (or raise the exception) once set; ``pykka.Timeout`` after ``timeout``."""
        try:
            return super().get(timeout=timeout)
        except NotImplementedError:
            pass
        if not self._done.wait(timeout):
            raise pykka.Timeout(f"{timeout} seconds")
        assert self._result is not None
        value, exc_info = self._result
        if exc_info is not None:
            exc_type, exc_value, exc_traceback = exc_info
            assert exc_type is not None
            if exc_value is None:
                exc_value = exc_type()
            raise exc_value.with_traceback(exc_traceback)
        return value

    def set(self, value: Any | None = None) -> None:
        """Set the value; ``queue.Full`` if already set, as pykka's futures do."""
        self._settle((value, None))

    def set_exception(self, exc_info: OptExcInfo | None = None) -> None:
        """Set an exception (default: the one being handled)."""
        self._settle((None, exc_info if exc_info is not None else sys.exc_info()))

    def _settle(self, result: tuple[Any, OptExcInfo | None]) -> None:
        with self._lock:
            if self._result is not None or self._get_hook is not None:
                raise queue.Full
            self._result = result
        self._done.set()


class GreenletActor(pykka.Actor):
    """A pykka actor that runs as a lightweight process on the runtime's schedulers::

    class Echo(GreenletActor):
        def on_receive(self, message):
            return message

    ref = Echo.start()
    ref.ask("hi")  # -> "hi"
    ref.stop()
    """

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        # pykka's own __init__ makes a uuid and a threading.Event: 2 us and ~5 KB per
        # actor, too much for a million of them; the fields it promises are set here.
        self.actor_urn = f"urn:otpmem:{next(_urns)}"
        self.actor_inbox = self._create_actor_inbox()
        self.actor_stopped = Event()  # type: ignore[assignment]
        self._actor_ref = pykka.ActorRef(self)
        self.run_state = IDLE
        self.run_lock = threading.Lock()
        self.home: Scheduler | None = None
        self.killed = False
        self.waiting: OneShot | None = None

    @staticmethod
    def _create_actor_inbox() -> Any:
        return GreenletInbox()

    @staticmethod
    def _create_future() -> pykka.Future[Any]:
        return GreenletFuture()

    def _start_actor_loop(self) -> None:
        self.run_state = QUEUED
        wake(self)

    def run_batch(self) -> None:
        """pykka's own loop: it suspends in ``get`` while the inbox is empty."""
        self._actor_loop()
