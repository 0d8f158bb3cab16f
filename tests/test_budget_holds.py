"""What a model call holds, and when it lets go: from the reservation before the call to
the release once its answer is stored, or its failure; a call kept out by the holds of
others waits for them, one kept out by what was spent is refused at once; a turn killed
mid-call keeps its hold until that call answers; a store that cannot reserve is checked
as before."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors import faults
from otpmem.agents import Agent, AgentHandle, TurnFailed
from otpmem.frozen import FrozenDict
from otpmem.guardrails import CostBudget, PolicyViolation, TokenBudget
from otpmem.kernel import Context, Kernel, guardrails_filter, memory_filter
from otpmem.llm import ChatResponse, ModelError, ScriptedModel, tool_call
from otpmem.memory import HeuristicCounter, count_all
from otpmem.messages import Conv
from otpmem.stores import Hold, LevelDBStore, Limit, MemoryStore, Reservation
from otpmem.stores.postgres import PostgresStore
from tests.budget_support import Unreserved

WAIT = 10.0
ANN, ANN2 = Conv("ann", "c1"), Conv("ann", "c2")
USER = {"role": "user", "content": "go"}


@pytest.fixture(params=["memory", "leveldb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A MemoryStore, then a LevelDBStore."""
    started: Any = (
        MemoryStore.start_link()
        if request.param == "memory"
        else LevelDBStore.start_link(tmp_path / "db")
    )
    yield started
    if started.alive:
        started.stop()


def held(store: Any, conv: Conv = ANN, scope: str = "user") -> int | Decimal | None:
    """What calls in flight hold in a scope now (a reservation that always refuses)."""
    answer = store.reserve(conv, "probe", Hold(), [Limit(scope, "tokens", 0, own=1)], 1.0)
    assert not answer.granted
    return answer.held


def eventually(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until it holds (what an ``abandon``, which does not wait, needs)."""
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        threading.Event().wait(0.005)


class Gate:
    """A model whose calls wait at a gate: ``entered`` is set at each call, ``open`` lets
    them answer with ``tokens`` of usage."""

    blocks = True

    def __init__(self, tokens: int = 100, error: BaseException | None = None) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.tokens = tokens
        self.error = error
        self.sent: list[list[dict[str, Any]]] = []

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Wait at the gate, then answer (or raise ``error``)."""
        self.sent.append([dict(m) for m in messages])
        self.entered.set()
        assert self.gate.wait(WAIT), "the gate never opened"
        if self.error is not None:
            raise self.error
        return ChatResponse(content="ok", usage={"prompt_tokens": self.tokens})


class Watched:
    """A store whose reservations are seen: ``answers``, and ``refused`` once one was."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.answers: list[Reservation] = []
        self.holds: list[Hold] = []
        self.refused = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def reserve(self, conv: Any, hold_id: str, hold: Hold, limits: Any, ttl: float) -> Reservation:
        """The store's answer, noted."""
        answer: Reservation = self._store.reserve(conv, hold_id, hold, limits, ttl)
        self.answers.append(answer)
        self.holds.append(hold)
        if not answer.granted:
            self.refused.set()
        return answer


def start(store: Any, model: Any, budgets: list[Any], conv: Conv = ANN, **options: Any) -> Any:
    """An agent of ``conv`` with ``budgets``."""
    return Agent.start_link(llm=model, memory={"store": store}, user_id=conv.user_id,
                            conversation_id=conv.conversation_id, guardrails=budgets,
                            **options)  # fmt: skip


def running(agent: AgentHandle, text: str = "go") -> tuple[threading.Thread, list[Any]]:
    """Run a turn on a thread: its result (or error) lands in the list."""
    outcome: list[Any] = []

    def turn() -> None:
        try:
            outcome.append(agent.run(text, timeout=WAIT))
        except BaseException as exc:  # the test looks at it
            outcome.append(exc)

    thread = threading.Thread(target=turn)
    thread.start()
    return thread, outcome


def test_a_call_holds_its_sent_tokens_and_answer_until_the_answer_is_stored(store: Any) -> None:
    model = Gate(tokens=100)
    agent = start(store, model, [TokenBudget(1000, scope="user")], system_prompt="be brief")
    try:
        thread, outcome = running(agent)
        assert model.entered.wait(WAIT)
        sent = count_all(HeuristicCounter(), model.sent[0])  # the prompt and the question
        assert held(store) == sent + 512
        assert held(store, ANN2, "user") == sent + 512, "the user's other conversations see it"
        assert held(store, ANN2, "conversation") == 0, "but not their own budgets"
        model.gate.set()
        thread.join(WAIT)
        assert outcome[0].content == "ok"
        assert held(store) == 0 and store.user_usage("ann").total_tokens == 100
    finally:
        agent.stop()


def test_a_failed_model_call_releases_its_hold(store: Any) -> None:
    model = Gate(error=ModelError("down"))
    agent = start(store, model, [TokenBudget(1000, scope="user")])
    try:
        thread, outcome = running(agent)
        assert model.entered.wait(WAIT) and held(store) > 0
        model.gate.set()
        thread.join(WAIT)
        assert isinstance(outcome[0], TurnFailed)
        assert held(store) == 0
        assert agent.alive
    finally:
        agent.stop()


def test_a_tool_round_runs_with_the_answer_s_hold_already_released(store: Any) -> None:
    seen: list[Any] = []

    def look() -> str:
        """Look how much calls in flight hold."""
        seen.append(held(store))
        return "42"

    model = ScriptedModel(
        [{"content": None, "tool_calls": [tool_call("t1", "look")]}, "done"], record=True
    )
    agent = start(store, model, [TokenBudget(10_000, scope="user")], tools=[look])
    try:
        assert agent.run("look").content == "done"
    finally:
        agent.stop()
    assert seen == [0], "the first call's answer was stored: nothing held while the tool ran"
    assert held(store) == 0


@pytest.mark.parametrize("kind", ["memory", "leveldb", "postgres"])
def test_a_turn_killed_mid_call_keeps_its_hold_until_the_call_answers(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        dsn, namespace = (request.getfixturevalue(f) for f in ("postgres_dsn", "pg_namespace"))
        store: Any = PostgresStore.start_link(dsn, namespace=namespace)
    elif kind == "memory":
        store = MemoryStore.start_link()
    else:
        store = LevelDBStore.start_link(tmp_path / "db")
    model = Gate()
    agent = start(store, model, [TokenBudget(1000, scope="user")])
    try:
        thread, _ = running(agent)
        assert model.entered.wait(WAIT)
        hold = held(store)
        assert hold is not None and hold > 0
        faults.kill(agent)
        thread.join(WAIT)
        assert not agent.alive
        # The call it made may still answer (and a write after it land): the hold stays.
        assert held(store) == hold
        model.gate.set()
        eventually(lambda: held(store) == 0, "the killed turn's hold was dropped")
    finally:
        model.gate.set()
        if agent.alive:
            agent.stop()
        store.stop()


def test_a_call_kept_out_by_holds_waits_and_goes_once_they_settle(store: Any) -> None:
    watched = Watched(store)
    first, second = Gate(tokens=100), Gate(tokens=100)
    second.gate.set()
    a = start(watched, first, [TokenBudget(500, scope="user")])
    b = start(watched, second, [TokenBudget(500, scope="user")], ANN2)
    try:
        thread_a, outcome_a = running(a)
        assert first.entered.wait(WAIT)  # holds 512 + its prompt: more than 500
        thread_b, outcome_b = running(b)
        assert watched.refused.wait(WAIT), "b was kept out by a's hold"
        assert not second.entered.is_set()
        first.gate.set()
        thread_a.join(WAIT)
        thread_b.join(WAIT)
        assert outcome_a[0].content == "ok" and outcome_b[0].content == "ok"
        assert store.user_usage("ann").total_tokens == 200
    finally:
        first.gate.set()
        a.stop()
        b.stop()


def test_a_call_still_kept_out_after_wait_s_is_refused_naming_the_holds(store: Any) -> None:
    first = Gate(tokens=100)
    a = start(store, first, [TokenBudget(500, scope="user")])
    b = start(
        store,
        ScriptedModel(["never"], record=True),
        [TokenBudget(500, scope="user", wait_s=0.05)],
        ANN2,
    )
    try:
        thread, _ = running(a)
        assert first.entered.wait(WAIT)
        hold = held(store)
        with pytest.raises(PolicyViolation) as refused:
            b.run("go")
        assert refused.value.reason == (
            f"token budget exceeded: {hold} / 500 tokens (scope: user), {hold} of it held by "
            "calls in flight (waited 0.05 s)"
        )
        assert refused.value.metadata == {
            "accumulated": 0, "estimated": 0, "held": hold, "total": hold, "max": 500,
            "scope": "user",
        }  # fmt: skip
        assert store.get(ANN2) == [], "the refused turn stored nothing"
        first.gate.set()
        thread.join(WAIT)
    finally:
        first.gate.set()
        a.stop()
        b.stop()


def test_a_scope_spent_for_real_is_refused_at_once_as_a_check_would(store: Any) -> None:
    watched = Watched(store)
    spent = {"role": "assistant", "content": "x", "metadata": {"usage": {"prompt_tokens": 90}}}
    store.add(ANN, [spent])
    model = ScriptedModel(["never"], record=True)
    agent = start(watched, model, [TokenBudget(80, scope="user")])
    try:
        with pytest.raises(PolicyViolation) as refused:
            agent.run("go")
        assert refused.value.reason == "token budget exceeded: 90 / 80 tokens (scope: user)"
        assert len(watched.answers) == 1, "no waiting: no hold settling can undo what was spent"
        assert len(model.calls) == 0
    finally:
        agent.stop()


def test_a_cost_budget_s_first_call_holds_an_unknown_cost(store: Any) -> None:
    watched = Watched(store)
    model = ScriptedModel(
        [{"content": "ok", "usage": {"prompt_tokens": 100, "cost": "0.1"}}] * 2, record=True
    )
    agent = start(watched, model, [CostBudget("1.00", scope="user")])
    try:
        agent.run("one")
        agent.run("two")
    finally:
        agent.stop()
    first, second = watched.holds
    assert first.cost is None, "nothing recorded yet to price it"
    assert second.cost == Decimal("0.1") * second.tokens / 100  # 0.001 a token recorded
    assert second.tokens == count_all(HeuristicCounter(), model.calls[1][0]) + 512


def test_a_store_that_cannot_reserve_is_checked_as_before(store: Any) -> None:
    model = ScriptedModel([{"content": "ok", "usage": {"prompt_tokens": 60}}] * 3, record=True)
    agent = start(Unreserved(store), model, [TokenBudget(100, scope="user")])
    try:
        agent.run("one")
        agent.run("two")  # 60 <= 100: passes (checked, nothing held)
        with pytest.raises(PolicyViolation, match="120 / 100"):
            agent.run("three")
        assert len(model.calls) == 2
        assert held(store) == 0
    finally:
        agent.stop()


def test_the_kernel_filter_holds_max_tokens_and_releases_when_the_call_fails(store: Any) -> None:
    watched = Watched(store)
    model = ScriptedModel(["ok", ModelError("down")], record=True)
    guard = guardrails_filter([TokenBudget(10_000)], watched)
    kernel = Kernel(model, [guard, memory_filter(store)])
    kernel.chat([USER], Context(conversation_id=ANN), max_tokens=50)
    sent = count_all(HeuristicCounter(), [USER])
    assert watched.holds[0].tokens == sent + 50, "the call's max_tokens, not 512"
    with pytest.raises(ModelError):
        kernel.chat([USER], Context(conversation_id=ANN))
    assert watched.holds[1].tokens > sent + 512 - 1
    assert held(store) == 0


def test_bad_hold_settings_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="answer_tokens must be an int >= 0"):
        TokenBudget(10, answer_tokens=-1)
    with pytest.raises(ValueError, match="hold_s must be a number of seconds > 0"):
        TokenBudget(10, hold_s=0)
    with pytest.raises(ValueError, match="wait_s must be a number of seconds >= 0"):
        CostBudget("1", wait_s=-1)
    with pytest.raises(ValueError, match="hold_s"):
        CostBudget("1", hold_s=float("inf"))
    with pytest.raises(TypeError, match="counter must be a TokenCounter"):
        CostBudget("1", counter=42)  # type: ignore[arg-type]


def test_a_conversation_s_stored_messages_are_counted_once_not_at_every_call() -> None:
    seen: list[Mapping[str, Any]] = []

    class Spy(HeuristicCounter):
        def count(self, message: Mapping[str, Any]) -> int:
            seen.append(message)
            return super().count(message)

    store = MemoryStore.start_link()
    agent = start(
        store,
        ScriptedModel(lambda messages: "ok", record=True),
        [TokenBudget(10**9, counter=Spy())],
    )
    try:
        for turn in range(5):
            agent.run(f"turn {turn}")
    finally:
        agent.stop()
        store.stop()
    frozen = [m for m in seen if isinstance(m, FrozenDict)]
    assert len(frozen) == len({id(m) for m in frozen}) == 8, "each stored message counted once"
    assert len(seen) - len(frozen) == 5, "and each turn's new message once"
