"""LevelDBStore's fork and its reads of a conversation as it was (see ``stores._fork``).

A fork runs in the server with adds paused (as a clear does) and every queued write on
disk, so the source's prefix and the target's emptiness are read from one settled state;
the copy is then one WriteBatch through the committer, answered once it is durable. A
read ``as_of`` n is a range scan that stops at message n: O(n) (O(last) with ``last``),
never the whole conversation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgpack

from ...actors import NO_REPLY, blocking
from ...messages import Conv
from .._fork import CheckedFork, bounds, not_a_fork, prefix_length, target_holds
from . import keys

if TYPE_CHECKING:
    from ._server import LevelDBStore


def fork(store: LevelDBStore, checked: CheckedFork) -> Any:
    """Fork as ``checked`` says, in the server with adds paused; answers the caller with
    how many messages were copied once they are on disk."""
    source, into, at, key = checked
    blocking(store.committer.flush)  # what follows reads the disk: all of it is there
    if key is not None:
        raw = store.db.get(keys.idempotency_key(into, key))
        if raw is not None:
            forked = keys.forked_of(raw)
            if forked is None:
                raise not_a_fork(into, key)
            return forked  # a retry: the fork is there already
    held = store._conversation(into).meta.count
    if held:
        raise target_holds(into, held)
    n = prefix_length(store._conversation(source).meta.count, at)
    if n == 0:
        return 0  # nothing to copy: a conversation holds at least one message
    # Decoded as stored, they are what was validated when added: the copy takes them as is.
    batch: list[Any] = blocking(read_range, store.db, source, 0, n)
    with store.write_lock:
        staged: dict[bytes, bytes | None] = {}
        ops = store._append_ops(into, batch, key, staged=staged, forked=n)
        store.committer.submit(ops, store.caller(), staged, answer=n)
    return NO_REPLY


def read_range(db: Any, conv: Conv, start: int, stop: int) -> list[dict[str, Any]]:
    """Messages ``start`` to ``stop`` (exclusive) of ``conv``: one range scan of them alone."""
    prefix = keys.conv_prefix(keys.MESSAGE, conv)
    if stop <= start:
        return []
    first, end = keys.message_key(prefix, start), keys.message_key(prefix, stop)
    return [
        msgpack.unpackb(v, raw=False) for v in db.iterator(start=first, stop=end, include_key=False)
    ]


def read_as_of(db: Any, conv: Conv, last: int | None, as_of: int) -> list[dict[str, Any]]:
    """``get(conv, last, as_of)``: the meta's count read first (one point read), then the
    range ``bounds`` gives, from one snapshot."""
    with db.snapshot() as snapshot:
        raw = snapshot.get(keys.conv_prefix(keys.META, conv))
        count = 0 if raw is None else keys.count_of(raw)
        start, stop = bounds(count, last, as_of)
        return read_range(snapshot, conv, start, stop)


__all__ = ["fork", "read_as_of", "read_range"]
