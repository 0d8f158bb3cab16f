"""Budgets hold under concurrency: racing turns of one scope, on every store, spend at most
what one turn after another would, the limit plus one call, and no less than the limit
(nobody is refused while the budget has room); without reservations the same race
overspends, which is what a store that cannot hold budgets gives.

The race is the worst one the budgets allow: a model call answers only once every other
racing turn is in a model call too or kept out by holds (``tests.budget_support``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otpmem.actors import faults
from otpmem.agents import TurnFailed
from otpmem.guardrails import CostBudget, PolicyViolation, TokenBudget
from otpmem.kernel import Context, Kernel, guardrails_filter, memory_filter
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.stores.postgres import PostgresStore
from otpmem.supervisors import Supervisor
from tests.budget_support import Race, RacingModel, Unreserved, race_agents

PRICE = Decimal("0.001")


@pytest.fixture(params=["memory", "leveldb", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """One store of each kind for the whole property (each example races its own user)."""
    if request.param == "memory":
        started: Any = MemoryStore.start_link()
    elif request.param == "leveldb":
        started = LevelDBStore.start_link(tmp_path / "db")
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        started = PostgresStore.start_link(dsn, namespace=request.getfixturevalue("pg_namespace"))
    yield started
    started.stop()


def budget_of(kind: str, limit: int, scope: str, mode: str) -> Callable[[], list[Any]]:
    """A fresh budget for each agent (wait_s=0: the race waits for holds itself)."""
    window = {"window_s": 3600.0} if scope == "time_window" else {}
    if kind == "tokens":
        return lambda: [TokenBudget(limit, scope=scope, mode=mode, wait_s=0, **window)]
    return lambda: [CostBudget(PRICE * limit, scope=scope, wait_s=0, **window)]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    agents=st.integers(2, 10),
    limit=st.integers(0, 1500),
    usages=st.lists(st.integers(1, 300), min_size=1, max_size=6),
    kind=st.sampled_from(["tokens", "cost"]),
    scope=st.sampled_from(["user", "time_window"]),
    mode=st.sampled_from(["accumulated", "estimated"]),
)
def test_racing_turns_never_spend_past_the_limit_plus_one_call(
    store: Any, agents: int, limit: int, usages: list[int], kind: str, scope: str, mode: str
) -> None:
    mode = mode if kind == "tokens" else "accumulated"
    price = PRICE if kind == "cost" else None
    user, outcome = race_agents(
        store, budget_of(kind, limit, scope, mode), agents, lambda n: usages[n % len(usages)], price
    )
    assert outcome.errors == []
    spent = store.user_usage(user)
    one_call = max(usages)
    if kind == "tokens":
        assert spent.total_tokens <= limit + one_call
        if mode == "accumulated":
            assert spent.total_tokens > limit, "refused while the budget had room"
    else:
        assert spent.cost <= PRICE * (limit + one_call)
        assert spent.cost > PRICE * limit, "refused while the budget had room"


def test_without_reservations_the_same_race_overspends() -> None:
    # What a ChatMemory of one's own without reserve/release/abandon gets: budgets check,
    # hold nothing, and every racing turn passes the same recorded sum.
    store = MemoryStore.start_link()
    try:
        user, outcome = race_agents(
            Unreserved(store), lambda: [TokenBudget(1000, scope="user")], 16, lambda n: 100
        )
        assert outcome.errors == [] and outcome.most_inside == 16
        assert store.user_usage(user).total_tokens >= 1600  # past 1000 + one call
        reserved, fair = race_agents(
            store, lambda: [TokenBudget(1000, scope="user", wait_s=0)], 16, lambda n: 100
        )
        assert store.user_usage(reserved).total_tokens == 1100
        assert fair.answered == 11 and fair.kept_out > 0
    finally:
        store.stop()


def test_a_cost_budget_s_first_call_goes_alone_then_calls_are_held_at_its_price() -> None:
    store = MemoryStore.start_link()
    try:
        user, outcome = race_agents(
            store, lambda: [CostBudget("1.00", scope="user", wait_s=0)], 16, lambda n: 100, PRICE
        )
        assert outcome.errors == []
        assert store.user_usage(user).cost == Decimal("1.1")  # not 1.60: the limit + one call
        # Nothing recorded to price the first call: it went alone. Then each was held at
        # (sent + 512 tokens) x 0.001, so two fit beside the 0.10 already spent, not ten.
        assert outcome.most_inside == 2
    finally:
        store.stop()


@pytest.mark.parametrize("kind", ["memory", "leveldb"])
def test_holds_outlast_a_crash_of_the_supervised_store(kind: str, tmp_path: Path) -> None:
    name = f"racing-{kind}"
    spec = (
        MemoryStore.child_spec(name)
        if kind == "memory"
        else LevelDBStore.child_spec(tmp_path / "db", name)
    )
    sup = Supervisor.start_link([spec])
    store: Any = (MemoryStore if kind == "memory" else LevelDBStore).named(name)
    crashed: list[int] = []

    def usage(n: int) -> int:
        if n == 3 and not crashed:  # calls are in flight: their holds are in the ledger
            crashed.append(n)
            faults.kill(store)
        return 100

    try:
        user, outcome = race_agents(
            store,
            lambda: [TokenBudget(1000, scope="user", wait_s=0, hold_s=2.0)],
            8,
            usage,
            retry=(TurnFailed,),
            linger=0.2,
        )
        assert crashed and outcome.errors == []
        assert 1000 < store.user_usage(user).total_tokens <= 1100
    finally:
        sup.stop()


def test_kernel_calls_racing_on_one_conversation_hold_its_budget() -> None:
    store = MemoryStore.start_link()
    conv = Conv("ann", "shared")
    workers = 8
    race = Race(workers)
    kernel = Kernel(
        RacingModel(race, lambda n: 100),
        [guardrails_filter([TokenBudget(1000, wait_s=0)], store), memory_filter(store)],
    )
    errors: list[BaseException] = []
    asked = [{"role": "user", "content": "go"}]

    def work() -> None:
        try:
            while True:
                try:
                    kernel.invoke(asked, Context(conversation_id=conv))
                except PolicyViolation as refused:
                    if "held" not in refused.metadata:
                        return
                    race.kept_out()
                    continue
                race.turn_done()
        except BaseException as exc:
            errors.append(exc)
        finally:
            race.finished()

    threads = [threading.Thread(target=work) for _ in range(workers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert errors == []
        assert store.usage(conv).total_tokens == 1100
    finally:
        store.stop()
