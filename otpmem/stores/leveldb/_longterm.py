"""LevelDBStore's long-term records: their keys, the ops that write them, the reads.

    f <owner> <fact key>                ->  msgpack(fact)
    s <owner>                           ->  the stamp of the last change of the owner's facts
    h <owner> <fact key part> <seq>     ->  msgpack(a superseded or deleted fact)
    H <owner> <fact key part>           ->  msgpack([entries kept, where they start])
    r <owner>                           ->  msgpack([summary, metadata, updated_at])
    U <user>                            ->  msgpack(usage): the user's running sums
    l <user> <ns: 8 bytes> <n: 8 bytes> ->  msgpack([conversation id, usage]): the usage log
    L <user>                            ->  where the log's entries past the horizon start
    C <user> <conversation>             ->  when the conversation was last cleared
    u <user> <conversation>             ->  msgpack(usage): the conversation's running sums
    x <user> <conversation>             ->  the extraction cursor
    j <user> <conversation>             ->  a pending extraction: up to which position

``<owner>`` is the ``scopes.owner_key`` of whose records (a user id for a user's own, so
layout-3 data keeps its keys; an encoded ``Scope`` else), encoded as ``keys.user_prefix``
encodes a user; every other ``<user>`` is the raw user id, as the conversations have it.
``u``, ``x`` and ``j`` belong to a conversation and go with it on ``clear``; the rest belong
to the user and go on ``forget_user`` (the owner-keyed ones under the user's own owner key,
and those of every scope the user has, which ``_scopes`` lists). An add writes its ``u``,
``U`` and ``l`` entries in the same WriteBatch as its messages; a ``save_facts`` its facts,
their history and the cursor in one.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgpack

from ...messages import Conv, ConvLike, as_conv
from .. import longterm
from .._fact_plan import as_seconds, check_cursor_from, facts_as_of, plan_facts
from ..longterm import (
    Fact,
    Profile,
    Usage,
    batch_usage,
    check_fact_key,
    check_owner,
    check_since,
    check_user,
    fact_as_list,
    fact_from_list,
    new_stamp,
)
from ..scopes import Who, owner_key, public_id
from . import keys

FACT = b"f"
STAMP = b"s"
HISTORY = b"h"
HISTORY_INDEX = b"H"
PROFILE = b"r"
USER_USAGE = b"U"
USAGE_LOG = b"l"
LOG_MARK = b"L"
CLEARED = b"C"
CONV_USAGE = b"u"
CURSOR = b"x"
JOB = b"j"
CONVERSATION_KINDS = (CONV_USAGE, CURSOR, JOB)
OWNER_KINDS = (FACT, STAMP, HISTORY, HISTORY_INDEX, PROFILE)
"""The long-term records keyed by an owner key (a user's own, or a scope's)."""
USER_KINDS = (USER_USAGE, USAGE_LOG, LOG_MARK, CLEARED)
_STAMP = struct.Struct(">QQ")
_entries = itertools.count()

Op = tuple[bytes, bytes | None]
Read = Callable[[bytes], bytes | None]


def fact_key(user_id: str, key: str) -> bytes:
    """Where one fact lives (``user_id``: the owner key)."""
    return keys.user_prefix(FACT, user_id) + key.encode("utf-8", "surrogatepass")


def history_prefix(user_id: str, key: str) -> bytes:
    """Where one fact's superseded values live, oldest first."""
    return keys.user_prefix(HISTORY, user_id) + keys.user_prefix(b"", key)


def _usage(raw: bytes | None) -> Usage:
    return Usage() if raw is None else Usage.from_list(msgpack.unpackb(raw))


def usage_ops(
    read: Read, conv: Conv, batch: Sequence[Mapping[str, Any]], db: Any = None
) -> list[Op]:
    """The usage sums and the log entry an added batch brings (none without usage), and
    the deletes of the user's log entries past ``USAGE_LOG_HORIZON`` (found in ``db``)."""
    added = batch_usage(batch)
    if added is None:
        return []
    conv_key = keys.conv_prefix(CONV_USAGE, conv)
    user_key = keys.user_prefix(USER_USAGE, conv.user_id)
    now = time.time_ns()
    stamp = _STAMP.pack(now, next(_entries))
    log = keys.user_prefix(USAGE_LOG, conv.user_id)
    ops: list[Op] = [
        (conv_key, msgpack.packb((_usage(read(conv_key)) + added).as_list())),
        (user_key, msgpack.packb((_usage(read(user_key)) + added).as_list())),
        (log + stamp, msgpack.packb([conv.conversation_id, added.as_list()])),
    ]
    if db is not None:
        # From the mark past the last entry dropped: never over the tombstones before it.
        mark = keys.user_prefix(LOG_MARK, conv.user_id)
        start = log + (read(mark) or b"")
        stop = log + _STAMP.pack(max(0, now - int(longterm.USAGE_LOG_HORIZON * 1e9)), 0)
        if start < stop:
            old = db.iterator(start=start, stop=stop, include_value=False)
            expired = list(itertools.islice(old, longterm.USAGE_EXPIRED_PER_ADD))
            ops.extend((k, None) for k in expired)
            if expired:
                ops.append((mark, expired[-1][len(log) :] + b"\x00"))
    return ops


def cleared_op(conv: Conv) -> Op:
    """Mark when ``conv`` was cleared: its usage windows start again then."""
    return keys.conv_prefix(CLEARED, conv), msgpack.packb(time.time())


def fact_ops(
    db: Any,
    user_id: str,
    facts: Sequence[Fact],
    deletes: Sequence[str],
    cursor: tuple[Conv, int, int | None] | None,
    max_facts: int,
    evict: bool,
    closes: Mapping[str, float],
    keep: int,
) -> tuple[list[Fact], list[str], list[Op]]:
    """The facts as saved, the keys removed, and the ops of one ``save_facts`` (read from
    ``db`` with every earlier write on disk: the server flushes first); each key's
    history cut to its newest ``keep`` entries by deletes in the same batch."""
    if cursor is not None:
        stored = _int(db.get(keys.conv_prefix(CURSOR, cursor[0])))
        check_cursor_from(cursor[0], cursor[2], stored)
    current = {f.key: f for f in _facts(db, user_id)}
    plan = plan_facts(current, facts, deletes, time.time(), max_facts, evict, closes)
    ops: list[Op] = []
    for fact in plan.put.values():
        ops.append((fact_key(user_id, fact.key), msgpack.packb(fact_as_list(fact))))
    for key in plan.removed:
        ops.append((fact_key(user_id, key), None))
    added: dict[str, int] = {}
    for old in plan.superseded:
        # Ordered by when it was superseded (a key deleted and saved again starts again at
        # version 1, so the version cannot name the entry).
        entry = history_prefix(user_id, old.key) + _STAMP.pack(time.time_ns(), next(_entries))
        ops.append((entry, msgpack.packb(fact_as_list(old))))
        added[old.key] = added.get(old.key, 0) + 1
    for key, n in added.items():
        ops.extend(_trim_ops(db, user_id, key, n, keep))
    if plan.put or plan.removed:  # what a cached ranking of the facts is checked against
        ops.append((keys.user_prefix(STAMP, user_id), new_stamp()))
    if cursor is not None:
        conv, position, _ = cursor
        ops.append((keys.conv_prefix(CURSOR, conv), msgpack.packb(position)))
        job = db.get(keys.conv_prefix(JOB, conv))
        if job is not None and position >= msgpack.unpackb(job):
            ops.append((keys.conv_prefix(JOB, conv), None))
    return plan.saved, plan.removed, ops


def _trim_ops(db: Any, user_id: str, key: str, added: int, keep: int) -> list[Op]:
    """Deletes of a key's oldest history entries, so that with ``added`` new ones it holds
    ``keep``, and its count and mark: the scan starts past the entries dropped before (so
    never over their tombstones) and reads only those it drops."""
    prefix = history_prefix(user_id, key)
    index = keys.user_prefix(HISTORY_INDEX, user_id) + keys.user_prefix(b"", key)
    raw = db.get(index)
    if raw is None:  # a key from before the index: counted once
        count, mark = sum(1 for _ in db.iterator(prefix=prefix, include_value=False)), b""
    else:
        count, mark = msgpack.unpackb(raw)
    ops: list[Op] = []
    if count + added > keep:
        stop = prefix + b"\xff" * (_STAMP.size + 1)
        old = db.iterator(start=prefix + mark, stop=stop, include_value=False)
        dropped = list(itertools.islice(old, count + added - keep))
        ops = [(k, None) for k in dropped]
        if dropped:
            mark = dropped[-1][len(prefix) :] + b"\x00"
        count -= len(dropped)
    ops.append((index, msgpack.packb([count + added, mark])))
    return ops


def job_ops(db: Any, conv: Conv, upto: int) -> list[Op]:
    """Record (or extend) a pending extraction, unless the cursor is already there."""
    job, cursor = db.get(keys.conv_prefix(JOB, conv)), db.get(keys.conv_prefix(CURSOR, conv))
    done = max(0 if job is None else msgpack.unpackb(job), _int(cursor))
    return [] if upto <= done else [(keys.conv_prefix(JOB, conv), msgpack.packb(upto))]


def profile_op(profile: Profile) -> Op:
    """Write one profile, under its owner key."""
    raw = msgpack.packb([profile.summary, dict(profile.metadata), profile.updated_at])
    return keys.user_prefix(PROFILE, owner_key(profile.user_id)), raw


def _int(raw: bytes | None) -> int:
    return 0 if raw is None else int(msgpack.unpackb(raw))


def _facts(db: Any, user_id: str) -> list[Fact]:
    prefix = keys.user_prefix(FACT, user_id)
    return [
        fact_from_list(msgpack.unpackb(v)) for v in db.iterator(prefix=prefix, include_key=False)
    ]


def _sum_log(db: Any, user_id: str | None, since: float, conv_id: str | None) -> Usage:
    prefix = keys.user_prefix(USAGE_LOG, user_id)
    start = prefix + _STAMP.pack(max(0, int(since * 1e9)), 0)
    total = Usage()
    for raw in db.iterator(start=start, stop=prefix + b"\xff" * 17, include_key=False):
        where, usage = msgpack.unpackb(raw)
        if conv_id is None or where == conv_id:
            total = total + Usage.from_list(usage)
    return total


def read_usage(db: Any, conv: Conv, since: float | None) -> Usage:
    """A conversation's recorded usage: its running sums, or a window of its user's log."""
    if since is None:
        return _usage(db.get(keys.conv_prefix(CONV_USAGE, conv)))
    cleared = db.get(keys.conv_prefix(CLEARED, conv))
    if cleared is not None:
        since = max(since, float(msgpack.unpackb(cleared)))
    return _sum_log(db, conv.user_id, since, conv.conversation_id)


def read_user_usage(db: Any, user_id: str, since: float | None) -> Usage:
    """A user's recorded usage across conversations: the running sums, or a window."""
    if since is None:
        return _usage(db.get(keys.user_prefix(USER_USAGE, user_id)))
    return _sum_log(db, user_id, since, None)


class LevelDBReads:
    """The long-term reads of a LevelDB store handle, on the caller's thread."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _db(self) -> AbstractContextManager[Any]: ...

    def get_fact(self, user_id: Who, key: str) -> Fact | None:
        """The fact, or None."""
        entry = fact_key(check_owner(user_id), check_fact_key(key))
        with self._db() as db:
            raw = db.get(entry)
        return None if raw is None else fact_from_list(msgpack.unpackb(raw))

    def get_facts(self, user_id: Who, as_of: float | datetime | None = None) -> list[Fact]:
        """Every fact of the user true now, by key; ``as_of``: those true then (one scan
        of the user's facts and one of their history)."""
        at = as_seconds(as_of, "as_of")
        owner = check_owner(user_id)
        with self._db() as db:
            current = _facts(db, owner)
            if at is None:
                return sorted(current, key=lambda f: f.key)
            prefix = keys.user_prefix(HISTORY, owner)
            history = [
                fact_from_list(msgpack.unpackb(v))
                for v in db.iterator(prefix=prefix, include_key=False)
            ]
        return facts_as_of(current, history, at)

    def facts_stamp(self, user_id: Who) -> bytes | None:
        """The stamp of the last change of the user's facts (``FactStamps``), or None."""
        entry = keys.user_prefix(STAMP, check_owner(user_id))
        with self._db() as db:
            raw: bytes | None = db.get(entry)
        return raw

    def fact_history(self, user_id: Who, key: str) -> list[Fact]:
        """The values superseded or deleted, oldest first."""
        prefix = history_prefix(check_owner(user_id), check_fact_key(key))
        with self._db() as db:
            return [
                fact_from_list(msgpack.unpackb(v))
                for v in db.iterator(prefix=prefix, include_key=False)
            ]

    def get_profile(self, user_id: Who) -> Profile | None:
        """The profile, or None."""
        owner = check_owner(user_id)
        with self._db() as db:
            raw = db.get(keys.user_prefix(PROFILE, owner))
        if raw is None:
            return None
        summary, metadata, updated_at = msgpack.unpackb(raw)
        return Profile(public_id(owner), summary, metadata, updated_at)

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage (one read; ``since``: a window of its log)."""
        key = as_conv(conv)
        since = check_since(since)
        with self._db() as db:
            return read_usage(db, key, since)

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage across conversations, cleared ones included."""
        user_id = check_user(user_id)
        since = check_since(since)
        with self._db() as db:
            return read_user_usage(db, user_id, since)

    def extraction_cursor(self, conv: ConvLike) -> int:
        """How many of the conversation's messages extraction has processed."""
        with self._db() as db:
            return _int(db.get(keys.conv_prefix(CURSOR, as_conv(conv))))

    def pending_extractions(self) -> list[tuple[Conv, int]]:
        """The extractions asked for and not yet done."""
        with self._db() as db:
            return sorted(
                (keys.decode_conv(k), int(msgpack.unpackb(v))) for k, v in db.iterator(prefix=JOB)
            )


def iter_user_prefixes(user_id: str) -> Iterator[bytes]:
    """Every long-term prefix keyed by the raw user id that ``forget_user`` deletes (the
    owner-keyed ones: ``_scopes.forget_prefixes``)."""
    for kind in (*USER_KINDS, *CONVERSATION_KINDS):
        yield keys.user_prefix(kind, user_id)
