"""LevelDBStore's committer: a thread of the store's own that writes what is queued as one
synced WriteBatch, so writes that arrive while an fsync is in flight share the next one.

The store's server hands each write (its puts and deletes, and whom to answer) to the
committer thread and moves on to the next message. The committer takes everything queued,
writes it as one LevelDB WriteBatch with one fsync, then answers every caller of that group:
an ``add`` is acknowledged only once it is on disk.

A plain thread's add (``begin_direct``, ``write_direct``) is no hand-off at all: the thread
writes its own synced WriteBatch, as the bare writer does, and LevelDB's own writer queue
gathers the batches of threads writing together into one fsync, in C, with the GIL
released (a committer of ours would wake for each, and wake each writer after). Order
holds where it matters, among writes of the same keys: a write whose keys (every key whose
order matters: the conversation's meta, the usage sums, the idempotency keys) a write not
yet on disk touches is queued instead, and a queued group waits for every direct write
claimed before it. Writes of other keys land in either order, and none is acknowledged
before it is on disk.

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
from functools import partial
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


def _write_batch(db: Any, sync: bool, ops: list[Op]) -> None:
    """Put and delete ``ops`` (a ``None`` value deletes) in one WriteBatch, synced if asked."""
    batch = db.write_batch(sync=sync)
    for key, value in ops:
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    batch.write()


def _refuse(to: Answer | None, error: BaseException) -> None:
    if type(to) is OneShot:
        to.fail(error)
    elif to is not None:
        reply_error(to, error)  # type: ignore[arg-type]


_Write = tuple[list[Op], "Answer | None", int, list[bytes], Any]


class Committer:
    """One thread that writes groups of batches to a plyvel DB in arrival order, beside the
    plain threads that write their own."""

    def __init__(
        self, db: Any, sync: bool, on_failure: Callable[[BaseException], None], label: str
    ) -> None:
        self._db = db
        self._sync = sync
        self._on_failure = on_failure
        # The lock itself where no one waits: a Condition's own enter is Python code.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._queue: list[_Write] = []
        # key -> (the write that last touched it, its value); read without the lock
        self._staged: dict[bytes, tuple[int, bytes | None]] = {}
        self.writes = 0  # writes submitted, for observers (and each write's token)
        self._busy = False
        # tokens of the direct writes not yet on disk, oldest first
        self._direct: dict[int, None] = {}
        self.direct_writes = 0  # direct writes on disk, for observers
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
        with self._lock:
            if self._queued(ops, to, staged, answer):
                # A flush may wait on the condition too (for a direct write): notify() could
                # wake it rather than the committer thread.
                if self._flushing:
                    self._cond.notify_all()
                else:
                    self._cond.notify()

    def begin_direct(self, staged: dict[bytes, bytes | None]) -> int | None:
        """Claim a write a plain thread makes itself (``write_direct``): its token, or None
        if a write not yet on disk touches one of the keys in ``staged`` (every key whose
        order matters: it must then queue behind that write, with ``submit``).

        Its ``staged`` shows in ``staged()`` until it is written; a group submitted after
        it is written only once it is on disk. ``StoreError`` if the store cannot write.
        """
        with self._lock:
            if self._failed is not None or self._stopping:
                raise StoreError(f"the store can no longer write: {self._failed or 'stopping'}")
            held = self._staged
            for key in staged:
                if key in held:
                    return None
            self.writes += 1
            token = self.writes
            for key, value in staged.items():
                held[key] = (token, value)
            self._direct[token] = None
            return token

    def write_direct(self, ops: list[Op], staged: dict[bytes, bytes | None], token: int) -> None:
        """Write a claimed write as one synced batch on this thread: LevelDB's own writer
        queue gathers concurrent ones into one fsync, with no hand-off to a thread of ours.
        Returns once it is durable; ``StoreError`` if it failed (the store then restarts)."""
        try:
            _write_batch(self._db, self._sync, ops)
        except BaseException as exc:
            # Failed first: a group waiting on this write must see it did not land.
            self._fail([], exc, direct=True)
            self._landed(token, staged)
            raise StoreError(f"LevelDB write failed: {exc!r}") from exc
        self._landed(token, staged)

    def _landed(self, token: int, staged: dict[bytes, bytes | None]) -> None:
        with self._lock:
            held = self._staged
            for key in staged:
                found = held.get(key)
                if found is not None and found[0] == token:
                    del held[key]
            del self._direct[token]
            self.direct_writes += 1
            # Only a group queued behind it, a flush or a stop waits on its end.
            if self._queue or self._busy or self._flushing or self._stopping:
                self._cond.notify_all()

    def _nothing_before(self, token: int) -> bool:
        """Whether every direct write claimed before ``token`` is on disk (or a write
        failed: nothing more is written then)."""
        direct = self._direct
        return self._failed is not None or not direct or next(iter(direct)) >= token

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
            # The direct writes claimed so far, not those of threads that go on writing.
            before = self.writes + 1
            try:
                return self._cond.wait_for(
                    lambda: not self._queue and not self._busy and self._nothing_before(before),
                    timeout,
                )
            finally:
                self._flushing -= 1

    def stop(self, timeout: float | None = 30.0) -> None:
        """Write what is queued, then end the thread; return once no direct write is on
        its way either (the database may be closed then)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            self._cond.wait_for(lambda: not self._direct, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._failed is not None or self._queue or self._stopping
                )
                if self._failed is not None or not self._queue:
                    return
                group, self._queue = self._queue, []
                self._busy = True
                # A direct write claimed before this group may touch its keys: it lands
                # first, as it was built first.
                last = group[-1][2]
                self._cond.wait_for(partial(self._nothing_before, last))
                refused = None
                if self._failed is not None:
                    self._busy = False
                    refused = StoreError(f"LevelDB write failed: {self._failed!r}")
            if refused is not None:
                for _, to, *_ in group:
                    _refuse(to, refused)
                return
            if not self._write(group):
                return

    def _write(self, group: list[_Write]) -> bool:
        """Write one group (this thread holds ``_busy``) and answer it; False if it failed."""
        try:
            _write_batch(self._db, self._sync, [op for ops, *_ in group for op in ops])
        except BaseException as exc:
            self._fail(group, exc)
            return False
        self.groups += 1
        with self._lock:
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

    def _fail(self, group: list[_Write], exc: BaseException, direct: bool = False) -> None:
        logger.error("LevelDB write failed; failing %d writes", len(group) + direct, exc_info=exc)
        with self._cond:
            first = self._failed is None
            self._failed = self._failed or exc
            pending, self._queue = self._queue, []
            if not direct:  # a direct write's failure leaves a group being written to its writer
                self._busy = False
            self._cond.notify_all()
        error = StoreError(f"LevelDB write failed: {exc!r}")
        for _, to, *_ in group + pending:
            _refuse(to, error)
        if first:  # direct writes failing together: the server restarts once
            self._on_failure(exc)
