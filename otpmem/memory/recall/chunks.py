"""A recall snapshot's unit: one chunk of a conversation's indexed messages, as bytes.

A chunk holds consecutive positions of one conversation: the messages, their analysed
terms (text and meta, as a chunk-local vocabulary and term numbers, so loading builds
postings with numpy instead of re-tokenizing), their vectors, and the fingerprint of its
newest message. Its bytes are::

    b"oR" | sha256(payload)[:16] | payload = msgpack([FORMAT, signature, owner, conversation,
        start, previous digest, last fingerprint, messages, text terms, meta terms, vectors])

Checked when read, never trusted: the payload's hash, the format, the signature (the
embedder and the analyzer that made it), the owner and conversation (so a chunk under a
damaged key cannot land in another tenant), its start (where the previous chunk ended)
and the previous chunk's digest (``chain``: a chunk of an older history of the
conversation, or another node's, does not continue this one). A chunk that fails any
check ends its conversation's snapshot there.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np
import numpy.typing as npt

from ...messages import Conv
from . import lexical
from .base import Embedder
from .embedders import HashingEmbedder
from .partition import analyze_meta, document_text

FORMAT = 1
MAGIC = b"oR"
HASH = 16
_CHAIN = struct.Struct(">QQ")
START = b""
"""The previous digest of a conversation's first chunk."""

_PROBE = {
    "role": "user",
    "name": "Anna",
    "content": "I'm allergic to peanuts; my sister's living in Lyon since 2019, running daily.",
    "metadata": {"timestamp": "2024-03-12T09:30:00"},
    "tool_calls": [{"function": {"name": "lookup_city", "arguments": '{"city": "Lyon"}'}}],
}


class BadChunk(ValueError):
    """A chunk that fails a check: its conversation's snapshot ends before it."""


@dataclass
class Terms:
    """Documents' terms, columnar: ``vocab[ids[k]]`` is the k-th term, ``lengths[i]`` how
    many terms document i has."""

    vocab: list[str]
    ids: npt.NDArray[np.uint32]
    lengths: npt.NDArray[np.uint32]

    @classmethod
    def of(cls, docs: Sequence[Sequence[str]]) -> Terms:
        """The columnar form of each document's term list."""
        # map and fromiter run in C: a few tens of ns a term, where a Python loop is 10x.
        flat = list(itertools.chain.from_iterable(docs))
        vocab = list(dict.fromkeys(flat))
        number = {term: i for i, term in enumerate(vocab)}
        ids = np.fromiter(map(number.__getitem__, flat), np.uint32, len(flat))
        return cls(vocab, ids, np.fromiter(map(len, docs), np.uint32, len(docs)))

    def packed(self) -> list[Any]:
        """What msgpack stores."""
        return [self.vocab, self.ids.astype("<u4").tobytes(), self.lengths.astype("<u4").tobytes()]

    @classmethod
    def unpacked(cls, raw: object, docs: int) -> Terms:
        """``packed``'s inverse, checked; ``BadChunk`` if it does not hold up."""
        if not isinstance(raw, list) or len(raw) != 3:
            raise BadChunk("terms are not [vocab, ids, lengths]")
        vocab, ids, lengths = raw
        if not isinstance(vocab, list) or not all(type(t) is str for t in vocab):
            raise BadChunk("a vocabulary holds a non-str")
        if not isinstance(ids, bytes) or not isinstance(lengths, bytes):
            raise BadChunk("term numbers are not bytes")
        if len(ids) % 4 or len(lengths) != 4 * docs:
            raise BadChunk("term numbers do not fit the documents")
        id_array = np.frombuffer(ids, "<u4").astype(np.uint32)
        length_array = np.frombuffer(lengths, "<u4").astype(np.uint32)
        if int(length_array.sum(dtype=np.int64)) != len(id_array):
            raise BadChunk("term counts do not add up")
        if len(id_array) and int(id_array.max()) >= len(vocab):
            raise BadChunk("a term number is past the vocabulary")
        return cls(vocab, id_array, length_array)


@dataclass
class Piece:
    """Consecutive indexed messages of one conversation, as a chunk holds them."""

    messages: list[Mapping[str, Any]]
    text: Terms
    meta: Terms
    vectors: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return len(self.messages)


@dataclass
class Chunk:
    """A decoded chunk: its piece, where it starts, its newest fingerprint, its digest."""

    piece: Piece
    start: int
    last: bytes
    digest: bytes


def signature(embedder: Embedder | None) -> bytes | None:
    """What a snapshot must have been made by to be used: the embedder (its class, its
    ``repr`` and dim; None: no vectors) and the analyzer (``ANALYZER_VERSION``, the
    stemmer's version and the terms of a probe message); None when the embedder cannot say
    who it is (no ``__repr__`` of its own), so nothing of it is persisted. A
    ``HashingEmbedder``'s vector of the probe counts too: a change of its hashing shows."""
    kind = type(embedder)
    if embedder is not None and kind.__repr__ is object.__repr__:
        return None
    import Stemmer

    who = [
        FORMAT,
        f"{kind.__module__}.{kind.__qualname__}",
        repr(embedder),
        0 if embedder is None else int(embedder.dim),
        lexical.ANALYZER_VERSION,
        str(Stemmer.version()) if hasattr(Stemmer, "version") else "",
        lexical.tokenize(document_text(_PROBE)),
        analyze_meta(_PROBE),
    ]
    if isinstance(embedder, HashingEmbedder):  # deterministic and cheap: its own vectors too
        probe = embedder.embed([document_text(_PROBE)])
        who.append(np.asarray(probe, dtype="<f4").tobytes())
    return hashlib.sha256(msgpack.packb(who, use_bin_type=True)).digest()[:16]


def chain(previous: bytes, content: bytes, start: int, count: int, last: bytes) -> bytes:
    """A chunk's digest: it names every chunk of the conversation up to it."""
    return _hash(previous + content + _CHAIN.pack(start, count) + last)


def _hash(data: bytes | memoryview) -> bytes:
    return hashlib.sha256(data).digest()[:HASH]


def encode(
    sig: bytes,
    conv: Conv,
    start: int,
    previous: bytes,
    piece: Piece,
    last: bytes,
) -> tuple[bytes, bytes]:
    """(the chunk's bytes, its digest)."""
    payload = msgpack.packb(
        [
            FORMAT,
            sig,
            conv.user_id,
            conv.conversation_id,
            start,
            previous,
            last,
            [m if isinstance(m, dict) else dict(m) for m in piece.messages],
            piece.text.packed(),
            piece.meta.packed(),
            np.ascontiguousarray(piece.vectors, dtype="<f4").tobytes(),
        ],
        use_bin_type=True,
    )
    content = _hash(payload)
    return MAGIC + content + payload, chain(previous, content, start, len(piece), last)


def decode(raw: bytes, sig: bytes, conv: Conv, start: int, previous: bytes, dim: int) -> Chunk:
    """The chunk ``raw`` holds, if it is ``conv``'s from ``start`` on, continues the chunk
    whose digest is ``previous`` and was made with ``sig``; else ``BadChunk``."""
    if len(raw) < 2 + HASH or raw[:2] != MAGIC:
        raise BadChunk("not a recall chunk")
    content = bytes(raw[2 : 2 + HASH])
    payload = memoryview(raw)[2 + HASH :]
    if _hash(payload) != content:
        raise BadChunk("its hash does not match")
    try:
        fields = msgpack.unpackb(payload, raw=False)
    except (ValueError, TypeError, msgpack.ExtraData) as exc:
        raise BadChunk(f"undecodable: {exc}") from None
    if not isinstance(fields, list) or len(fields) != 11:
        raise BadChunk("not a chunk's fields")
    version, made_by, user_id, conversation_id, at, before, last, messages = fields[:8]
    if version != FORMAT or made_by != sig:
        raise BadChunk("made by another format, embedder or analyzer")
    if user_id != conv.user_id or conversation_id != conv.conversation_id:
        raise BadChunk("another conversation's")
    if at != start or before != previous:
        raise BadChunk("does not continue the chunks before it")
    if not isinstance(last, bytes) or not isinstance(messages, list) or not messages:
        raise BadChunk("no messages")
    if not all(isinstance(m, dict) for m in messages):
        raise BadChunk("a message is not a mapping")
    vectors = fields[10]
    if not isinstance(vectors, bytes) or len(vectors) != 4 * dim * len(messages):
        raise BadChunk("vectors of another size")
    piece = Piece(
        messages,
        Terms.unpacked(fields[8], len(messages)),
        Terms.unpacked(fields[9], len(messages)),
        np.frombuffer(vectors, "<f4").reshape(len(messages), dim),
    )
    return Chunk(piece, start, last, chain(previous, content, start, len(messages), last))
