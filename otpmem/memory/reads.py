"""What a pipeline reads of a stored conversation, and where what it is given sits in it.

A summarizing pipeline numbers the conversation's unpinned messages (a summary covers
``[0, n)`` of them), so a prepare over a tail must know how many come before the tail
unread: its ``offset``. ``read_for`` reads the pinned index and as much of the tail as the
pipeline's strategies need and returns a ``History`` that carries that offset;
``LastReads`` finds it again when the list a caller hands to ``prepare`` lost it, as
beamai's loop does (``prepare(conv, history + [question])`` builds a new list).
Without an offset, a tail would pass for the whole conversation: each prepare would see
the stored summary as not fitting, roll a new one misnumbered from 0, and the next read
would find nothing covered and read the whole conversation again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..messages import Conv, split_pinned
from ..stores import ChatMemory
from .pipeline import Pipeline
from .prepare_context import NO_OPTIONS, CallOptions

FIRST_READ = 64
"""How many of the newest messages a pipeline's first read of a turn takes; it doubles
until every strategy sees enough."""

REMEMBERED = 1024
"""How many conversations' last tail read a ``LastReads`` keeps (the oldest go first)."""


class History(list[dict[str, Any]]):
    """What a provider's ``history`` returns: the messages, and how many of the
    conversation's unpinned messages come before them unread (``offset``), so a pipeline
    that numbers the whole conversation (summaries do) still can. ``history + [message]``
    and ``history.copy()`` keep the offset (what is added comes after)."""

    __slots__ = ("offset",)

    def __init__(self, messages: Iterable[Any] = (), offset: int = 0) -> None:
        super().__init__(messages)
        self.offset = offset

    def __add__(self, other: Iterable[Any]) -> History:  # type: ignore[override]
        """The messages, then ``other``'s, with this offset."""
        return History([*self, *other], self.offset)

    def copy(self) -> History:
        """A shallow copy, offset kept."""
        return History(self, self.offset)


def read_for(
    store: ChatMemory, conv: Conv, pipeline: Pipeline, options: CallOptions = NO_OPTIONS
) -> History:
    """The pinned messages and the newest ones the pipeline (run with ``options``) needs,
    oldest first: the first read takes ``FIRST_READ``, each next one twice as many."""
    want = FIRST_READ
    while True:
        stored = store.window(conv, want)
        if stored.start == 0:
            return History(stored.tail)
        offset = stored.start - stored.pinned_before
        pinned = [m for _, m in stored.pinned]
        in_tail, unpinned, _, _ = split_pinned(stored.tail)  # one pass, every turn
        pinned += in_tail
        if (
            unpinned
            and unpinned[0].get("role") != "tool"
            and pipeline.sees_enough(unpinned, offset, pinned, options)
        ):
            return History(stored.messages(), offset)
        want *= 2


class LastReads:
    """The last tail read per conversation, to find the offset of a list built from it.

    ``offset_of(conv, messages)``: the list's own ``offset`` if it has one (a ``History``),
    else the offset of the last read if the list begins with what that read returned
    (the same messages, or equal ones), else 0 (the list is taken for the whole
    conversation). Thread-safe; reads of a whole conversation are not kept.
    """

    def __init__(self, keep: int = REMEMBERED) -> None:
        self._reads: dict[Conv, History] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def remember(self, conv: Conv, history: History) -> None:
        """Keep ``history`` as the conversation's last read."""
        with self._lock:
            self._reads.pop(conv, None)
            if history.offset == 0:
                return
            if len(self._reads) >= self._keep:
                del self._reads[next(iter(self._reads))]
            self._reads[conv] = history

    def forget(self, conv: Conv) -> None:
        """Drop the conversation's last read (it was cleared)."""
        with self._lock:
            self._reads.pop(conv, None)

    def offset_of(self, conv: Conv, messages: Sequence[Mapping[str, Any]]) -> int:
        """Where ``messages`` begins among the conversation's unpinned messages."""
        own = getattr(messages, "offset", None)
        if type(own) is int:
            return own
        with self._lock:
            read = self._reads.get(conv)
        if read is None or len(messages) < len(read):
            return 0
        if all(a is b or a == b for a, b in zip(read, messages, strict=False)):
            return read.offset
        return 0
