"""An agent killed while a write of its turn is in flight keeps its conversation until
that write has answered: a retry of the turn then reads it back instead of storing its
step again, and no other turn reads the conversation without it.

The write is held in flight for real: at the store (a MemoryStore or LevelDBStore whose
fault plan holds the add), or in PostgreSQL (the add waits on a table lock another
connection holds, on the blocking pool). The model answers differently at each call, as a
real one does, so a retry that asked it again would answer with what the store does not
hold.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from otpmem.actors import ServerExited, faults
from otpmem.actors.faults import FaultPlan
from otpmem.agents import Agent, AgentHandle, ConversationBusy
from otpmem.agents._writers import writers
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.stores.postgres import PostgresStore
from tests.support import started_thread
from tests.test_postgres_store import read_waits_on_a_lock

WAIT = 10.0
CONV = Conv("alice", "killed-mid-write")


class Answers:
    """A model that answers "answer 1", "answer 2", ...: never the same twice."""

    def __init__(self, on_first: Callable[[], None] = lambda: None) -> None:
        self.calls = itertools.count(1)
        self.asked = 0
        self.on_first = on_first

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> str:
        n = next(self.calls)
        self.asked = n
        if n == 1:
            self.on_first()
        return f"answer {n}"


class HeldWrite:
    """A store on which the turn's answer (its step 1) is held in flight: ``hold`` as the
    model answers, ``in_flight`` once the write waits, ``release`` to let it land."""

    def __init__(
        self,
        store: Any,
        hold: Callable[[], None],
        in_flight: Callable[[], bool],
        release: Callable[[], None],
    ) -> None:
        self.store, self.hold, self.in_flight, self.release = store, hold, in_flight, release


def holding_the_answer(held: threading.Event) -> Callable[[Any], bool]:
    """A fault plan's predicate: the add of turn t1's answer (its step 1), noted in ``held``."""

    def holding(message: Any) -> bool:
        if isinstance(message, tuple) and message[:1] == ("add",) and "turn:t1:1" in message:
            held.set()
            return True
        return False

    return holding


@pytest.fixture(params=["memory", "leveldb", "postgres"])
def held_write(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HeldWrite]:
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        namespace = request.getfixturevalue("pg_namespace")
        store = PostgresStore.start_link(dsn, namespace=namespace)
        blocker = psycopg.connect(dsn)
        try:
            yield HeldWrite(
                store,
                # Reads go on; the answer's insert waits for the lock, on the blocking pool.
                lambda: blocker.execute(f"LOCK TABLE {namespace}.messages IN EXCLUSIVE MODE"),
                lambda: read_waits_on_a_lock(dsn),
                blocker.commit,
            )
        finally:
            blocker.close()
            store.stop()
        return

    held, release = threading.Event(), threading.Event()
    plan = FaultPlan().hold_when(holding_the_answer(held), release, timeout=WAIT)
    if request.param == "memory":
        store = MemoryStore.start_link(faults=plan)
    else:
        store = LevelDBStore.start_link(tmp_path / "db", faults=plan)
    try:
        yield HeldWrite(store, lambda: None, lambda: held.wait(WAIT), release.set)
    finally:
        release.set()
        store.stop()


def test_a_retry_waits_for_the_answer_a_killed_attempt_had_in_flight(
    held_write: HeldWrite, agents: list[AgentHandle]
) -> None:
    store = held_write.store
    model = Answers(on_first=held_write.hold)

    def agent(**options: Any) -> AgentHandle:
        started = Agent.start(
            llm=ScriptedModel(model, blocks=False),
            memory=DefaultProvider(store),
            conversation_id=CONV.conversation_id,
            user_id=CONV.user_id,
            **options,
        )
        agents.append(started)
        return started

    first = agent()
    caller, outcome = started_thread(lambda: first.run("q", turn_id="t1"))
    assert held_write.in_flight(), "the answer's write never got under way"
    faults.kill(first)  # its answer is in flight: at the store, or in PostgreSQL
    caller.join(WAIT)
    assert outcome and isinstance(outcome[0], ServerExited)

    # Until that write answers, the conversation is still the killed turn's.
    with pytest.raises(ConversationBusy):
        agent(on_busy="refuse", name="refuser").run("q", turn_id="t1", timeout=WAIT)
    assert model.asked == 1

    retry = agent()
    answered: list[Any] = []
    retrying = threading.Thread(target=lambda: answered.append(retry.run("q", turn_id="t1")))
    retrying.start()
    held_write.release()
    retrying.join(WAIT)
    assert answered, "the retry never ended"
    result = answered[0]
    stored = store.get(CONV)
    assert [m["content"] for m in stored] == ["q", "answer 1"]
    assert result.content == "answer 1" and result.messages == stored
    assert model.asked == 1, "the retry read the answer back; it did not ask again"
    assert writers.held() == 0


@contextlib.contextmanager
def killed_mid_write(agents: list[AgentHandle]) -> Iterator[tuple[Any, threading.Event]]:
    """A MemoryStore holding turn t1's answer, and the agent that sent it killed meanwhile:
    (the store, the event that lets the answer land)."""
    held, release = threading.Event(), threading.Event()
    plan = FaultPlan().hold_when(holding_the_answer(held), release, timeout=WAIT)
    store = MemoryStore.start_link(faults=plan)
    try:
        agent = Agent.start(
            llm=ScriptedModel(Answers(), blocks=False),
            memory=DefaultProvider(store),
            conversation_id=CONV.conversation_id,
            user_id=CONV.user_id,
        )
        agents.append(agent)
        caller, outcome = started_thread(lambda: agent.run("q", turn_id="t1"))
        assert held.wait(WAIT)
        faults.kill(agent)
        caller.join(WAIT)
        assert outcome and isinstance(outcome[0], ServerExited)
        assert not writers.acquire(CONV, 0), "kept while its write is queued"
        yield store, release
    finally:
        release.set()
        if store.alive:
            store.stop()


def test_the_claim_is_freed_when_the_store_dies_with_the_write_still_queued(
    agents: list[AgentHandle],
) -> None:
    with killed_mid_write(agents) as (store, _):
        faults.kill(store)  # the queued call fails with the store: the write is over
        assert writers.acquire(CONV, WAIT)
        writers.release(CONV)


def test_a_write_that_never_answers_holds_the_conversation_at_most_the_linger_limit(
    agents: list[AgentHandle], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from otpmem.agents import _writers

    monkeypatch.setattr(_writers, "LINGER_LIMIT", 0.3)
    with killed_mid_write(agents):
        assert writers.acquire(CONV, WAIT), "taken over once the limit passed"
        assert "did not answer within 0.3 s" in caplog.text
        writers.release(CONV)
    assert writers.held() == 0, "the late answer frees nothing that is not its own"


def test_an_answer_after_the_wait_ended_is_heard_by_when_answered() -> None:
    from otpmem.actors.runtime import OneShot

    heard: list[str] = []
    in_time = OneShot()
    in_time.set(1)
    in_time.when_answered(lambda: heard.append("in time: at once"))
    late = OneShot()
    assert not late.wait(0)  # ended unanswered
    late.when_answered(lambda: heard.append("late: on the answer"))
    assert heard == ["in time: at once"]
    assert not late.set(2)  # nobody takes it, but the work behind it is over
    assert heard == ["in time: at once", "late: on the answer"]
    failed = OneShot()
    assert not failed.wait(0)
    assert not failed.fail(RuntimeError("lost"))
    failed.when_answered(lambda: heard.append("late, registered after: at once"))
    assert heard[-1] == "late, registered after: at once"
