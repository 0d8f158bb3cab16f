"""HybridProvider: pinned messages, then relevant older ones, then the recent window.

bx-ai's hybrid memory, with its holes closed (seed_peers.md §1.10): recalled messages are
deduplicated against the recent window by position (not by a content hash that never
matches), come back in one shape (stored messages) and in conversation order, and
``recent_weight`` really decides something: how ``total_limit`` is split when the recent
and the semantic limits do not both fit in it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ...messages import ConvLike, as_conv, is_summary, short_repr, text_of
from ...stores import ChatMemory
from ..pipeline import Pipeline
from ..provider import DefaultProvider, StoreProvider
from ..window import is_pinned, newest_user_index, units
from .handle import RecallIndexHandle

Message = Mapping[str, Any]


def _recallable(message: Mapping[str, Any]) -> bool:
    # Pinned messages come first anyway; recalling them would send them twice.
    return not is_pinned(message)


class HybridProvider(StoreProvider):
    """A ``MemoryProvider`` that recalls what matters from the whole conversation::

        index = RecallIndex.start_link(store)
        provider = HybridProvider(store, index, recent_limit=6, semantic_limit=4)
        Agent.start_link(llm=model, memory=provider, user_id="ann")

    ``prepare(conv, messages)`` returns: every pinned message of the conversation (system
    messages, ``metadata.pinned``, and only the newest stored summary), in conversation
    order; then up to ``semantic_limit`` older messages the index finds relevant to the
    newest user message, whole tool groups only, in conversation order; then the newest
    ``recent_limit`` messages of ``messages`` (whole tool groups). Recalled plus recent never
    exceed ``total_limit``; when both limits do not fit, the recent window gets
    ``ceil(total_limit * recent_weight)`` places (at least one) and recall the rest. The
    one exception: a newest tool group larger than ``total_limit`` is sent alone and whole,
    since a turn must see the results it is answering. A ``pipeline`` (e.g. a
    ``TokenTruncation``) runs last over the result.
    """

    def __init__(
        self,
        store: ChatMemory,
        index: RecallIndexHandle,
        recent_limit: int = 5,
        semantic_limit: int = 5,
        total_limit: int = 10,
        recent_weight: float = 0.6,
        *,
        pipeline: Pipeline | None = None,
        min_score: float = 0.0,
    ) -> None:
        if not isinstance(store, ChatMemory):
            raise TypeError(f"store must implement ChatMemory, got {short_repr(store)}")
        if not isinstance(index, RecallIndexHandle):
            raise TypeError(f"index must be a RecallIndex handle, got {short_repr(index)}")
        for name, value, low in (
            ("recent_limit", recent_limit, 1),
            ("semantic_limit", semantic_limit, 0),
            ("total_limit", total_limit, 1),
        ):
            if type(value) is not int or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {short_repr(value)}")
        if isinstance(recent_weight, bool) or not isinstance(recent_weight, int | float):
            raise ValueError(f"recent_weight must be a number in [0, 1], got {recent_weight!r}")
        if not 0.0 <= recent_weight <= 1.0:
            raise ValueError(f"recent_weight must be in [0, 1], got {recent_weight!r}")
        if pipeline is not None and not isinstance(pipeline, Pipeline):
            raise TypeError(f"pipeline must be a Pipeline, got {short_repr(pipeline)}")
        super().__init__(store)
        self.index = index
        self.recent_limit = recent_limit
        self.semantic_limit = semantic_limit
        self.total_limit = total_limit
        self.recent_weight = float(recent_weight)
        self.pipeline = pipeline
        self.min_score = min_score
        # The recent window's tail read (reaching back past system messages and into a
        # tool round), as DefaultProvider does it.
        self._tail = DefaultProvider(store, window=recent_limit)

    def __repr__(self) -> str:
        return (
            f"HybridProvider(recent_limit={self.recent_limit}, semantic_limit="
            f"{self.semantic_limit}, total_limit={self.total_limit}, "
            f"recent_weight={self.recent_weight})"
        )

    def quotas(self) -> tuple[int, int]:
        """(places for the recent window, places for recall) within ``total_limit``."""
        if self.recent_limit + self.semantic_limit <= self.total_limit:
            return self.recent_limit, self.semantic_limit
        recent = min(self.recent_limit, max(1, math.ceil(self.total_limit * self.recent_weight)))
        return recent, min(self.semantic_limit, self.total_limit - recent)

    def history(self, conv: ConvLike) -> list[dict[str, Any]]:
        """The pinned messages and the newest ``recent_limit`` others, from one
        ``store.window`` read (reaching back into a tool round): the rest is recalled in
        ``prepare``."""
        return self._tail.history(conv)

    def clear(self, conv: ConvLike) -> None:
        """Forget the conversation, in the store and in the index."""
        key = as_conv(conv)
        self.store.clear(key)
        self.index.forget(key)

    def pinned(self, conv: ConvLike, loaded: Sequence[Message]) -> list[Message]:
        """The conversation's pinned messages, oldest first, from the store's pinned index
        (O(pinned), so a system message older than the loaded tail is still found), then
        any pinned message given but not stored.

        Of the summaries only the store's newest counts: one in ``loaded`` that the index
        does not list was superseded (a summary given but never stored counts only when
        the store holds none).
        """
        found: list[Message] = [m for _, m in self.store.pinned(conv)]
        stored_summary = any(is_summary(m) for m in found)
        extra = [
            m
            for m in loaded
            if is_pinned(m)
            and not (stored_summary and is_summary(m))
            and not any(m is f or m == f for f in found)
        ]
        pinned = found + extra
        summaries = [m for m in pinned if is_summary(m)]
        return [m for m in pinned if not is_summary(m) or m is summaries[-1]]

    def prepare(
        self, conv: ConvLike, messages: Sequence[Mapping[str, Any]]
    ) -> list[Mapping[str, Any]]:
        """Pinned first, then recalled older messages, then the recent window."""
        key = as_conv(conv)
        pinned = self.pinned(key, messages)
        body = [m for m in messages if not is_pinned(m)]
        recent_quota, semantic_quota = self.quotas()
        spans = units(body)
        recent: list[Message] = []
        for span in reversed(spans):
            if len(recent) + len(span) > recent_quota:
                if not recent and len(span) > self.total_limit:
                    return self._finish(key, [*pinned, *span])  # the newest group alone
                if not recent:
                    recent_quota = len(span)  # the newest group whole, recall shrinks
                    semantic_quota = min(semantic_quota, self.total_limit - recent_quota)
                else:
                    break
            recent[:0] = span
        recalled = self._recall(key, messages, recent, max(0, semantic_quota))
        return self._finish(key, [*pinned, *recalled, *recent])

    def _recall(
        self, key: Any, messages: Sequence[Message], recent: list[Message], quota: int
    ) -> list[Message]:
        asked = newest_user_index(messages)
        if quota <= 0 or asked is None or not text_of(messages[asked]).strip():
            return []
        # Where the recent window starts in the stored conversation, when ``messages``
        # is its tail (as ``history`` loads it): recall only what lies before.
        stored = self.store.count(key)
        first = next((i for i, m in enumerate(messages) if recent and m is recent[0]), None)
        start = stored - (len(messages) - first) if first is not None else stored
        start = max(0, min(start, stored))
        hits = self.index.get_relevant(
            text_of(messages[asked]),
            conversation=key,
            limit=quota + (stored - start),
            min_score=self.min_score,
            filter=_recallable,
        )
        chosen: dict[int, Message] = {}
        for hit in hits:
            if hit.position >= start or hit.position in chosen or hit.message in recent:
                continue
            span = self._span(key, hit.position, hit.message)
            if not span or any(p >= start for p, _ in span):
                continue
            if len(chosen) + len(span) > quota:
                continue  # a smaller hit further down may still fit
            chosen.update(span)
            if len(chosen) == quota:
                break
        return [chosen[p] for p in sorted(chosen)]

    def _span(self, key: Any, position: int, message: Message) -> list[tuple[int, Message]]:
        if message.get("role") != "tool" and not message.get("tool_calls"):
            return [(position, message)]
        return list(self.index.group(key, position))

    def _finish(self, key: Any, messages: list[Message]) -> list[Mapping[str, Any]]:
        if self.pipeline is None:
            return messages
        return self.pipeline.run(messages, key)
