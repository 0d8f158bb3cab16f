"""What one ``save_facts`` does to a user's facts, decided once for every store, and what
was true at a time (``get_facts(user_id, as_of=t)``).

A fact holds from ``valid_from`` until ``valid_to`` (None: still true), as Zep/Graphiti's
edges hold from ``valid_at`` to ``invalid_at``. A correction (a new value for a key) closes
the old value at the new one's ``valid_from`` and keeps it in the history; ``close_fact``
closes one without a successor; a delete (or an eviction) erases: the value goes to the
history unclosed, which no ``as_of`` read answers. Data stored before facts had times reads
``valid_from=None`` (unknown: taken as true before its end) and ``valid_to=None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from ..messages import short_repr
from ._base import StoreError

if TYPE_CHECKING:
    from .longterm import Fact


KEEP_FACT_HISTORY = 100
"""How many superseded values of each fact key a store keeps by default (``keep_history``):
older ones are dropped in the write that supersedes a newer one."""


class FactLimitReached(StoreError):
    """A new fact would take a user past ``max_facts``: nothing was saved."""


class CursorMoved(StoreError):
    """``save_facts(cursor=..., cursor_from=n)`` found the extraction cursor no longer at
    ``n``: another extractor processed those messages; nothing was saved."""


def check_cursor_from(conv: object, expected: int | None, stored: int) -> None:
    """Refuse a cursor move that did not start where the stored cursor is."""
    if expected is not None and expected != stored:
        raise CursorMoved(
            f"the extraction cursor of {conv} is at {stored}, not at {expected} where this "
            "extraction started: another extractor moved it; nothing was saved"
        )


def check_keep(keep: object) -> int:
    """``keep_history``: an int >= 1."""
    if type(keep) is not int or keep < 1:
        raise ValueError(f"keep_history must be an int >= 1, got {short_repr(keep)}")
    return keep


def as_seconds(value: object, what: str) -> float | None:
    """A time at the door: None, a timezone-aware datetime, or finite POSIX seconds; the
    seconds since the epoch (UTC) it names."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(
                f"{what} must be a datetime with a timezone (or POSIX seconds), got the "
                f"naive {value.isoformat()}"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"{what} must be None, a datetime with a timezone or POSIX seconds, "
            f"got {short_repr(value)}"
        )
    return float(value)


def start(fact: Fact) -> float | None:
    """When the fact became true, in seconds (None: unknown)."""
    return None if fact.valid_from is None else float(fact.valid_from)  # type: ignore[arg-type]


def end(fact: Fact) -> float | None:
    """When the fact stopped being true, in seconds (None: it has not)."""
    return None if fact.valid_to is None else float(fact.valid_to)  # type: ignore[arg-type]


def checked_times(fact: Fact) -> Fact:
    """The fact with its times in seconds; a ``valid_to`` before ``valid_from`` refused."""
    began = as_seconds(fact.valid_from, f"fact {fact.key!r}: valid_from")
    ended = as_seconds(fact.valid_to, f"fact {fact.key!r}: valid_to")
    if began is not None and ended is not None and ended < began:
        raise ValueError(
            f"fact {fact.key!r}: valid_to ({ended}) is before valid_from ({began}): a fact "
            "cannot stop being true before it began"
        )
    return replace(fact, valid_from=began, valid_to=ended)


def check_closes(closes: object) -> dict[str, float]:
    """A ``closes`` mapping: fact key -> when it stopped being true (in seconds)."""
    if not isinstance(closes, Mapping):
        raise ValueError(f"closes must be a mapping of fact key to time, got {short_repr(closes)}")
    checked: dict[str, float] = {}
    for key, at in closes.items():
        seconds = as_seconds(at, f"fact {key!r}: valid_to")
        if seconds is None:
            raise ValueError(f"fact {key!r}: closing it needs a valid_to, got None")
        checked[key] = seconds
    return checked


def _closed(existing: Fact, at: float, what: str) -> Fact:
    began = start(existing)
    if began is not None and at < began:
        raise ValueError(
            f"fact {existing.key!r}: {what} ({at}) is before the stored value's valid_from "
            f"({began}): a fact cannot stop being true before it began; nothing was saved"
        )
    return replace(existing, valid_to=at)


@dataclass
class FactPlan:
    """What one ``save_facts`` does: the facts as saved, the keys to write and to delete,
    and the values that go to history (closed ones with their ``valid_to``)."""

    saved: list[Fact] = field(default_factory=list)
    put: dict[str, Fact] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    superseded: list[Fact] = field(default_factory=list)


def plan_facts(
    current: Mapping[str, Fact],
    facts: Sequence[Fact],
    deletes: Sequence[str],
    now: float,
    max_facts: int,
    evict: bool,
    closes: Mapping[str, float] | None = None,
) -> FactPlan:
    """Upserts (a changed value gets the next version and closes the old one at its
    ``valid_from``, now when not given; an unchanged one is left as is), then closes, then
    deletes; a new key at the cap is refused (``FactLimitReached``) or, with ``evict``,
    replaces the least recently updated fact not touched by this write."""
    plan = FactPlan()
    state = dict(current)
    touched: set[str] = set()

    def leave(key: str, old: Fact) -> None:
        del state[key]
        plan.put.pop(key, None)
        plan.removed.append(key)
        plan.superseded.append(old)

    for fact in facts:
        existing = state.get(fact.key)
        touched.add(fact.key)
        began = start(fact)
        began = now if began is None else began
        if existing is not None and existing.value == fact.value:
            if fact.valid_to is None:
                plan.saved.append(existing)
                continue
            ended = end(fact)
            assert ended is not None
            closed = _closed(existing, ended, "valid_to")
            leave(fact.key, closed)
            plan.saved.append(closed)
            continue
        over = fact.valid_to is not None  # saved as already over: history, not current
        if existing is None and not over and len(state) >= max_facts:
            victims = sorted(
                (f for k, f in state.items() if k not in touched), key=lambda f: f.updated_at
            )
            if not evict or not victims:
                raise FactLimitReached(
                    f"user {fact.user_id!r} has {len(state)} facts, the most allowed "
                    f"(max_facts={max_facts}): the new fact {fact.key!r} was not saved; "
                    "delete one, raise the cap, or let the oldest be evicted (evict=True)"
                )
            leave(victims[0].key, victims[0])
        stored = replace(
            fact,
            version=1 if existing is None else existing.version + 1,
            created_at=now if existing is None else existing.created_at,
            updated_at=now,
            valid_from=began,
        )
        if existing is not None:
            plan.superseded.append(_closed(existing, began, "the new value's valid_from"))
        if over:
            if existing is not None:
                del state[fact.key]
                plan.put.pop(fact.key, None)
                plan.removed.append(fact.key)
            plan.superseded.append(stored)
            plan.saved.append(stored)
            continue
        state[fact.key] = stored
        plan.put[fact.key] = stored
        if fact.key in plan.removed:
            plan.removed.remove(fact.key)
        plan.saved.append(stored)
    for key, at in (closes or {}).items():
        existing = state.get(key)
        if existing is not None:
            leave(key, _closed(existing, at, "valid_to"))
    for key in deletes:
        existing = state.get(key)
        if existing is not None:
            leave(key, existing)
    return plan


def _earliest(seconds: float | None) -> float:
    return -math.inf if seconds is None else seconds


def facts_as_of(current: Iterable[Fact], history: Iterable[Fact], at: float) -> list[Fact]:
    """What was true at ``at``, by key: the current facts and the closed history entries
    whose ``valid_from <= at < valid_to`` (an unknown ``valid_from`` counts as before);
    of two values of a key true then, the one that began later."""
    found: dict[str, Fact] = {}

    def consider(fact: Fact) -> None:
        began = start(fact)
        if began is not None and began > at:
            return
        held = found.get(fact.key)
        if held is None or _earliest(start(held)) <= _earliest(began):
            found[fact.key] = fact

    for old in history:  # oldest first, so a later entry wins a tie
        ended = end(old)
        if ended is not None and at < ended:
            consider(old)
    for fact in current:
        if end(fact) is None:
            consider(fact)
    return [found[k] for k in sorted(found)]
