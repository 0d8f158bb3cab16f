"""Agents are identities: handles follow restarts, known agents are activated on demand.

The user's path throughout: the handle ``start_agent``/``define_agent``/``Agent.start_link``
gave, held across kills, crashes, idle stops, a burst that makes the agents' supervisor
give up, and racing callers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import otpmem
from otpmem import aio
from otpmem.actors import NoProcess, faults, whereis
from otpmem.agents import (
    IDLE_EXIT,
    Agent,
    AgentAlreadyStarted,
    AgentHandle,
    agent_name,
)
from otpmem.app import AGENTS_NAME, APP_NAME
from otpmem.llm import ScriptedModel
from otpmem.messages import Conv
from otpmem.stores import DEFAULT_STORE_NAME, MemoryStore
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorEvent, SupervisorHandle
from tests.support import WAIT, Trace


def echo(messages: list[dict[str, Any]], tools: Any) -> str:
    return f"saw:{len(messages)}"


def model() -> ScriptedModel:
    return ScriptedModel(echo, usage=False)


@pytest.fixture
def app() -> Iterator[Trace]:
    """The application, running for the test; what its supervisors report."""
    assert whereis(APP_NAME) is None and whereis(DEFAULT_STORE_NAME) is None
    trace = Trace()
    with otpmem.running(listeners=[trace]):
        yield trace
    assert whereis(APP_NAME) is None


def contents(agent: AgentHandle) -> list[Any]:
    return [m["content"] for m in agent.messages()]


# -- a handle follows its agent -----------------------------------------------------------


def test_a_held_handle_follows_its_agent_across_a_kill(app: Trace) -> None:
    agent = otpmem.start_agent(llm=model(), conversation_id="kept")
    assert agent.run("one").content == "saw:1"
    first = agent.pid
    faults.kill(agent)
    # No wait for the restart: the call itself waits for it.
    assert agent.run("two").content == "saw:3"
    assert agent.pid != first and agent.alive
    assert contents(agent) == ["one", "saw:1", "two", "saw:3"]


def test_a_handle_made_after_the_crash_still_waits_for_the_restart(
    app: Trace,
) -> None:
    otpmem.start_agent(llm=model(), conversation_id="late", user_id="ann")
    faults.crash(AgentHandle.of(Conv("ann", "late")))
    fresh = AgentHandle.of(Conv("ann", "late"))
    assert fresh.run("hello").content == "saw:1"
    assert fresh == AgentHandle.named(agent_name(Conv("ann", "late")))


def test_agent_started_with_a_plain_child_spec_in_the_users_tree_is_followed() -> None:
    store = MemoryStore.start_link()
    spec = ChildSpec(
        "assistant",
        start=lambda: Agent.start_link(
            llm=model(), memory={"store": store}, conversation_id="tree"
        ),
    )
    sup = Supervisor.start_link([spec], strategy="one_for_one", intensity=10)
    try:
        agent = AgentHandle.of("tree")
        assert agent.run("one").content == "saw:1"
        for _ in range(3):
            faults.kill(agent)
            agent.info()  # waits for the supervisor's restart, never NoProcess
        assert agent.run("two").content == "saw:3"
        assert store.get("tree")[-1]["content"] == "saw:3"
    finally:
        sup.stop()
        store.stop()


def test_an_agent_nobody_restarts_is_gone_at_once() -> None:
    agent = Agent.start(llm=model(), memory=None, conversation_id="alone")
    faults.kill(agent)
    with pytest.raises(NoProcess):
        agent.info(timeout=WAIT)  # no supervisor, no application: nothing to wait for
    stopped = Agent.start(llm=model(), memory=None, conversation_id="alone")
    stopped.stop()
    with pytest.raises(NoProcess):
        stopped.info(timeout=WAIT)


def test_the_identity_is_the_conversation_unless_a_name_is_given() -> None:
    store = MemoryStore.start_link()
    try:
        one = Agent.start_link(llm=model(), memory={"store": store}, conversation_id="c")
        with pytest.raises(AgentAlreadyStarted, match="already running"):
            Agent.start_link(llm=model(), memory={"store": store}, conversation_id="c")
        two = Agent.start_link(
            llm=model(), memory={"store": store}, conversation_id="c", name="second"
        )
        assert one.name == "agent:c" and two.name == "second" and one != two
        # Ids are quoted: no user id makes two conversations share a name.
        assert agent_name(Conv("a/b", "c")) != agent_name(Conv("a", "b/c"))
        one.stop()
        two.stop()
    finally:
        store.stop()


# -- a burst that makes the agents' supervisor give up -------------------------------------


def test_a_kill_burst_costs_only_latency(app: Trace) -> None:
    trace = app
    agents = [otpmem.start_agent(llm=model(), conversation_id=f"burst-{i}") for i in range(12)]
    for i, agent in enumerate(agents):
        assert agent.run(f"hello {i}").content == "saw:1"
    healthy = otpmem.start_agent(llm=model(), conversation_id="healthy")
    healthy.run("still here")
    for agent in agents[:11]:  # 11 kills in well under 10 s: past the intensity of 10
        faults.kill(agent)
        agent.info()  # waits for the restart, or (the 11th) activates it again
    trace.wait_for(
        lambda items: any(
            isinstance(e, SupervisorEvent) and e.kind == "max_intensity" for e in items
        )
    )
    root = whereis(APP_NAME)
    assert isinstance(root, SupervisorHandle)
    root.sync_tree()
    # OTP's rule held: the supervisor gave up and came back empty ...
    assert whereis(AGENTS_NAME) is not None
    # ... and each agent, the healthy one included, is back at its next call, with history.
    assert contents(healthy) == ["still here", "saw:1"]
    for i, agent in enumerate(agents):
        assert agent.run(f"again {i}").content == "saw:3"
    assert len(otpmem.running_agents()) == 13
    assert len(otpmem.known_agents()) == 13


# -- activation on demand and idleness ---------------------------------------------------


def test_a_defined_agent_runs_only_once_called_and_stops_when_idle(
    app: Trace,
) -> None:
    agent = otpmem.define_agent(llm=model(), conversation_id="lazy", idle_timeout=0.05)
    assert not agent.alive and otpmem.running_agents() == []
    assert agent.run("wake").content == "saw:1"
    assert agent.alive
    assert agent.wait(WAIT) == IDLE_EXIT  # stops by itself, a clean exit
    assert otpmem.running_agents() == []
    trace = app
    assert trace.kinds("restarted") == [], "an idle stop is not a crash"
    assert agent.run("again").content == "saw:3"  # activated again, history from the store


def test_callers_racing_the_idle_stop_never_fail(app: Trace) -> None:
    agent = otpmem.define_agent(llm=model(), conversation_id="racy", idle_timeout=0.001)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def caller() -> None:
        barrier.wait(WAIT)
        for _ in range(50):
            try:
                agent.info()
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
    assert errors == []
    agent.add_message({"role": "user", "content": "kept"})
    assert contents(agent) == ["kept"]


def test_many_callers_of_an_inactive_agent_activate_it_once(app: Trace) -> None:
    trace = app
    agent = otpmem.define_agent(llm=model(), conversation_id="crowd")
    barrier = threading.Barrier(8)
    answers: list[Any] = []

    def caller(i: int) -> None:
        barrier.wait(WAIT)
        answers.append(agent.info()["conversation"])

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert answers == [Conv(None, "crowd")] * 8
    started = [e for e in trace.kinds("started") if e.supervisor == AGENTS_NAME]
    assert len(started) == 1, started


def test_start_define_and_forget(app: Trace) -> None:
    agent = otpmem.start_agent(llm=model(), conversation_id="life")
    with pytest.raises(AgentAlreadyStarted):
        otpmem.start_agent(llm=model(), conversation_id="life")
    agent.run("one")
    agent.stop()  # stopped, still known: the next call activates it
    assert agent.run("two").content == "saw:3"
    assert otpmem.forget_agent(agent) is True
    assert not agent.alive
    with pytest.raises(NoProcess):
        agent.info()
    # Its conversation stays: a new agent of it (new options) continues it.
    again = otpmem.start_agent(llm=ScriptedModel(["new"], usage=False), conversation_id="life")
    assert again.run("three").content == "new"
    assert contents(again) == ["one", "saw:1", "two", "saw:3", "three", "new"]
    assert otpmem.forget_agent("nobody") is False


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"idle_timeout": 0}, ValueError),
        ({"idle_timeout": float("nan")}, ValueError),
        ({"idle_timeout": True}, ValueError),
        ({"name": 7}, TypeError),
        ({"name": ""}, TypeError),
    ],
    ids=repr,
)
def test_bad_identity_options_are_refused_at_the_door(
    app: Trace, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        otpmem.define_agent(llm=model(), conversation_id="bad", **options)
    with pytest.raises(error):
        otpmem.start_agent(llm=model(), conversation_id="bad", **options)
    assert otpmem.known_agents() == []


def test_outside_the_application_there_is_nothing_to_define() -> None:
    with pytest.raises(otpmem.AppError):
        otpmem.define_agent(llm=model(), conversation_id="x")


def test_the_asyncio_face_follows_restarts_and_activates(app: Trace) -> None:
    import asyncio

    async def scenario() -> list[Any]:
        agent = await aio.start_agent(llm=model(), conversation_id="aio-kept")
        await agent.run("one")
        faults.kill(agent.sync)
        lazy = await aio.define_agent(llm=model(), conversation_id="aio-lazy")
        return [(await agent.run("two")).content, (await lazy.run("hi")).content]

    assert asyncio.run(scenario()) == ["saw:3", "saw:1"]


def test_a_turn_killed_midway_is_retried_exactly_once_through_the_same_handle(
    app: Trace,
) -> None:
    in_model, release = threading.Event(), threading.Event()
    answers = iter(["held", "after"])

    def held(messages: list[dict[str, Any]], tools: Any) -> str:
        answer = next(answers)
        if answer == "held":
            in_model.set()
            release.wait(WAIT)
        return answer

    agent = otpmem.start_agent(llm=ScriptedModel(held, usage=False), conversation_id="mid")
    outcome: list[BaseException] = []

    def first_attempt() -> None:
        try:
            agent.run("q", turn_id="t1")
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=first_attempt)
    caller.start()
    assert in_model.wait(WAIT)
    faults.kill(agent)
    caller.join(WAIT)
    release.set()
    assert outcome and type(outcome[0]).__name__ == "ServerExited"
    retried = agent.run("q", turn_id="t1")  # the same handle, the next incarnation
    assert retried.content == "after"
    assert contents(agent) == ["q", "after"]  # the user message stored once


def test_after_the_application_stops_a_handle_fails_at_once() -> None:
    with otpmem.running():
        agent = otpmem.start_agent(llm=model(), conversation_id="gone")
        agent.run("hi")
    with pytest.raises(NoProcess):
        agent.info(timeout=WAIT)
