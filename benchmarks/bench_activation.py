"""Agents activated on demand: what a known, idle agent costs, and what waking one costs.

A million agents are known to the application (``otpmem.define_agent``) and a thousand of
them are called, so they run. The baselines come from the same run: the RSS of a live idle
agent (started, never called) and the latency of a call to an agent that already runs.
"""

from __future__ import annotations

import time
from typing import Any

from _common import memory_kib, percentile, verdict

import otpmem
from otpmem.agents import AgentHandle, agent_name
from otpmem.llm import ScriptedModel

ACTIVE = 1_000


def echo(messages: list[dict[str, Any]], tools: Any) -> str:
    """The model: answers at once, so a call measures the runtime and the store."""
    return "ok"


def first_calls(names: list[str]) -> list[float]:
    """Latency (us) of one ``info()`` call per agent, in order, each a fresh handle."""
    latencies = []
    for name in names:
        handle = AgentHandle.named(name)
        t0 = time.perf_counter()
        handle.info(timeout=60.0)
        latencies.append((time.perf_counter() - t0) * 1e6)
    return sorted(latencies)


def bench_known_agents(known: int) -> list[str]:
    """KiB per known idle agent against a live idle one; activation latency against a call."""
    model = ScriptedModel(echo, usage=False)
    model.blocks = False
    memory = {"window": 20}
    with otpmem.running():
        rss0, _ = memory_kib()
        t0 = time.perf_counter()
        for i in range(known):
            otpmem.define_agent(llm=model, memory=memory, conversation_id=f"k{i}", idle_timeout=600)
        defined = time.perf_counter() - t0
        rss1, _ = memory_kib()
        per_known = (rss1 - rss0) / known
        names = [agent_name(f"k{i}") for i in range(0, known, known // ACTIVE)][:ACTIVE]
        activations = first_calls(names)  # each starts its agent
        rss2, _ = memory_kib()
        per_active = (rss2 - rss1) / len(names)
        calls = first_calls(names)  # the same agents, running now
        running = len(otpmem.running_agents())
    p50, p99 = percentile(activations, 0.5), percentile(activations, 0.99)
    c50, c99 = percentile(calls, 0.5), percentile(calls, 0.99)
    return [
        f"known agents {known:,} ({running:,} active): RSS +{per_known:.2f} KiB per known idle "
        f"agent | a running agent +{per_active:.2f} KiB | known/running = "
        f"{per_known / per_active:.3f}x (goal: memory follows the active ones, <= 0.1x) -> "
        f"{verdict(per_known <= 0.1 * per_active)} | defined in {defined:.1f} s "
        f"({defined / known * 1e6:.0f} us each)",
        f"activation on first call: p50 {p50:.0f} us, p99 {p99:.0f} us | a call to a running "
        f"agent: p50 {c50:.0f} us, p99 {c99:.0f} us | activation/call p50 = {p50 / c50:.1f}x",
    ]


def main(quick: bool) -> list[str]:
    """Run the activation benchmarks and return their lines."""
    return bench_known_agents(20_000 if quick else 1_000_000)
