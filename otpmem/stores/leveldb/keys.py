"""The LevelDB key layout: ordered so that every common query is one range scan.

    m <user> <conversation> <seq: 8 bytes, big-endian>  ->  msgpack(message)
    c <user> <conversation>                              ->  msgpack(meta)
    p <user> <conversation> <seq>                        ->  msgpack(message), pinned only
    k <user> <conversation> <idempotency key, UTF-8>     ->  msgpack([ordinal, position])
    q <user> <conversation> <ordinal: 8 bytes>           ->  idempotency key, UTF-8
    v                                                    ->  the layout's version

(The long-term records' keys are in ``_longterm``, blocks' in ``_blocks``, and the scope
records', ``o`` and ``g``, in ``_scopes``.)

``meta`` is ``[next_seq, count, next_ordinal, summary_seq, pinned_count]`` (``Meta``): the
next message's sequence number (its position: a conversation is only ever appended to, or
deleted whole), how many messages it holds, how many keyed batches it has had, where its
newest summary is (-1: none), and how many of its messages are pinned (superseded summaries
too). A ``k`` entry (``key_entry``) is the batch's ordinal among the keyed batches and the
position it begins at (and, for the batch of a keyed fork, how many messages it copied).
``p`` is the pinned index (system and pinned messages and the newest summary, a copy of
each, so the index is one range scan). ``k`` finds a key's batch, ``q`` lists the
keys oldest first so the oldest can be forgotten.

``<user>`` is ``00`` for no user, or ``01`` + 4-byte big-endian length + UTF-8 bytes; a
conversation id is encoded the same way (always present). Length prefixes make every
component prefix-free, so:

- a conversation's messages are one contiguous range, in sequence order: ``get(last=n)``
  reads n entries from the end with a reverse iterator, whatever the length;
- a user's conversations are one contiguous range of ``c`` keys: ``conversations(user)``
  scans one entry per conversation, never the messages;
- ``count`` is one point read of the ``c`` key;
- a conversation's pinned messages are one range of ``p`` keys, in order, read up to any
  position without reading a message that is not pinned.

Every ``add`` writes its messages, their ``p`` copies, its key entries and the new meta in
one WriteBatch, so the index and the keys are never out of step with the messages.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import msgpack

from ...messages import Conv

MESSAGE = b"m"
META = b"c"
PINNED = b"p"
KEY = b"k"
KEY_ORDER = b"q"
VERSION = b"v"
LAYOUT_VERSION = 4
"""1: wave 1 (messages and meta); 2: the pinned index and idempotency keys; 3: facts carry
``valid_from`` and ``valid_to`` (a layout-2 fact reads as of unknown start, still true, so
a layout-2 directory needs no rewrite, only the new number: an older otpmem, which would
drop the times on its next write, then refuses the directory); 4: records keyed by a
scope's owner key, the scope registry and scope members (``_scopes``): a layout-3
directory holds none of them, so it needs the number and no rewrite, but for the records
of user ids that begin with ``scopes.MARK`` (whose owner key is encoded), moved on open;
an older otpmem, whose ``forget_user`` would leave a user's scopes behind, refuses it."""
CONVERSATION_KINDS = (MESSAGE, PINNED, KEY, KEY_ORDER)
_LEN = struct.Struct(">I")
_SEQ = struct.Struct(">Q")


def _part(text: str | None) -> bytes:
    if text is None:
        return b"\x00"
    raw = text.encode("utf-8", "surrogatepass")
    return b"\x01" + _LEN.pack(len(raw)) + raw


def user_prefix(kind: bytes, user_id: str | None) -> bytes:
    """Every key of ``kind`` that belongs to ``user_id`` starts with this."""
    return kind + _part(user_id)


def conv_prefix(kind: bytes, conv: Conv) -> bytes:
    """Every key of ``kind`` that belongs to ``conv`` starts with this (the meta key itself)."""
    return kind + _part(conv.user_id) + _part(conv.conversation_id)


def message_key(prefix: bytes, seq: int) -> bytes:
    """The key of message ``seq`` under a conversation's message (or pinned) prefix."""
    return prefix + _SEQ.pack(seq)


def seq_of(key: bytes) -> int:
    """The sequence number a message (or pinned, or key-order) key ends with."""
    (seq,) = _SEQ.unpack_from(key, len(key) - _SEQ.size)
    return int(seq)


def idempotency_key(conv: Conv, key: str) -> bytes:
    """Where a conversation's batch keyed ``key`` is found."""
    return conv_prefix(KEY, conv) + key.encode("utf-8", "surrogatepass")


def decode_conv(key: bytes, offset: int = 1) -> Conv:
    """The conversation of a ``c`` or ``m`` key (or the one encoded at ``offset``)."""
    user, offset = _read_part(key, offset)
    conversation, _ = _read_part(key, offset)
    assert conversation is not None
    return Conv(user, conversation)


def decode_part(key: bytes, offset: int) -> str | None:
    """The user id (or other text) encoded in ``key`` at ``offset``, as ``user_prefix``
    writes it."""
    return _read_part(key, offset)[0]


def keys_of_users_beginning(db: Any, kind: bytes, lead: str) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of ``kind`` whose user part begins with ``lead``: a seek per
    length of user id held, not a scan (the parts are ordered by length first)."""
    raw = lead.encode("utf-8", "surrogatepass")
    after = raw[:-1] + bytes([raw[-1] + 1])  # past every part that begins with lead
    length, stop = len(raw), kind + b"\x02"
    while True:
        head = kind + b"\x01" + _LEN.pack(length)
        with db.iterator(start=head + raw, stop=stop, include_value=False) as it:
            first = next(it, None)
        if first is None:
            return
        (held,) = _LEN.unpack_from(first, len(kind) + 1)
        if held != length:  # none of this length: on to the next length held
            length = held
            continue
        if first.startswith(head + raw):
            yield from db.iterator(start=head + raw, stop=head + after)
        length += 1


def _read_part(key: bytes, offset: int) -> tuple[str | None, int]:
    if key[offset] == 0:
        return None, offset + 1
    (length,) = _LEN.unpack_from(key, offset + 1)
    start = offset + 1 + _LEN.size
    return key[start : start + length].decode("utf-8", "surrogatepass"), start + length


class Meta:
    """A conversation's meta record, the value of its ``c`` key, read and changed by name."""

    __slots__ = ("count", "next_ordinal", "next_seq", "pinned_count", "summary_seq")

    def __init__(
        self,
        next_seq: int = 0,
        count: int = 0,
        next_ordinal: int = 0,
        summary_seq: int = -1,
        pinned_count: int = 0,
    ) -> None:
        self.next_seq = next_seq
        self.count = count
        self.next_ordinal = next_ordinal
        self.summary_seq = summary_seq
        self.pinned_count = pinned_count

    @classmethod
    def unpack(cls, raw: bytes) -> Meta:
        """A stored record (one of layout 1 holds only ``next_seq`` and ``count``)."""
        return cls(*msgpack.unpackb(raw))

    def pack(self, pack: Callable[[Any], bytes] = msgpack.packb) -> bytes:
        """The record as stored (``pack``: a ``Packer``'s, to spare making one per call)."""
        packed: bytes = pack(
            [self.next_seq, self.count, self.next_ordinal, self.summary_seq, self.pinned_count]
        )
        return packed


def count_of(raw: bytes) -> int:
    """The ``count`` of a stored meta record, read without building a ``Meta``."""
    return int(msgpack.unpackb(raw)[1])


def key_entry(ordinal: int, position: int, forked: int | None = None) -> bytes:
    """The value of a ``k`` key: the batch's ordinal among its conversation's keyed batches,
    the position it begins at, and for a fork's batch how many messages it copied (a third
    field an older reader, which reads the first two, does not see)."""
    entry = [ordinal, position] if forked is None else [ordinal, position, forked]
    packed: bytes = msgpack.packb(entry)
    return packed


def position_of(raw: bytes) -> int:
    """The position a ``k`` key's batch begins at."""
    return int(msgpack.unpackb(raw)[1])


def forked_of(raw: bytes) -> int | None:
    """How many messages the fork keyed by a ``k`` key copied (None: the key is an add's)."""
    entry = msgpack.unpackb(raw)
    return int(entry[2]) if len(entry) > 2 else None
