"""Memory beyond the transcript, kept by the stores: facts, profiles, usage sums, cursors.

Seed 004's second half (PhoenixAI.Store's long-term memory and cost tracking), with its
holes closed: usage is recorded by the store itself from every stored assistant message's
``metadata.usage``, in the same write as the message; a new fact past the cap is refused
with an error, never dropped; a correction keeps what was believed before
(``fact_history``); clearing a conversation does not reset its user's spend; the extraction
cursor moves in the same write as the facts it produced, so a crash neither skips nor
repeats an extraction.

    store.save_fact(Fact("ann", "city", "Lyon"))      # Fact(..., version=1)
    store.get_facts("ann"); store.fact_history("ann", "city")
    store.usage(conv); store.user_usage("ann", since=time.time() - 3600)
"""

from __future__ import annotations

import itertools
import math
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol, runtime_checkable

from ..messages import Conv, ConvLike, as_conv, freeze_value, short_repr, thaw
from ._fact_plan import KEEP_FACT_HISTORY as KEEP_FACT_HISTORY
from ._fact_plan import CursorMoved as CursorMoved
from ._fact_plan import FactLimitReached as FactLimitReached
from ._fact_plan import checked_times
from .scopes import Who, as_scope, owner_key, public_id, tenant_of

MAX_FACTS_PER_USER = 200
USAGE_LOG_HORIZON = 400 * 86_400.0
"""How far back (seconds) a user's usage log reaches: an add that records usage drops
the user's entries older than this (the running sums keep everything), so a window
(``since=``) of up to 400 days is exact and the log stays bounded. Read by the stores
at each add (PostgreSQL: when its store starts)."""
USAGE_EXPIRED_PER_ADD = 64
"""LevelDB: at most this many expired log entries go with one add (more than it brings, so
a log that outgrew the horizon drains, and no add pays for a whole backlog at once)."""
MAX_FACT_KEY = 200
MAX_FACT_VALUE = 10_000
_STAMP = struct.Struct(">QQ")
_stamps = itertools.count()


@dataclass(frozen=True)
class Fact:
    """One thing known about a user: ``key`` -> ``value``, versioned from 1 on every change.

    ``user_id`` is whose: a user id (the user's own scope) or a ``Scope`` (an agent's, a
    run's, a team's); the store gives a user's own back as the id.

    ``source`` is the conversation and message position it came from, when known;
    ``version``, ``created_at`` and ``updated_at`` (seconds since the epoch) are set by the
    store. ``valid_from`` is when it became true (a datetime with a timezone or POSIX
    seconds; stored as seconds, UTC; the time of the save when not given) and ``valid_to``
    when it stopped (None: still true); a correction closes the old value.
    """

    user_id: Who
    key: str
    value: str
    version: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    source: tuple[Conv, int] | None = None
    valid_from: float | datetime | None = None
    valid_to: float | datetime | None = None


@dataclass(frozen=True)
class Profile:
    """A user's (or a ``Scope``'s) summary, injected before the history, and structured
    metadata."""

    user_id: Who
    summary: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0


@dataclass(frozen=True)
class Usage:
    """Tokens and cost recorded from model answers; sums add up with ``+``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: Decimal = Decimal(0)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cost + other.cost,
        )

    def as_list(self) -> list[Any]:
        """The stored form: [prompt, completion, total, cost as a str]."""
        return [self.prompt_tokens, self.completion_tokens, self.total_tokens, str(self.cost)]

    @classmethod
    def from_list(cls, raw: Sequence[Any]) -> Usage:
        """The inverse of ``as_list``."""
        return cls(int(raw[0]), int(raw[1]), int(raw[2]), Decimal(raw[3]))


_NONE = Usage()


@runtime_checkable
class LongTermStore(Protocol):
    """What long-term memory, usage accounting and budgets need of a store."""

    def save_fact(self, fact: Fact, *, max_facts: int = ..., evict: bool = ...) -> Fact:
        """Upsert on (user_id, key); return the fact as stored."""

    def save_facts(
        self,
        user_id: Who,
        facts: Sequence[Fact],
        deletes: Sequence[str] = (),
        *,
        cursor: tuple[ConvLike, int] | None = None,
        max_facts: int = ...,
        evict: bool = ...,
        closes: Mapping[str, float | datetime] | None = None,
        cursor_from: int | None = None,
        keep_history: int = ...,
    ) -> list[Fact]:
        """Upsert, close and delete several facts and move an extraction cursor (only from
        ``cursor_from``, when given: else ``CursorMoved``), in one write."""

    def get_fact(self, user_id: Who, key: str) -> Fact | None:
        """The fact, or None."""

    def get_facts(self, user_id: Who, as_of: float | datetime | None = None) -> list[Fact]:
        """Every fact of the user true now, by key; ``as_of``: those true then."""

    def close_fact(self, user_id: Who, key: str, valid_to: float | datetime | None = None) -> bool:
        """Mark the fact no longer true from ``valid_to`` (default now); False if none."""

    def delete_fact(self, user_id: Who, key: str) -> bool:
        """Delete it (its history stays); False if there was none."""

    def fact_history(self, user_id: Who, key: str) -> list[Fact]:
        """The values superseded (or deleted), oldest first: the newest ``keep_history``."""

    def save_profile(self, profile: Profile) -> Profile:
        """Replace the user's profile."""

    def get_profile(self, user_id: Who) -> Profile | None:
        """The profile, or None."""

    def delete_profile(self, user_id: Who) -> bool:
        """Delete it; False if there was none."""

    def usage(self, conv: ConvLike, since: float | None = None) -> Usage:
        """The conversation's recorded usage (O(1)); ``since``: only what was recorded then
        or later."""

    def user_usage(self, user_id: str, since: float | None = None) -> Usage:
        """The user's recorded usage across conversations, cleared ones included."""

    def extraction_cursor(self, conv: ConvLike) -> int:
        """How many of the conversation's messages fact extraction has processed."""

    def request_extraction(self, conv: ConvLike, upto: int) -> None:
        """Durably ask for the conversation's messages up to ``upto`` to be extracted."""

    def pending_extractions(self) -> list[tuple[Conv, int]]:
        """The extractions asked for and not yet done, by conversation."""


@runtime_checkable
class FactStamps(Protocol):
    """A store that stamps every change to a user's facts (otpmem's three do): long-term
    memory keeps a user's ranked facts while the stamp it read them under stays."""

    def facts_stamp(self, user_id: Who) -> bytes | None:
        """A value that every write changing the user's facts changes, and that names one
        state of them (equal stamps, equal facts); None when the store knows none (no
        facts, or facts older than stamps)."""


def new_stamp() -> bytes:
    """A stamp no write had before: the time in ns and a counter of this process."""
    return _STAMP.pack(time.time_ns(), next(_stamps) & 0xFFFF_FFFF_FFFF_FFFF)


# -- validation, shared by every store ---------------------------------------------------------


def check_user(user_id: object) -> str:
    """A long-term record belongs to a user: a non-empty str."""
    # An exact str: it becomes a key, and a subclass would bring its own __hash__ and __eq__.
    if type(user_id) is not str or not user_id:
        raise ValueError(f"user_id must be a non-empty str, got {short_repr(user_id)}")
    return user_id


def check_fact_key(key: object) -> str:
    """A fact key: a non-empty str of at most 200 characters."""
    if type(key) is not str or not key.strip() or len(key) > MAX_FACT_KEY:
        raise ValueError(
            f"a fact key must be a non-empty str of at most {MAX_FACT_KEY} characters, "
            f"got {short_repr(key)}"
        )
    return key


def check_owner(who: object) -> str:
    """The store key of whose long-term records (a non-empty user id or a ``Scope``)."""
    return owner_key(who)


def check_fact(fact: object) -> Fact:
    """A Fact with a valid user (or scope), key, value and source, ready to store; a user's
    own scope given as a Scope becomes the user id."""
    if not isinstance(fact, Fact):
        raise TypeError(f"save_fact takes a Fact, got {short_repr(fact)}")
    who = public_id(owner_key(fact.user_id))
    if who != fact.user_id or type(who) is not type(fact.user_id):
        fact = replace(fact, user_id=who)
    check_fact_key(fact.key)
    if type(fact.value) is not str or len(fact.value) > MAX_FACT_VALUE:
        raise ValueError(
            f"fact {fact.key!r}: the value must be a str of at most {MAX_FACT_VALUE} "
            f"characters, got {short_repr(fact.value)}"
        )
    if fact.source is not None:
        if not (type(fact.source) is tuple and len(fact.source) == 2):
            raise ValueError(f"fact {fact.key!r}: source must be (conv, position)")
        conv, position = as_conv(fact.source[0]), fact.source[1]
        if type(position) is not int or position < 0:
            raise ValueError(f"fact {fact.key!r}: source position must be an int >= 0")
        if conv.user_id != tenant_of(fact.user_id):
            raise ValueError(
                f"fact {fact.key!r} of {fact.user_id!r} cannot come from {conv}: another "
                "user's conversation"
            )
        fact = replace(fact, source=(conv, position))
    return checked_times(fact)


def check_limit(max_facts: object) -> int:
    """``max_facts``: an int >= 1."""
    if type(max_facts) is not int or max_facts < 1:
        raise ValueError(f"max_facts must be an int >= 1, got {short_repr(max_facts)}")
    return max_facts


def check_profile(profile: object) -> Profile:
    """A Profile with a user, a str summary and JSON-like metadata, ready to store: its
    metadata a copy of its own, checked by the rules of a message's metadata (nesting,
    finite numbers), so every backend refuses the same profiles (``InvalidMessage``, a
    ValueError naming the field)."""
    if not isinstance(profile, Profile):
        raise TypeError(f"save_profile takes a Profile, got {short_repr(profile)}")
    who = public_id(owner_key(profile.user_id))
    if type(profile.summary) is not str:
        raise ValueError(f"a profile summary is a str, got {short_repr(profile.summary)}")
    if not isinstance(profile.metadata, dict):
        raise ValueError(f"profile metadata is a dict, got {short_repr(profile.metadata)}")
    metadata = thaw(freeze_value(profile.metadata, "metadata"))
    return replace(profile, user_id=who, metadata=metadata)


def check_since(since: object) -> float | None:
    """None, or a finite number of seconds since the epoch."""
    if since is None:
        return None
    if isinstance(since, bool) or not isinstance(since, int | float) or not math.isfinite(since):
        raise ValueError(f"since must be None or seconds since the epoch, got {short_repr(since)}")
    return float(since)


def usage_of(message: Mapping[str, Any]) -> Usage | None:
    """The usage an assistant message carries in ``metadata.usage``, if any.

    Tokens count only when they are non-negative ints; ``cost`` is a decimal string or a
    number. Anything else in the usage is kept in the message but not summed.
    """
    if message.get("role") != "assistant":
        return None
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    usage = metadata.get("usage")
    if not isinstance(usage, Mapping):
        return None

    def tokens(name: str) -> int:
        value = usage.get(name)
        return value if type(value) is int and value >= 0 else 0

    prompt, completion = tokens("prompt_tokens"), tokens("completion_tokens")
    total = tokens("total_tokens") or prompt + completion
    cost = Decimal(0)
    raw = usage.get("cost")
    if isinstance(raw, str | int | float) and not isinstance(raw, bool):
        try:
            cost = Decimal(str(raw))
        except InvalidOperation:
            cost = Decimal(0)
        if not cost.is_finite() or cost < 0:
            cost = Decimal(0)
    return Usage(prompt, completion, total, cost)


def batch_usage(batch: Iterable[Mapping[str, Any]]) -> Usage | None:
    """The usage a batch's messages carry, summed; None if it carries none worth a record
    (most batches: every add asks, so those leave at once)."""
    added: Usage | None = None
    for message in batch:
        found = usage_of(message)
        if found is not None:
            added = found if added is None else added + found
    return None if added is None or added == _NONE else added


def fact_as_list(fact: Fact) -> list[Any]:
    """A fact's stored form (msgpack- and table-friendly)."""
    source = None
    if fact.source is not None:
        conv, position = fact.source
        source = [conv.user_id, conv.conversation_id, position]
    return [
        owner_key(fact.user_id),
        fact.key,
        fact.value,
        fact.version,
        fact.created_at,
        fact.updated_at,
        source,
        fact.valid_from,
        fact.valid_to,
    ]


def fact_from_list(raw: Sequence[Any]) -> Fact:
    """The inverse of ``fact_as_list`` (a record from before facts had times: unknown
    ``valid_from``, no ``valid_to``)."""
    source = raw[6]
    began, ended = (raw[7], raw[8]) if len(raw) > 8 else (None, None)
    return Fact(
        public_id(raw[0]),
        raw[1],
        raw[2],
        int(raw[3]),
        float(raw[4]),
        float(raw[5]),
        None if source is None else (Conv(source[0], source[1]), int(source[2])),
        None if began is None else float(began),
        None if ended is None else float(ended),
    )


def scope_usage(store: object, scope: Who, since: float | None = None) -> Usage:
    """What the scope's conversations recorded (a user's own scope: ``user_usage``, which
    keeps a cleared conversation's spend; another scope's sum restarts with a clear, as
    the conversation's ``usage`` does)."""
    checked = as_scope(scope)
    reader: Any = store
    if checked.is_user:
        total: Usage = reader.user_usage(checked.user, since)
        return total
    total = Usage()
    for conv in reader.scope_conversations(checked):
        total = total + reader.usage(conv, since)
    return total
