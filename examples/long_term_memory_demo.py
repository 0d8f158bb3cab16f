"""Long-term memory, usage and budgets in a few seconds, offline.

Run: ``python examples/long_term_memory_demo.py``. A scripted model stands in for a real
one (``OpenAIClient`` and ``ModelFactExtractor(llm)`` plug in the same way); facts,
profiles, usage and the extraction jobs live in a LevelDB directory that outlives the
application.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import otpmem
from otpmem.guardrails import CostBudget, PolicyViolation, TokenBudget
from otpmem.llm import Pricing, ScriptedModel
from otpmem.memory import LongTermMemory, RuleFactExtractor
from otpmem.messages import Conv

ANN = Conv("ann", "chat")
PRICING = Pricing.per_million({"scripted": ("2.50", "10.00")})  # per million tokens


def assistant(messages: list[dict[str, Any]]) -> str:
    """The scripted model: it answers from the user context long-term memory gave it."""
    context = [m["content"] for m in messages if m["role"] == "system"]
    question = str(messages[-1]["content"])
    if "where do i live" in question.lower():
        facts = next((c for c in context if c.startswith("User context:")), "")
        city = next((line[12:] for line in facts.splitlines() if "location:" in line), "?")
        return f"You live in {city}."
    return "Noted."


def main(data: Path) -> None:
    """Walk through long-term memory, usage accounting and guardrails."""
    model = ScriptedModel(assistant, record=True)
    with otpmem.running(data_dir=data):
        store = otpmem.default_store()
        # 1. Facts are extracted after every turn, by a supervised server (mode="async")
        #    working the store's durable job list.
        ltm = LongTermMemory(store, RuleFactExtractor(), trigger="per_turn", mode="async")
        budgets = [TokenBudget(300, scope="user"), CostBudget("0.05", scope="user")]
        agent = otpmem.start_agent(
            llm=model, user_id="ann", conversation_id="chat", system_prompt="Be brief.",
            long_term_memory=ltm, guardrails=budgets, pricing=PRICING,
        )  # fmt: skip
        agent.run("Hi, my name is Ann and I live in Lyon.")
        ltm.flush(10.0)
        print("facts:", {f.key: f.value for f in store.get_facts("ann")})

        # 2. The next turn's context: the system prompt, then the user's facts (pinned,
        #    never stored), then the history.
        print("answer:", agent.run("Where do I live?").content)
        sent = model.calls[-1][0]
        print("context sent:", [m["content"].splitlines()[0] for m in sent[:2]])
        print("stored system messages:", [m for m in store.get(ANN) if m["role"] == "system"])

        # 3. A correction supersedes the fact and keeps what was believed before.
        agent.run("I moved to Paris.")
        ltm.flush(10.0)
        location = store.get_fact("ann", "location")
        history = [f.value for f in store.fact_history("ann", "location")]
        print(f"location: {location.value} (version {location.version}), before: {history}")
        print("answer:", agent.run("Where do I live now?").content)

        # 4. A profile from the facts, injected before them.
        profiler = ScriptedModel(['{"summary": "Ann lives in Paris.", "metadata": {}}'])
        ltm.update_profile("ann", profiler)
        first = next(m["content"] for m in ltm.context("ann"))
        print("context now starts:", first.replace("\n", " "))

        # 5. Usage: recorded by the store from every answer, priced, summed per user.
        spent = store.user_usage("ann")
        print(f"usage: {spent.total_tokens} tokens, cost {spent.cost}")

        # 6. Budgets: checked before every model call; a violation reaches the caller
        #    before the model is called, and the agent stays up.
        turns = 0
        try:
            while True:
                agent.run(f"Tell me something, {turns}.")
                turns += 1
        except PolicyViolation as refused:
            print(f"refused after {turns} more turn(s): {refused.reason}")
        print("agent alive:", agent.alive)
        ltm.close()

    # 7. A restart: the budget reads the sums the store kept, so it still holds.
    with otpmem.running(data_dir=data):
        store = otpmem.default_store()
        again = otpmem.start_agent(llm=model, user_id="ann", conversation_id="chat",
                                   guardrails=[TokenBudget(300, scope="user")])  # fmt: skip
        try:
            again.run("Hello again.")
        except PolicyViolation as refused:
            print("after a restart:", refused.reason)
        print("facts after a restart:", {f.key: f.value for f in store.get_facts("ann")})


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="otpmem-ltm-") as tmp:
        main(Path(tmp) / "data")
