"""Token and cost budgets over the usage a store records (seed 004's, with usage real).

PhoenixAI.Store's budgets summed a ``token_count`` nothing filled in, and kept time windows
in an unsupervised ETS table; here the store records every answer's usage in the same
write as the message, so a budget reads sums that survive crashes and restarts::

    TokenBudget(50_000, scope="user")
    TokenBudget(8_000, scope="conversation", mode="estimated")
    TokenBudget(100_000, scope="time_window", window_s=3600)     # a sliding hour
    CostBudget("5.00", scope="user")
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ..llm.pricing import as_price
from ..memory import DEFAULT_COUNTER, TokenCounter, count_all
from ..messages import short_repr
from ..stores import Usage
from ._policy import PolicyViolation, Request, UsageReader

SCOPES = ("conversation", "user", "time_window")
MODES = ("accumulated", "estimated")


def _check_choice(value: object, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)


def _check_window(scope: str, window_s: object) -> float | None:
    if scope != "time_window":
        if window_s is not None:
            raise ValueError(f"window_s is for scope='time_window', not scope={scope!r}")
        return None
    if (
        isinstance(window_s, bool)
        or not isinstance(window_s, int | float)
        or not math.isfinite(window_s)
        or window_s <= 0
    ):
        raise ValueError(
            f"scope='time_window' needs window_s, a number of seconds > 0, got {window_s!r}"
        )
    return float(window_s)


class _Scoped:
    """What both budgets share: the scope, its window, and reading the recorded usage."""

    scope: str
    window_s: float | None
    clock: Callable[[], float]

    def recorded(self, request: Request, store: UsageReader) -> Usage:
        """The usage recorded in this budget's scope; a violation if its ids are missing."""
        if self.scope == "conversation":
            if request.conv is None:
                raise self.refuse("the request names no conversation", {"scope": self.scope})
            return store.usage(request.conv)
        if self.scope == "user":
            if request.user_id is None:
                raise self.refuse("the request names no user", {"scope": self.scope})
            return store.user_usage(request.user_id)
        assert self.window_s is not None
        since = self.clock() - self.window_s
        # A window counts the user's calls when it knows the user, else the conversation's.
        if request.user_id is not None:
            return store.user_usage(request.user_id, since)
        if request.conv is not None:
            return store.usage(request.conv, since)
        raise self.refuse("the request names no user and no conversation", {"scope": self.scope})

    def refuse(self, why: str, metadata: dict[str, Any]) -> PolicyViolation:
        """A fail-closed violation: the budget cannot tell whose spend to count."""
        return PolicyViolation(self, f"{type(self).__name__} ({self.scope}): {why}", metadata)

    def where(self) -> str:
        """The scope in words, for a reason."""
        if self.window_s is None:
            return f"scope: {self.scope}"
        return f"scope: the last {self.window_s:g} s"


class TokenBudget(_Scoped):
    """Pass iff the tokens recorded in the scope (plus, in ``estimated`` mode, the tokens
    of the messages about to be sent) are at most ``max``.

    ``accumulated`` counts what the model reported (``total_tokens``); ``estimated`` adds
    ``counter``'s count of the request's messages, so the call that would overshoot is
    refused before it is made. Fails closed: a request without the ids its scope needs is
    refused, with a reason that says so.
    """

    def __init__(
        self,
        max: int,
        scope: str = "conversation",
        mode: str = "accumulated",
        window_s: float | None = None,
        counter: TokenCounter | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if type(max) is not int or max < 0:
            raise ValueError(f"TokenBudget max must be an int >= 0 (tokens), got {short_repr(max)}")
        self.max = max
        self.scope = _check_choice(scope, SCOPES, "TokenBudget scope")
        self.mode = _check_choice(mode, MODES, "TokenBudget mode")
        self.window_s = _check_window(self.scope, window_s)
        if counter is not None and not isinstance(counter, TokenCounter):
            raise TypeError(f"counter must be a TokenCounter, got {short_repr(counter)}")
        self.counter = counter or DEFAULT_COUNTER
        self.clock = clock

    def __repr__(self) -> str:
        window = "" if self.window_s is None else f", window_s={self.window_s:g}"
        return f"TokenBudget({self.max}, scope={self.scope!r}, mode={self.mode!r}{window})"

    def check(self, request: Request, store: UsageReader) -> Request:
        """Pass, or raise ``PolicyViolation`` with the figures in its metadata."""
        accumulated = self.recorded(request, store).total_tokens
        estimated = count_all(self.counter, request.messages) if self.mode == "estimated" else 0
        total = accumulated + estimated
        if total > self.max:
            raise PolicyViolation(
                self,
                f"token budget exceeded: {total} / {self.max} tokens ({self.where()})",
                {
                    "accumulated": accumulated,
                    "estimated": estimated,
                    "total": total,
                    "max": self.max,
                    "scope": self.scope,
                },
            )
        return request


class CostBudget(_Scoped):
    """Pass iff the cost recorded in the scope is at most ``max`` (exact ``Decimal``)::

    CostBudget("2.50", scope="user")

    Costs come from each answer's ``metadata.usage.cost`` (the provider's, or ``Pricing``'s).
    """

    def __init__(
        self,
        max: Decimal | str | int,
        scope: str = "conversation",
        window_s: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max = as_price(max, "CostBudget max")
        self.scope = _check_choice(scope, SCOPES, "CostBudget scope")
        self.window_s = _check_window(self.scope, window_s)
        self.clock = clock

    def __repr__(self) -> str:
        window = "" if self.window_s is None else f", window_s={self.window_s:g}"
        return f"CostBudget({str(self.max)!r}, scope={self.scope!r}{window})"

    def check(self, request: Request, store: UsageReader) -> Request:
        """Pass, or raise ``PolicyViolation`` with the amounts (as str) in its metadata."""
        spent = self.recorded(request, store).cost
        if spent > self.max:
            raise PolicyViolation(
                self,
                f"cost budget exceeded: {spent} / {self.max} ({self.where()})",
                {"accumulated": str(spent), "max": str(self.max), "scope": self.scope},
            )
        return request
