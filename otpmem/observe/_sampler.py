"""What a live observer and an attached one share: ``sample()`` run every ``interval`` s on
a daemon thread of their own until ``close``, a failed sample logged and survived."""

from __future__ import annotations

import logging
import threading
from typing import Self

logger = logging.getLogger("otpmem.observe")


class Sampler:
    """A base for observers: ``start`` the loop, ``stop_sampling`` to end it."""

    thread_name = "otpmem-observer"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> object:
        """One sample (the subclass's)."""
        raise NotImplementedError

    def start(self, interval: float = 0.5) -> Self:
        """Sample every ``interval`` s on a thread of the observer's own."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, args=(interval,), name=self.thread_name, daemon=True
            )
            self._thread.start()
        return self

    def _loop(self, interval: float) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # an observer must outlive what it watches
                logger.exception("%s: a sample failed", self.thread_name)
            self._stop.wait(interval)

    def stop_sampling(self, timeout: float) -> None:
        """End the loop and wait up to ``timeout`` s for its thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
