"""Agent benchmarks: what an otpmem Agent turn costs over the store calls under it.

Each figure is printed next to a baseline measured in the same run, because this shared
2-core box swings up to 2x between periods (perf_anchors.md): compare the paired ratios and
the medians over repeats, never one absolute number. Every agent answers with a
``ScriptedModel`` function (``"ok"``, no tools) and keeps memory through a
``DefaultProvider`` with a window of 20, so a turn's cost does not grow with its
conversation. The user message is ~160 chars, the perf_anchors shape. The model records
every call it gets (a copy of what it was sent); the benchmark clears that record between
chunks, untimed, or it would grow by ~20 messages per turn.

1. Turns per second under the application (``otpmem.running()``): agents started with
   ``otpmem.start_agent(memory={"window": 20})`` on the shared default store, each its own
   conversation, driven by caller threads that each cycle over their share of the agents
   calling ``agent.run``: 1 agent from 1 thread, 50 and 500 agents from 16 threads. Baseline:
   the same turns done by hand (``DefaultProvider`` on the default store, as below) over 50
   conversations from 16 threads. The four alternate in rotated chunks and each repeat takes
   the median chunk per run; 50/1, 500/1 and 50 agents/by hand are throughputs of the same
   repeat.
2. Per-turn overhead of one agent (on its own MemoryStore) over the same work done in the
   caller thread: ``store.get(conv, last=20)``, ``store.add(conv, [user])``, the model call
   on the newest 20, ``store.add(conv, [assistant])``. A second baseline does it through the
   same ``DefaultProvider`` (``history``, ``append``, ``prepare``, model, ``append``), and an
   echo GenServer call shows the one thread hop an agent adds. Each repeat takes the median
   of rotated chunks per contender (other tenants' bursts hit chunks, not repeats); ratios
   are of the same repeat.
3. RSS per live agent: start N agents (1,000; 500 with --quick) with ``Agent.start_link`` on
   one MemoryStore and a shared model, read VmRSS before and after (gc + malloc_trim first),
   then again after one turn each; against N bare ``pykka.ThreadingActor`` echo actors,
   rounds alternating. Rounds after the first reuse pymalloc arenas the previous round freed
   (a partly used arena is never returned), so RSS growth mostly shows the thread stacks;
   one more round per side under ``tracemalloc`` gives the Python heap each one holds.
"""

from __future__ import annotations

import gc
import queue
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any

import pykka
from _common import (
    EchoActor,
    drive,
    join_new_threads,
    memory_kib,
    ratio_summary,
    rotated,
    safe_ratio,
    split,
    verdict,
)

import otpmem
from otpmem.actors import GenServer, live_processes
from otpmem.agents import Agent, AgentHandle
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle

WINDOW = 20
"""DefaultProvider window on every side."""

TEXT = (
    "memory store actor supervisor restart message conversation user assistant tool call "
    "reply process link monitor crash exit reason child spec strategy intensity period"
)
"""The user message of every turn (~160 chars)."""

REPLY = "ok"
CALLERS = 16
"""Caller threads for the 50- and 500-agent runs."""

STOP_TIMEOUT = 60.0
PROCESS_GOAL = 1.3
"""An agent turn from a process over the same calls by hand there, in time: at most."""
THREAD_GOAL = 1.15
"""An agent turn from a plain thread over the by-hand turn plus two bare hand-offs: at most."""


def reply(messages: list[dict[str, Any]], tools: Any) -> str:
    """The scripted model's answer to anything."""
    return REPLY


def new_model(record: bool = False) -> ScriptedModel:
    """A ScriptedModel that answers ``"ok"`` to every call, inline (it never waits, so an
    agent calls it as the by-hand turn does, not through the blocking pool); ``record``
    keeps the last 1,000 calls."""
    return ScriptedModel(reply, blocks=False, record=record)


def user_message() -> dict[str, Any]:
    """The user message a turn stores."""
    return {"role": "user", "content": TEXT}


def per_call_us(times: Sequence[float]) -> float:
    """Median over repeats of seconds per call, in us."""
    return statistics.median(times) * 1e6


# -- one turn, by hand -----------------------------------------------------------------------


class Echo(GenServer):
    """A GenServer that answers every call with the message."""

    def handle_call(self, message: Any) -> Any:
        """Return the message."""
        return message


def direct_turn(store: MemoryStoreHandle, model: ScriptedModel, conv: Conv) -> Callable[[], Any]:
    """One turn's work done by hand in the caller thread: get, add, model, add."""
    user = user_message()

    def turn() -> Any:
        """get(last=WINDOW), add user, model on the newest WINDOW, add assistant."""
        history = store.get(conv, last=WINDOW)
        store.add(conv, [user])
        response = model.chat([*history, user][-WINDOW:])
        store.add(conv, [response.to_message()])
        return response

    return turn


def provider_turn(provider: DefaultProvider, model: ScriptedModel, conv: Conv) -> Callable[[], Any]:
    """One turn's work through the agent's DefaultProvider, in the caller thread."""
    user = user_message()

    def turn() -> Any:
        """history, append user, prepare, model, append assistant."""
        history = provider.history(conv)
        provider.append(conv, [user])
        response = model.chat(provider.prepare(conv, [*history, user]))
        provider.append(conv, [response.to_message()])
        return response

    return turn


# -- 1. turns per second, 1 / 50 / 500 agents -------------------------------------------------


def agent_run(agent: AgentHandle) -> Callable[[], Any]:
    """A function that runs one turn of ``agent``."""
    return lambda: agent.run(TEXT, timeout=STOP_TIMEOUT)


def bench_throughput(quick: bool) -> list[str]:
    """Turns/s of 1, 50 and 500 agents under the app, and of 50 conversations by hand."""
    turns, chunks, repeats = (320, 1, 3) if quick else (480, 5, 5)
    sizes = {"1": (1, 1), "50": (50, CALLERS), "500": (500, CALLERS), "direct": (50, CALLERS)}
    model = new_model()
    rates: dict[str, list[float]] = {name: [] for name in sizes}
    before = set(threading.enumerate())
    t_start = time.perf_counter()
    with otpmem.running():
        pool = {
            name: [
                otpmem.start_agent(llm=model, memory={"window": WINDOW}, agent_name=f"b{name}")
                for _ in range(n)
            ]
            for name, (n, _) in sizes.items()
            if name != "direct"
        }
        start_s = time.perf_counter() - t_start
        provider = DefaultProvider(otpmem.default_store(), window=WINDOW)
        direct = [provider_turn(provider, model, Conv(None, f"direct-{i}")) for i in range(50)]
        groups = {
            name: split([agent_run(a) for a in agents], sizes[name][1])
            for name, agents in pool.items()
        }
        groups["direct"] = split(direct, sizes["direct"][1])
        per_thread = {name: max(1, turns // len(groups[name])) for name in sizes}
        for name in sizes:
            drive(groups[name], max(1, per_thread[name] // 5))  # warm-up
        for r in range(repeats):
            chunk_rates: dict[str, list[float]] = {name: [] for name in sizes}
            for k in range(chunks):
                for name in rotated(list(sizes), r + k):
                    done = per_thread[name] * len(groups[name])
                    chunk_rates[name].append(done / drive(groups[name], per_thread[name]))
            for name in sizes:
                rates[name].append(statistics.median(chunk_rates[name]))  # the median chunk
        held = otpmem.default_store().count(pool["1"][0].info()["conversation"])
    join_new_threads(before)
    expected = 2 * (per_thread["1"] // 5 + repeats * chunks * per_thread["1"])
    if held != expected:
        raise AssertionError(f"the 1-agent conversation holds {held} messages, not {expected}")

    def med(name: str) -> str:
        """Median turns/s of a run, as ``4.20k``."""
        return f"{statistics.median(rates[name]) / 1e3:.2f}k"

    def paired(a: str, b: str) -> str:
        """Throughput ratios a/b, per repeat, summarised."""
        return ratio_summary([x / y for x, y in zip(rates[a], rates[b], strict=True)])

    shape = (
        f"paired per repeat, median [min..max] of {repeats} repeats, each the median of "
        f"{chunks} rotated chunks of ~{turns} turns"
    )
    return [
        f"agent turns/s under otpmem.running() (start_agent, memory={{'window': {WINDOW}}}, "
        f"ScriptedModel 'ok', default store): 1 agent / 1 thread {med('1')} turns/s "
        f"({1e6 / statistics.median(rates['1']):.0f} us/turn) | 50 agents / {CALLERS} threads "
        f"{med('50')} | 500 agents / {CALLERS} threads {med('500')} | 50/1 = {paired('50', '1')}"
        f", 500/1 = {paired('500', '1')} (throughput, {shape}; informational: under the GIL "
        f"more agents add no throughput) | baseline: the same turns by hand (DefaultProvider "
        f"on the default store) over 50 conversations from {CALLERS} threads {med('direct')}, "
        f"50 agents/that = {paired('50', 'direct')} | "
        f"{sum(len(p) for p in pool.values())} agents started in {start_s:.2f} s"
    ]


# -- 2. per-turn overhead over direct store calls ---------------------------------------------


class BareEcho:
    """Two bare OS-thread hand-offs: a plain thread that answers each message put on one
    SimpleQueue on another (what no runtime can do with less)."""

    def __init__(self) -> None:
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.replies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="bench-bare-echo", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (message := self.requests.get()) is not None:
            self.replies.put(message)

    def call(self, message: Any) -> Any:
        """Hand ``message`` to the echo thread and wait for it back."""
        self.requests.put(message)
        return self.replies.get(timeout=STOP_TIMEOUT)

    def stop(self) -> None:
        """End the echo thread."""
        self.requests.put(None)
        self.thread.join(STOP_TIMEOUT)


def time_calls(call: Callable[[], Any], n: int) -> float:
    """Seconds for n calls of ``call``."""
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return time.perf_counter() - t0


class Driver(GenServer):
    """Times calls from inside a process: ``call((fn, n))`` answers the seconds n took."""

    def handle_call(self, message: Any) -> Any:
        """Run ``fn`` n times here, on the schedulers; return the seconds."""
        call, n = message
        return time_calls(call, n)


def bench_overhead(quick: bool) -> list[str]:
    """One agent turn vs the same store calls made directly, from a plain thread and from a
    process, paired per repeat."""
    calls, chunks, repeats = (50, 5, 3) if quick else (100, 12, 5)
    model = new_model(record=True)  # what each call was sent is checked at the end
    with ExitStack() as running:
        store = MemoryStore.start_link()
        running.callback(store.stop)
        echo = Echo.start_link()
        running.callback(echo.stop)
        driver = Driver.start_link()
        running.callback(driver.stop)
        bare = BareEcho()
        running.callback(bare.stop)
        provider = DefaultProvider(store, window=WINDOW)
        agent = Agent.start_link(llm=model, memory=provider, conversation_id="agent")
        running.callback(agent.stop)
        run_agent = lambda: agent.run(TEXT)  # noqa: E731
        by_hand = direct_turn(store, model, Conv(None, "direct"))
        by_hand_there = direct_turn(store, model, Conv(None, "direct-process"))
        hop = lambda: echo.call(TEXT)  # noqa: E731

        def there(call: Callable[[], Any]) -> Callable[[int], float]:
            """``call`` timed n times inside the driver process."""
            return lambda n: float(driver.call((call, n), timeout=STOP_TIMEOUT))

        def here(call: Callable[[], Any]) -> Callable[[int], float]:
            """``call`` timed n times on this thread."""
            return lambda n: time_calls(call, n)

        contenders: dict[str, Callable[[int], float]] = {
            "agent": here(run_agent),
            "direct": here(by_hand),
            "provider": here(provider_turn(provider, model, Conv(None, "provider"))),
            "hop": here(hop),
            "bare": here(lambda: bare.call(TEXT)),
            "agent-p": there(run_agent),
            "direct-p": there(by_hand_there),
            "hop-p": there(hop),
        }
        n = {
            name: calls if name.startswith("agent") or "direct" in name else 5 * calls
            for name in contenders
        }
        for timed in contenders.values():
            timed(2 * WINDOW)  # warm-up: every window full
        model.calls.clear()
        sent: set[int] = set()  # how many messages each model call was sent
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(repeats):
            chunk_times: dict[str, list[float]] = {name: [] for name in contenders}
            for k in range(chunks):
                for name in rotated(list(contenders), r + k):
                    chunk_times[name].append(contenders[name](n[name]) / n[name])
                    sent |= {len(m) for m, _ in model.calls}
                    model.calls.clear()
            for name in contenders:
                # The median chunk: other tenants' CPU bursts hit a few chunks, not the pair.
                times[name].append(statistics.median(chunk_times[name]))
        agent_msgs = store.count(Conv(None, "agent"))
    agent_turns = 2 * 2 * WINDOW + 2 * repeats * chunks * calls  # from a thread and a process
    if sent != {WINDOW} or agent_msgs != 2 * agent_turns:
        raise AssertionError(f"the model was sent {sent} messages; the agent holds {agent_msgs}")

    def paired(a: str, b: str) -> list[float]:
        """Time ratios a/b, per repeat."""
        return [x / y for x, y in zip(times[a], times[b], strict=True)]

    def us(name: str) -> str:
        """Median over repeats of a contender's time per call."""
        return f"{per_call_us(times[name]):.0f} us"

    extra = [(a - p) * 1e6 for a, p in zip(times["agent"], times["provider"], strict=True)]
    extra_p = [(a - d) * 1e6 for a, d in zip(times["agent-p"], times["direct-p"], strict=True)]
    shape = (
        f"paired per repeat, median [min..max] of {repeats} repeats, each the median of "
        f"{chunks} rotated chunks of {calls}"
    )
    # The thread goal's baseline: the by-hand turn plus two bare hand-offs, of the same repeat.
    floor = [d + b for d, b in zip(times["direct"], times["bare"], strict=True)]
    thread_ratios = [a / f for a, f in zip(times["agent"], floor, strict=True)]
    thread_ratio = statistics.median(thread_ratios)
    process_ratio = statistics.median(paired("agent-p", "direct-p"))
    return [
        f"agent turn from a plain thread (Agent.run, DefaultProvider(MemoryStore, window="
        f"{WINDOW}), ScriptedModel, no tools): {us('agent')} | by hand in the caller thread, "
        f"get(last={WINDOW}) + add(user) + model + add(assistant): {us('direct')} | two bare "
        f"hand-offs (a SimpleQueue round trip to a plain thread): {us('bare')} | agent/(by "
        f"hand + bare hand-offs) time = {ratio_summary(thread_ratios)} ({shape}) (goal <= "
        f"{THREAD_GOAL}) -> {verdict(thread_ratio <= THREAD_GOAL)} | agent/by hand = "
        f"{ratio_summary(paired('agent', 'direct'))} | the same through the provider "
        f"(history/append/prepare/append): {us('provider')}, agent/provider = "
        f"{ratio_summary(paired('agent', 'provider'))} | agent - provider = "
        f"{statistics.median(extra):.0f} us per turn vs one GenServer call hop {us('hop')}",
        f"agent turn from a process (a driver GenServer calls Agent.run): {us('agent-p')} | "
        f"the same calls by hand in that process: {us('direct-p')} | agent/by hand time = "
        f"{ratio_summary(paired('agent-p', 'direct-p'))} ({shape}) (goal <= {PROCESS_GOAL}) "
        f"-> {verdict(process_ratio <= PROCESS_GOAL)} | one GenServer call hop from a "
        f"process {us('hop-p')} (a greenlet switch) | agent - by hand = "
        f"{statistics.median(extra_p):.0f} us per turn beside that hop (the turn's own "
        "steps: exactly-once keys on both adds, the writer claim, the window with its pinned "
        "messages, the context check)",
    ]


# -- 3. RSS per live agent --------------------------------------------------------------------


Round = tuple[float, float, float]
"""One round: start s, RSS KiB per agent started, RSS KiB per agent after one turn each."""


def stop_agents(agents: Sequence[AgentHandle]) -> None:
    """Stop every agent still running (also after a failed round: they are non-daemon)."""
    for agent in agents:
        if agent.alive:
            agent.stop(timeout=STOP_TIMEOUT)


def stop_actors(actors: Sequence[pykka.ActorRef[Any]]) -> None:
    """Stop bare pykka actors, all at once, and wait until they have."""
    pykka.get_all([actor.stop(block=False) for actor in actors], timeout=STOP_TIMEOUT)


def agent_round(n: int, store: MemoryStoreHandle, model: ScriptedModel) -> Round:
    """Start n agents on ``store``, one turn each, then stop them."""
    before = set(threading.enumerate())
    agents: list[AgentHandle] = []
    try:
        rss0, _ = memory_kib()
        t0 = time.perf_counter()
        for i in range(n):
            agents.append(
                Agent.start_link(llm=model, memory={"store": store}, conversation_id=f"rss-{i}")
            )
        t1 = time.perf_counter()
        rss1, _ = memory_kib()
        for agent in agents:
            agent.run(TEXT)
        rss2, _ = memory_kib()
    finally:
        stop_agents(agents)
    for i in range(n):
        store.clear(Conv(None, f"rss-{i}"))
    join_new_threads(before)
    return t1 - t0, (rss1 - rss0) / n, (rss2 - rss0) / n


def pykka_round(n: int) -> Round:
    """Start n bare pykka echo actors, ask each once, then stop them."""
    before = set(threading.enumerate())
    actors: list[pykka.ActorRef[Any]] = []
    try:
        rss0, _ = memory_kib()
        t0 = time.perf_counter()
        for _ in range(n):
            actors.append(EchoActor.start())
        t1 = time.perf_counter()
        rss1, _ = memory_kib()
        for actor in actors:
            actor.ask(TEXT)
        rss2, _ = memory_kib()
    finally:
        stop_actors(actors)
    join_new_threads(before)
    return t1 - t0, (rss1 - rss0) / n, (rss2 - rss0) / n


def heap_round(side: str, n: int, store: MemoryStoreHandle, model: ScriptedModel) -> float:
    """Python heap bytes per agent (or bare pykka actor) started, traced by tracemalloc."""
    before = set(threading.enumerate())
    agents: list[AgentHandle] = []
    actors: list[pykka.ActorRef[Any]] = []
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            if side == "agent":
                agents.append(
                    Agent.start_link(
                        llm=model, memory={"store": store}, conversation_id=f"heap-{i}"
                    )
                )
            else:
                actors.append(EchoActor.start())
        gc.collect()
        per_item = (tracemalloc.get_traced_memory()[0] - base) / n
    finally:
        tracemalloc.stop()
        stop_agents(agents)
        stop_actors(actors)
    join_new_threads(before)
    return per_item


def bench_rss(quick: bool) -> list[str]:
    """RSS per live agent vs per bare pykka actor, rounds alternating; heap by tracemalloc."""
    n, repeats = (500, 2) if quick else (1_000, 3)
    store = MemoryStore.start_link()
    model = new_model()
    runs: dict[str, list[Round]] = {"agent": [], "pykka": []}
    try:
        agent_round(50, store, model)  # warm-up: imports, caches, first-use allocations
        pykka_round(50)
        for r in range(repeats):
            for side in rotated(["agent", "pykka"], r):
                runs[side].append(
                    agent_round(n, store, model) if side == "agent" else pykka_round(n)
                )
        heap = {side: heap_round(side, n, store, model) / 1024 for side in ("agent", "pykka")}
    finally:
        store.stop()
    if live_processes():
        raise AssertionError(f"{len(live_processes())} otpmem processes left running")

    def med(side: str, field: int) -> float:
        """Median over repeats of one field of a side's rounds."""
        return statistics.median(run[field] for run in runs[side])

    start_ratios = [a[0] / p[0] for a, p in zip(runs["agent"], runs["pykka"], strict=True)]
    return [
        f"RSS per live agent ({n:,} started, Agent.start_link on one MemoryStore, shared "
        f"model): +{med('agent', 1):.1f} KiB | bare pykka ThreadingActor +"
        f"{med('pykka', 1):.1f} KiB | agent/pykka = "
        f"{safe_ratio(med('agent', 1), med('pykka', 1))} (ratio of medians of {repeats}; "
        f"informational: each is one OS thread, and freed arenas are reused) | Python heap "
        f"(tracemalloc) {heap['agent']:.1f} KiB per agent vs {heap['pykka']:.1f} KiB per "
        f"actor = {safe_ratio(heap['agent'], heap['pykka'])} | after one turn each (2 stored "
        f"msgs per agent): RSS +{med('agent', 2):.1f} KiB vs pykka after one ask "
        f"+{med('pykka', 2):.1f} KiB | start {med('agent', 0) / n * 1e6:.0f} us/agent vs "
        f"{med('pykka', 0) / n * 1e6:.0f} us/actor, agent/pykka time = "
        f"{ratio_summary(start_ratios)}"
    ]


def main(quick: bool) -> list[str]:
    """Run every agent benchmark and return its result lines."""
    return [*bench_throughput(quick), *bench_overhead(quick), *bench_rss(quick)]
