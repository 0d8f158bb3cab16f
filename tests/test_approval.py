"""Human approval: a tool that needs it suspends the turn in the store; ``agent.resume``
continues it, also after the agent was killed or the whole node restarted.

LangGraph's ``interrupt()`` / ``Command(resume=...)``, under supervision: the user's path
(the README's snippet, as written), every order of run/resume/retry, racing threads, a
killed agent, a LevelDB node restarted in-process and a process killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import otpmem
from otpmem.actors import faults
from otpmem.agents import (
    Agent,
    AgentHandle,
    PendingCall,
    TurnNotSuspended,
    TurnSuspended,
)
from otpmem.kernel import ApprovalRequired, Kernel, Tool, needs_approval, refusal, tool
from otpmem.llm import ScriptedModel, tool_call
from otpmem.stores import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
WAIT = 10.0


class Bank:
    """A tool with a side effect to count: every transfer that really ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[int] = []

    def transfer(self, amount: int) -> str:
        """Move money."""
        with self.lock:
            self.done.append(amount)
        return f"sent {amount}"

    def tool(self) -> Tool:
        return tool(self.transfer, needs_approval=True)


def lookup(account: str) -> str:
    """Read an account (no approval needed)."""
    return f"{account}: ok"


def planner(messages: Sequence[Mapping[str, Any]], tools: Any) -> Any:
    """Asks for a transfer after each user message; then says what the tool answered."""
    last = messages[-1]
    if last["role"] == "user":
        call_id = f"c{len(messages)}"
        return {"tool_calls": [tool_call(call_id, "transfer", '{"amount": 100}')]}
    return f"after: {last['content']}"


def model() -> ScriptedModel:
    return ScriptedModel(planner, usage=False, record=True)


def valid(sent: Sequence[Mapping[str, Any]]) -> bool:
    """No tool call without its result, no result without its call."""
    asked: set[str] = set()
    for message in sent:
        for call in message.get("tool_calls") or ():
            asked.add(call["id"])
        if message.get("role") == "tool" and message.get("tool_call_id") not in asked:
            return False
    answered = {m.get("tool_call_id") for m in sent if m.get("role") == "tool"}
    return asked <= answered


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def start(store: Any, bank: Bank, llm: Any = None, **options: Any) -> AgentHandle:
    return Agent.start_link(
        llm=llm or model(),
        memory={"store": store},
        tools=[bank.tool(), lookup],
        conversation_id=options.pop("conversation_id", "pay"),
        **options,
    )


# -- the user's path ------------------------------------------------------------------------


def test_the_readme_snippet_suspends_then_resumes(tmp_path: Path) -> None:
    bank = Bank()
    with otpmem.running(data_dir=str(tmp_path)):
        agent = otpmem.start_agent(
            llm=model(), tools=[tool(bank.transfer, needs_approval=True)], conversation_id="pay"
        )
        turn = agent.run("Pay the rent")
        assert turn.suspended and turn.content is None and bank.done == []
        assert turn.pending == (PendingCall("c1", "transfer", {"amount": 100}),)
        done = agent.resume(turn.turn_id, approve=True)
        assert done.content == "after: sent 100" and bank.done == [100]
        assert not done.suspended and done.turn_id == turn.turn_id


def test_a_suspended_turn_stores_the_call_marked_and_runs_nothing(store: MemoryStore) -> None:
    bank = Bank()
    llm = model()
    agent = start(store, bank, llm)
    turn = agent.run("Pay the rent", turn_id="t1")
    assert turn.turn_id == "t1" and turn.content is None and bank.done == []
    stored = store.get("pay")
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert stored[-1]["tool_calls"][0]["id"] == "c1"
    assert stored[-1]["metadata"]["approval"] == {"turn_id": "t1", "pending": ["c1"]}
    assert llm.call_count == 1
    agent.stop()


def test_an_approved_call_runs_once_and_the_loop_answers(store: MemoryStore) -> None:
    bank = Bank()
    llm = model()
    agent = start(store, bank, llm)
    turn = agent.run("Pay the rent")
    done = agent.resume(turn.turn_id, approve=True)
    assert done.content == "after: sent 100" and bank.done == [100]
    assert [m["role"] for m in done.messages] == ["user", "assistant", "tool", "assistant"]
    assert done.messages[2]["metadata"] == {"approval": {"approved": True}}
    assert [m["role"] for m in store.get("pay")] == ["user", "assistant", "tool", "assistant"]
    assert all(valid(sent) for sent, _ in llm.calls), "every context sent was valid"
    agent.stop()


def test_a_refused_call_does_not_run_and_the_model_hears_the_refusal(store: MemoryStore) -> None:
    bank = Bank()
    llm = model()
    agent = start(store, bank, llm)
    turn = agent.run("Pay the rent")
    done = agent.resume(turn.turn_id, approve=False)
    assert bank.done == []
    assert done.content == f"after: {refusal('transfer')}"
    result = store.get("pay")[2]
    assert result["role"] == "tool" and result["tool_call_id"] == "c1"
    assert json.loads(result["content"])["error"]["type"] == "refused"
    assert result["metadata"] == {"approval": {"approved": False}}
    sent, _ = llm.calls[-1]
    assert sent[-1]["content"] == refusal("transfer") and valid(sent)
    agent.stop()


def test_decisions_per_call_and_a_plain_tool_of_the_same_round(store: MemoryStore) -> None:
    bank = Bank()
    calls = [
        tool_call("a", "transfer", '{"amount": 1}'),
        tool_call("b", "lookup", '{"account": "x"}'),
        tool_call("c", "transfer", '{"amount": 2}'),
    ]
    llm = ScriptedModel([{"tool_calls": calls}, "done"], usage=False, record=True)
    agent = start(store, bank, llm)
    turn = agent.run("Pay both")
    assert [p.id for p in turn.pending] == ["a", "c"], "lookup needs no approval"
    assert [m["role"] for m in store.get("pay")] == ["user", "assistant"], "nothing ran yet"
    done = agent.resume(turn.turn_id, approve={"a": True, "c": False})
    assert done.content == "done" and bank.done == [1]
    results = {m["tool_call_id"]: m["content"] for m in store.get("pay") if m["role"] == "tool"}
    assert results == {"a": "sent 1", "b": "x: ok", "c": refusal("transfer")}
    assert valid(llm.calls[-1][0])
    agent.stop()


# -- the rules ------------------------------------------------------------------------------


def test_a_resume_retried_after_it_completed_applies_once(store: MemoryStore) -> None:
    bank = Bank()
    llm = model()
    agent = start(store, bank, llm)
    turn = agent.run("Pay the rent")
    first = agent.resume(turn.turn_id, approve=True)
    stored = store.get("pay")
    again = agent.resume(turn.turn_id, approve=True)
    also = agent.resume(turn.turn_id, approve={"c1": True})
    assert again.content == also.content == first.content == "after: sent 100"
    assert bank.done == [100] and llm.call_count == 2 and store.get("pay") == stored
    agent.stop()


def test_resuming_a_turn_that_is_not_suspended_is_a_clear_error(store: MemoryStore) -> None:
    bank = Bank()
    agent = start(store, bank, ScriptedModel(["plain answer"], usage=False))
    plain = agent.run("hello", turn_id="t-plain")
    stored = store.get("pay")
    with pytest.raises(TurnNotSuspended, match="awaits no approval"):
        agent.resume(plain.turn_id, approve=True)
    with pytest.raises(TurnNotSuspended, match="no turn 'nope'"):
        agent.resume("nope", approve=True)
    with pytest.raises(TypeError, match="approve must be"):
        agent.resume("t-plain", approve="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="turn_id"):
        agent.resume("", approve=True)
    assert store.get("pay") == stored and agent.alive
    agent.stop()


def test_decisions_that_do_not_fit_the_pending_calls_are_refused(store: MemoryStore) -> None:
    bank = Bank()
    agent = start(store, bank)
    turn = agent.run("Pay the rent")
    stored = store.get("pay")
    with pytest.raises(TurnNotSuspended, match="no pending call 'zz'"):
        agent.resume(turn.turn_id, approve={"zz": True})
    with pytest.raises(TurnNotSuspended, match="decides no call 'c1'"):
        agent.resume(turn.turn_id, approve={})
    assert store.get("pay") == stored and bank.done == []
    assert agent.resume(turn.turn_id, approve={"c1": True}).content == "after: sent 100"
    agent.stop()


def test_a_new_turn_on_a_suspended_conversation_is_refused(store: MemoryStore) -> None:
    bank = Bank()
    llm = model()
    agent = start(store, bank, llm)
    turn = agent.run("Pay the rent", turn_id="t1")
    stored = store.get("pay")
    with pytest.raises(TurnSuspended, match="awaits approval of turn 't1'") as refused:
        agent.run("something else")
    assert refused.value.turn_id == "t1" and [p.id for p in refused.value.pending] == ["c1"]
    with pytest.raises(TurnSuspended):
        agent.add_message({"role": "user", "content": "sneaked in"})
    assert store.get("pay") == stored and llm.call_count == 1
    # The same turn run again is a retry: it answers as it stands, suspended.
    retried = agent.run("Pay the rent", turn_id="t1")
    assert retried.pending == turn.pending and llm.call_count == 1
    agent.resume("t1", approve=True)
    assert agent.run("thanks").suspended, "after the resume, new turns run again"
    agent.stop()


def test_a_turn_suspended_twice_waits_for_each_resume(store: MemoryStore) -> None:
    bank = Bank()
    script = [
        {"tool_calls": [tool_call("a", "transfer", '{"amount": 1}')]},
        {"tool_calls": [tool_call("b", "transfer", '{"amount": 2}')]},
        "both done",
    ]
    agent = start(store, bank, ScriptedModel(script, usage=False))
    turn = agent.run("Pay twice")
    second = agent.resume(turn.turn_id, approve={"a": True})
    assert [p.id for p in second.pending] == ["b"] and bank.done == [1]
    # The first resume retried: its call is answered, so it decides nothing of the second.
    retried = agent.resume(turn.turn_id, approve={"a": True})
    assert [p.id for p in retried.pending] == ["b"] and bank.done == [1]
    done = agent.resume(turn.turn_id, approve={"b": True})
    assert done.content == "both done" and bank.done == [1, 2] and done.iterations == 3
    agent.stop()


def test_the_kernel_alone_stops_at_a_call_that_needs_approval() -> None:
    @needs_approval
    def wipe(path: str) -> str:
        """Delete everything."""
        raise AssertionError("must not run")

    kernel = Kernel(ScriptedModel([{"tool_calls": [tool_call("w", "wipe", '{"path": "/"}')]}]))
    kernel = Kernel(kernel.llm, tools=[wipe])
    assert kernel.tools["wipe"].needs_approval
    with pytest.raises(ApprovalRequired, match="wipe") as stopped:
        kernel.invoke([{"role": "user", "content": "clean up"}])
    assert [c["id"] for c in stopped.value.calls] == ["w"]


def test_marking_a_tool_needs_approval() -> None:
    def plain(x: int) -> int:
        """Echo."""
        return x

    assert not tool(plain).needs_approval
    marked = tool(plain, needs_approval=True)
    assert marked.needs_approval and not tool(marked, needs_approval=False).needs_approval
    assert tool(marked) is marked
    with pytest.raises(TypeError, match="needs_approval must be a bool"):
        tool(plain, needs_approval="yes")  # type: ignore[arg-type]


def test_an_agent_without_stored_turns_refuses_a_tool_that_needs_approval() -> None:
    bank = Bank()
    with pytest.raises(ValueError, match="transfer need a human's approval"):
        Agent.start_link(llm=model(), memory=False, tools=[bank.tool()])


# -- concurrency ----------------------------------------------------------------------------


def test_racing_resumes_and_runs_apply_the_approval_once(store: MemoryStore) -> None:
    bank = Bank()
    agent = start(store, bank)
    turn = agent.run("Pay the rent")
    barrier = threading.Barrier(8)
    answers: list[Any] = []
    lock = threading.Lock()

    def resume() -> None:
        barrier.wait(WAIT)
        answer: Any = agent.resume(turn.turn_id, approve=True, timeout=WAIT).content
        with lock:
            answers.append(answer)

    def run() -> None:
        barrier.wait(WAIT)
        try:
            answer: Any = agent.run("and again", timeout=WAIT).pending[0].id
        except TurnSuspended as refused:
            answer = refused
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=resume) for _ in range(6)]
    threads += [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    assert bank.done == [100], "approved once, run once"
    assert answers.count("after: sent 100") == 6
    others = [a for a in answers if a != "after: sent 100"]
    # A run before the resume is refused; one after it starts a turn of its own, which
    # waits at its own approval (and refuses the other run).
    assert len(others) == 2
    assert all(isinstance(a, TurnSuspended) or a.startswith("c") for a in others)
    assert [m["content"] for m in store.get("pay") if m["role"] == "tool"] == ["sent 100"]
    agent.stop()


# -- restarts -------------------------------------------------------------------------------


def test_a_killed_agent_resumes_through_the_same_handle() -> None:
    bank = Bank()
    with otpmem.running():
        agent = otpmem.start_agent(llm=model(), tools=[bank.tool()], conversation_id="pay")
        turn = agent.run("Pay the rent")
        before = agent.pid
        faults.kill(agent)
        done = agent.resume(turn.turn_id, approve=True, timeout=WAIT)
        assert agent.pid != before, "restarted by the application"
        assert done.content == "after: sent 100" and bank.done == [100]


def test_an_agent_killed_inside_an_approved_tool_finishes_on_a_retried_resume() -> None:
    entered, release = threading.Event(), threading.Event()
    ran: list[int] = []

    def transfer(amount: int) -> str:
        """Move money, slowly."""
        ran.append(amount)
        if len(ran) == 1:
            entered.set()
            release.wait(WAIT)
        return f"sent {amount}"

    with otpmem.running():
        agent = otpmem.start_agent(
            llm=model(), tools=[tool(transfer, needs_approval=True)], conversation_id="pay"
        )
        turn = agent.run("Pay the rent")
        outcome: list[BaseException] = []

        def resume() -> None:
            try:
                agent.resume(turn.turn_id, approve=True, timeout=WAIT)
            except Exception as exc:
                outcome.append(exc)

        caller = threading.Thread(target=resume)
        caller.start()
        assert entered.wait(WAIT)
        faults.kill(agent, grace=0.1)
        caller.join(WAIT)
        release.set()
        assert outcome, "the caller heard of the kill"
        with pytest.raises(TurnSuspended):
            agent.run("meanwhile", timeout=WAIT)  # nothing was stored: still suspended
        done = agent.resume(turn.turn_id, approve=True, timeout=WAIT)
        assert done.content == "after: sent 100"
        assert [m["role"] for m in agent.messages()] == ["user", "assistant", "tool", "assistant"]
        assert ran == [100, 100], "a round in flight at the kill runs again, as a retry's does"


def test_a_whole_node_restart_on_leveldb_keeps_the_suspended_turn(tmp_path: Path) -> None:
    bank = Bank()
    options = {"tools": [bank.tool()], "conversation_id": "pay", "user_id": "ann"}
    with otpmem.running(data_dir=str(tmp_path)):
        turn = otpmem.start_agent(llm=model(), **options).run("Pay the rent")
    assert turn.suspended and bank.done == []
    with otpmem.running(data_dir=str(tmp_path)):
        agent = otpmem.start_agent(llm=model(), **options)
        with pytest.raises(TurnSuspended, match=turn.turn_id):
            agent.run("something else")
        done = agent.resume(turn.turn_id, approve=True)
        assert done.content == "after: sent 100" and bank.done == [100]
    with otpmem.running(data_dir=str(tmp_path)):
        agent = otpmem.start_agent(llm=model(), **options)
        assert agent.resume(turn.turn_id, approve=True).content == "after: sent 100"
        assert bank.done == [100], "a resume retried after a restart applies once"


def test_a_process_killed_with_sigkill_leaves_a_turn_to_resume(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, os, signal
        import otpmem
        from otpmem.kernel import tool
        from tests.test_approval import Bank, model
        with otpmem.running(data_dir={str(tmp_path)!r}):
            agent = otpmem.start_agent(llm=model(), tools=[Bank().tool()],
                                       conversation_id="pay")
            turn = agent.run("Pay the rent")
            print(json.dumps([turn.turn_id, [p.id for p in turn.pending]]), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert child.returncode == -9, child.stderr
    turn_id, pending = json.loads(child.stdout.splitlines()[-1])
    assert pending == ["c1"]
    bank = Bank()
    with otpmem.running(data_dir=str(tmp_path)):
        agent = otpmem.start_agent(llm=model(), tools=[bank.tool()], conversation_id="pay")
        done = agent.resume(turn_id, approve=True)
        assert done.content == "after: sent 100" and bank.done == [100]
