"""Scale: live agents by the hundred thousand, turns among them, calls between processes.

Each figure comes with a baseline from the same run: bare pykka (a ThreadingActor is one OS
thread, the model the runtime had before) or the same work with one agent alive.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pykka
from _common import EchoActor, drive, memory_kib, ratio_summary, split, verdict

from otpmem.actors import GenServer, NoProcess, ServerExited, faults, sleep, stop_all, whereis
from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle
from otpmem.supervisors import ChildSpec, Supervisor

CALLERS = 16
TEXT = "hello"


class Echo(GenServer):
    """Answers every call with the message."""

    def handle_call(self, message: Any) -> Any:
        """Return the message."""
        return message


class Relay(GenServer):
    """Calls ``target`` n times from inside a process: process-to-process round trips."""

    def handle_call(self, message: Any) -> Any:
        """Make n calls to the target; return the seconds they took."""
        target, n = message
        t0 = time.perf_counter()
        for i in range(n):
            target.call(i)
        return time.perf_counter() - t0


def start_agents(
    n: int, store: MemoryStoreHandle, model: ScriptedModel, prefix: str = "scale"
) -> list[AgentHandle]:
    """n idle agents, each on its own conversation ``{prefix}-i`` of one store, sharing one
    model (an agent is its conversation: groups alive together need their own prefix).

    A window of 20, so a turn's cost does not grow with its conversation: one agent taking
    every turn would otherwise read an ever longer history.
    """
    provider = DefaultProvider(store, window=20)
    return [
        Agent.start_link(llm=model, memory=provider, conversation_id=f"{prefix}-{i}")
        for i in range(n)
    ]


def bench_live_agents(sizes: list[int]) -> list[str]:
    """RSS per live idle agent at each size, and the start time, against pykka at 1,000."""
    lines = []
    model = ScriptedModel(["ok"] * 10)
    pykka_kib = pykka_rss_per_actor(1_000)
    # A warm-up round: the first agents pay for imports and caches, and RSS freed by the
    # benchmarks before would otherwise make small sizes read negative.
    warm = MemoryStore.start_link()
    start_agents(1_000, warm, model)
    stop_all(timeout=30.0)
    for n in sizes:
        store = MemoryStore.start_link()
        gc.collect()
        rss0, _ = memory_kib()
        t0 = time.perf_counter()
        agents = start_agents(n, store, model)
        started = time.perf_counter() - t0
        rss1, _ = memory_kib()
        per_agent = (rss1 - rss0) / n
        alive = sum(1 for a in agents[:: max(1, n // 1000)] if a.alive)
        t0 = time.perf_counter()
        stop_all(timeout=30.0)
        stopped = time.perf_counter() - t0
        del agents
        goal = ""
        if n >= 1_000_000:
            goal = f" (goal <= 8 KiB) -> {verdict(per_agent <= 8)}"
        elif n == 100_000:
            goal = f" | start goal < 10 s -> {verdict(started < 10)}"
        lines.append(
            f"live idle agents {n:,}: RSS +{per_agent:.1f} KiB/agent{goal} | bare pykka actor "
            f"+{pykka_kib:.1f} KiB at 1,000 (one thread each: 25k would not start) | "
            f"agent/pykka = {per_agent / pykka_kib:.2f}x | started in {started:.2f} s "
            f"({started / n * 1e6:.0f} us/agent), stopped in {stopped:.2f} s | sampled alive "
            f"{alive}"
        )
    return lines


def pykka_rss_per_actor(n: int) -> float:
    """RSS per bare pykka ThreadingActor started (KiB)."""
    gc.collect()
    rss0, _ = memory_kib()
    actors = [EchoActor.start() for _ in range(n)]
    rss1, _ = memory_kib()
    pykka.get_all([a.stop(block=False) for a in actors], timeout=60)
    return (rss1 - rss0) / n


def turns_per_second(agents: list[AgentHandle], turns: int) -> float:
    """Turns/s of CALLERS threads, each running turns on its own slice of ``agents``."""
    runs = [lambda agent=agent: agent.run(TEXT, timeout=60) for agent in agents]
    groups = split(runs, CALLERS) if len(runs) >= CALLERS else [runs] * CALLERS
    per_thread = turns // CALLERS
    return per_thread * len(groups) / drive(groups, per_thread)


def bench_turns(sizes: list[int], turns: int, repeats: int) -> list[str]:
    """Turns/s with 16 caller threads spread over many live agents vs over one agent."""
    lines = []
    model = ScriptedModel(lambda messages, tools: "ok")
    model.blocks = False  # a pure function: the turn measures the runtime, not the pool
    for n in sizes:
        store = MemoryStore.start_link()
        one = start_agents(1, store, model, prefix="one")
        many = start_agents(n, store, model)
        ratios, rates_one, rates_many = [], [], []
        for r in range(repeats):
            order = [("one", one), ("many", many)] if r % 2 == 0 else [("many", many), ("one", one)]
            rate = {name: turns_per_second(group, turns) for name, group in order}
            rates_one.append(rate["one"])
            rates_many.append(rate["many"])
            ratios.append(rate["many"] / rate["one"])
        stop_all(timeout=30.0)
        ok = statistics.median(ratios) >= 0.8
        lines.append(
            f"agent turns/s, {CALLERS} caller threads over {n:,} live agents: "
            f"{statistics.median(rates_many):.0f} | over 1 agent: "
            f"{statistics.median(rates_one):.0f} | many/one = {ratio_summary(ratios)} "
            f"(goal >= 0.8) -> {verdict(ok)}"
        )
    return lines


def bench_roundtrips(n: int, repeats: int) -> list[str]:
    """Call round trips, thread-to-process and process-to-process, against a pykka ask."""
    echo = Echo.start()
    relay = Relay.start()
    actor = EchoActor.start()
    thread_ratios, process_ratios = [], []
    samples: dict[str, list[float]] = {"thread": [], "process": [], "pykka": []}
    try:
        for _ in range(repeats):
            t_pykka = timed(lambda: [actor.ask(i) for i in range(n)])
            t_thread = timed(lambda: [echo.call(i) for i in range(n)])
            t_process = relay.call((echo, n), timeout=60)
            samples["pykka"].append(t_pykka / n * 1e6)
            samples["thread"].append(t_thread / n * 1e6)
            samples["process"].append(t_process / n * 1e6)
            thread_ratios.append(t_pykka / t_thread)
            process_ratios.append(t_pykka / t_process)
    finally:
        actor.stop()
        stop_all()

    def med(key: str) -> float:
        """Median microseconds per call of one kind."""
        return statistics.median(samples[key])

    return [
        f"call roundtrip thread->process: {med('thread'):.1f} us | pykka ask "
        f"{med('pykka'):.1f} us | speed vs ask = {ratio_summary(thread_ratios)} (goal >= 1.0) "
        f"-> {verdict(statistics.median(thread_ratios) >= 1.0)}",
        f"call roundtrip process->process: {med('process'):.1f} us (no thread switch: both "
        f"on one scheduler) | pykka ask {med('pykka'):.1f} us | speed vs ask = "
        f"{ratio_summary(process_ratios)} (goal >= 1.0) -> "
        f"{verdict(statistics.median(process_ratios) >= 1.0)}",
    ]


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn`` takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(quick: bool) -> list[str]:
    """Run the scale benchmarks and return their lines."""
    if quick:
        live, turn_sizes, turns, repeats = [1_000, 10_000], [10_000], 1_600, 2
    else:
        live, turn_sizes, turns, repeats = [1_000, 100_000, 1_000_000], [10_000, 100_000], 8_000, 3
    lines = bench_roundtrips(2_000 if quick else 20_000, 3 if quick else 5)
    with tempfile.TemporaryDirectory() as root:
        lines += bench_recovery(50 if quick else 200, Path(root))
    lines += bench_turns(turn_sizes, turns, repeats)
    lines += bench_live_agents(live)
    return lines


def recovery_ms(store_spec: ChildSpec, name: str, kills: int) -> list[float]:
    """Kill the named store ``kills`` times; ms from the kill until an add succeeds again."""
    sup = Supervisor.start_link([store_spec], intensity=kills * 2, period=60.0)
    store = MemoryStore.named(name)
    samples = []
    try:
        store.add("warm", [{"role": "user", "content": "x"}])
        for i in range(kills):
            victim = whereis(name)
            assert victim is not None
            t0 = time.perf_counter()
            faults.kill(victim)
            while True:
                try:
                    store.add("warm", [{"role": "user", "content": str(i)}])
                    break
                except (NoProcess, ServerExited):
                    sleep(0.0002)
            samples.append((time.perf_counter() - t0) * 1e3)
    finally:
        sup.stop()
    return sorted(samples)


def bench_recovery(kills: int, root: Path) -> list[str]:
    """Store recovery after a kill, and terminate_child of a worker with a long queue."""
    memory = recovery_ms(
        ChildSpec("memory", start=lambda: MemoryStore.start_link(name="bench.mem")),
        "bench.mem",
        kills,
    )
    leveldb = recovery_ms(LevelDBStore.child_spec(root / "db", "bench.ldb"), "bench.ldb", kills)
    sup = Supervisor.start_link([ChildSpec("busy", start=Backlog.start_link, shutdown=5.0)])
    busy = sup.child("busy")
    assert busy is not None
    for i in range(400):
        busy.cast(i)  # 400 x 10 ms: 4 s of queue
    t0 = time.perf_counter()
    sup.terminate_child("busy")
    terminated = time.perf_counter() - t0
    reason = busy.exit_reason
    sup.stop()

    def p(samples: list[float], q: float) -> float:
        """Nearest-rank percentile."""
        return samples[min(len(samples) - 1, int(q * len(samples)))]

    return [
        f"store recovery, kill -> next add acknowledged ({kills} kills, plain ChildSpec): "
        f"MemoryStore p50 {p(memory, 0.5):.2f} ms, p99 {p(memory, 0.99):.2f} ms | LevelDBStore "
        f"p50 {p(leveldb, 0.5):.2f} ms, p99 {p(leveldb, 0.99):.2f} ms (wave 1: 1.8/7.9 and "
        f"5.6/14.2 ms)",
        f"terminate_child of a worker with 4 s of queued casts: {terminated * 1e3:.0f} ms, "
        f"reason {reason!r} (wave 1: the 5 s shutdown timeout, then killed)",
    ]


class Backlog(GenServer):
    """Each cast takes 10 ms of (suspended) work."""

    def handle_cast(self, message: Any) -> Any:
        """Work for 10 ms without holding the scheduler."""
        sleep(0.01)
