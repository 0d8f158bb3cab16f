"""One tenant's slice of the index: its documents, lexical and vector, and what is indexed.

A ``Partition`` holds every indexed message of one user (or of the conversations of no
user): nothing in it belongs to anybody else, and a query reads one partition only, so a
query cannot score, return or load another tenant's message. Documents are numbered in the
order indexed; a conversation's documents are dropped together (tombstoned, then compacted
once the dead outnumber the living).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

from ...messages import Conv, text_of
from .lexical import LexicalIndex, tokenize

ROLES = {"system": 0, "user": 1, "assistant": 2, "tool": 3}

LENGTH_NORMALISATION = 0.4
"""BM25's b for messages: less than Lucene's 0.75, since a chat turn's length says little
about how much of it is on topic (benchmarks/recall_eval: recall@5 0.441 -> 0.493)."""


def document_text(message: Mapping[str, Any]) -> str:
    """What of a message is searchable: its text, and the names and arguments it calls."""
    parts = [text_of(message)]
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            parts.append(f"{function.get('name', '')} {function.get('arguments', '')}")
    return " ".join(p for p in parts if p)


TIME_KEYS = ("timestamp", "time", "date", "datetime", "created_at", "sent_at")
"""Metadata keys read as a message's time, first found wins: an ISO 8601 string or POSIX
seconds. otpmem's stores assign no time of their own (what they store is exactly what
was added), so a time is the writer's to give."""


def message_time(message: Mapping[str, Any]) -> datetime | None:
    """The time in a message's metadata (``TIME_KEYS``), or None when it has none that parses."""
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    for key in TIME_KEYS:
        value = metadata.get(key)
        try:
            if isinstance(value, str):
                return datetime.fromisoformat(value.strip())
            if isinstance(value, int | float) and not isinstance(value, bool):
                return datetime.fromtimestamp(value, tz=UTC)
        except (ValueError, OverflowError, OSError):
            continue
    return None


def document_meta(message: Mapping[str, Any]) -> str:
    """What is known about a message besides its text: who said it and when ("Maya
    Tuesday 12 March 2024"), so "what did Maya say in March?" can find it."""
    parts = []
    name = message.get("name")
    if isinstance(name, str):
        parts.append(name)
    when = message_time(message)
    if when is not None:
        parts.append(f"{when:%A} {when.day} {when:%B %Y}")
    return " ".join(parts)


STANDALONE = "standalone"
"""A metadata key: ``{"standalone": True}`` marks a message that is a document, not a turn
of a dialogue (what the LangChain and LangGraph integrations store), so recall scores it
by its own text and its neighbours are not its context."""


def is_turn(message: Mapping[str, Any]) -> bool:
    """Whether a message is a turn of its conversation (not ``STANDALONE``)."""
    metadata = message.get("metadata")
    return not (isinstance(metadata, Mapping) and metadata.get(STANDALONE) is True)


def analyze_meta(message: Mapping[str, Any]) -> list[str]:
    """``document_meta``'s terms, analysed as the text's are (a query is analysed once)."""
    return tokenize(document_meta(message))


def fingerprint(message: Mapping[str, Any]) -> bytes:
    """A short digest of a whole message: how a cleared and rewritten conversation shows."""
    try:
        packed = msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError):
        packed = repr(sorted(message.items())).encode()
    return hashlib.blake2b(packed, digest_size=12).digest()


@dataclass
class ConvState:
    """How much of one conversation is indexed: ``docs[i]`` is position i's document."""

    slot: int
    docs: list[int] = field(default_factory=list)
    last: bytes | None = None
    # The newest indexed message itself: a store that hands out the same read-only
    # object each time (MemoryStore) is checked by identity, without a digest.
    newest: Mapping[str, Any] | None = None

    @property
    def indexed(self) -> int:
        """How many of the conversation's messages are indexed (positions 0..indexed-1)."""
        return len(self.docs)


class Partition:
    """The documents of one tenant, scored together."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.lexical = LexicalIndex(b=LENGTH_NORMALISATION)
        # Who and when, scored apart from the text: a name or a date is evidence of its
        # own, and kept out of the text's BM25 it does not lengthen every document.
        self.meta = LexicalIndex(b=LENGTH_NORMALISATION)
        # Each document's neighbours in its conversation (-1: none), so a message is
        # found by the words of the one it answers or the one answering it; the next
        # message's arrival links itself to the previous document.
        self.previous = np.full(16, -1, dtype=np.int32)
        self.following = np.full(16, -1, dtype=np.int32)
        self.vectors = np.zeros((16, dim), dtype=np.float32)
        self.alive = np.zeros(16, dtype=bool)
        self.roles = np.zeros(16, dtype=np.int8)
        self.doc_slot: array[int] = array("i")
        self.doc_position: array[int] = array("i")
        self.messages: list[Mapping[str, Any]] = []
        self.convs: dict[Conv, ConvState] = {}
        self.slots: list[Conv | None] = []
        self.dead = 0

    def __len__(self) -> int:
        """Live documents."""
        return len(self.messages) - self.dead

    def append(
        self,
        conv: Conv,
        messages: Sequence[Mapping[str, Any]],
        tokens: Sequence[Sequence[str]],
        vectors: npt.NDArray[np.float32],
        meta: Sequence[Sequence[str]] | None = None,
    ) -> None:
        """Index ``messages`` as the next positions of ``conv``."""
        if not messages:
            return
        state = self.convs.get(conv)
        if state is None:
            state = self.convs[conv] = ConvState(len(self.slots))
            self.slots.append(conv)
        start = len(self.messages)
        self._reserve(start + len(messages))
        self.vectors[start : start + len(messages)] = vectors
        self.alive[start : start + len(messages)] = True
        about = meta if meta is not None else [analyze_meta(m) for m in messages]
        for i, (message, words) in enumerate(zip(messages, tokens, strict=True)):
            doc = self.lexical.add(words)
            assert doc == start + i
            self.meta.add(about[i])
            if state.docs and is_turn(message) and is_turn(self.messages[state.docs[-1]]):
                self.previous[doc] = state.docs[-1]
                self.following[state.docs[-1]] = doc
            self.roles[doc] = ROLES.get(str(message.get("role")), -1)
            self.doc_slot.append(state.slot)
            self.doc_position.append(state.indexed)
            self.messages.append(message)
            state.docs.append(doc)
        state.last = fingerprint(messages[-1])
        state.newest = messages[-1]

    def drop(self, conv: Conv) -> None:
        """Forget every document of ``conv``."""
        state = self.convs.pop(conv, None)
        if state is None:
            return
        self.slots[state.slot] = None
        for doc in state.docs:
            self.alive[doc] = False
            self.lexical.remove(tokenize(document_text(self.messages[doc])))
            self.meta.remove(analyze_meta(self.messages[doc]))
        self.dead += len(state.docs)
        if self.dead > len(self) and self.dead > 64:
            self.compact()

    def compact(self) -> None:
        """Rebuild without the dropped documents (their postings and rows go)."""
        keep = np.flatnonzero(self.alive[: len(self.messages)]).tolist()
        remap = {old: new for new, old in enumerate(keep)}
        messages = [self.messages[old] for old in keep]
        # Old numbers to new, -1 for a dropped one (whose neighbours were dropped with
        # it: a conversation goes whole); the extra last slot keeps -1 at -1.
        renumber = np.full(len(self.messages) + 1, -1, dtype=np.int32)
        renumber[keep] = np.arange(len(keep), dtype=np.int32)
        self.previous = renumber[self.previous[keep]] if keep else np.full(16, -1, np.int32)
        self.following = renumber[self.following[keep]] if keep else np.full(16, -1, np.int32)
        self.vectors = self.vectors[keep] if keep else np.zeros((16, self.dim), np.float32)
        self.roles = self.roles[keep] if keep else np.zeros(16, np.int8)
        self.alive = np.ones(len(self.roles), dtype=bool)
        self.doc_slot = array("i", (self.doc_slot[old] for old in keep))
        self.doc_position = array("i", (self.doc_position[old] for old in keep))
        self.lexical = LexicalIndex(self.lexical.k1, self.lexical.b)
        self.meta = LexicalIndex(self.meta.k1, self.meta.b)
        for message in messages:
            self.lexical.add(tokenize(document_text(message)))
            self.meta.add(analyze_meta(message))
        self.messages = messages
        self.dead = 0
        # Slots keep their numbers (a dropped conversation's stays None).
        for state in self.convs.values():
            state.docs = [remap[d] for d in state.docs]
        if not keep:
            self.alive[:] = False

    def _reserve(self, size: int) -> None:
        capacity = len(self.alive)
        if size <= capacity:
            return
        while capacity < size:
            capacity *= 2
        self.vectors = _grow(self.vectors, capacity)
        self.previous = _grow(self.previous, capacity, -1)
        self.following = _grow(self.following, capacity, -1)
        self.alive = _grow(self.alive, capacity)
        self.roles = _grow(self.roles, capacity)

    def live_mask(self) -> npt.NDArray[np.bool_]:
        """Which of the numbered documents are live."""
        return self.alive[: len(self.messages)]

    def conv_mask(self, *convs: Conv) -> npt.NDArray[np.bool_]:
        """Which documents belong to any of ``convs``."""
        mask = np.zeros(len(self.messages), dtype=bool)
        for conv in convs:
            state = self.convs.get(conv)
            if state is not None:
                mask[np.asarray(state.docs, dtype=np.int64)] = True
        return mask

    def text_scores(
        self,
        terms: Sequence[str],
        mask: npt.NDArray[np.bool_],
        around: tuple[float, float, float],
    ) -> npt.NDArray[np.float32]:
        """Each document's BM25 for ``terms`` with its context's: its own text's, plus
        ``around = (previous, following, meta)`` times the previous message's, the
        following message's and its speaker-and-date's (0 outside ``mask``)."""
        n = len(self.messages)
        own = self.lexical.scores(terms, mask)
        before, after, meta = around
        total = own.copy()
        if before or after:
            padded = np.append(own, np.float32(0.0))  # index -1 (no neighbour) reads 0
            if before:
                total += np.float32(before) * padded[self.previous[:n]]
            if after:
                total += np.float32(after) * padded[self.following[:n]]
        if meta:
            total += np.float32(meta) * self.meta.scores(terms, mask)
        total[~mask[:n]] = 0.0
        return total

    def similarity(self, query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Cosine of every document with the (unit) query vector."""
        n = len(self.messages)
        result: npt.NDArray[np.float32] = self.vectors[:n] @ query
        return result

    def where(self, doc: int) -> tuple[Conv, int]:
        """The conversation and position of a document."""
        conv = self.slots[self.doc_slot[doc]]
        assert conv is not None
        return conv, self.doc_position[doc]


def _grow(values: npt.NDArray[Any], capacity: int, fill: int = 0) -> npt.NDArray[Any]:
    grown = np.full((capacity, *values.shape[1:]), fill, dtype=values.dtype)
    grown[: len(values)] = values
    return grown
