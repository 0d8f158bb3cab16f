"""A Partition rebuilt from snapshot pieces at once: what a tenant's first query after a
restart costs instead of re-tokenizing and re-embedding every message.

``build`` gives the partition that ``Partition.append`` of the same messages, terms and
vectors would, conversation after conversation, field for field (a test compares every
attribute): postings come from one numpy sort of the tenant's term numbers instead of a
``Counter`` per message, and the per-document arrays are filled by slices.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence

import numpy as np

from ...messages import Conv
from .chunks import Piece, Terms
from .lexical import LexicalIndex, Posting
from .partition import ROLES, ConvState, Partition, is_turn

Segment = tuple[Conv, Sequence[Piece], bytes]
"""One conversation's pieces, oldest first, and the fingerprint of its newest message."""


def build(dim: int, segments: Sequence[Segment]) -> Partition:
    """The partition of ``segments``, numbered in their order (a conversation's documents
    together, as a rebuild numbers them)."""
    part = Partition(dim)
    sizes = [sum(len(p) for p in pieces) for _, pieces, _ in segments]
    total = sum(sizes)
    if not total:
        return part
    part._reserve(total)
    texts: list[Terms] = []
    metas: list[Terms] = []
    doc = 0
    for (conv, pieces, last), size in zip(segments, sizes, strict=True):
        if not size:
            continue
        slot = len(part.slots)
        part.slots.append(conv)
        newest = pieces[-1].messages[-1]
        part.convs[conv] = ConvState(slot, list(range(doc, doc + size)), last, newest)
        # Neighbours as append links them: consecutive turns, never a standalone document.
        turns = np.fromiter((is_turn(m) for p in pieces for m in p.messages), bool, size)
        linked = np.flatnonzero(turns[1:] & turns[:-1]) + doc + 1
        part.previous[linked] = linked - 1
        part.following[linked - 1] = linked
        part.doc_slot.frombytes(np.full(size, slot, dtype=np.int32).tobytes())
        part.doc_position.frombytes(np.arange(size, dtype=np.int32).tobytes())
        at = doc
        for piece in pieces:
            part.vectors[at : at + len(piece)] = piece.vectors
            part.messages.extend(piece.messages)
            texts.append(piece.text)
            metas.append(piece.meta)
            at += len(piece)
        doc += size
    part.alive[:total] = True
    part.roles[:total] = [ROLES.get(str(m.get("role")), -1) for m in part.messages]
    _fill(part.lexical, texts, total)
    _fill(part.meta, metas, total)
    return part


def _fill(index: LexicalIndex, pieces: Sequence[Terms], total: int) -> None:
    """Set an empty ``index`` to what adding the pieces' documents in order would."""
    vocab: dict[str, int] = {}
    ids = []
    for terms in pieces:
        local = np.fromiter(
            (vocab.setdefault(t, len(vocab)) for t in terms.vocab), np.int64, len(terms.vocab)
        )
        ids.append(local[terms.ids])
    lengths = np.concatenate([t.lengths for t in pieces]).astype(np.int64)
    index.lengths = array("f", lengths.astype(np.float32).tobytes())
    index.live = total
    index.total_length = int(lengths.sum())
    flat = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    if not len(flat):
        return
    # One sort of (term, document) pairs: each term's documents come out ascending, with
    # how often the term is in each (its tf), as adding them one by one leaves them.
    docs = np.repeat(np.arange(total, dtype=np.int64), lengths)
    pairs, tfs = np.unique(flat * total + docs, return_counts=True)
    terms = pairs // total
    numbers = (pairs - terms * total).astype(np.int32)
    frequencies = tfs.astype(np.float32)
    cuts = np.flatnonzero(np.diff(terms)) + 1
    starts = [0, *cuts.tolist()]
    ends = [*cuts.tolist(), len(pairs)]
    names = list(vocab)
    postings = index.postings
    df: dict[str, int] = {}
    for start, end, term in zip(starts, ends, terms[starts].tolist(), strict=True):
        name = names[term]
        postings[name] = Posting(
            array("i", numbers[start:end].tobytes()), array("f", frequencies[start:end].tobytes())
        )
        df[name] = end - start
    index.df = Counter(df)
