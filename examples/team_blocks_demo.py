"""Three agents coordinate through one team memory block while a chaos thread kills them.

The agents serve no user (a simulation): each is started with ``team="alpha"``, so
``"team/notes"`` is the notes block of ``Scope(None, team="alpha")``, shared by the team and
by nobody else. Each agent's scripted model answers every user message with one
``core_memory_append`` to it; its thread runs ten turns, each with a turn_id, and when a kill ends a
turn it starts the agent again and retries the turn with the same id. The store keys every
edit by turn and tool call, so a retried turn's edit lands once. The audit at the end: every
acknowledged note is in the block exactly once, and nothing else is.

    python examples/team_blocks_demo.py
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from typing import Any

from otpmem.actors import faults
from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ChatResponse, ScriptedModel, tool_call
from otpmem.stores import MemoryStore, Scope

AGENTS, TURNS, WAIT = 3, 10, 30.0
TEAM_BLOCK = "team/notes"
TEAM = Scope(None, team="alpha")


def model_for(name: str) -> ScriptedModel:
    """A model that notes each user message in the team block, then answers "noted"."""

    def reply(messages: list[dict[str, Any]], tools: Any) -> Any:
        last = messages[-1]
        if last["role"] == "tool":
            return "noted"
        args = json.dumps({"block": TEAM_BLOCK, "text": f"{name}: {last['content']}"})
        return ChatResponse(tool_calls=(tool_call("c1", "core_memory_append", args),))

    return ScriptedModel(reply, blocks=False)


def main() -> None:
    """Run the agents under chaos, then audit the block."""
    store = MemoryStore.start_link()
    store.set_block(TEAM, "notes", "", limit=50_000)
    live: dict[str, AgentHandle] = {}
    acknowledged: list[str] = []
    kills = 0
    lock = threading.Lock()
    done = threading.Event()

    def start(name: str) -> AgentHandle:
        handle = Agent.start(
            model_for(name),
            memory={"store": store},
            conversation_id=f"{name}-work",
            agent_id=name,
            team="alpha",
            blocks=(TEAM_BLOCK,),
        )
        with lock:
            live[name] = handle
        return handle

    def work(name: str) -> None:
        agent = start(name)
        for n in range(TURNS):
            text = f"task {n}"
            while True:
                try:
                    agent.run(text, timeout=WAIT, turn_id=f"{name}-{n}")
                    break
                except Exception:  # killed mid-turn: a new incarnation retries the turn
                    agent = start(name)
            with lock:
                acknowledged.append(f"{name}: {text}")

    def chaos() -> None:
        nonlocal kills
        rng = random.Random(7)
        while not done.wait(0.002):
            with lock:
                victim = live.get(rng.choice(sorted(live))) if live else None
            if victim is not None:
                with contextlib.suppress(Exception):  # already dead, or restarting
                    faults.kill(victim)
                    kills += 1

    names = [f"agent{i}" for i in range(AGENTS)]
    threads = [threading.Thread(target=work, args=(name,)) for name in names]
    killer = threading.Thread(target=chaos)
    killer.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 4)
    done.set()
    killer.join(WAIT)
    for handle in live.values():
        with contextlib.suppress(Exception):  # one a kill left restarting
            handle.stop()
    block = store.get_block(TEAM, "notes")
    members = store.scope_conversations(TEAM)
    store.stop()
    assert block is not None
    lines = block.value.split("\n")
    twice = len(lines) - len(set(lines))
    missing = sorted(set(acknowledged) - set(lines))
    extra = sorted(set(lines) - set(acknowledged))
    print(f"{AGENTS} agents, {len(acknowledged)} acknowledged edits, {kills} kills")
    print(f"the team's conversations: {[c.conversation_id for c in members]}")
    print(
        f"in the block: {len(lines)} lines; missing: {len(missing)}, twice: {twice}, "
        f"unacknowledged: {len(extra)}"
    )
    ok = not missing and not twice and not extra and len(acknowledged) == AGENTS * TURNS
    ok = ok and len(members) == AGENTS
    print("OK: every acknowledged edit is in the block exactly once" if ok else "FAILED")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
