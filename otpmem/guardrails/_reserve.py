"""Budgets that hold under concurrency: before a model call, every budget's limit is checked
and the call's expected spend held in the store, as one step; once its answer (and so its
usage) is stored, or the call failed, the hold is released.

Checked alone, N concurrent turns of one scope all read the same recorded sum and all
pass. Reserved, each sees what the others hold, so N racing turns spend at most what one
turn after another would: the limit plus one call (as long as no call spends more than
its budget held for it; see ``TokenBudget``). A call the holds of others keep out waits
for them to settle (up to the budget's ``wait_s``, polling), since they may settle lower;
a call its scope's recorded spend keeps out is refused at once, as a checked one is.

A hold belongs to the process that made it: a turn killed mid-call leaves it until the
work the process was waiting on (its model call, its write) has answered, and then its
exit drops it. Anything else (a plain thread that died, a node that vanished) leaves the
hold to expire after ``hold_s``.

A store that cannot reserve (no ``reserve``/``release``/``abandon``, see
``otpmem.stores.ReservationStore``) is checked as before, the weaker guarantee: one turn
after another still stops within the limit plus one call, but concurrent turns of one
scope may each pass the same recorded sum.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import time
import uuid
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol, runtime_checkable

from ..actors import current, sleep
from ..actors.runtime import Process
from ..messages import Conv
from ..protocols import conforms
from ..stores import Hold, Limit, Reservation, ReservationStore
from ._policy import Policy, PolicyViolation, Request, UsageReader, run_policies

logger = logging.getLogger("otpmem.guardrails")

FIRST_PAUSE = 0.002
MAX_PAUSE = 0.05
"""How a call waiting for the holds of others polls: after 2 ms, doubling, at most 50 ms."""


def _new_prefix() -> None:
    global _prefix
    _prefix = uuid.uuid4().hex


_prefix = ""
_new_prefix()
os.register_at_fork(after_in_child=_new_prefix)  # a forked child draws its own
_serial = itertools.count()


def hold_id() -> str:
    """A new hold id, unique across processes and nodes: this process's random prefix and a
    count (a uuid4 per call costs ten times more)."""
    return f"{_prefix[:24]}.{next(_serial)}"


@dataclass(frozen=True)
class Claim:
    """What one budget asks of a call's reservation: the ``limit`` the store checks, what
    it ``hold``s for the call, how long the hold lasts (``hold_s``) and how long the call
    may wait for others' holds to settle (``wait_s``)."""

    budget: Budget
    limit: Limit
    hold: Hold
    hold_s: float
    wait_s: float

    def spent(self, answer: Reservation) -> bool:
        """Whether what the scope recorded refuses the call, whatever others hold."""
        return answer.recorded + self.limit.own > self.limit.max


@runtime_checkable
class Budget(Policy, Protocol):
    """A policy that can also be reserved: ``claim`` says what to check and hold (raising
    ``PolicyViolation`` when it cannot tell whose spend it is), ``refusal`` what to tell
    the caller when the store refused it."""

    def claim(self, request: Request, store: UsageReader) -> Claim:
        """The limit and the hold of this budget for the call ``request`` is about to make."""

    def refusal(self, claim: Claim, answer: Reservation) -> PolicyViolation:
        """The violation of a refused reservation."""


class Held:
    """A call's hold, released once: by ``release``, or by its process's exit."""

    __slots__ = ("cleanup", "hold_id", "process", "store")

    def __init__(self, store: ReservationStore, hold_id: str) -> None:
        self.store: ReservationStore | None = store
        self.hold_id = hold_id
        self.process = current()
        self.cleanup = None
        if self.process is not None:
            # Registered before the hold is asked for: a kill during the request still
            # drops it, once the request has answered.
            self.cleanup = functools.partial(_abandon_on_exit, self.process, store, hold_id)
            self.process.cleanups.append(self.cleanup)

    def release(self) -> None:
        """Drop the hold (best effort: one the store cannot drop now expires)."""
        store = self.store
        if store is None:
            return
        if self.process is not None and self.process.killed:
            return  # the exit drops it, once what the process waits on has answered
        self.forget()
        try:
            store.release(self.hold_id)
        except Exception as exc:
            logger.warning("budget hold %s was not released (%s); it expires", self.hold_id, exc)

    def forget(self) -> None:
        """Nothing left to release: drop the exit cleanup."""
        self.store = None
        cleanup, self.cleanup = self.cleanup, None
        if cleanup is not None and self.process is not None:
            with suppress(ValueError):
                self.process.cleanups.remove(cleanup)


def _abandon_on_exit(process: Process, store: ReservationStore, hold_id: str) -> None:
    # A write (or the call) the kill cut short may still land: drop the hold only after it.
    in_flight = process.abandoned
    if in_flight is None:
        store.abandon(hold_id)
    else:
        in_flight.when_answered(functools.partial(store.abandon, hold_id))


@dataclass
class Admitted:
    """A model call the guardrails let through: the request to send, and its hold (None:
    nothing held). ``release`` once the answer is stored or the call failed."""

    request: Request
    held: Held | None = None

    def release(self) -> None:
        """Release the call's hold, if it holds one."""
        held, self.held = self.held, None
        if held is not None:
            held.release()


class Guardrails:
    """Policies over one store, sorted once: which are budgets, and whether the store can
    hold them (a protocol check that fails costs microseconds: not one per model call)::

        guard = Guardrails([TokenBudget(10_000, scope="user")], store)
        admitted = guard.admit(Request.of(messages, conv))   # PolicyViolation, or passed
        ...                                                   # the call, its answer stored
        admitted.release()
    """

    __slots__ = ("budgets", "holds", "policies", "store")

    def __init__(self, policies: Sequence[Policy], store: UsageReader) -> None:
        self.policies = tuple(policies)
        self.store = store
        holds = store if conforms(store, ReservationStore) else None
        self.holds: ReservationStore | None = holds  # type: ignore[assignment]
        self.budgets = {id(p) for p in self.policies if holds is not None and conforms(p, Budget)}

    def admit(self, request: Request) -> Admitted:
        """Run every policy in order, as ``check_guardrails`` does, but reserve the budgets:
        their limits are checked and the call's spend held in one store request (which may
        wait for other calls' holds); a store that cannot reserve checks them instead."""
        if not self.policies:
            return Admitted(request)
        conv = request.conv
        if not self.budgets or conv is None or request.user_id != conv.user_id:
            return Admitted(run_policies(request, self.policies, self.store))
        claims: list[Claim] = []
        budgets = self.budgets

        def claim(policy: Policy, asked: Request, reads: UsageReader) -> Request:
            if id(policy) in budgets:
                claims.append(policy.claim(asked, reads))  # type: ignore[attr-defined]
                return asked
            return policy.check(asked, reads)

        passed = run_policies(request, self.policies, self.store, claim)
        if not claims:
            return Admitted(passed)
        assert passed.conv is not None and self.holds is not None
        return Admitted(passed, reserve(self.holds, passed.conv, claims))


def admit(request: Request, policies: Sequence[Policy], store: UsageReader) -> Admitted:
    """``Guardrails(policies, store).admit(request)``: check, and hold the budgets."""
    return Guardrails(policies, store).admit(request)


def reserve(store: ReservationStore, conv: Conv, claims: Sequence[Claim]) -> Held:
    """Hold the claims' spend for one call in ``conv``, waiting while others' holds keep
    it out; the first refusing budget's ``PolicyViolation`` once no wait can help."""
    costs = [c.hold.cost for c in claims]
    known = [cost for cost in costs if cost is not None]
    hold = Hold(
        max(c.hold.tokens for c in claims),
        max(known, default=Decimal(0)) if len(known) == len(costs) else None,
    )
    limits = [c.limit for c in claims]
    ttl = max(c.hold_s for c in claims)
    deadline = time.monotonic() + max(c.wait_s for c in claims)
    held = Held(store, hold_id())
    pause = FIRST_PAUSE
    try:
        while True:
            answer = store.reserve(conv, held.hold_id, hold, limits, ttl)
            if answer.granted:
                return held
            refused = claims[answer.refused]  # type: ignore[index]
            remaining = deadline - time.monotonic()
            if refused.spent(answer) or remaining <= 0:
                held.forget()  # a refused reservation holds nothing
                raise refused.budget.refusal(refused, answer)
            sleep(min(pause, remaining))
            pause = min(pause * 2, MAX_PAUSE)
    except PolicyViolation:
        raise
    except Exception:
        held.release()  # the store failed mid-request: the hold may have been taken
        raise


__all__ = ["Admitted", "Budget", "Claim", "Guardrails", "Held", "admit", "reserve"]
