"""Holds on a budget: what a model call in flight is expected to spend, held in the store
from before the call until its answer is recorded, so that concurrent calls of one scope
cannot all pass a check that each would pass alone.

A reservation is one atomic check-and-hold in the store::

    answer = store.reserve(Conv("ann", "c1"), "h-1", Hold(tokens=600),
                           [Limit("user", "tokens", 1000)], ttl=300.0)
    answer.granted          # True: recorded + held by other calls + own <= 1000
    store.release("h-1")    # once the answer (and its usage) is stored, or the call failed

Every limit is checked against what the store has recorded in its scope (``usage`` or
``user_usage``, ``since`` a time for a window) plus what the unexpired holds of calls in
that scope hold: a conversation's limit counts its own calls' holds, a user's limit those
of all the user's conversations. The store is the lock: MemoryStore takes reservations one
at a time under its write lock, LevelDBStore in its server, PostgresStore under a
transaction-scoped advisory lock per user, on every node. A hold expires after ``ttl`` s,
so a turn that died without releasing it frees its budget then; ``abandon`` is the release
a dying process sends, which never blocks and never raises.

A hold whose ``cost`` is None is a call of unknown cost (nothing recorded yet to estimate it
from): while it is in flight, every cost limit that counts it refuses, so the first call of
a fresh scope goes alone and the next ones are estimated from what it spent.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from ..messages import Conv, ConvLike, as_conv, short_repr
from .longterm import Usage, check_since

HOLD_SCOPES = ("conversation", "user")
MEASURES = ("tokens", "cost")
MAX_HOLD_ID = 64
RESERVATION_KINDS = frozenset({"reserve", "release"})
ABANDON = "abandon_hold"

Amount = int | Decimal


@dataclass(frozen=True)
class Limit:
    """One budget a call must fit: at most ``max`` of ``measure`` (``"tokens"``: total
    tokens, ``"cost"``: a Decimal) recorded in ``scope`` (``since`` a time, for a window),
    plus what calls in flight hold there, plus ``own`` (the call's own estimate, when its
    budget counts it before the call)."""

    scope: str
    measure: str
    max: Amount
    own: Amount = 0
    since: float | None = None


@dataclass(frozen=True)
class Hold:
    """What a call in flight holds: ``tokens``, and ``cost`` (None: unknown)."""

    tokens: int = 0
    cost: Decimal | None = Decimal(0)


@dataclass(frozen=True)
class Reservation:
    """A reservation's answer: granted, or the first limit that refused (its index in the
    limits given) with what its scope had ``recorded`` and what other calls ``held`` there
    (None: a call of unknown cost holds it)."""

    hold_id: str
    refused: int | None = None
    recorded: Amount = 0
    held: Amount | None = 0

    @property
    def granted(self) -> bool:
        """Whether the call's hold was taken."""
        return self.refused is None


@runtime_checkable
class ReservationStore(Protocol):
    """What budgets need of a store to hold a call's spend while it is in flight."""

    def reserve(
        self, conv: ConvLike, hold_id: str, hold: Hold, limits: Sequence[Limit], ttl: float
    ) -> Reservation:
        """Check ``limits`` and take the hold ``hold_id`` (replacing one of that id), as one
        step: granted, or the first limit that refused and nothing held."""

    def release(self, hold_id: str) -> bool:
        """Drop the hold; False if it was gone (released, expired, forgotten)."""

    def abandon(self, hold_id: str) -> None:
        """Drop the hold without waiting: what a dying process sends (never raises)."""


def measure(usage: Usage, what: str) -> Amount:
    """The tokens (total) or the cost of a usage."""
    return usage.total_tokens if what == "tokens" else usage.cost


def refuses(limit: Limit, recorded: Amount, held: Amount | None) -> bool:
    """Whether ``limit`` refuses a call, given its scope's recorded and held amounts."""
    return held is None or recorded + held + limit.own > limit.max


def held_in(limit: Limit, hold: Hold) -> Amount | None:
    """What ``hold`` holds of the limit's measure (None: an unknown cost)."""
    return hold.tokens if limit.measure == "tokens" else hold.cost


def check_hold_id(hold_id: object) -> str:
    """A hold's id: a non-empty str of at most 64 characters."""
    if not isinstance(hold_id, str) or not hold_id or len(hold_id) > MAX_HOLD_ID:
        raise ValueError(
            f"a hold id must be a non-empty str of at most {MAX_HOLD_ID} characters, "
            f"got {short_repr(hold_id)}"
        )
    return hold_id


def _amount(value: object, what: str, measure_name: str) -> Amount:
    if measure_name == "tokens":
        if type(value) is not int or value < 0:
            raise ValueError(f"{what} of tokens must be an int >= 0, got {short_repr(value)}")
        return value
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise ValueError(f"{what} of cost must be a Decimal >= 0, got {short_repr(value)}")
    amount = value if type(value) is Decimal else Decimal(value)
    if not amount.is_finite() or amount < 0:
        raise ValueError(f"{what} of cost must be a finite Decimal >= 0, got {short_repr(value)}")
    return amount


def check_limit(limit: object, conv: Conv) -> Limit:
    """A Limit whose scope, measure and amounts are valid for a call in ``conv`` (the same
    one when it is valid as it is: what budgets build)."""
    if not isinstance(limit, Limit):
        raise TypeError(f"reserve takes a list of Limit, got {short_repr(limit)}")
    if limit.scope not in HOLD_SCOPES:
        raise ValueError(f"a limit's scope is 'conversation' or 'user', got {limit.scope!r}")
    if limit.scope == "user" and conv.user_id is None:
        raise ValueError(f"a limit of scope 'user' needs a conversation of a user, got {conv}")
    if limit.measure not in MEASURES:
        raise ValueError(f"a limit's measure is 'tokens' or 'cost', got {limit.measure!r}")
    most = _amount(limit.max, "a limit's max", limit.measure)
    own = _amount(limit.own, "a limit's own", limit.measure)
    since = check_since(limit.since)
    if most is limit.max and own is limit.own and since is limit.since:
        return limit
    return Limit(limit.scope, limit.measure, most, own, since)


def check_hold(hold: object) -> Hold:
    """A Hold of tokens (an int >= 0) and cost (a Decimal >= 0, or None: unknown)."""
    if not isinstance(hold, Hold):
        raise TypeError(f"reserve takes a Hold, got {short_repr(hold)}")
    tokens = _amount(hold.tokens, "a hold", "tokens")
    cost = None if hold.cost is None else _amount(hold.cost, "a hold", "cost")
    if cost is hold.cost:
        return hold
    assert isinstance(tokens, int) and isinstance(cost, Decimal)
    return Hold(tokens, cost)


def check_ttl(ttl: object) -> float:
    """How long a hold lasts: a finite number of seconds > 0."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise ValueError(f"a hold's ttl must be a number of seconds > 0, got {short_repr(ttl)}")
    if ttl <= 0:
        raise ValueError(f"a hold's ttl must be a number of seconds > 0, got {short_repr(ttl)}")
    return float(ttl)


ReserveArgs = tuple[Conv, str, Hold, list[Limit], float]


def check_reserve(args: Sequence[Any]) -> ReserveArgs:
    """A reservation's arguments, checked whole (the handle's and the server's own check)."""
    if len(args) != 5:
        raise ValueError("reserve takes (conv, hold_id, hold, limits, ttl)")
    conv = as_conv(args[0])
    limits = args[3]
    if isinstance(limits, str | bytes) or not isinstance(limits, Sequence):
        raise TypeError(f"reserve takes a list of Limit, got {short_repr(limits)}")
    return (
        conv,
        check_hold_id(args[1]),
        check_hold(args[2]),
        [check_limit(limit, conv) for limit in limits],
        check_ttl(args[4]),
    )


def parse_reservation(message: tuple[Any, ...], store: str) -> tuple[str, Any]:
    """The server's check of a ``reserve`` or ``release`` request; ``ValueError`` (or
    ``TypeError``) names what is wrong."""
    kind, args = message[0], message[1:]
    if kind == "reserve":
        return kind, check_reserve(args)
    if len(args) != 1:
        raise ValueError(f"{store}: 'release' takes a hold id")
    return kind, check_hold_id(args[0])


def is_reservation(message: object) -> bool:
    """True for a ``reserve`` or ``release`` request, told by exact types only: a store's
    door must not run a caller's ``__eq__`` or ``__hash__``."""
    return (
        type(message) is tuple
        and len(message) > 0
        and type(message[0]) is str
        and message[0] in RESERVATION_KINDS
    )


def abandoned_hold(message: object) -> str | None:
    """The hold id of an ``abandon`` message a dying process sent, else None."""
    # Exact types first: any message may reach handle_info, and its __eq__ must not run.
    if (
        type(message) is tuple
        and len(message) == 2
        and type(message[0]) is str
        and message[0] == ABANDON
    ):
        hold_id = message[1]
        if type(hold_id) is str and 0 < len(hold_id) <= MAX_HOLD_ID:
            return hold_id
    return None


__all__ = [
    "ABANDON",
    "HOLD_SCOPES",
    "MEASURES",
    "RESERVATION_KINDS",
    "Hold",
    "Limit",
    "Reservation",
    "ReservationStore",
    "abandoned_hold",
    "check_reserve",
    "held_in",
    "is_reservation",
    "measure",
    "parse_reservation",
    "refuses",
]
