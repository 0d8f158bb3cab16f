"""Racing turns for the budget tests: a model that answers only once every racing turn is
either waiting for it or kept out by the holds of others (the most calls in flight at
once the budgets allow, every round), and workers that run turns until their budget
refuses them for good."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from otpmem.agents import Agent, AgentHandle
from otpmem.guardrails import PolicyViolation
from otpmem.llm import ChatResponse
from otpmem.messages import Conv

WAIT = 30.0


class Race:
    """Who is where: ``live`` workers, ``inside`` a model call, ``waiting`` for holds.

    A model call answers once the race is quiet (every live worker is inside a call or
    waiting), with every call of its round: no call answers while another turn could
    still be let in beside it.
    """

    def __init__(self, workers: int, linger: float | None = None) -> None:
        self.cond = threading.Condition()
        self.linger = linger  # holds may outlive their calls (a store crashed): retry after
        self.live = workers
        self.inside = 0
        self.waiting = 0
        self.rounds = 0  # rounds answered
        self.changes = 0  # turns finished: what a waiting worker waits for
        self.most_inside = 0

    def _open_if_quiet(self) -> None:
        if self.inside and self.inside + self.waiting >= self.live:
            self.rounds += 1
            self.cond.notify_all()

    def in_model(self) -> None:
        """A model call: wait for its round to be answered."""
        with self.cond:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            mine = self.rounds
            self._open_if_quiet()
            answered = self.cond.wait_for(lambda: self.rounds > mine, WAIT)
            self.inside -= 1
        assert answered, "the race never went quiet"

    def kept_out(self) -> None:
        """A worker the holds of others refused: wait for a turn to finish (or, when holds
        may linger, at most ``linger`` s)."""
        with self.cond:
            self.waiting += 1
            seen = self.changes
            self._open_if_quiet()
            changed = self.cond.wait_for(lambda: self.changes > seen, self.linger or WAIT)
            self.waiting -= 1
        assert changed or self.linger, "no turn finished while a worker waited for holds"

    def turn_done(self) -> None:
        """A turn finished: its hold is released."""
        with self.cond:
            self.changes += 1
            self.cond.notify_all()

    def finished(self) -> None:
        """A worker stopped for good."""
        with self.cond:
            self.live -= 1
            self.changes += 1
            self._open_if_quiet()
            self.cond.notify_all()


class RacingModel:
    """A ChatModel whose calls wait for their round of the race, then report ``usage(n)``
    for the n-th call (tokens; cost at ``price`` a token, when given)."""

    blocks = True  # off the schedulers: its calls wait for each other

    def __init__(
        self, race: Race, usage: Callable[[int], int], price: Decimal | None = None
    ) -> None:
        self.race = race
        self.usage = usage
        self.price = price
        self.lock = threading.Lock()
        self.calls = 0

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Wait for the round, then answer "ok" with this call's usage."""
        with self.lock:
            n = self.calls
            self.calls += 1
        self.race.in_model()
        tokens = self.usage(n)
        usage: dict[str, Any] = {"prompt_tokens": tokens, "completion_tokens": 0}
        if self.price is not None:
            usage["cost"] = str(self.price * tokens)
        return ChatResponse(content="ok", usage=usage)


@dataclass
class Outcome:
    """What a race did: turns answered, refusals by holds, the most calls in flight."""

    answered: int = 0
    kept_out: int = 0
    most_inside: int = 0
    errors: list[BaseException] = field(default_factory=list)


def race_agents(
    store: Any,
    budgets: Callable[[], list[Any]],
    agents: int,
    usage: Callable[[int], int],
    price: Decimal | None = None,
    user_id: str | None = None,
    retry: tuple[type[BaseException], ...] = (),
    linger: float | None = None,
    during: Callable[[], None] = lambda: None,
) -> tuple[str, Outcome]:
    """Race ``agents`` agents of one user (a conversation each) over ``store``, each with
    ``budgets()``, running turns until refused for good; the user and what happened.
    ``retry``: errors after which a worker runs its turn again (a store restarting);
    ``during`` runs once every worker has started (a fault to inject)."""
    user = user_id or f"racer-{uuid.uuid4().hex[:8]}"
    race = Race(agents, linger)
    model = RacingModel(race, usage, price)
    outcome = Outcome()
    lock = threading.Lock()
    handles: list[AgentHandle] = []
    try:
        for i in range(agents):
            agent = Agent.start_link(
                llm=model,
                memory={"store": store},
                user_id=user,
                conversation_id=f"c{i}",
                guardrails=budgets(),
            )
            handles.append(agent)

        def work(agent: AgentHandle) -> None:
            try:
                while True:
                    try:
                        agent.run("go", timeout=WAIT)
                    except PolicyViolation as refused:
                        if "held" not in refused.metadata:
                            return  # the scope spent its budget: refused for good
                        with lock:
                            outcome.kept_out += 1
                        race.kept_out()
                        continue
                    except retry:
                        race.turn_done()
                        continue
                    with lock:
                        outcome.answered += 1
                    race.turn_done()
            except BaseException as exc:  # reported by the test
                outcome.errors.append(exc)
            finally:
                race.finished()

        threads = [threading.Thread(target=work, args=(a,)) for a in handles]
        for thread in threads:
            thread.start()
        during()
        for thread in threads:
            thread.join(WAIT * 2)
        assert not any(t.is_alive() for t in threads), "a racing worker never finished"
    finally:
        for handle in handles:
            if handle.alive:
                handle.stop()
    outcome.most_inside = race.most_inside
    return user, outcome


def conv_of(user: str, i: int) -> Conv:
    """The conversation of racing agent ``i``."""
    return Conv(user, f"c{i}")


class Unreserved:
    """A store's face without reservations: what a ChatMemory of one's own that does not
    hold budgets gives the guardrails (they check, and hold nothing)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in ("reserve", "release", "abandon"):
            raise AttributeError(name)
        return getattr(self._store, name)
