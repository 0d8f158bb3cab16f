"""The LevelDB key layout: ordered so that every common query is one range scan.

    m <user> <conversation> <seq: 8 bytes, big-endian>  ->  msgpack(message)
    c <user> <conversation>                              ->  msgpack([next_seq, count])

``<user>`` is ``00`` for no user, or ``01`` + 4-byte big-endian length + UTF-8 bytes; a
conversation id is encoded the same way (always present). Length prefixes make every
component prefix-free, so:

- a conversation's messages are one contiguous range, in sequence order: ``get(last=n)``
  reads n entries from the end with a reverse iterator, whatever the length;
- a user's conversations are one contiguous range of ``c`` keys: ``conversations(user)``
  scans one entry per conversation, never the messages;
- ``count`` is one point read of the ``c`` key.
"""

from __future__ import annotations

import struct

from ..messages import Conv

MESSAGE = b"m"
META = b"c"
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
    """The key of message ``seq`` under a conversation's message prefix."""
    return prefix + _SEQ.pack(seq)


def decode_conv(key: bytes) -> Conv:
    """The conversation of a ``c`` or ``m`` key."""
    user, offset = _read_part(key, 1)
    conversation, _ = _read_part(key, offset)
    assert conversation is not None
    return Conv(user, conversation)


def _read_part(key: bytes, offset: int) -> tuple[str | None, int]:
    if key[offset] == 0:
        return None, offset + 1
    (length,) = _LEN.unpack_from(key, offset + 1)
    start = offset + 1 + _LEN.size
    return key[start : start + length].decode("utf-8", "surrogatepass"), start + length
