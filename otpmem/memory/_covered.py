"""What a summary replaces in what is sent: the messages it covers, on every kind of
``memory()``.

A summary (``Memory.summarize``, or the summary kind's rolls) is a pinned system message
whose ``metadata.summary.covers`` is ``[0, n)``: the conversation's first n unpinned
messages. They stay stored (``get_all``, ``search``, ``get_relevant`` still find them);
what a model is sent is the summary in their place. The summary kind's pipeline does this
itself; these providers do it for the others, so that after ``summarize(keep_recent=5)``
the context is the pinned messages, the summary and the 5 recent ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import ConvLike, as_conv, is_summary
from .provider import DefaultProvider
from .recall import HybridProvider
from .window import drop_orphans, is_pinned, safe_window

Message = Mapping[str, Any]


def covered_count(messages: Sequence[Message]) -> int:
    """How many of the conversation's unpinned messages its newest summary covers."""
    newest = next((m for m in reversed(messages) if is_summary(m)), None)
    if newest is None:
        return 0
    covers = newest["metadata"]["summary"].get("covers")
    if isinstance(covers, Sequence) and len(covers) == 2 and covers[0] == 0:
        end = covers[1]
        if type(end) is int and end > 0:
            return end
    return 0


def without_covered(messages: Sequence[Message], covered: int) -> list[Message]:
    """``messages`` (a provider's history: ``offset`` unpinned ones before it unread) minus
    the unpinned ones a summary covers, in their order; the newest user message and what
    follows it are never dropped (a summary must not hide the question being answered)."""
    offset = getattr(messages, "offset", 0)
    unpinned = [i for i, m in enumerate(messages) if not is_pinned(m)]
    asked = next((n for n in reversed(range(len(unpinned))) if _asks(messages[unpinned[n]])), None)
    cut = max(0, covered - offset)
    if asked is not None:
        cut = min(cut, asked)
    if cut == 0:
        return list(messages)
    dropped = set(unpinned[:cut])
    # A cut lands between tool groups (summaries are made so); drop_orphans guards the rest.
    return drop_orphans([m for i, m in enumerate(messages) if i not in dropped])


def _asks(message: Message) -> bool:
    return message.get("role") == "user"


class WindowMemoryProvider(DefaultProvider):
    """``DefaultProvider``: the pinned messages first (of the summaries only the newest),
    then the newest ``window`` others (all of them without a window), with the newest
    summary standing in for the messages it covers."""

    def __repr__(self) -> str:
        return f"WindowMemoryProvider({self.store!r}, window={self.window_size})"

    def prepare(self, conv: ConvLike, messages: Sequence[Message]) -> list[Message]:
        """The messages a summary does not cover, pinned first, windowed."""
        as_conv(conv)
        kept = without_covered(messages, covered_count(messages))
        # Without a window every message is sent, still in the order every kind sends:
        # the pinned ones (the summary of what came before) first.
        return safe_window(kept, len(kept) if self.window_size is None else self.window_size)


class HybridMemoryProvider(HybridProvider):
    """``HybridProvider``, with the newest summary standing in for what it covers: neither
    the recent window nor recall sends a covered message."""

    def prepare(self, conv: ConvLike, messages: Sequence[Message]) -> list[Message]:
        """Pinned, recalled and recent messages; none of them covered by the summary."""
        covered = covered_count(messages)
        kept = without_covered(messages, covered)
        sent = super().prepare(conv, kept)
        if covered == 0:
            return sent
        given = {id(m) for m in kept}
        recalled = [m for m in sent if not is_pinned(m) and id(m) not in given]
        if not recalled:
            return sent
        uncovered = self._uncovered(conv, covered)
        return [m for m in sent if is_pinned(m) or id(m) in given or m in uncovered]

    def _uncovered(self, conv: ConvLike, covered: int) -> list[Message]:
        """The stored unpinned messages from number ``covered`` on (what recall may send),
        from tail reads that double until they reach back to it."""
        key = as_conv(conv)
        want = 64
        while True:
            stored = self.store.window(key, want)
            offset = stored.start - stored.pinned_before  # unpinned messages before the tail
            if offset <= covered:
                break
            want *= 2
        body: list[Message] = [m for m in stored.tail if not is_pinned(m)]
        return body[covered - offset :]
