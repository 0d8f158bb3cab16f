"""Agents under the application tree: tool calls, a store crash, an agent crash.

Run with ``make demo`` or ``python examples/agents_demo.py``. Offline: the model is a
``ScriptedModel`` that asks for the ``add`` tool, then answers with its result.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from typing import Any

import otpmem
from otpmem.actors import NoProcess, ServerExited, faults
from otpmem.agents import TurnFailed
from otpmem.llm import ScriptedModel, tool_call


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def arithmetic(messages: list[dict[str, Any]], tools: Any) -> Any:
    """Ask for add() after a question; answer with the tool's result after a tool message."""
    last = messages[-1]
    if last["role"] == "user":
        a, b = (int(x) for x in last["content"].split("+"))
        return {
            "content": "Let me add.",
            "tool_calls": [tool_call("c1", "add", f'{{"a": {a}, "b": {b}}}')],
        }
    return f"The sum is {last['content']}."


def main() -> None:
    """Run a few agents, crash what can crash, show that nothing is lost."""
    with (
        tempfile.TemporaryDirectory(prefix="otpmem-agents-") as data,
        otpmem.running(data_dir=data),
    ):
        model = ScriptedModel(arithmetic)
        agents = [
            otpmem.start_agent(llm=model, tools=[add], conversation_id=f"sums-{i}", user_id="demo")
            for i in range(4)
        ]
        turn = agents[0].run("7+8")
        print("1. one turn with a tool call")
        for message in turn.messages:
            text = message.get("content") or message.get("tool_calls")[0]["function"]
            print(f"   {message['role']:9} {text}")

        print("2. four agents in parallel; the default store is killed twice meanwhile")
        done = [1, 0, 0, 0]  # agent 0's turn above

        def drive(i: int) -> None:
            for n in range(10):
                while True:
                    try:
                        # The turn id makes the retry continue the turn, not store it twice.
                        agents[i].run(f"{n}+{i}", turn_id=f"sums-{i}-{n}")
                        done[i] += 1
                        break
                    except (NoProcess, ServerExited, TurnFailed):
                        continue  # the store was restarting: the turn is run again

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        store = otpmem.default_store()
        for _ in range(2):
            with contextlib.suppress(NoProcess):
                faults.kill(store)
        for thread in threads:
            thread.join(60)
        exactly_once = True
        for i, agent in enumerate(agents):
            stored = agent.messages()
            answers = [m for m in stored if m["role"] == "assistant" and not m.get("tool_calls")]
            questions = [m for m in stored if m["role"] == "user"]
            print(f"   agent {i}: {done[i]} turns acknowledged, {len(answers)} answers stored")
            exactly_once &= done[i] == len(answers) == len(questions)
        print(f"   each acknowledged turn stored once: {exactly_once}")

        print("3. an agent crashes; its supervisor restarts it and the conversation goes on")
        first_pid = agents[1].pid
        faults.crash(agents[1], RuntimeError("injected"))
        # The handle is the agent's identity: the same one reaches the new incarnation.
        answer = agents[1].run("20+22").content
        print(
            f"   the same handle now reaches {agents[1].pid} (was {first_pid}), which sees "
            f"{len(agents[1].messages())} stored messages; next answer: {answer}"
        )


if __name__ == "__main__":
    main()
