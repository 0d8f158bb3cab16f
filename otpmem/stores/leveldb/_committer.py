"""LevelDBStore's committer: a thread of the store's own that writes what is queued as one
synced WriteBatch, so writes that arrive while an fsync is in flight share the next one.

The store's server hands each write (its puts and deletes, and whom to answer) to the
committer thread and moves on to the next message. The committer takes everything queued,
writes it as one LevelDB WriteBatch with one fsync, then answers every caller of that group:
an ``add`` is acknowledged only once it is on disk.

A plain thread's write (``submit_here``) that finds no group being written, and the last
group a lone write, leads one itself, as in LevelDB's writer queue: it writes what is
queued, its own write last, on its own thread, so a lone writer pays no hand-off to the
committer thread and back. One group is written at a time, whoever writes it, so writes
still land in the order submitted.

The server reads some keys it wrote before they are on disk (an idempotency key, to refuse
a batch sent twice in quick succession): ``staged`` answers from the writes still queued,
and a key leaves that view only after its group is written, so a reader that misses it
there finds it on disk.

Why a thread, where PostgresStore's writers take turns among themselves
(``postgres/_group_commit``): a LevelDB write is built by the one server that
numbers the conversation's messages, and that server is a process, which must never wait
for an fsync (it would hold a scheduler thread, and every process queued behind it). So a
process's add is handed over with whom to answer, and someone other than the server must
write it: this thread. The writes it holds are also what ``staged`` shows, since the next
write is built on them before they are on disk. A PostgresStore numbers messages inside
the transaction, under the conversation's row lock, so it has no such server and no such
view: each writer can commit for the others on its own thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from ...actors import ReplyTo, reply, reply_error
from ...actors.runtime import OneShot
from .._base import StoreError

logger = logging.getLogger("otpmem.stores")

Op = tuple[bytes, bytes | None]  # (key, value); None deletes
MISSING = object()
"""What ``Committer.staged`` returns for a key no queued write touches."""


# A process's call waits on its ReplyTo; a plain thread's add on a slot of its own.
Answer = ReplyTo | OneShot


def _answer(to: Answer | None, value: Any) -> None:
    if type(to) is OneShot:
        to.set(value)
    elif to is not None:
        reply(to, value)  # type: ignore[arg-type]


def _refuse(to: Answer | None, error: BaseException) -> None:
    if type(to) is OneShot:
        to.fail(error)
    elif to is not None:
        reply_error(to, error)  # type: ignore[arg-type]


_Write = tuple[list[Op], "Answer | None", int, list[bytes], Any]


class Committer:
    """One thread that writes groups of batches to a plyvel DB in arrival order."""

    def __init__(
        self, db: Any, sync: bool, on_failure: Callable[[BaseException], None], label: str
    ) -> None:
        self._db = db
        self._sync = sync
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._queue: list[_Write] = []
        # key -> (the write that last touched it, its value); read without the lock
        self._staged: dict[bytes, tuple[int, bytes | None]] = {}
        self.writes = 0  # writes submitted, for observers (and each write's token)
        self._busy = False
        self._last_group = 0  # how many writes the last group held
        self._flushing = 0  # threads in flush()
        self._stopping = False
        self._failed: BaseException | None = None
        self.groups = 0
        self._thread = threading.Thread(target=self._run, name=f"committer-{label}", daemon=True)
        self._thread.start()

    def submit(
        self,
        ops: list[Op],
        to: Answer | None,
        staged: dict[bytes, bytes | None] | None = None,
        answer: Any = None,
    ) -> None:
        """Queue one all-or-nothing write; ``to`` is answered (with ``answer``) once it is
        durable.

        ``staged`` (a subset of ``ops``) is what ``staged()`` shows until it is written.
        """
        with self._cond:
            if self._queued(ops, to, staged, answer):
                self._cond.notify()

    def submit_here(
        self, ops: list[Op], to: OneShot, staged: dict[bytes, bytes | None] | None = None
    ) -> list[_Write] | None:
        """``submit`` for a plain thread that may write: the group it is to write now (its
        own write last) if none is being written, else None (the committer writes it).
        The caller writes a group it got with ``write_led``, after releasing its locks."""
        with self._cond:
            if not self._queued(ops, to, staged, None):
                return None
            # Leading pays off for a lone writer; writers that arrive together are gathered
            # better by the committer (the groups it last wrote say which we have): a writer
            # leading at once would write alone while the rest queue for the next fsync.
            if self._busy or self._last_group > 1:
                self._cond.notify()
                return None
            group, self._queue = self._queue, []
            self._busy = True
            return group

    def write_led(self, group: list[_Write]) -> None:
        """Write a group ``submit_here`` gave this thread, and answer its callers."""
        self._write(group)

    def _queued(
        self,
        ops: list[Op],
        to: Answer | None,
        staged: dict[bytes, bytes | None] | None,
        answer: Any,
    ) -> bool:
        if self._failed is not None or self._stopping:
            error = StoreError(f"the store can no longer write: {self._failed or 'stopping'}")
            _refuse(to, error)
            return False
        self.writes += 1
        token = self.writes
        if staged:
            for key, value in staged.items():
                self._staged[key] = (token, value)
        self._queue.append((ops, to, token, list(staged or ()), answer))
        return True

    def staged(self, key: bytes) -> bytes | object | None:
        """The value a queued write gives ``key`` (None: deletes it), or ``MISSING``."""
        found = self._staged.get(key)
        return MISSING if found is None else found[1]

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        with self._cond:
            self._flushing += 1
            try:
                return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)
            finally:
                self._flushing -= 1

    def stop(self, timeout: float | None = 30.0) -> None:
        """Write what is queued, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                # A group a plain thread leads is written before anything queued behind it.
                self._cond.wait_for(
                    lambda: (
                        self._failed is not None
                        or (not self._busy and (self._queue or self._stopping))
                    )
                )
                if self._failed is not None or not self._queue:
                    return
                group, self._queue = self._queue, []
                self._busy = True
            if not self._write(group):
                return

    def _write(self, group: list[_Write]) -> bool:
        """Write one group (this thread holds ``_busy``) and answer it; False if it failed."""
        try:
            batch = self._db.write_batch(sync=self._sync)
            for ops, *_ in group:
                for key, value in ops:
                    if value is None:
                        batch.delete(key)
                    else:
                        batch.put(key, value)
            batch.write()
        except BaseException as exc:
            self._fail(group, exc)
            return False
        self.groups += 1
        with self._cond:
            self._last_group = len(group)
            for _, _, token, staged, _ in group:
                for key in staged:
                    found = self._staged.get(key)
                    if found is not None and found[0] <= token:
                        del self._staged[key]
            self._busy = False
            # Only a flush, or the committer with writes queued behind this group, waits on
            # its end: waking the idle committer after every lone write costs a switch.
            if self._queue or self._flushing or self._stopping:
                self._cond.notify_all()
        for _, to, _, _, answer in group:
            _answer(to, answer)
        return True

    def _fail(self, group: list[_Write], exc: BaseException) -> None:
        logger.error("LevelDB write failed; failing %d writes", len(group), exc_info=exc)
        with self._cond:
            self._failed = exc
            pending, self._queue = self._queue, []
            self._busy = False
            self._cond.notify_all()
        error = StoreError(f"LevelDB write failed: {exc!r}")
        for _, to, *_ in group + pending:
            _refuse(to, error)
        self._on_failure(exc)
