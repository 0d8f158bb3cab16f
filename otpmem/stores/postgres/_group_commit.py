"""PostgresStore's group commit: writers on many threads take turns as the one that commits
them all; there is no thread of its own.

LevelDB's writer queue, in Python: each writer joins a queue; the writer at its front is
the leader, commits everything queued behind it (up to ``max_group``) as one unit, answers
each of them, and hands the front to the next writer. A writer alone commits alone, at
once; sixteen at once share one transaction (one fsync, one round trip) where each would
have paid its own.

    group = GroupCommit(commit_all, max_group=64)
    result = group.submit(item)     # returns once ``item`` is committed, or raises its error

``commit(items)`` returns one outcome per item: its result, or the exception that item
alone raises (a bad item fails alone). If ``commit`` itself raises, every item of the
group raises that.

Why writers taking turns, where LevelDBStore hands its writes to a committer thread
(``leveldb/_committer``): every PostgresStore write already runs on its
caller's thread (a process's in the blocking pool, so no scheduler thread waits on the
network), and PostgreSQL orders the writes: sequence numbers are assigned in the
transaction, under the conversation's row lock, and nothing reads a write before it
commits. So there is nothing to hand a write to and no view of queued writes to keep: the
writer that would otherwise wait for its own commit commits the group instead, and each
item hears an outcome of its own (one add's lost lease or cleared conversation does not
fail the others), where a LevelDB group is one WriteBatch, all of it or none.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Writer(Generic[T]):
    __slots__ = ("done", "item", "outcome", "wake")

    def __init__(self, item: T) -> None:
        self.item = item
        self.outcome: object = None
        self.done = False
        self.wake = threading.Lock()
        self.wake.acquire()  # released once: when done, or when this writer leads


class GroupCommit(Generic[T, R]):
    """Commit the items of concurrent ``submit`` calls together, in arrival order."""

    def __init__(
        self,
        commit: Callable[[Sequence[T]], Sequence[R | BaseException]],
        max_group: int = 64,
    ) -> None:
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group!r}")
        self._commit = commit
        self._max_group = max_group
        self._mutex = threading.Lock()
        self._queue: deque[_Writer[T]] = deque()
        self.groups = 0
        self.items = 0

    @property
    def queued(self) -> int:
        """How many writers are in line (the committing group included)."""
        return len(self._queue)

    def submit(self, item: T) -> R:
        """Commit ``item`` (with whatever else is queued) and return its result."""
        writer: _Writer[T] = _Writer(item)
        with self._mutex:
            self._queue.append(writer)
            leading = len(self._queue) == 1
        if not leading:
            # The leader of the group this writer joins wakes it: committed, or its turn
            # (it is then at the front, so its own item is in the group it leads).
            writer.wake.acquire()
            if writer.done:
                return self._answer(writer)
        self._lead(writer)
        return self._answer(writer)

    def _lead(self, leader: _Writer[T]) -> None:
        with self._mutex:
            group = list(islice(self._queue, self._max_group))
        try:
            outcomes: Sequence[object] = self._commit([w.item for w in group])
            if len(outcomes) != len(group):
                raise RuntimeError(
                    f"group commit answered {len(outcomes)} outcomes for {len(group)} items"
                )
        except BaseException as exc:  # the whole group failed: each member hears why
            outcomes = [exc if w is leader else _own_copy(exc) for w in group]
        with self._mutex:
            for _ in group:
                self._queue.popleft()
            following = self._queue[0] if self._queue else None
            self.groups += 1
            self.items += len(group)
        for writer, outcome in zip(group, outcomes, strict=True):
            writer.outcome = outcome
            writer.done = True
            if writer is not leader:
                writer.wake.release()
        if following is not None:
            following.wake.release()  # the next writer in line leads the next group

    @staticmethod
    def _answer(writer: _Writer[T]) -> R:
        if isinstance(writer.outcome, BaseException):
            raise writer.outcome
        return writer.outcome  # type: ignore[return-value]


def _own_copy(exc: BaseException) -> BaseException:
    """``exc`` for another thread to raise: one object raised on many threads would chain
    every thread's traceback onto it, so a copy (with the same cause) when one can be
    made."""
    try:
        copied = copy.copy(exc)
    except Exception:  # an exception type that cannot be rebuilt from its args
        return exc
    copied.__traceback__ = None
    copied.__cause__ = exc.__cause__
    copied.__context__ = exc.__context__
    return copied
