"""A multi-agent simulation under chaos, audited for loss against an independent ledger.

Supervised agents hold conversations on the default store (LevelDB under the run's
directory) while faults are injected into the store and the agents. Every turn that an
agent acknowledges is written to a ledger (``ledger.jsonl``, fsynced) that the store never
sees; at the end every conversation is read back and every acknowledged message must be
there, in order, and nothing else: every turn is retried with the same turn id after a
fault, so each message is stored exactly once (``messages stored == messages acked``). A run
killed with SIGKILL can be resumed: the ledger says where each agent was, the turn in flight
continues from what it stored, and the audit covers both runs. The run's parameters are kept
beside the ledger (``run.json``), with its fault schedule: a resumed run is the run that was
started, and a replay (``schedule=`` another run's) injects the same faults at the same
points, whatever the number of workers.

This module is the run: its tree, its workers' turns and retries, where chaos strikes. The
schedule is ``_schedule``'s, how a fault is injected ``_chaos``'s, the audit and the report
it fills ``_report``'s.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..actors import CallTimeout, NoProcess, ServerExited
from ..agents import AgentHandle, Callbacks, TurnFailed
from ..app import start, start_agent
from ..guardrails import PolicyViolation, TokenBudget
from ..llm import ChatModel, ScriptedModel
from ..stores import default_store
from ..stores.leveldb import files as store_files
from ..supervisors import SupervisorEvent, SupervisorHandle
from ._chaos import Chaos
from ._conventions import USER_ID, Stopped, agent_name, conv_id
from ._files import (
    FAULT_LOG,
    LEDGER,
    FaultLog,
    Ledger,
    RunMismatch,
    RunParams,
    check_run_directory,
)
from ._model import ModelFailed, ModelWatch, add, scripted_arithmetic
from ._report import SimulationReport, audit
from ._schedule import Fault, Schedule
from ._timeline import Timeline

Retryable = (NoProcess, ServerExited, TurnFailed, CallTimeout)
TURN_ATTEMPTS = 200
TURN_TIMEOUT = 60.0
MODEL_FAILURE_BUDGET = 3
"""Turns in a row that may fail on the model (after its client's own retries) before the
run stops: the model is down, and every further attempt would only wait and fail."""


@dataclass
class Simulation:
    """``Simulation(agents=20, turns=10, data_dir="run", chaos=0.05, seed=1).run()``.

    ``progress(n)`` hears of each acknowledged turn, ``on_started(done, planned)`` once the
    store is open and the ledger read, ``on_retry(text)`` of each turn the model failed.
    ``stop()`` (from a signal handler, say) ends the run after the turns in flight.
    ``schedule``: the faults to inject (another run's, to replay it: ``replay_of`` says
    whose); by default drawn from ``seed`` and ``chaos``, the same at any ``workers``.
    """

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
    on_started: Callable[[int, int], None] | None = None
    on_retry: Callable[[str], None] | None = None
    model_info: dict[str, str] = field(default_factory=lambda: {"kind": "scripted"})
    model_failure_budget: int = MODEL_FAILURE_BUDGET
    budget_tokens: int | None = None
    callbacks: Callbacks | None = None
    schedule: Schedule | None = None
    replay_of: str | None = None

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        if self.agents < 1 or self.turns < 1:
            raise ValueError("agents and turns must be >= 1")
        if not 0.0 <= self.chaos <= 1.0:
            raise ValueError(f"chaos is a probability per turn in [0, 1], got {self.chaos}")
        if self.schedule is not None:
            self.schedule.check(self.agents, self.turns)
        self._faults: Counter[str] = Counter()
        self._restarts = 0
        self._acked = 0
        self._acked_lock = threading.Lock()
        self._errors: list[str] = []
        self._retries = 0
        self._model = ModelWatch(self.model_failure_budget, self.on_retry)
        self._stopping = threading.Event()
        self._chaos = Chaos(self.agents, self._stopping)
        self._fault_log: FaultLog | None = None
        self._interrupted = False
        self._fatal: ModelFailed | None = None
        self.timeline = Timeline()
        self._over_budget: set[int] = set()
        self._turns_over_budget = 0

    @property
    def params(self) -> RunParams:
        """The parameters that define this run, as ``run.json`` keeps them."""
        return RunParams(
            self.agents,
            self.turns,
            self.chaos,
            self.seed,
            dict(self.model_info),
            schedule=self.schedule,
            replay_of=self.replay_of,
        )

    def stop(self) -> None:
        """End the run after the turns in flight; the report says it was interrupted."""
        self._interrupted = True
        self._stopping.set()

    def run(self) -> SimulationReport:
        """Run (or resume) the simulation and audit it."""
        ledger_path = self.data_dir / LEDGER
        check_run_directory(self.data_dir, self.resume)
        started = time.monotonic()
        self.timeline = Timeline()
        if self.resume:
            store_files.check_readable(self.data_dir)  # at once: StoreLocked or StoreCorrupt
        self.data_dir.mkdir(parents=True, exist_ok=True)
        root = self._start_tree()
        try:
            # The store's lock is held from here on: only now is the ledger read, so a run
            # that finished meanwhile is seen whole.
            previous = Ledger.load(ledger_path)
            if self.resume:
                self._check_params()
            self._settle_schedule()
            if not self.resume:
                self.params.save(self.data_dir)
            # The points already done are skipped, and their faults with them: the resumed
            # run injects the rest of the schedule, as the first run would have.
            done = {(e["conversation"], e["turn"]) for e in previous}
            ledger = Ledger(ledger_path)
            try:
                self._fault_log = FaultLog(self.data_dir / FAULT_LOG)
                model = self.model or ScriptedModel(scripted_arithmetic)
                for i in range(self.agents):
                    start_agent(
                        llm=model,
                        memory={"window": 20},
                        conversation_id=conv_id(i),
                        user_id=USER_ID,
                        tools=[add],
                        name=agent_name(i),
                        system_prompt=f"You are agent {i} of a simulation.",
                        guardrails=self._guardrails(),
                        callbacks=self.callbacks,
                    )
                if self.on_started is not None:
                    self.on_started(len(done), self.agents * self.turns)
                self._drive(done, ledger)
                if self._fatal is not None:
                    raise self._fatal
                root.sync_tree()  # queued behind any exit of a last fault: restarts are done
                report = self._audit(Ledger.load(ledger_path), time.monotonic() - started)
            finally:
                ledger.close()
                if self._fault_log is not None:
                    self._fault_log.close()
        finally:
            if root.alive:
                root.stop("shutdown", 60.0)
        report.resumed_from = len(done)
        report.replay_of = self.replay_of or ""
        return report

    def _check_params(self) -> None:
        stored = RunParams.load(self.data_dir)
        if stored is None:
            return  # a run from before run.json: trust the caller
        differences = stored.differences(self.params)
        if differences:
            raise RunMismatch(differences)

    def _settle_schedule(self) -> None:
        """The schedule of this run: a resumed run's from its run.json, else the one given,
        else drawn from the seed."""
        stored = RunParams.load(self.data_dir) if self.resume else None
        if stored is not None and stored.schedule is not None:
            if self.schedule is not None and self.schedule != stored.schedule:
                raise RunMismatch([("schedule", repr(stored.schedule), repr(self.schedule))])
            self.schedule, self.replay_of = stored.schedule, stored.replay_of
        if self.schedule is None:
            self.schedule = Schedule.draw(self.seed, self.agents, self.turns, self.chaos)

    def _start_tree(self) -> SupervisorHandle:
        try:
            return start(self.data_dir, intensity=10_000, period=1.0, listeners=[self._on_event])
        except Exception as exc:
            # The store's own error (locked, corrupt) is the news, not the two supervisors
            # that reported it on their way up.
            cause = store_files.store_error_in(exc)
            if cause is not None:
                raise cause from None
            raise

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
        try:
            for thread in threads:
                thread.join()
        except BaseException:  # a KeyboardInterrupt in join: let the workers finish first
            self._stopping.set()
            for thread in threads:
                thread.join()
            raise

    def _worker(self, mine: list[int], done: set[tuple[str, int]], ledger: Ledger) -> None:
        try:
            self._work(mine, done, ledger)
        except Stopped:
            return
        except Exception as exc:  # reported, and the run fails: never a silent short run
            self._errors.append(f"{threading.current_thread().name}: {exc}")

    def _work(self, mine: list[int], done: set[tuple[str, int]], ledger: Ledger) -> None:
        for turn in range(self.turns):
            for i in mine:
                if (conv_id(i), turn) in done:
                    continue
                if i in self._over_budget:
                    with self._acked_lock:
                        self._turns_over_budget += 1
                    continue
                if self._stopping.is_set():
                    return
                try:
                    messages = self._turn(i, turn)
                except PolicyViolation as refused:
                    # The budget stops this agent: what its refused turn stored (tool
                    # rounds before a refused call) is audited like any turn's.
                    messages = refused.stored
                    with self._acked_lock:
                        self._over_budget.add(i)
                ledger.record(conv_id(i), turn, messages)
                self._acknowledged()
                self._maybe_fault(i, turn)

    def _guardrails(self) -> list[TokenBudget]:
        """``--budget-tokens``: each conversation may spend that many tokens."""
        if self.budget_tokens is None:
            return []
        return [TokenBudget(self.budget_tokens, scope="conversation")]

    def _turn(self, i: int, turn: int) -> list[dict[str, Any]]:
        agent = AgentHandle.named(agent_name(i))
        text = f"agent {i} turn {turn}: {turn}+{i}?" if turn % 3 == 0 else f"agent {i} turn {turn}"
        began = time.monotonic()
        for _attempt in range(TURN_ATTEMPTS):
            if self._stopping.is_set():
                raise Stopped
            try:
                # A crash planned for this agent rides on the attempt's call.
                messages = self._chaos.attempt(
                    i, agent, lambda: self._run_turn(agent, text, f"{conv_id(i)}:{turn}")
                )
            except Retryable as exc:
                self._turn_failed(i, turn, exc)
                time.sleep(0.005)  # a store or agent is restarting: give it a moment
            else:
                self._model.answered()
                self.timeline.turn(time.monotonic() - began)
                return messages
        raise RuntimeError(f"agent {i} could not finish turn {turn} in {TURN_ATTEMPTS} attempts")

    def _run_turn(self, agent: AgentHandle, text: str, turn_id: str) -> list[dict[str, Any]]:
        """One attempt at a turn: the only place a turn is run (a retry calls it again).

        The same turn id on every attempt, in this run and a resumed one: a retry continues
        from what an earlier attempt stored and stores nothing twice.
        """
        return agent.run(text, timeout=TURN_TIMEOUT, turn_id=turn_id).messages

    def _turn_failed(self, i: int, turn: int, exc: BaseException) -> None:
        with self._acked_lock:
            self._retries += 1
        failure = self._model.failed(f"agent {i}, turn {turn}", exc)
        if failure is not None:
            with self._acked_lock:
                self._fatal = self._fatal or failure
            self._stopping.set()
            raise Stopped

    def _acknowledged(self) -> None:
        with self._acked_lock:
            self._acked += 1
            acked = self._acked
        if self.progress is not None:
            self.progress(1)
        if self.kill_self_after is not None and acked >= self.kill_self_after:
            os.kill(os.getpid(), signal.SIGKILL)

    # -- chaos ------------------------------------------------------------------------------

    def _maybe_fault(self, i: int, turn: int) -> None:
        """Inject the schedule's fault after agent ``i``'s ``turn``, if it holds one."""
        fault = self.schedule.at(i, turn) if self.schedule is not None else None
        if fault is None:
            return
        victim = self._victim(fault)
        self._chaos.inject(fault, victim)
        with self._acked_lock:
            self._faults[fault.kind] += 1
        self.timeline.fault(fault.kind)
        if self._fault_log is not None:
            self._fault_log.record(Fault(fault.turn, fault.agent, fault.kind, victim))

    def _victim(self, fault: Fault) -> int | None:
        """The agent ``fault`` hits (None: the store): the schedule's."""
        return fault.victim

    def _on_event(self, event: SupervisorEvent) -> None:
        # Several supervisors report from their own threads.
        self._chaos.tree_changed()
        if event.kind == "restarted":
            with self._acked_lock:
                self._restarts += 1
            self.timeline.restart()

    # -- the audit --------------------------------------------------------------------------

    def _audit(
        self, entries: list[dict[str, Any]], seconds: float, store: Any = None
    ) -> SimulationReport:
        found = audit(entries, store if store is not None else default_store())
        return SimulationReport(
            agents=self.agents,
            turns_done=found.turns_done,
            turns_planned=self.agents * self.turns,
            messages_acknowledged=found.acknowledged,
            messages_stored=found.stored,
            lost=found.lost,
            duplicated=found.stored - (found.acknowledged - found.lost),
            faults=dict(self._faults),
            restarts=self._restarts,
            seconds=seconds,
            lost_examples=found.lost_examples,
            errors=list(self._errors),
            data_dir=str(self.data_dir),
            retries=self._retries,
            interrupted=self._interrupted,
            stopped_by_budget=len(self._over_budget),
            turns_over_budget=self._turns_over_budget,
        )


__all__ = ["Simulation"]
