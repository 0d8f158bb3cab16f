"""A multi-agent simulation under chaos, audited for loss against an independent ledger.

Supervised agents hold conversations on the default store (LevelDB under the run's
directory) while faults are injected into the store and the agents. Every turn that an
agent acknowledges is written to a ledger (``ledger.jsonl``, fsynced) that the store never
sees; at the end every conversation is read back and every acknowledged message must be
there, in order, and nothing else: every turn is retried with the same turn id after a
fault, so each message is stored exactly once (``messages stored == messages acked``). A run
killed with SIGKILL can be resumed: the ledger says where each agent was, the turn in flight
continues from what it stored, and the audit covers both runs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .actors import CallTimeout, NoProcess, ServerExited, faults
from .actors.faults import FaultPlan
from .agents import AgentHandle, TurnFailed
from .app import AGENTS_NAME, running, start_agent
from .llm import ChatModel, ScriptedModel, tool_call
from .messages import Conv
from .stores import default_store
from .supervisors import SupervisorEvent

USER_ID = "sim"
LEDGER = "ledger.jsonl"
FAULTS = ("kill_store", "crash_store", "kill_agent", "crash_agent_on_message")
Retryable = (NoProcess, ServerExited, TurnFailed, CallTimeout)


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def scripted_arithmetic(messages: list[dict[str, Any]], tools: Any) -> Any:
    """The default model: a question with numbers gets the add tool, its result an answer."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"The answer is {last['content']}."
    text = str(last.get("content") or "")
    if last["role"] == "user" and "+" in text:
        left, right = text.rsplit(" ", 1)[-1].rstrip("?").split("+")
        arguments = json.dumps({"a": int(left), "b": int(right)})
        call = tool_call(f"add-{len(messages)}", "add", arguments)  # unique in the conversation
        return {"content": "Let me add that.", "tool_calls": [call]}
    return f"Noted: {text}"


@dataclass
class SimulationReport:
    """What a run did, and whether anything acknowledged was lost."""

    agents: int
    turns_done: int
    turns_planned: int
    messages_acknowledged: int
    messages_stored: int
    lost: int
    faults: dict[str, int]
    restarts: int
    seconds: float
    resumed_from: int = 0
    duplicated: int = 0
    lost_examples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every planned turn was done."""
        return self.turns_done == self.turns_planned

    @property
    def ok(self) -> bool:
        """True when every turn was done and every acknowledged message is stored, once."""
        return self.lost == 0 and self.duplicated == 0 and self.complete and not self.errors

    def lines(self) -> list[str]:
        """The report, as printed by ``otpmem simulate``."""
        rate = self.turns_done / self.seconds if self.seconds else 0.0
        injected = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"agents:            {self.agents}",
            f"turns done:        {self.turns_done} of {self.turns_planned}"
            + (f" ({self.resumed_from} before resuming)" if self.resumed_from else ""),
            f"messages acked:    {self.messages_acknowledged} (in the ledger)",
            f"messages stored:   {self.messages_stored} (recounted from the store)",
            f"faults injected:   {sum(self.faults.values())} ({injected})",
            f"restarts:          {self.restarts} (by the supervisors)",
            f"messages lost:     {self.lost}",
            f"messages extra:    {self.duplicated} (stored, but in no acknowledged turn)",
            f"throughput:        {rate:.1f} turns/s over {self.seconds:.1f} s",
        ]
        lines += [f"  lost: {example}" for example in self.lost_examples]
        lines += [f"  error: {error}" for error in self.errors]
        return lines

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {**self.__dict__, "complete": self.complete, "ok": self.ok}


class Ledger:
    """Acknowledged turns, one fsynced JSON line each: the store never writes here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def record(self, conversation: str, turn: int, messages: Sequence[Mapping[str, Any]]) -> None:
        """Write one acknowledged turn durably."""
        entry = {
            "conversation": conversation,
            "turn": turn,
            "messages": [[m.get("role"), m.get("content")] for m in messages],
        }
        with self._lock:
            self._file.write(json.dumps(entry) + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    @staticmethod
    def load(path: Path) -> list[dict[str, Any]]:
        """Every complete entry (a torn last line from a kill -9 is ignored)."""
        if not path.exists():
            return []
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return entries


@dataclass
class Simulation:
    """``Simulation(agents=20, turns=10, data_dir="run", chaos=0.05, seed=1).run()``."""

    agents: int
    turns: int
    data_dir: Path
    chaos: float = 0.0
    seed: int = 0
    model: ChatModel | None = None
    resume: bool = False
    workers: int = 8
    kill_self_after: int | None = None
    progress: Callable[[int], None] | None = None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.agents < 1 or self.turns < 1:
            raise ValueError("agents and turns must be >= 1")
        if not 0.0 <= self.chaos <= 1.0:
            raise ValueError(f"chaos is a probability per turn in [0, 1], got {self.chaos}")
        self._rng = random.Random(self.seed)
        self._rng_lock = threading.Lock()
        self._faults: Counter[str] = Counter()
        self._restarts = 0
        self._acked = 0
        self._acked_lock = threading.Lock()
        self._errors: list[str] = []

    def run(self) -> SimulationReport:
        """Run (or resume) the simulation and audit it."""
        ledger_path = self.data_dir / LEDGER
        previous = Ledger.load(ledger_path)
        if self.resume and not ledger_path.exists():
            raise FileNotFoundError(f"nothing to resume: {ledger_path} does not exist")
        if not self.resume and previous:
            raise FileExistsError(
                f"{self.data_dir} holds an earlier run; pass --resume to continue it, "
                "or choose an empty directory"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        done = {(e["conversation"], e["turn"]) for e in previous}
        started = time.monotonic()
        ledger = Ledger(ledger_path)
        try:
            with running(
                self.data_dir, intensity=10_000, period=1.0, listeners=[self._on_event]
            ) as root:
                model = self.model or ScriptedModel(scripted_arithmetic)
                for i in range(self.agents):
                    start_agent(
                        llm=model,
                        memory={"window": 20},
                        conversation_id=_conv_id(i),
                        user_id=USER_ID,
                        tools=[add],
                        name=_agent_name(i),
                        system_prompt=f"You are agent {i} of a simulation.",
                    )
                self._drive(done, ledger)
                root.sync_tree()  # queued behind any exit of a last fault: restarts are done
                report = self._audit(Ledger.load(ledger_path), time.monotonic() - started)
        finally:
            ledger.close()
        report.resumed_from = len(done)
        return report

    # -- driving turns ----------------------------------------------------------------------

    def _drive(self, done: set[tuple[str, int]], ledger: Ledger) -> None:
        workers = max(1, min(self.workers, self.agents))
        threads = [
            threading.Thread(
                target=self._worker,
                args=(list(range(w, self.agents, workers)), done, ledger),
                name=f"sim-worker-{w}",
            )
            for w in range(workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _worker(self, mine: list[int], done: set[tuple[str, int]], ledger: Ledger) -> None:
        try:
            self._work(mine, done, ledger)
        except Exception as exc:  # reported, and the run fails: never a silent short run
            self._errors.append(f"{threading.current_thread().name}: {exc}")

    def _work(self, mine: list[int], done: set[tuple[str, int]], ledger: Ledger) -> None:
        for turn in range(self.turns):
            for i in mine:
                if (_conv_id(i), turn) in done:
                    continue
                messages = self._turn(i, turn)
                ledger.record(_conv_id(i), turn, messages)
                self._acknowledged()
                self._maybe_fault()

    def _turn(self, i: int, turn: int) -> list[dict[str, Any]]:
        agent = AgentHandle.named(_agent_name(i))
        text = f"agent {i} turn {turn}: {turn}+{i}?" if turn % 3 == 0 else f"agent {i} turn {turn}"
        # The same turn id on every attempt, in this run and a resumed one: a retry continues
        # from what an earlier attempt stored and stores nothing twice.
        turn_id = f"{_conv_id(i)}:{turn}"
        for _attempt in range(200):
            try:
                return agent.run(text, timeout=60.0, turn_id=turn_id).messages
            except Retryable:
                time.sleep(0.005)  # a store or agent is restarting: give it a moment
        raise RuntimeError(f"agent {i} could not finish turn {turn} in 200 attempts")

    def _acknowledged(self) -> None:
        with self._acked_lock:
            self._acked += 1
            acked = self._acked
        if self.progress is not None:
            self.progress(1)
        if self.kill_self_after is not None and acked >= self.kill_self_after:
            os.kill(os.getpid(), signal.SIGKILL)

    # -- chaos ------------------------------------------------------------------------------

    def _maybe_fault(self) -> None:
        with self._rng_lock:
            if self._rng.random() >= self.chaos:
                return
            kind = self._rng.choice(FAULTS)
            victim = self._rng.randrange(self.agents)
        try:
            if kind == "kill_store":
                faults.kill(default_store())
            elif kind == "crash_store":
                faults.crash(default_store(), RuntimeError("chaos"))
            elif kind == "kill_agent":
                faults.kill(AgentHandle.named(_agent_name(victim)))
            else:
                faults.inject(
                    AgentHandle.named(_agent_name(victim)), FaultPlan().crash_on_message(2)
                )
        except (NoProcess, CallTimeout):
            return  # it was already down: a fault that found nothing to break
        self._faults[kind] += 1

    def _on_event(self, event: SupervisorEvent) -> None:
        # Several supervisors report from their own threads.
        if event.kind == "restarted":
            with self._acked_lock:
                self._restarts += 1

    # -- the audit --------------------------------------------------------------------------

    def _audit(self, entries: list[dict[str, Any]], seconds: float) -> SimulationReport:
        store = default_store()
        by_conv: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            by_conv.setdefault(entry["conversation"], []).append(entry)
        acknowledged = lost = stored = 0
        examples: list[str] = []
        for conv_id, conv_entries in sorted(by_conv.items()):
            conv_entries.sort(key=lambda e: e["turn"])
            key = Conv(USER_ID, conv_id)
            stored_messages = _retrying(lambda: store.get(key))  # noqa: B023 - called at once
            history = [[m.get("role"), m.get("content")] for m in stored_messages]
            stored += len(history)
            position = 0
            for entry in conv_entries:
                for expected in entry["messages"]:
                    acknowledged += 1
                    found = _find(history, expected, position)
                    if found is None:
                        lost += 1
                        if len(examples) < 5:
                            examples.append(f"{conv_id} turn {entry['turn']}: {expected}")
                    else:
                        position = found + 1
        return SimulationReport(
            agents=self.agents,
            turns_done=len({(e["conversation"], e["turn"]) for e in entries}),
            turns_planned=self.agents * self.turns,
            messages_acknowledged=acknowledged,
            messages_stored=stored,
            lost=lost,
            duplicated=stored - (acknowledged - lost),
            faults=dict(self._faults),
            restarts=self._restarts,
            seconds=seconds,
            lost_examples=examples,
            errors=list(self._errors),
        )


def _retrying(read: Callable[[], Any], attempts: int = 500) -> Any:
    """A read that a store restart may interrupt, tried again until the store is back."""
    for _ in range(attempts - 1):
        try:
            return read()
        except NoProcess:
            time.sleep(0.01)  # the store is restarting; nothing to wait on from here
    return read()


def _find(history: list[list[Any]], expected: list[Any], start: int) -> int | None:
    for index in range(start, len(history)):
        if history[index] == expected:
            return index
    return None


def _conv_id(i: int) -> str:
    return f"sim-{i}"


def _agent_name(i: int) -> str:
    return f"otpmem.sim.agent-{i}"


__all__ = ["AGENTS_NAME", "Ledger", "Simulation", "SimulationReport", "scripted_arithmetic"]
