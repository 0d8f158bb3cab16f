"""Group commit: writes that arrive while a synced write is in flight share the next one.

The store's server hands each write (its puts and deletes, and whom to answer) to the
committer thread and moves on to the next message. The committer takes everything queued,
writes it as one LevelDB WriteBatch with one fsync, then answers every caller of that group:
an ``add`` is acknowledged only once it is on disk.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ..actors import ReplyTo, reply, reply_error
from ._base import StoreError

logger = logging.getLogger("otpmem.stores")

Op = tuple[bytes, bytes | None]  # (key, value); None deletes


class Committer:
    """One thread that writes groups of batches to a plyvel DB in arrival order."""

    def __init__(
        self, db: Any, sync: bool, on_failure: Callable[[BaseException], None], label: str
    ) -> None:
        self._db = db
        self._sync = sync
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._queue: list[tuple[list[Op], ReplyTo | None]] = []
        self._busy = False
        self._stopping = False
        self._failed: BaseException | None = None
        self.groups = 0
        self._thread = threading.Thread(target=self._run, name=f"committer-{label}", daemon=True)
        self._thread.start()

    def submit(self, ops: list[Op], to: ReplyTo | None) -> None:
        """Queue one all-or-nothing write; ``to`` is answered once it is durable."""
        with self._cond:
            if self._failed is not None or self._stopping:
                error = StoreError(f"the store can no longer write: {self._failed or 'stopping'}")
                if to is not None:
                    reply_error(to, error)
                return
            self._queue.append((ops, to))
            self._cond.notify()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Write what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if not self._queue:
                    return
                group, self._queue = self._queue, []
                self._busy = True
            try:
                batch = self._db.write_batch(sync=self._sync)
                for ops, _ in group:
                    for key, value in ops:
                        if value is None:
                            batch.delete(key)
                        else:
                            batch.put(key, value)
                batch.write()
            except BaseException as exc:
                self._fail(group, exc)
                return
            self.groups += 1
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            for _, to in group:
                if to is not None:
                    reply(to, None)

    def _fail(self, group: list[tuple[list[Op], ReplyTo | None]], exc: BaseException) -> None:
        logger.error("LevelDB write failed; failing %d writes", len(group), exc_info=exc)
        with self._cond:
            self._failed = exc
            pending, self._queue = self._queue, []
            self._busy = False
            self._cond.notify_all()
        error = StoreError(f"LevelDB write failed: {exc!r}")
        for _, to in group + pending:
            if to is not None:
                reply_error(to, error)
        self._on_failure(exc)
