"""Recall in a few seconds, offline: a ranked index, tenant safety, hybrid memory, bx-ai's API.

Run: ``python examples/recall_demo.py``. No model, no network: the HashingEmbedder and a
scripted model stand in for real ones (``OpenAIEmbedder`` and ``OpenAIClient`` plug in the
same way).
"""

from __future__ import annotations

from typing import Any

from otpmem.actors import faults
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import HybridProvider, RecallIndex, memory
from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from otpmem.supervisors import Supervisor


def main() -> None:
    """Walk through the recall subsystem."""
    # 1. A supervised store and a supervised index over it (through the store's name, so
    #    the index follows the store across restarts).
    tree = Supervisor.start_link(
        [
            MemoryStore.child_spec("demo-store"),
            RecallIndex.child_spec(MemoryStore.named("demo-store"), "demo-index"),
        ],
        strategy="rest_for_one",
    )
    store = MemoryStore.named("demo-store")
    index = RecallIndex.named("demo-index")
    try:
        ann, bob = Conv("ann", "trip"), Conv("bob", "trip")  # same conversation id
        store.add(ann, [{"role": "user", "content": "I'm allergic to shellfish."}])
        store.add(ann, [{"role": "user", "content": f"small talk {i}"} for i in range(30)])
        store.add(bob, [{"role": "user", "content": "I am allergic to cats."}])

        print("== ranked recall, scoped to one user (read-your-writes: no refresh needed)")
        for hit in index.get_relevant("what am I allergic to?", user_id="ann", limit=2):
            print(f"  {hit.score:.3f}  {hit.conv} #{hit.position}: {hit.message['content']}")
        bobs = index.get_relevant("allergic", user_id="bob")
        print("  bob's query sees only bob:", [h.message["content"] for h in bobs])

        print("== store.search is a ranked query of the index while one is attached")
        for found in store.search("allergies", user_id="ann", limit=2):
            print(f"  BM25 {found.score:.2f}  #{found.index}: {found.message['content']}")
        talk = store.search("talk 2", user_id="ann", mode="substring")
        print("  substring 'talk 2':", [h.message["content"] for h in talk][:3])

        print("== the index is killed; its supervisor restarts it; nothing is missed")
        faults.kill(index)
        store.add(ann, [{"role": "user", "content": "My passport expires in May."}])
        tree.sync()
        hit = index.get_relevant("passport expiry", user_id="ann", limit=1)[0]
        print(f"  after the restart: #{hit.position}: {hit.message['content']}")

        print("== a hybrid memory for an agent: pinned, recalled, then recent")
        provider = HybridProvider(store, index, recent_limit=2, semantic_limit=2, total_limit=4)
        sent: list[list[Any]] = []

        def model(messages: list[Any]) -> str:
            sent.append(messages)
            return "noted"

        agent = Agent.start_link(
            llm=ScriptedModel(model), memory=provider, user_id="ann", conversation_id="trip"
        )
        try:
            agent.run("Remind me what I am allergic to before we order seafood.")
        finally:
            agent.stop()
        for message in sent[-1]:
            print(f"  {message['role']:>9}: {message['content']}")
    finally:
        tree.stop()

    print("== bx-ai's API: memory(kind, ...)")
    with memory("hybrid", user_id="cy", conversation_id="notes") as mem:
        mem.set_system_message("You are terse.")
        mem.add(["My locker code is 9182.", "I parked on level 3.", "Lunch was great."])
        mem.set_system_message("You are very terse.")  # replaced, not duplicated
        print("  system messages:", [m["content"] for m in mem.get_by_role("system")])
        print("  relevant:", mem.get_relevant("where did I park?", limit=1)[0].message["content"])
        print("  substring search 'code':", [h.message["content"] for h in mem.search("code")])
        print("  count:", mem.count())


if __name__ == "__main__":
    main()
