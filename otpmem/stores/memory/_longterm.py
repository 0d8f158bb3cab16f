"""MemoryStore's long-term records: facts, profiles, usage and cursors in its own table.

They live in the same table as the conversations, under keys no conversation can have
(plain 3-tuples: a ``Conv`` is a 2-tuple, a conversation of no user a str), so they
outlive a crash with the messages, and an ``add`` updates its messages and its usage sums
in one ``Table.update``. Readers read them directly, as they read conversations.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

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
    new_stamp,
)
from ..scopes import Who, owner_key

MARK = "\x00otpmem.longterm"
LongTermKey = tuple[str, str, Any]


def key(kind: str, owner: Any) -> LongTermKey:
    """The table key of one long-term record."""
    return (MARK, kind, owner)


HOLDS = key("holds", None)
"""Where the store's ledger of holds on budgets lives (see ``otpmem.stores.reservations``)."""


def is_longterm(table_key: object) -> bool:
    """Whether a table key is a long-term record's (not a conversation's)."""
    return type(table_key) is tuple and len(table_key) == 3 and table_key[0] == MARK


def usage_puts(
    mapping: Mapping[Any, Any], conv: Conv, batch: Sequence[Mapping[str, Any]]
) -> dict[LongTermKey, Any]:
    """The usage sums and log entries an added batch brings, ready for one update."""
    added = batch_usage(batch)
    if added is None:
        return {}
    user = conv.user_id
    log: tuple[list[Any], int] | None = mapping.get(key("log", user))
    now = time.time()
    entry = (now, conv, added)
    if log is None:
        entries, n = [entry], 1
    else:
        # An append-only list under a (list, n) snapshot, as the messages are: readers never
        # look past n, so an add costs one entry, not a copy of the user's whole log.
        entries, n = log
        del entries[n:]
        entries.append(entry)
        n += 1
        expired = bisect.bisect_left(
            entries, now - longterm.USAGE_LOG_HORIZON, 0, n, key=lambda e: e[0]
        )
        if expired * 2 >= n:  # a fresh list once half is past the horizon: amortised O(1)
            entries, n = entries[expired:n], n - expired
    return {
        key("conv_usage", conv): mapping.get(key("conv_usage", conv), Usage()) + added,
        key("user_usage", user): mapping.get(key("user_usage", user), Usage()) + added,
        key("log", user): (entries, n),
    }


def clear_deletes(conv: Conv) -> list[LongTermKey]:
    """What clearing a conversation forgets of its long-term records (not the user's sums)."""
    return [key("conv_usage", conv)]


def user_records(user_id: str, convs: Sequence[Conv]) -> list[LongTermKey]:
    """Every long-term record of a user whose conversations are ``convs``: the records of a
    conversation that outlive its clear (when it was cleared, its cursor) are kept under
    its user, so a forget needs no scan of the table."""
    # The records of the user's own scope are under its owner key; those of the user's
    # conversations under the user id, as the conversations are.
    owner = owner_key(user_id)
    owned = [key(kind, owner) for kind in ("facts", "stamp", "history", "profile")]
    kinds = ("user_usage", "log", "cleared", "cursors")
    return owned + [key(kind, user_id) for kind in kinds] + [key("conv_usage", c) for c in convs]


def _without(mapping: Mapping[Any, Any], record: LongTermKey, conv: Conv) -> dict[Conv, Any]:
    return {c: v for c, v in mapping.get(record, {}).items() if c != conv}


def clear_puts(mapping: Mapping[Any, Any], conv: Conv) -> dict[LongTermKey, Any]:
    """A cleared conversation's usage window restarts now; its pending job goes."""
    cleared = dict(mapping.get(key("cleared", conv.user_id), {}))
    cleared[conv] = time.time()
    puts: dict[LongTermKey, Any] = {
        key("cleared", conv.user_id): cleared,
        key("cursors", conv.user_id): _without(mapping, key("cursors", conv.user_id), conv),
    }
    jobs = mapping.get(key("jobs", None))
    if jobs and conv in jobs:
        puts[key("jobs", None)] = {c: n for c, n in jobs.items() if c != conv}
    return puts


def forget_puts(mapping: Mapping[Any, Any], user_id: str) -> dict[LongTermKey, Any]:
    """Pending jobs of a forgotten user's conversations go with them."""
    jobs = mapping.get(key("jobs", None))
    if jobs and any(c.user_id == user_id for c in jobs):
        return {key("jobs", None): {c: n for c, n in jobs.items() if c.user_id != user_id}}
    return {}


def fact_write(
    mapping: Mapping[Any, Any],
    user_id: str,
    facts: Sequence[Fact],
    deletes: Sequence[str],
    cursor: tuple[Conv, int, int | None] | None,
    max_facts: int,
    evict: bool,
    closes: Mapping[str, float],
    keep: int,
) -> tuple[list[Fact], dict[LongTermKey, Any]]:
    """The facts as saved and the table writes of one ``save_facts`` (each key's history
    cut to its newest ``keep`` values in the same write)."""
    if cursor is not None:
        check_cursor_from(cursor[0], cursor[2], read_cursor(mapping, cursor[0]))
    current: dict[str, Fact] = mapping.get(key("facts", user_id), {})
    plan = plan_facts(current, facts, deletes, time.time(), max_facts, evict, closes)
    merged = {k: f for k, f in current.items() if k not in plan.removed}
    merged.update(plan.put)
    history: dict[str, tuple[Fact, ...]] = dict(mapping.get(key("history", user_id), {}))
    for old in plan.superseded:
        history[old.key] = (*history.get(old.key, ()), old)[-keep:]
    puts: dict[LongTermKey, Any] = {
        key("facts", user_id): merged,
        key("history", user_id): history,
    }
    if plan.put or plan.removed:  # what a cached ranking of the facts is checked against
        puts[key("stamp", user_id)] = new_stamp()
    if cursor is not None:
        conv, position, _ = cursor
        cursors = dict(mapping.get(key("cursors", conv.user_id), {}))
        cursors[conv] = position
        puts[key("cursors", conv.user_id)] = cursors
        jobs = mapping.get(key("jobs", None))
        if jobs and conv in jobs and position >= jobs[conv]:
            puts[key("jobs", None)] = {c: n for c, n in jobs.items() if c != conv}
    return plan.saved, puts


def job_puts(mapping: Mapping[Any, Any], conv: Conv, upto: int) -> dict[LongTermKey, Any]:
    """Record (or extend) a pending extraction of ``conv`` up to ``upto``."""
    jobs = dict(mapping.get(key("jobs", None), {}))
    if upto <= max(jobs.get(conv, 0), read_cursor(mapping, conv)):
        return {}
    jobs[conv] = upto
    return {key("jobs", None): jobs}


# -- reads, on any thread ----------------------------------------------------------------------


def read_facts(mapping: Mapping[Any, Any], user_id: Who, as_of: Any = None) -> list[Fact]:
    """A user's facts true now, by key; ``as_of``: those true then."""
    at = as_seconds(as_of, "as_of")
    owner = check_owner(user_id)
    facts: dict[str, Fact] = mapping.get(key("facts", owner), {})
    if at is None:
        return [facts[k] for k in sorted(facts)]
    history: dict[str, tuple[Fact, ...]] = mapping.get(key("history", owner), {})
    return facts_as_of(facts.values(), (f for old in history.values() for f in old), at)


def read_fact(mapping: Mapping[Any, Any], user_id: Who, fact_key: str) -> Fact | None:
    """One fact, or None."""
    facts: dict[str, Fact] = mapping.get(key("facts", check_owner(user_id)), {})
    return facts.get(check_fact_key(fact_key))


def read_stamp(mapping: Mapping[Any, Any], user_id: Who) -> bytes | None:
    """The stamp of the user's last change of facts, or None."""
    stamp: bytes | None = mapping.get(key("stamp", check_owner(user_id)))
    return stamp


def read_history(mapping: Mapping[Any, Any], user_id: Who, fact_key: str) -> list[Fact]:
    """The superseded values of one fact, oldest first."""
    history = mapping.get(key("history", check_owner(user_id)), {})
    return list(history.get(check_fact_key(fact_key), ()))


def read_profile(mapping: Mapping[Any, Any], user_id: Who) -> Profile | None:
    """A user's profile, or None."""
    profile: Profile | None = mapping.get(key("profile", check_owner(user_id)))
    return profile


def read_usage(mapping: Mapping[Any, Any], conv: Conv, since: float | None) -> Usage:
    """A conversation's usage, all of it (one lookup) or since a time (its user's log)."""
    since = check_since(since)
    if since is None:
        total: Usage = mapping.get(key("conv_usage", conv), Usage())
        return total
    cleared = mapping.get(key("cleared", conv.user_id), {}).get(conv)
    if cleared is not None:
        since = max(since, cleared)
    return _sum_log(_entries(mapping.get(key("log", conv.user_id))), since, conv)


def read_user_usage(mapping: Mapping[Any, Any], user_id: str, since: float | None) -> Usage:
    """A user's usage across conversations, cleared ones included."""
    since = check_since(since)
    user_id = check_user(user_id)
    if since is None:
        total: Usage = mapping.get(key("user_usage", user_id), Usage())
        return total
    return _sum_log(_entries(mapping.get(key("log", user_id))), since, None)


def read_cursor(mapping: Mapping[Any, Any], conv: Conv) -> int:
    """How many of the conversation's messages extraction has processed."""
    cursor: int = mapping.get(key("cursors", conv.user_id), {}).get(conv, 0)
    return cursor


def read_jobs(mapping: Mapping[Any, Any]) -> list[tuple[Conv, int]]:
    """The pending extractions."""
    jobs: dict[Conv, int] = mapping.get(key("jobs", None), {})
    return sorted(jobs.items())


def _entries(log: tuple[list[Any], int] | None) -> Iterator[tuple[float, Conv, Usage]]:
    """The usage log's entries a reader may see (the first n), newest first, uncopied."""
    if log is None:
        return iter(())
    entries, n = log
    return (entries[i] for i in range(n - 1, -1, -1))


def _sum_log(
    newest_first: Iterator[tuple[float, Conv, Usage]], since: float, conv: Conv | None
) -> Usage:
    total = Usage()
    for stamp, where, usage in newest_first:  # stop at the window's start
        if stamp < since:
            break
        if conv is None or where == conv:
            total = total + usage
    return total


class TableReads:
    """The long-term reads of a MemoryStore handle, straight from its table."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _mapping(self) -> dict[Any, Any]: ...

    def get_fact(self, user_id: Who, key: str) -> Fact | None:
        """The fact, or None."""
        return read_fact(self._mapping(), user_id, key)

    def get_facts(self, user_id: Who, as_of: float | datetime | None = None) -> list[Fact]:
        """Every fact of the user true now, by key; ``as_of``: those true then."""
        return read_facts(self._mapping(), user_id, as_of)

    def facts_stamp(self, user_id: Who) -> bytes | None:
        """The stamp of the last change of the user's facts (``FactStamps``), or None."""
        return read_stamp(self._mapping(), user_id)

    def fact_history(self, user_id: Who, key: str) -> list[Fact]:
        """The values superseded or deleted, oldest first."""
        return read_history(self._mapping(), user_id, key)

    def get_profile(self, user_id: Who) -> Profile | None:
        """The profile, or None."""
        return read_profile(self._mapping(), user_id)

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage (one lookup; ``since``: a window of its log)."""
        return read_usage(self._mapping(), as_conv(conv), since)

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage across conversations, cleared ones included."""
        return read_user_usage(self._mapping(), user_id, since)

    def extraction_cursor(self, conv: ConvLike) -> int:
        """How many of the conversation's messages extraction has processed."""
        return read_cursor(self._mapping(), as_conv(conv))

    def pending_extractions(self) -> list[tuple[Conv, int]]:
        """The extractions asked for and not yet done."""
        return read_jobs(self._mapping())
