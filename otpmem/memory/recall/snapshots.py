"""Recall snapshots: a RecallIndex's partitions kept beside its store, so a restart (or an
evicted tenant's return) does not re-read, re-tokenize and re-embed every message.

What is kept, per tenant and conversation: chunks (``chunks``), appended as catch-ups index
new messages, each holding the indexed messages, their analysed terms (text and meta), their
vectors and the fingerprint of the newest one; the conversation's indexed count is where
its chunks end. Where (``shelves``): for a LevelDBStore in ``<store>/recall``, a LevelDB
database of its own; for a PostgresStore in the table ``recall_chunks`` of the store's
schema; a MemoryStore keeps nothing.

On a tenant's first query after a restart (or after its eviction) its chunks are read with
one range read and its partition rebuilt from them (``restore.build``) without tokenizing
or embedding; the usual catch-up check against the store (count and newest fingerprint,
per conversation) decides what is newer, and only that is indexed. A conversation cleared
or rewritten while the index was down shows as it does to a running index (fewer messages,
or another message at the last indexed position): it is re-indexed and its chunks
replaced. The rebuilt partition is numbered as a fresh rebuild numbers it (conversations in
the store's order, each whole), so a reopened index ranks exactly as a rebuilt one.

A snapshot is a cache, never trusted: a chunk made by another embedder (class, ``repr``,
dim) or analyzer (``lexical.ANALYZER_VERSION``, the stemmer, a probe's terms), one whose
hash fails, that belongs to another conversation or does not continue the chunk before it
ends its conversation's snapshot there, and the rest is re-indexed from the store; a
damaged database is started anew; a shelf that cannot be opened or read means a rebuild.
None of it is ever an error to a caller. An embedder with no ``__repr__`` of its own cannot
say which model it is: nothing of it is persisted. Tenants never see each other's chunks:
the key layout is by tenant, a load reads one tenant's range, and each chunk names its
owner, checked on load.

Writes are behind (the store stays the truth: a chunk lost to a crash is re-indexed from
it): catch-ups queue what they indexed here, and the index writes it in batches, on the
blocking pool, shortly after it answered (``flush``); a tenant's queued writes go first
when it is loaded again. Deletions are queued the same way when a catch-up sees a cleared
conversation; ``forget`` and ``forget_user`` write theirs before they return.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ...actors import CallTimeout, NoProcess
from ...messages import Conv
from ...stores import ChatMemory, StoreUnavailable
from .base import Embedder
from .chunks import START, BadChunk, Piece, Terms, decode, encode, signature
from .handle import Owner
from .partition import fingerprint
from .shelves import Batch, Shelf, shelf_for

logger = logging.getLogger("otpmem.recall")

CHUNK_MESSAGES = 2048
"""Messages per chunk at most (a few MB with 256-dim vectors)."""
FLUSH_MESSAGES = 50_000
"""Messages one write-behind slice encodes and writes at most; the rest waits for the next."""


@dataclass
class Run:
    """Messages a catch-up indexed, queued to be written."""

    start: int
    messages: Sequence[Mapping[str, Any]]
    tokens: Sequence[Sequence[str]]
    meta: Sequence[Sequence[str]]
    vectors: npt.NDArray[np.float32]
    last: bytes


@dataclass
class Queued:
    """One conversation's queued writes: a cut of its stored chunks first (from ``cut`` on),
    then its runs."""

    cut: int | None = None
    runs: list[Run] = field(default_factory=list)


@dataclass
class Stored:
    """What a load found of one conversation: its pieces, how many messages they hold, the
    newest one's fingerprint, and the digest of the last chunk."""

    pieces: list[Piece]
    count: int
    last: bytes
    digest: bytes


class Snapshots:
    """One index's snapshots; used from its process and its blocking work, one at a time."""

    def __init__(self, store: ChatMemory, embedder: Embedder | None) -> None:
        self.store = store
        self.sig = signature(embedder)
        self.dim = 0 if embedder is None else int(embedder.dim)
        self.shelf: Shelf | None = None
        self.off = self.sig is None  # True: nothing is (or will be) kept for this index
        self.queued: dict[Owner, dict[Conv, Queued]] = {}
        self.forgotten: dict[Owner, None] = {}  # tenants whose chunks go, oldest first
        # Per conversation: (messages stored in chunks, the last chunk's digest).
        self.heads: dict[Owner, dict[Conv, tuple[int, bytes]]] = {}
        self.away: set[Owner] = set()  # evicted with writes queued: heads go once written
        self.unwritten = 0
        self.restored = 0

    @property
    def due(self) -> bool:
        """Whether anything waits to be written."""
        return bool(self.queued or self.forgotten)

    def ready(self) -> bool:
        """Open the shelf if it is not (blocking I/O): whether there is one."""
        if self.shelf is not None or self.off:
            return self.shelf is not None
        try:
            self.shelf = shelf_for(self.store)
        except (NoProcess, StoreUnavailable, CallTimeout):
            return False  # the store is not up: asked again at the next load
        except Exception as exc:  # a cache that cannot be opened is no cache, never an error
            logger.warning("recall snapshots are off: cannot open them (%s)", exc)
            self.off = True
            return False
        self.off = self.shelf is None
        return self.shelf is not None

    def close(self, killed: bool) -> None:
        """The index is exiting."""
        if self.shelf is not None:
            self.shelf.release(killed)
            self.shelf = None
        self.off = True

    # -- what catch-ups record (no I/O) ----------------------------------------------------

    def appended(
        self,
        owner: Owner,
        conv: Conv,
        start: int,
        messages: Sequence[Mapping[str, Any]],
        tokens: Sequence[Sequence[str]],
        meta: Sequence[Sequence[str]],
        vectors: npt.NDArray[np.float32],
        last: bytes,
    ) -> None:
        """``messages`` were indexed as positions ``start``... of ``conv``."""
        if self.shelf is None or not messages:
            return
        self._queue(owner, conv).runs.append(Run(start, messages, tokens, meta, vectors, last))
        self.unwritten += len(messages)

    def reset(self, owner: Owner, conv: Conv) -> None:
        """``conv`` is indexed anew (or gone): its chunks go, and what was queued for it."""
        if self.shelf is None:
            return
        queued = self._queue(owner, conv)
        self.unwritten -= sum(len(r.messages) for r in queued.runs)
        queued.runs.clear()
        queued.cut = 0
        self.heads.get(owner, {}).pop(conv, None)

    def evicted(self, owner: Owner) -> None:
        """The tenant left memory: what is known of its chunks is read again on its return."""
        if owner in self.queued:
            self.away.add(owner)
        else:
            self.heads.pop(owner, None)

    # -- I/O: on the blocking pool ---------------------------------------------------------

    def forget(self, owner: Owner, conv: Conv | None) -> None:
        """Delete a conversation's chunks (None: the tenant's) now."""
        if not self.ready():
            return
        if conv is not None:
            self.reset(owner, conv)
        else:
            for runs in self.queued.pop(owner, {}).values():
                self.unwritten -= sum(len(r.messages) for r in runs.runs)
            self.heads.pop(owner, None)
            self.forgotten[owner] = None
        self.drain(owner=owner)

    def load(self, owner: Owner) -> dict[Conv, Stored]:
        """The tenant's usable chunks, by conversation ({} for none, or no shelf); what
        fails a check is queued for deletion."""
        if not self.ready():
            return {}
        self.away.discard(owner)
        self.drain(owner=owner)  # its queued chunks are part of what is read back
        assert self.shelf is not None and self.sig is not None
        try:
            rows = self.shelf.load(owner)
        except Exception as exc:
            logger.warning("recall snapshots of %r unreadable, re-indexing (%s)", owner, exc)
            return {}
        by_conv: dict[Conv, list[tuple[int, bytes]]] = {}
        for conv, start, raw in rows:
            by_conv.setdefault(conv, []).append((start, raw))
        found: dict[Conv, Stored] = {}
        heads = self.heads[owner] = {}
        for conv, chunks in by_conv.items():
            pieces: list[Piece] = []
            count, digest, last = 0, START, b""
            for start, raw in sorted(chunks, key=lambda c: c[0]):
                try:
                    chunk = decode(raw, self.sig, conv, count, digest, self.dim)
                except BadChunk as exc:
                    logger.info("recall snapshot of %s ends at %d: %s", conv, start, exc)
                    self._queue(owner, conv).cut = start
                    break
                pieces.append(chunk.piece)
                count, digest, last = count + len(chunk.piece), chunk.digest, chunk.last
            if pieces:
                found[conv] = Stored(pieces, count, last, digest)
                heads[conv] = (count, digest)
        if found:
            self.restored += 1
        return found

    def drain(self, owner: Owner | Any = ..., deadline: float | None = None) -> bool:
        """Write everything queued (``owner``'s alone if given), slice by slice, until done,
        a write fails or ``deadline`` (``time.monotonic()``) passed; whether all went."""
        while self.due if owner is ... else (owner in self.queued or owner in self.forgotten):
            if self.flush(FLUSH_MESSAGES, owner) < 0:
                return False
            if deadline is not None and time.monotonic() >= deadline:
                return not self.due
        return True

    def flush(self, limit: int | None = None, owner: Owner | Any = ...) -> int:
        """Write what is queued (``owner``'s alone if given; at most about ``limit``
        messages' chunks); how many messages were written, -1 if the write failed (it is
        logged and its chunks dropped; its deletions are kept, to be tried again)."""
        if self.shelf is None or self.sig is None:
            self.queued.clear()
            self.forgotten.clear()
            self.unwritten = 0
            return 0
        owners = list(self.queued) if owner is ... else [owner]
        if owner is ...:
            batch = Batch(forgotten=list(self.forgotten))
        else:
            batch = Batch(forgotten=[owner] if owner in self.forgotten else [])
        heads: dict[tuple[Owner, Conv], tuple[int, bytes]] = {}
        written = 0
        for who in owners:
            convs = self.queued.get(who, {})
            for conv in list(convs):
                queued = convs[conv]
                if queued.cut is not None:
                    batch.cuts.append((conv, queued.cut))
                    queued.cut = None
                head = self.heads.get(who, {}).get(conv)
                while queued.runs and (limit is None or written < limit):
                    run = queued.runs.pop(0)
                    written += len(run.messages)
                    if not run.start:
                        head = (0, START)
                    elif head is None or head[0] != run.start:
                        continue  # what came before it was never written: cannot chain
                    head = self._encode(batch, conv, run, head)
                    heads[(who, conv)] = head
                if not queued.runs:
                    del convs[conv]
            if not convs:
                self.queued.pop(who, None)
        self.unwritten -= written
        try:
            self.shelf.write(batch)
        except Exception as exc:
            logger.warning("recall snapshots: a write failed, re-indexed next time (%s)", exc)
            for who in batch.forgotten:
                self.forgotten[who] = None
            for conv, cut in batch.cuts:
                queued = self._queue(conv.user_id, conv)
                queued.cut = cut if queued.cut is None else min(cut, queued.cut)
            return -1
        for who in batch.forgotten:
            self.forgotten.pop(who, None)
        for (who, conv), head in heads.items():
            self.heads.setdefault(who, {})[conv] = head
        for who in [o for o in self.away if o not in self.queued]:
            self.away.discard(who)
            self.heads.pop(who, None)
        return written

    def _encode(
        self, batch: Batch, conv: Conv, run: Run, head: tuple[int, bytes]
    ) -> tuple[int, bytes]:
        """Put ``run``'s chunks in ``batch`` after ``head``; the head after them."""
        assert self.sig is not None
        count, digest = head
        for at in range(0, len(run.messages), CHUNK_MESSAGES):
            end = min(at + CHUNK_MESSAGES, len(run.messages))
            messages = list(run.messages[at:end])
            text, meta = Terms.of(run.tokens[at:end]), Terms.of(run.meta[at:end])
            piece = Piece(messages, text, meta, run.vectors[at:end])
            last = run.last if end == len(run.messages) else fingerprint(messages[-1])
            raw, digest = encode(self.sig, conv, count, digest, piece, last)
            batch.puts.append((conv, count, raw))
            count += len(piece)
        return count, digest

    def _queue(self, owner: Owner, conv: Conv) -> Queued:
        return self.queued.setdefault(owner, {}).setdefault(conv, Queued())
