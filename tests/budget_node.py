"""One node of the cross-process budget race: ``python -m tests.budget_node DSN NAMESPACE USER
NODE AGENTS LIMIT ROLE``.

It starts a PostgresStore and AGENTS agents of USER (one conversation each) under one
``TokenBudget(LIMIT, scope="user")`` each, prints ``ready``, and on a line from its stdin runs
turns on every agent at once until the budget refuses them for good; then it prints what
its agents answered, as JSON. Its model spends 100 tokens a call. A ``victim`` prints
``in-call`` from its model instead of answering, and waits there to be killed.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from otpmem.agents import Agent, AgentHandle
from otpmem.guardrails import PolicyViolation, TokenBudget
from otpmem.llm import ChatResponse
from otpmem.stores.postgres import PostgresStore

HOLD_S = 1.0  # a killed node's holds free the budget after a second
TOKENS = 100


class NodeModel:
    """Answers "ok" for 100 tokens; a victim's first call never answers."""

    blocks = True

    def __init__(self, victim: bool) -> None:
        self.victim = victim

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """The answer, or (a victim) a report and a wait to be killed."""
        if self.victim:
            print("in-call", flush=True)
            sys.stdin.readline()  # never sent: the node is killed here
        return ChatResponse(content="ok", usage={"prompt_tokens": TOKENS})


def main(argv: list[str]) -> None:
    """Run the node (see the module docstring)."""
    dsn, namespace, user, node, agents, limit, role = argv
    store = PostgresStore.start_link(dsn, namespace=namespace)
    model = NodeModel(victim=role == "victim")
    handles: list[AgentHandle] = [
        Agent.start_link(llm=model, memory={"store": store}, user_id=user,
                         conversation_id=f"{node}-c{i}",
                         guardrails=[TokenBudget(int(limit), scope="user", hold_s=HOLD_S)])
        for i in range(int(agents))
    ]  # fmt: skip
    print("ready", flush=True)
    sys.stdin.readline()
    answered = [0] * len(handles)

    def work(i: int) -> None:
        while True:
            try:
                handles[i].run("go", timeout=60.0)
            except PolicyViolation:
                return
            answered[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(handles))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(json.dumps({"answered": sum(answered)}), flush=True)
    for handle in handles:
        handle.stop()
    store.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
