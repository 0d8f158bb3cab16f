"""A simulation on many nodes: K OS processes, each with its own tree and a share of the
agents, all on one PostgreSQL, audited together for exactly-once.

The coordinator (this process) starts or joins the database (the embedded PostgreSQL under
``DATA/postgres``, or the server of a DSN; one schema per run), takes the run's advisory
lock (a run still going elsewhere is refused), makes one lease per conversation and places
the nodes (``_placement``). It never tells a node what to work on: each node claims
leases in the database (``stores.postgres``'s ``Leases``). It watches progress in the leases table,
injects node faults (``kill_node``: SIGKILL of a whole node, a fifth of ``--chaos``; the
nodes inject the other four kinds among themselves), starts a new incarnation of each
killed node, and once every conversation is done merges the nodes' ledgers
(``ledger-NODE.jsonl``) and audits every conversation read back from PostgreSQL.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..llm import ModelError
from ..stores.postgres import connected, embedded_server
from ._conventions import conv_id
from ._files import (
    Ledger,
    RunParams,
    RunRefused,
    check_run_directory,
    ledger_paths,
)
from ._model import ModelFailed
from ._node import EXIT_MODEL_FAILED
from ._node_config import NodeConfig, summary_path
from ._placement import Placement, placement
from ._report import SimulationReport
from ._simulation import Simulation
from ._timeline import Timeline

POLL = 0.1
EMBEDDED_NAMESPACE = "otpmem_sim"
NODE_STOP_TIMEOUT = 60.0


def merge_ledgers(paths: list[Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """Every acknowledged turn once, and the turns two nodes acknowledged differently.

    A node that took over a conversation redoes the turn in flight with its turn id; if the
    killed node had acknowledged it already, both ledgers hold it, with the same messages.
    """
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    conflicts = []
    for path in paths:
        for entry in Ledger.load(path):
            key = (entry["conversation"], entry["turn"])
            first = merged.setdefault(key, entry)
            if first is not entry and first["messages"] != entry["messages"]:
                conflicts.append(
                    f"{key[0]} turn {key[1]} was acknowledged by {first.get('node')} and "
                    f"{entry.get('node')} with different messages"
                )
    return list(merged.values()), conflicts


@dataclass
class ClusterSimulation(Simulation):
    """``Simulation`` on ``nodes`` processes sharing PostgreSQL (``dsn``, or embedded).

    ``namespace``: the run's schema (made up for a new run; run.json keeps it).
    ``cluster``: the placement (``local`` or ``ray``). ``lease_ttl``: how long a killed
    node's conversations wait before another node may take them over.
    """

    nodes: int = 1
    dsn: str | None = None
    namespace: str | None = None
    cluster: str = "local"
    lease_ttl: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.budget_tokens is not None or self.callbacks is not None:
            # The agents run in the node processes: a budget or an observer here would see
            # none of them. Refused, not ignored.
            raise ValueError("budget_tokens and callbacks are not built for many nodes yet")
        if self.namespace is None:
            self.namespace = (
                EMBEDDED_NAMESPACE if self.dsn is None else f"otpmem_sim_{uuid.uuid4().hex[:10]}"
            )
        self._continued = 0
        self._node_errors: list[str] = []
        self._kills_pending = 0
        # Node kills are drawn as progress is polled, not at a logical point: a run on
        # many nodes keeps no schedule (see RunParams) and cannot be replayed.
        self._rng = random.Random(self.seed)
        self._rng_lock = threading.Lock()

    @property
    def params(self) -> RunParams:
        """The run's parameters, with its store (the DSN without a password) and nodes."""
        from ..stores.postgres import redact

        store = {"kind": "postgres", "dsn": redact(self.dsn or ""), "namespace": self.ns}
        return RunParams(
            self.agents,
            self.turns,
            self.chaos,
            self.seed,
            dict(self.model_info),
            store=store,
            nodes=self.nodes,
        )

    @property
    def ns(self) -> str:
        """The run's schema."""
        assert self.namespace is not None
        return self.namespace

    def run(self) -> SimulationReport:
        """Run (or resume) the simulation on its nodes and audit it."""
        check_run_directory(self.data_dir, self.resume)
        started, wall0 = time.monotonic(), time.time()
        self.timeline = Timeline()
        if self.dsn is not None:  # an unreachable server: refused before anything is made
            with connected(self.dsn):
                pass
        where = placement(self.cluster)  # likewise a Ray that cannot be reached
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.data_dir = self.data_dir.resolve()
            return self._run(where, started, wall0)
        finally:
            where.close()

    def _run(self, where: Placement, started: float, wall0: float) -> SimulationReport:
        with self._database() as dsn, self._run_lock(dsn):
            from ..stores.postgres import Leases, PostgresStore, ensure_leases

            store = PostgresStore.start_link(dsn, namespace=self.ns)  # makes the schema
            leases = Leases(dsn, self.ns, owner="coordinator", ttl=self.lease_ttl)
            try:
                with connected(dsn) as conn:
                    ensure_leases(conn, self.ns)
                previous, _ = merge_ledgers(ledger_paths(self.data_dir))
                if self.resume:
                    self._check_params()
                else:
                    self.params.save(self.data_dir)
                leases.add(conv_id(i) for i in range(self.agents))
                done = len(previous)
                if done:
                    self._rng.seed(f"{self.seed}/{done}")
                if self.on_started is not None:
                    self.on_started(done, self.agents * self.turns)
                self._drive_nodes(dsn, leases, where)
                entries, conflicts = merge_ledgers(ledger_paths(self.data_dir))
                self._errors += self._node_errors + conflicts
                report = self._audit(entries, time.monotonic() - started, store)
            finally:
                leases.close()
                store.stop()
        report.resumed_from = done
        report.nodes, report.store, report.continued = self.nodes, "postgres", self._continued
        self._fill_timeline(entries, wall0)
        return report

    # -- the database -------------------------------------------------------------------------

    @contextmanager
    def _database(self) -> Iterator[str]:
        if self.dsn is not None:
            yield self.dsn
            return
        with embedded_server(self.data_dir / "postgres") as dsn:
            yield dsn

    @contextmanager
    def _run_lock(self, dsn: str) -> Iterator[None]:
        """The run's advisory lock, held on a connection of its own for the whole run."""
        with connected(dsn) as conn:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s))", (f"otpmem.sim.{self.ns}",)
            ).fetchone()
            if not row or not row[0]:
                raise RunRefused(
                    f"the run in schema {self.ns!r} is still going in another process; "
                    "wait for it to end, or stop it first"
                )
            yield

    # -- the nodes ----------------------------------------------------------------------------

    def _config(self, dsn: str, index: int, incarnation: int) -> NodeConfig:
        return NodeConfig(
            index=index,
            nodes=self.nodes,
            node_id=f"n{index}-{uuid.uuid4().hex[:6]}",
            dsn=dsn,
            namespace=self.ns,
            agents=self.agents,
            turns=self.turns,
            data_dir=str(self.data_dir),
            chaos=self.chaos * 0.8,  # four of the five kinds: the fifth is kill_node, here
            seed=self.seed,
            workers=self.workers,
            lease_ttl=self.lease_ttl,
            incarnation=incarnation,
            model=dict(self.model_info),
            started_at=time.time() - self.timeline.now(),  # second 0 of the run's timeline
        )

    def _drive_nodes(self, dsn: str, leases: Any, where: Placement) -> None:
        running: dict[int, Any] = {}
        incarnations: dict[int, int] = {}
        started_ids: list[str] = []
        try:

            def launch(index: int) -> None:
                incarnation = incarnations.get(index, -1) + 1
                incarnations[index] = incarnation
                config = self._config(dsn, index, incarnation)
                running[index] = where.start_node(config)
                started_ids.append(config.node_id)

            # Counted before the launch: a node placed slowly (a Ray actor) lets the others
            # run turns meanwhile, and each turn must still draw its chance of a node fault.
            seen = leases.progress(self.turns)
            for index in range(self.nodes):
                launch(index)
            stop_sent: float | None = None
            while running:
                time.sleep(POLL)  # nodes report through the database: nothing to wait on
                if self._stopping.is_set() and stop_sent is None:
                    for node in running.values():
                        node.stop()
                    stop_sent = time.monotonic()
                if stop_sent is not None and time.monotonic() - stop_sent > NODE_STOP_TIMEOUT:
                    for node in running.values():
                        node.kill()
                total = leases.progress(self.turns)
                for _ in range(max(0, total - seen)):
                    self._acknowledged()
                self._maybe_kill_node(running, leases, max(0, total - seen))
                seen = max(seen, total)
                for index, node in list(running.items()):
                    status = node.poll()
                    if status is None:
                        continue
                    del running[index]
                    node.close()
                    if status == 0:
                        continue
                    if status < 0 and not self._stopping.is_set():
                        self._restarts += 1
                        self.timeline.restart()
                        launch(index)  # a new incarnation, under a new owner id
                    elif status == EXIT_MODEL_FAILED or status > 0:
                        self._node_failed(node, status)
        finally:
            for node in running.values():
                node.close()
            self._read_summaries(started_ids)

    def _maybe_kill_node(self, running: dict[int, Any], leases: Any, turns: int) -> None:
        # A node fault drawn for a turn waits (across polls) for a node that holds leases,
        # so how fast the nodes run does not decide whether the fault happens.
        with self._rng_lock:
            self._kills_pending += sum(self._rng.random() < self.chaos / 5 for _ in range(turns))
            if not self._kills_pending:
                return
            # Only a node that holds leases: each node fault must cost a takeover.
            owners = leases.owners()
            holding = [i for i in sorted(running) if running[i].node_id in owners]
            if not holding:
                return
            victim = self._rng.choice(holding)
            self._kills_pending -= 1
        running[victim].kill()
        self._faults["kill_node"] += 1
        self.timeline.fault("kill_node")

    def _node_failed(self, node: Any, status: int) -> None:
        tail = node.log_tail() if hasattr(node, "log_tail") else ""
        self._node_errors.append(
            f"node {node.node_id} exited with status {status}" + (f": {tail}" if tail else "")
        )
        self._stopping.set()

    def _read_summaries(self, node_ids: list[str]) -> None:
        """Add up what each node that ended (not one that was killed) reported."""
        fatal: ModelFailed | None = None
        for node_id in node_ids:
            try:
                summary = json.loads(summary_path(self.data_dir, node_id).read_text("utf-8"))
            except (OSError, ValueError):
                continue  # killed: what it counted died with it (the ledger did not)
            for kind, count in dict(summary.get("faults") or {}).items():
                self._faults[kind] += int(count)
            self._restarts += int(summary.get("restarts", 0))
            self._retries += int(summary.get("retries", 0))
            self._continued += int(summary.get("continued", 0))
            self._node_errors += [f"node {node_id}: {e}" for e in summary.get("errors", [])]
            self._interrupted |= bool(summary.get("interrupted")) and self._stopping.is_set()
            self._node_times(summary)
            if summary.get("fatal") and fatal is None:
                error = ModelError(
                    str(summary.get("fatal_error") or summary["fatal"]),
                    retryable=bool(summary.get("fatal_retryable", True)),
                )
                fatal = ModelFailed(str(summary["fatal"]), error, 1)
        if fatal is not None:
            raise fatal

    def _node_times(self, summary: dict[str, Any]) -> None:
        self.timeline.add_event_counts(summary.get("events") or {})

    def _fill_timeline(self, entries: list[dict[str, Any]], wall0: float) -> None:
        """This run's turns, from the ledgers (a killed node's turns are there too)."""
        offset = time.time() - self.timeline.now()
        self.timeline.set_turns(
            sorted(
                (float(e["at"]) - offset, float(e.get("latency", 0.0)))
                for e in entries
                if isinstance(e.get("at"), int | float) and e["at"] >= wall0
            )
        )


__all__ = ["ClusterSimulation", "merge_ledgers"]
