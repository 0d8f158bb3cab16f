"""A multi-agent simulation in a few dozen lines of library code, with faults injected.

Run with ``python examples/multi_agent_simulation.py`` (a few seconds, offline).

Six supervised agents talk in parallel threads, each with its own conversation on the
default store (LevelDB in a temporary directory). The model is a ``ScriptedModel`` over a
function of the messages: a sum gets the ``add`` tool, anything else an echo. While they
talk, the store is killed and crashed and agents are killed or made to crash on their next
message; a turn interrupted by a fault is run again with its turn id, so it continues
where it was and stores nothing twice. Every turn an agent acknowledges is noted, and at
the end every conversation is read back from the store: the run exits 1 if an
acknowledged message is missing or stored twice (or a tool result lost its call).

``otpmem simulate`` is the full-size version of this, with a fsynced ledger and resume.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import otpmem
from otpmem.actors import CallTimeout, NoProcess, ServerExited, faults
from otpmem.actors.faults import FaultPlan
from otpmem.agents import AgentHandle, TurnFailed, TurnResult
from otpmem.llm import ScriptedModel, tool_call
from otpmem.messages import Conv
from otpmem.supervisors import SupervisorEvent

AGENTS = 6
TURNS = 12
USER = "sim"
RETRYABLE = (NoProcess, ServerExited, TurnFailed, CallTimeout)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def model(messages: list[dict[str, Any]], tools: Any) -> Any:
    """A sum asks for add(); a tool result is answered; anything else is echoed."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"That makes {last['content']}."
    text = str(last.get("content"))
    if "+" in text:
        a, b = text.rsplit(" ", 1)[-1].split("+")
        call = tool_call(f"add-{uuid.uuid4().hex[:8]}", "add", f'{{"a": {a}, "b": {b}}}')
        return {"content": "Adding.", "tool_calls": [call]}
    return f"Heard: {text}"


def key(message: Any) -> tuple[Any, ...]:
    """What identifies a message in the audit."""
    calls = tuple(c["id"] for c in message.get("tool_calls") or ())
    return (message["role"], message.get("content"), calls, message.get("tool_call_id"))


def main() -> int:
    """Run the agents under faults, then audit every conversation; 0 if nothing was lost."""
    started = time.monotonic()
    acked: list[list[tuple[Any, ...]]] = [[] for _ in range(AGENTS)]
    turns_done = [0] * AGENTS
    progress = threading.Condition()
    restarts: list[SupervisorEvent] = []
    restarted = threading.Event()
    problems: list[str] = []

    def on_event(event: SupervisorEvent) -> None:
        if event.kind == "restarted":
            restarts.append(event)
            restarted.set()

    with (
        tempfile.TemporaryDirectory(prefix="otpmem-sim-") as data,
        otpmem.running(data_dir=data, intensity=50, listeners=[on_event]) as root,
    ):
        store = otpmem.default_store()  # a handle by name: it follows the store's restarts
        agents_sup: Any = root.child("agents")
        names = [f"sim.agent-{i}" for i in range(AGENTS)]
        for i, name in enumerate(names):
            otpmem.start_agent(
                llm=ScriptedModel(model),
                tools=[add],
                memory={"window": 10},
                conversation_id=f"chat-{i}",
                user_id=USER,
                name=name,
            )

        def run_turn(i: int, turn: int, text: str) -> TurnResult | None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    # The turn id makes a retry continue the turn: nothing stored twice.
                    return AgentHandle.named(names[i]).run(
                        text, timeout=30, turn_id=f"chat-{i}-{turn}"
                    )
                except RETRYABLE:
                    time.sleep(0.005)  # a store or this agent is restarting: run it again
            problems.append(f"agent {i} could not finish {text!r}")
            return None

        def talk(i: int) -> None:
            for turn in range(TURNS):
                text = f"agent {i} turn {turn}: {turn}+{i}" if turn % 2 else f"hello {turn}"
                result = run_turn(i, turn, text)
                if result is None:
                    return
                with progress:
                    acked[i].extend(key(m) for m in result.messages)
                    turns_done[i] += 1
                    progress.notify_all()

        def victim() -> str:
            with progress:  # the agent furthest behind still has turns to run
                return names[min(range(AGENTS), key=lambda i: turns_done[i])]

        def kill_agent() -> None:
            faults.kill(AgentHandle.named(victim()))
            agents_sup.sync()  # a barrier: the restart has happened when it returns

        def crash_agent_on_next_message() -> None:
            restarted.clear()
            faults.inject(AgentHandle.named(victim()), FaultPlan().crash_on_message(1))
            if not restarted.wait(10):
                problems.append("the injected crash never fired")

        def kill_store() -> None:
            faults.kill(store)
            root.sync_tree()  # the store's supervisor, or the root, has restarted it

        def crash_store() -> None:
            faults.crash(store, RuntimeError("injected"))
            root.sync_tree()

        # One fault at a time, each once enough turns went by, so no two restarts overlap.
        schedule: list[tuple[int, str, Callable[[], None]]] = [
            (8, "kill the store", kill_store),
            (16, "crash an agent on its next message", crash_agent_on_next_message),
            (26, "kill an agent", kill_agent),
            (36, "crash the store", crash_store),
            (46, "kill the store", kill_store),
        ]
        threads = [threading.Thread(target=talk, args=(i,)) for i in range(AGENTS)]
        for thread in threads:
            thread.start()

        def turns_at_least(n: int) -> Callable[[], bool]:
            return lambda: sum(turns_done) >= n

        for at, what, inject in schedule:
            with progress:
                progress.wait_for(turns_at_least(at), timeout=30)
            inject()
            print(f"after {sum(turns_done):3} turns: {what}")
        for thread in threads:
            thread.join(60)

        lost = orphaned = stored = 0
        for i in range(AGENTS):
            history = store.get(Conv(USER, f"chat-{i}"))
            stored += len(history)
            keys, position = [key(m) for m in history], 0
            for expected in acked[i]:  # in order: acknowledged messages are a subsequence
                try:
                    position = keys.index(expected, position) + 1
                except ValueError:
                    lost += 1
            calls = {c for _, _, ids, _ in keys for c in ids}
            orphaned += sum(1 for role, _, _, call in keys if role == "tool" and call not in calls)

    acknowledged = sum(len(a) for a in acked)
    print(f"agents: {AGENTS}, turns acknowledged: {sum(turns_done)} of {AGENTS * TURNS}")
    print(f"faults injected: {len(schedule)}, restarts by supervisors: {len(restarts)}")
    print(f"messages acknowledged: {acknowledged}, stored: {stored} (each once: turn ids)")
    print(f"lost: {lost}, orphaned tool results: {orphaned}")
    print(f"took {time.monotonic() - started:.1f} s")
    for problem in problems:
        print(f"problem: {problem}")
    ok = lost == 0 and orphaned == 0 and not problems and sum(turns_done) == AGENTS * TURNS
    ok = ok and stored == acknowledged
    print("OK: every acknowledged message was read back, once" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
