"""One node of a multi-node simulation: an OS process with its own application tree on the
run's PostgreSQL, working the conversations whose leases it holds.

A node claims the leases of its share of the conversations (``index``, ``index + nodes``,
...), then, as long as the run has unfinished conversations, any lease nobody holds or a
dead node let expire, up to its share's size. Each turn runs under the turn id
``<conversation>:<turn>`` that every node uses, so a turn a killed node half-stored is
continued, not stored again. After each acknowledged turn the node writes its own fsynced
ledger (``ledger-NODE.jsonl``) and then advances the lease's progress; it stops working on
a conversation the moment the database says its lease is gone. In-process chaos (store and
agent faults) is the one-process simulation's; whole-node faults come from the coordinator.

Run by a placement: ``python -m otpmem.simulate._node`` reads a ``NodeConfig`` line on stdin
(then ``stop`` ends it after the turns in flight, and end of input, the coordinator gone,
SIGKILLs it: a node never outlives its run), or ``run_node(config, stop)`` in a Ray actor.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..agents import AgentHandle
from ..app import start, start_agent
from ..llm import ChatModel, ScriptedModel
from ..messages import Conv
from ..stores import StoreError, default_store
from ..stores.postgres import Heartbeat, Lease, Leases
from ._conventions import USER_ID, Stopped, agent_index, agent_name, conv_id, retrying
from ._files import Ledger
from ._model import add, scripted_arithmetic
from ._node_config import NodeConfig, ledger_path, write_summary
from ._schedule import KILL_AGENT, Fault, Schedule
from ._simulation import Simulation
from ._timeline import Timeline

EXIT_MODEL_FAILED = 3
EXIT_UNAVAILABLE = 2


class _Dropped(Exception):
    """The node lost this conversation's lease: another node works it now."""


class NodeSimulation(Simulation):
    """The one-process simulation's turns, chaos and retries, on the leases this node holds."""

    def __init__(self, config: NodeConfig, stop: threading.Event) -> None:
        super().__init__(
            agents=config.agents,
            turns=config.turns,
            data_dir=Path(config.data_dir),
            chaos=config.chaos,
            seed=config.seed,
            workers=config.workers,
            model_info=dict(config.model),
        )
        self.config = config
        # Every node draws the same schedule: a point's fault is the same wherever it runs.
        self.schedule = Schedule.draw(config.seed, config.agents, config.turns, config.chaos)
        # A kill_agent whose victim is not on this node hits one that is, drawn from here.
        self._rng = random.Random(f"{config.seed}/node/{config.index}/{config.incarnation}")
        self._rng_lock = threading.Lock()
        self._outer_stop = stop
        self._queue: queue.Queue[int] = queue.Queue()
        self._advances: queue.Queue[tuple[int, int]] = queue.Queue()
        self._workers_done = threading.Event()
        self._next: dict[int, int] = {}
        self._epoch: dict[int, int] = {}
        self._active: set[int] = set()  # leases held, conversation unfinished
        self._started: set[int] = set()  # agents started (they live as long as the node)
        self._dropped: set[int] = set()
        self._state = threading.Lock()
        self._continued = 0
        self._acked_here = 0
        self._model_client: ChatModel = ScriptedModel(scripted_arithmetic)
        self.capacity = math.ceil(config.agents / config.nodes)
        self.leases = Leases(
            config.dsn, config.namespace, config.node_id, config.lease_ttl, config.lease_ttl / 2
        )

    # -- the node's life ----------------------------------------------------------------------

    def run_node(self, model: ChatModel) -> dict[str, Any]:
        """Start the tree, work until every conversation of the run is done (or ``stop``),
        and return the node's summary."""
        cfg = self.config
        self.timeline = Timeline(time.time, start=cfg.started_at)
        root = start(
            store="postgres",
            dsn=cfg.dsn,
            namespace=cfg.namespace,
            intensity=10_000,
            period=1.0,
            listeners=[self._on_event],
            # Every add holds its conversation's lease as it commits: a node frozen past
            # its leases thaws to refusals, not to writes beside its successor's.
            fence=lambda conv: self.leases.fence(conv.conversation_id),
        )
        ledger = Ledger(ledger_path(cfg.data_dir, cfg.node_id))
        heartbeat = Heartbeat(self.leases, cfg.turns, on_lost=self._lost).start()
        workers: list[threading.Thread] = []
        try:
            self._model_client = model
            for i in cfg.share:
                lease = self.leases.claim(conv_id(i))
                if lease is not None:
                    self._take(i, lease)
            workers = [
                threading.Thread(target=self._worker_loop, args=(ledger,), name=f"node-w{w}")
                for w in range(max(1, cfg.workers))
            ]
            workers.append(threading.Thread(target=self._advance_loop, name="node-advancer"))
            for worker in workers:
                worker.start()
            self._coordinate()
        finally:
            self._stopping.set()
            for worker in workers[:-1]:
                worker.join()
            self._workers_done.set()  # the advancer records what they acknowledged, then ends
            if workers:
                workers[-1].join()
            heartbeat.stop()
            ledger.close()
            if root.alive:
                root.stop("shutdown", 60.0)
            self.leases.close()
        return self._summary()

    def _coordinate(self) -> None:
        """Claim what dead nodes left, until the run is done or the node is told to stop."""
        every = self.config.lease_ttl / 4
        while not self._stopping.is_set():
            if self._outer_stop.wait(every):
                self._interrupted = True
                return
            if self._fatal is not None or self._errors:
                return
            try:
                with self._state:
                    room = self.capacity - len(self._active)
                for lease in self.leases.claim_free(room, self.config.turns):
                    self._take(agent_index(lease.name), lease)
                with self._state:
                    idle = not self._active
                if idle and self.leases.remaining(self.config.turns) == 0:
                    return
            except StoreError as exc:  # the database is away: keep trying while leases last
                print(f"node {self.config.node_id}: {exc}", file=sys.stderr, flush=True)

    def _take(self, i: int, lease: Lease) -> None:
        name = lease.name
        if lease.progress >= self.config.turns:
            self.leases.release(name)
            return
        if i not in self._started:
            start_agent(
                llm=self._model_client,
                memory={"window": 20},
                conversation_id=name,
                user_id=USER_ID,
                tools=[add],
                name=agent_name(i),
                system_prompt=f"You are agent {i} of a simulation.",
            )
            self._started.add(i)
        with self._state:
            self._next[i] = lease.progress
            self._epoch[i] = lease.epoch
            self._active.add(i)
            self._dropped.discard(i)
        self._queue.put(i)

    def _lost(self, names: list[str]) -> None:
        with self._state:
            for name in names:
                i = agent_index(name)
                self._dropped.add(i)
                self._active.discard(i)

    def _drop(self, i: int) -> None:
        """Stop working on a conversation whose lease this node may no longer hold, and let
        it go in the database so that it does not wait out the lease to be taken over."""
        name = conv_id(i)
        self._lost([name])
        with contextlib.suppress(StoreError):  # unreachable: it expires, as a dead node's do
            self.leases.release(name)

    # -- turns --------------------------------------------------------------------------------

    def _worker_loop(self, ledger: Ledger) -> None:
        while not self._stopping.is_set():
            try:
                i = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                self._serve(i, ledger)
            except (_Dropped, Stopped):
                continue
            except StoreError as exc:  # the leases' database: this conversation waits
                if not self._lease_gone(i):
                    print(f"node {self.config.node_id}: {exc}", file=sys.stderr, flush=True)
                self._drop(i)
            except Exception as exc:  # reported, and the run fails: never a silent short run
                if self._lease_gone(i):
                    # It failed on what its successor did meanwhile (a node frozen mid-turn
                    # reads the turns taken over): the conversation is the successor's.
                    self._drop(i)
                    continue
                self._errors.append(f"node {self.config.node_id}, agent {i}: {exc!r}")
                self._stopping.set()

    def _serve(self, i: int, ledger: Ledger) -> None:
        name = conv_id(i)
        self._check_lease(i)
        turn = self._next[i]
        if self._epoch.pop(i, 1) > 1 and self._begun(name, turn):
            with self._state:
                self._continued += 1
        began = time.monotonic()
        messages = self._turn(i, turn)
        latency = time.monotonic() - began
        ledger.record(
            name, turn, messages, at=time.time(), latency=latency, node=self.config.node_id
        )
        self._acknowledged()
        with self._state:
            self._acked_here += 1
        self._maybe_fault(i, turn)
        # The lease's progress is recorded by the advancer, grouped with the other workers'
        # (one commit for many): the conversation's next turn waits for it, no worker does.
        self._advances.put((i, turn + 1))

    def _advance_loop(self) -> None:
        """Record acknowledged turns in the leases, many at a time; queue each conversation
        for its next turn once its lease is confirmed, drop it if the lease was lost."""
        while True:
            try:
                batch = [self._advances.get(timeout=0.05)]
            except queue.Empty:
                if self._workers_done.is_set():
                    return
                continue
            while True:
                try:
                    batch.append(self._advances.get_nowait())
                except queue.Empty:
                    break
            progress = {conv_id(i): turn for i, turn in batch}
            try:
                kept = self.leases.advance_many(progress)
            except StoreError as exc:  # the database is away: these wait out their leases
                print(f"node {self.config.node_id}: {exc}", file=sys.stderr, flush=True)
                kept = set()
            for i, turn in batch:
                name = conv_id(i)
                if name not in kept:
                    self._drop(i)
                    continue
                self._next[i] = turn
                if turn < self.turns:
                    self._queue.put(i)
                    continue
                with self._state:
                    self._active.discard(i)
                with contextlib.suppress(StoreError):
                    self.leases.release(name)

    def _begun(self, name: str, turn: int) -> bool:
        """Whether an earlier owner stored part (or all) of this turn before it died."""
        store = default_store()
        key = f"turn:{name}:{turn}:0"
        position = retrying(lambda: store.key_position(Conv(USER_ID, name), key))
        return position is not None

    def _check_lease(self, i: int) -> None:
        """Raise ``_Dropped`` unless this node still holds the lease (renewing it if the
        local certainty ran out)."""
        name = conv_id(i)
        with self._state:
            dropped = i in self._dropped
        if dropped:
            raise _Dropped(name)
        if not self.leases.held(name) and not self.leases.advance(name, self._next[i]):
            self._drop(i)
            raise _Dropped(name)

    def _lease_gone(self, i: int) -> bool:
        """Whether the database says this node no longer holds conversation ``i``'s lease."""
        try:
            return not self.leases.advance(conv_id(i), self._next[i])
        except StoreError:
            return False  # unreachable: it cannot say, so the failure stands

    def _run_turn(self, agent: AgentHandle, text: str, turn_id: str) -> list[dict[str, Any]]:
        # Every attempt first makes sure the lease is still ours: a node that lost it must
        # not write, even a write its idempotency key would make harmless.
        self._check_lease(agent_index(turn_id.rsplit(":", 1)[0]))
        return super()._run_turn(agent, text, turn_id)

    def _victim(self, fault: Fault) -> int | None:
        if fault.kind != KILL_AGENT or fault.victim in self._started:
            return fault.victim
        with self._rng_lock:
            return self._rng.choice(sorted(self._started))

    def _summary(self) -> dict[str, Any]:
        return {
            "node": self.config.node_id,
            "index": self.config.index,
            "acked": self._acked_here,
            "faults": dict(self._faults),
            "restarts": self._restarts,
            "retries": self._retries,
            "continued": self._continued,
            "errors": list(self._errors),
            "fatal": str(self._fatal) if self._fatal is not None else None,
            "fatal_error": str(self._fatal.error) if self._fatal is not None else None,
            "fatal_retryable": self._fatal.error.retryable if self._fatal is not None else None,
            "interrupted": self._interrupted,
            "events": self.timeline.event_counts(),
        }


def _model(info: dict[str, str]) -> ChatModel:
    if info.get("kind", "scripted") == "scripted":
        return ScriptedModel(scripted_arithmetic)
    from ._model import openai_model

    return openai_model(
        info["base_url"], info["name"], lambda text: print(text, file=sys.stderr, flush=True)
    )


def run_node(config: NodeConfig, stop: threading.Event) -> int:
    """Run one node to its end; its exit status (0 done or stopped, 2 no database, 3 the
    model failed, 1 a worker's error)."""
    node = NodeSimulation(config, stop)
    model = _model(config.model)
    try:
        summary = node.run_node(model)
    except StoreError as exc:
        write_summary(config, {"node": config.node_id, "errors": [str(exc)], "fatal": None})
        print(f"node {config.node_id}: {exc}", file=sys.stderr, flush=True)
        return EXIT_UNAVAILABLE
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
    write_summary(config, summary)
    if summary["fatal"]:
        return EXIT_MODEL_FAILED
    return 1 if summary["errors"] else 0


def _watch_stdin(stop: threading.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            stop.set()
    # End of input: the coordinator is gone. A node never outlives its run.
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    """``python -m otpmem.simulate._node``: a NodeConfig line on stdin, then ``stop`` or EOF."""
    config = NodeConfig.loads(sys.stdin.readline())
    # Ctrl-C in a terminal reaches the whole process group: the coordinator answers it (it
    # asks the nodes to stop after the turns in flight), not each node on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = threading.Event()
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True, name="stdin").start()
    return run_node(config, stop)


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["NodeSimulation", "run_node"]
