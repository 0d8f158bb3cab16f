"""Token and cost budgets over the usage a store records (seed 004's, with usage real).

PhoenixAI.Store's budgets summed a ``token_count`` nothing filled in, and kept time windows
in an unsupervised ETS table; here the store records every answer's usage in the same
write as the message, so a budget reads sums that survive crashes and restarts::

    TokenBudget(50_000, scope="user")
    TokenBudget(8_000, scope="conversation", mode="estimated")
    TokenBudget(100_000, scope="time_window", window_s=3600)     # a sliding hour
    CostBudget("5.00", scope="user")

Against a store that reserves (every otpmem store), an agent's or a kernel's budgets hold
under concurrency: before each model call they check and hold the call's expected spend in
the store, as one step (``otpmem.guardrails.admit``), and the hold goes once the answer is
stored. A call is held at what its budget expects it to spend:

- tokens: the tokens of what is sent (the budget's ``counter``) plus ``answer_tokens``
  (512), or the call's ``max_tokens`` when the request says it (``metadata["max_tokens"]``,
  which the kernel's filter sets from the call's options);
- cost: those tokens at the scope's recorded cost per token; with nothing recorded yet, an
  unknown cost, so the scope's first call goes alone and the next are estimated from it.

N racing turns then spend at most the limit plus one call: exactly so while no call
spends more than it held; a call that does lets through at most its excess.
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
from ..stores import Hold, Limit, Reservation, Usage
from ._policy import PolicyViolation, Request, UsageReader, counted
from ._reserve import Claim

SCOPES = ("conversation", "user", "time_window")
MODES = ("accumulated", "estimated")
ANSWER_TOKENS = 512
"""The tokens a budget holds for a call's answer when the call names no ``max_tokens``."""
HOLD_S = 300.0
"""How long a hold outlives a call that never released it (a turn's default timeout)."""
WAIT_S = 30.0
"""How long a call waits for other calls' holds to settle before it is refused."""


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


def _check_seconds(value: object, what: str, zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        least = ">= 0" if zero else "> 0"
        raise ValueError(f"{what} must be a number of seconds {least}, got {short_repr(value)}")
    return float(value)


def _check_tokens(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} must be an int >= 0 (tokens), got {short_repr(value)}")
    return value


class _Scoped:
    """What both budgets share: the scope, its window, reading the recorded usage, and
    what a call holds."""

    scope: str
    window_s: float | None
    clock: Callable[[], float]
    counter: TokenCounter
    answer_tokens: int
    hold_s: float
    wait_s: float

    def _holding(
        self, answer_tokens: object, hold_s: object, wait_s: object, counter: object = None
    ) -> None:
        if counter is not None and not isinstance(counter, TokenCounter):
            raise TypeError(f"counter must be a TokenCounter, got {short_repr(counter)}")
        self.counter = counter or DEFAULT_COUNTER
        self.answer_tokens = _check_tokens(answer_tokens, "answer_tokens")
        self.hold_s = _check_seconds(hold_s, "hold_s")
        self.wait_s = _check_seconds(wait_s, "wait_s", zero=True)

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

    def limit_scope(self, request: Request) -> tuple[str, float | None]:
        """Where a reservation counts this budget's spend: the store's scope and since
        when; a violation if its ids are missing (as ``recorded``)."""
        if self.scope == "conversation":
            if request.conv is None:
                raise self.refuse("the request names no conversation", {"scope": self.scope})
            return "conversation", None
        if self.scope == "user":
            if request.user_id is None:
                raise self.refuse("the request names no user", {"scope": self.scope})
            return "user", None
        assert self.window_s is not None
        since = self.clock() - self.window_s
        if request.user_id is not None:
            return "user", since
        if request.conv is not None:
            return "conversation", since
        raise self.refuse("the request names no user and no conversation", {"scope": self.scope})

    def call_tokens(self, request: Request, sent: int) -> int:
        """The tokens a call is expected to take: what it sends, and its answer."""
        most = request.metadata.get("max_tokens")
        answer = most if type(most) is int and most >= 0 else self.answer_tokens
        return sent + answer

    def in_flight(self, claim: Claim, answer: Reservation) -> str:
        """What holds of other calls kept a refused call out, in words."""
        waited = f"(waited {claim.wait_s:g} s)"
        if answer.held is None:
            return f"and a call of unknown cost is in flight {waited}"
        return f"{answer.held} of it held by calls in flight {waited}"

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

    Reserved (see the module docstring), a call holds its sent tokens plus
    ``answer_tokens`` for ``hold_s`` s at most, and waits up to ``wait_s`` s for the holds
    of other calls to settle before it is refused.
    """

    def __init__(
        self,
        max: int,
        scope: str = "conversation",
        mode: str = "accumulated",
        window_s: float | None = None,
        counter: TokenCounter | None = None,
        *,
        answer_tokens: int = ANSWER_TOKENS,
        hold_s: float = HOLD_S,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if type(max) is not int or max < 0:
            raise ValueError(f"TokenBudget max must be an int >= 0 (tokens), got {short_repr(max)}")
        self.max = max
        self.scope = _check_choice(scope, SCOPES, "TokenBudget scope")
        self.mode = _check_choice(mode, MODES, "TokenBudget mode")
        self.window_s = _check_window(self.scope, window_s)
        self._holding(answer_tokens, hold_s, wait_s, counter)
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

    def claim(self, request: Request, store: UsageReader) -> Claim:
        """The limit a reservation checks for this budget, and the tokens it holds."""
        scope, since = self.limit_scope(request)
        sent = counted(store, self.counter, request.messages)
        own = sent if self.mode == "estimated" else 0
        hold = Hold(self.call_tokens(request, sent))
        return Claim(self, Limit(scope, "tokens", self.max, own, since), hold, self.hold_s,
                     self.wait_s)  # fmt: skip

    def refusal(self, claim: Claim, answer: Reservation) -> PolicyViolation:
        """The violation of a refused reservation, with the figures in its metadata."""
        accumulated, estimated = answer.recorded, claim.limit.own
        metadata: dict[str, Any] = {"accumulated": accumulated, "estimated": estimated}
        total = accumulated + estimated
        reason = f"token budget exceeded: {total} / {self.max} tokens ({self.where()})"
        if not claim.spent(answer):
            held = answer.held or 0
            total += held
            metadata["held"] = held
            reason = (
                f"token budget exceeded: {total} / {self.max} tokens ({self.where()}), "
                f"{self.in_flight(claim, answer)}"
            )
        metadata.update(total=total, max=self.max, scope=self.scope)
        return PolicyViolation(self, reason, metadata)


class CostBudget(_Scoped):
    """Pass iff the cost recorded in the scope is at most ``max`` (exact ``Decimal``)::

    CostBudget("2.50", scope="user")

    Costs come from each answer's ``metadata.usage.cost`` (the provider's, or ``Pricing``'s).
    Reserved, a call holds what its tokens (counted as ``TokenBudget`` counts them, with
    ``counter`` and ``answer_tokens``) cost at the scope's recorded cost per token.
    """

    def __init__(
        self,
        max: Decimal | str | int,
        scope: str = "conversation",
        window_s: float | None = None,
        *,
        counter: TokenCounter | None = None,
        answer_tokens: int = ANSWER_TOKENS,
        hold_s: float = HOLD_S,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max = as_price(max, "CostBudget max")
        self.scope = _check_choice(scope, SCOPES, "CostBudget scope")
        self.window_s = _check_window(self.scope, window_s)
        self._holding(answer_tokens, hold_s, wait_s, counter)
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

    def claim(self, request: Request, store: UsageReader) -> Claim:
        """The limit a reservation checks for this budget, and the cost it holds: the
        call's tokens at the scope's recorded price, unknown while nothing is recorded."""
        scope, since = self.limit_scope(request)
        recorded = self.recorded(request, store)
        tokens = self.call_tokens(request, counted(store, self.counter, request.messages))
        cost = None
        if recorded.total_tokens > 0:
            cost = recorded.cost * tokens / recorded.total_tokens
        limit = Limit(scope, "cost", self.max, Decimal(0), since)
        return Claim(self, limit, Hold(tokens, cost), self.hold_s, self.wait_s)

    def refusal(self, claim: Claim, answer: Reservation) -> PolicyViolation:
        """The violation of a refused reservation, with the amounts (as str) in its metadata."""
        spent = answer.recorded
        metadata: dict[str, Any] = {
            "accumulated": str(spent),
            "max": str(self.max),
            "scope": self.scope,
        }
        if claim.spent(answer):
            return PolicyViolation(
                self, f"cost budget exceeded: {spent} / {self.max} ({self.where()})", metadata
            )
        held = answer.held
        metadata["held"] = None if held is None else str(held)
        total = spent if held is None else spent + held
        return PolicyViolation(
            self,
            f"cost budget exceeded: {total} / {self.max} ({self.where()}), "
            f"{self.in_flight(claim, answer)}",
            metadata,
        )
