"""The observer's one data source: a JSON-ready snapshot of the running node.

What it reads, and how, so that watching never changes what is watched:

- processes (state, mailbox length, server type): read off the runtime's process table,
  no call, no message;
- the supervision tree: ``which_children`` and ``info`` calls to each supervisor (OTP's
  observer does the same), from the observer's own thread, each with a timeout;
- supervisor events: the observer subscribes to every supervisor it finds; the listener
  only appends to a bounded list;
- stores: their public reads (``conversations``, ``count``) and, where the server has one,
  the LevelDB committer's counters (group commits, writes);
- agents: a ``TurnMeter`` fed by the agents' callbacks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter, deque
from collections.abc import Hashable, Iterable
from typing import Any

from ..actors import ActorError, CallTimeout, Handle, live_processes
from ..actors import sys as otp_sys
from ..actors.runtime import QUEUED, RUNNING, Process, scheduler_count
from ..reprs import short_repr
from ..stores import ChatMemory, StoreError
from ..supervisors import Supervisor, SupervisorEvent, SupervisorHandle
from ._meter import TurnMeter
from ._sampler import Sampler

CALL_TIMEOUT = 1.0
EVENTS_KEPT = 200
CHILDREN_SHOWN = 50
"""Children listed per supervisor; the rest are counted (a simple_one_for_one of 100,000)."""
PROCESSES_SHOWN = 50
COUNTED_CONVERSATIONS = 20_000
"""Conversations a store's message count reads per sample; past it, messages is a floor."""


def label_of(value: object) -> str:
    """A child id or a name as shown: a str as it is, anything else as its repr."""
    # An exact str: a subclass's own __hash__ and __eq__ would run where labels are counted.
    return value if type(value) is str else short_repr(value)


def state_of(process: Process) -> str:
    """idle, runnable (queued on a scheduler), running, or waiting (suspended in a wait)."""
    if process.waiting is not None:
        return "waiting"
    if process.run_state == RUNNING:
        return "running"
    if process.run_state == QUEUED:
        return "runnable"
    return "idle"


def _labels(tree: list[dict[str, Any]]) -> dict[str, str]:
    """pid -> the label the tree shows for it: an unnamed supervisor's child id
    (``default_store``), where its pid alone would say nothing."""
    labels: dict[str, str] = {}
    todo = list(tree)
    while todo:
        node = todo.pop()
        if node.get("pid") and node.get("label"):
            labels[node["pid"]] = node["label"]
        todo.extend(node.get("children", ()))
    return labels


def _labelled(event: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The event, its supervisor named as the tree names it (not ``<0.2.0>``)."""
    label = labels.get(event["supervisor"])
    return event if label is None else {**event, "supervisor": label}


def _process_row(process: Process, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "pid": repr(process.pid),
        "name": process.name or (labels or {}).get(repr(process.pid)),
        "type": type(process.server).__name__,
        "state": state_of(process),
        "mailbox": len(process.mailbox),
        "traced": otp_sys.traced(Handle(process)),
    }


class Observer(Sampler):
    """Snapshots of the running node for the web page, the terminal view and Prometheus::

    observer = Observer()          # every supervision tree of the node
    observer.sample()["tree"]      # or observer.start(interval=0.5); observer.latest()
    observer.close()
    """

    def __init__(
        self, roots: Iterable[SupervisorHandle] | None = None, meter: TurnMeter | None = None
    ) -> None:
        self.roots = None if roots is None else list(roots)
        self.meter = meter if meter is not None else TurnMeter()
        self.started = time.time()
        self._lock = threading.Lock()
        self._events: deque[dict[str, Any]] = deque(maxlen=EVENTS_KEPT)
        self._event_counts: Counter[tuple[str, str]] = Counter()  # (supervisor, kind)
        self._restarts: Counter[tuple[str, str]] = Counter()  # (supervisor, child id)
        # A dynamic supervisor's children have no id: each restart is carried from the pid
        # that exited to the one that replaced it.
        self._restarts_of_pid: dict[str, int] = {}
        self._exited: dict[str, str] = {}  # supervisor -> the pid of its child that exited
        self._subscribed: dict[Any, SupervisorHandle] = {}  # pid -> handle
        self._store_rates: dict[str, tuple[float, int]] = {}
        self._latest: dict[str, Any] | None = None
        super().__init__()

    # -- events -----------------------------------------------------------------------------

    def _on_event(self, event: SupervisorEvent) -> None:
        # On the supervisor's thread: append and count, nothing that could wait.
        child = None if event.child_id is None else label_of(event.child_id)
        pid = None if event.pid is None else repr(event.pid)
        row = {
            "t": time.time(),
            "kind": event.kind,
            "supervisor": event.supervisor,
            "child": child,
            "pid": pid,
            "reason": None if event.reason is None else short_repr(event.reason),
        }
        with self._lock:
            self._events.append(row)
            self._event_counts[(event.supervisor, event.kind)] += 1
            if event.kind == "restarted":
                self._restarts[(event.supervisor, child or "")] += 1
            if child is None and pid is not None:
                if event.kind == "exited":
                    self._exited[event.supervisor] = pid
                elif event.kind == "restarted":
                    before = self._exited.pop(event.supervisor, None)
                    carried = self._restarts_of_pid.pop(before, 0) if before else 0
                    self._restarts_of_pid[pid] = carried + 1

    def _subscribe(self, handle: SupervisorHandle, pid: Any) -> None:
        if pid in self._subscribed:
            return
        try:
            handle.subscribe(self._on_event, CALL_TIMEOUT)
        except ActorError:
            return  # gone meanwhile: its successor is found on the next sample
        self._subscribed[pid] = handle

    # -- the tree ---------------------------------------------------------------------------

    def _roots(self, processes: list[Process]) -> list[SupervisorHandle]:
        if self.roots is not None:
            return [r for r in self.roots if r.alive]
        # A root is a supervisor no supervisor started (nobody up the links keeps it).
        return [
            SupervisorHandle(p)
            for p in processes
            if isinstance(p.server, Supervisor)
            and not (p.parent is not None and isinstance(p.parent.server, Supervisor))
            and not p.dead
        ]

    def _supervisor_node(
        self, handle: SupervisorHandle, label: Hashable, by_pid: dict[Any, Process]
    ) -> dict[str, Any]:
        pid = handle.pid
        process = by_pid.get(pid)
        name = process.name if process is not None and process.name else repr(pid)
        node: dict[str, Any] = {
            "id": label_of(label),
            "label": process.name if process is not None and process.name else label_of(label),
            "kind": "supervisor",
            "type": type(process.server).__name__ if process is not None else "Supervisor",
            "pid": None if pid is None else repr(pid),
            "status": "running",
            "children": [],
            "more_children": 0,
        }
        if process is not None:
            node.update(state=state_of(process), mailbox=len(process.mailbox))
        self._subscribe(handle, pid)
        try:
            node.update(handle.info(CALL_TIMEOUT))
            children = handle.which_children(CALL_TIMEOUT)
        except ActorError as exc:
            node["status"] = "unavailable"
            node["error"] = type(exc).__name__
            return node
        with self._lock:
            node["restarts"] = self._event_counts[(name, "restarted")]
            restarts = dict(self._restarts)
            of_pid = dict(self._restarts_of_pid)
        node["more_children"] = max(0, len(children) - CHILDREN_SHOWN)
        for info in children[:CHILDREN_SHOWN]:
            child_id = "" if info.id is None else label_of(info.id)
            if info.type == "supervisor" and isinstance(info.handle, SupervisorHandle):
                below = self._supervisor_node(info.handle, info.id, by_pid)
                below["status"] = info.status
                below["restarts_as_child"] = restarts.get((name, child_id), 0)
                node["children"].append(below)
                continue
            child = by_pid.get(info.pid)
            row: dict[str, Any] = {
                "id": child_id,
                "label": child.name if child is not None and child.name else child_id,
                "kind": "worker",
                "type": type(child.server).__name__ if child is not None else None,
                "pid": None if info.pid is None else repr(info.pid),
                "status": info.status,
                "restarts": restarts.get((name, child_id), 0)
                if child_id
                else of_pid.get(repr(info.pid), 0),
            }
            if child is not None:
                row.update(state=state_of(child), mailbox=len(child.mailbox))
                if not row["label"]:
                    row["label"] = repr(child.pid)
            node["children"].append(row)
        return node

    # -- stores -----------------------------------------------------------------------------

    def _stores(self, processes: list[Process], now: float) -> list[dict[str, Any]]:
        rows = []
        for process in processes:
            handle_class = type(process.server).handle_class
            if not _is_store(handle_class) or process.dead:
                continue
            label = process.name or repr(process.pid)
            handle: Any = handle_class(process)
            row: dict[str, Any] = {"name": label, "type": type(process.server).__name__}
            try:
                convs = handle.conversations()
                row["conversations"] = len(convs)
                row["messages"] = sum(handle.count(c) for c in convs[:COUNTED_CONVERSATIONS])
            except (ActorError, StoreError) as exc:
                row["error"] = type(exc).__name__
                rows.append(row)
                continue
            before = self._store_rates.get(label)
            self._store_rates[label] = (now, row["messages"])
            if before is not None:
                then, messages_then = before
                if now > then:
                    rate = (row["messages"] - messages_then) / (now - then)
                    row["writes_per_s"] = round(max(rate, 0.0), 1)
            committer = getattr(process.server, "committer", None)
            if committer is not None:
                # Synced writes: the committer's groups and the plain threads' own batches
                # (LevelDB's writer queue may share one fsync among those; none is missed).
                fsyncs = int(getattr(committer, "groups", 0))
                fsyncs += int(getattr(committer, "direct_writes", 0))
                writes = int(getattr(committer, "writes", 0))
                row.update(fsyncs=fsyncs, writes=writes)
                row["writes_per_fsync"] = round(writes / fsyncs, 2) if fsyncs else None
            rows.append(row)
        return rows

    # -- the snapshot -----------------------------------------------------------------------

    def sample(self) -> dict[str, Any]:
        """Read the node now and return the snapshot (also kept as ``latest()``)."""
        now = time.time()
        processes = live_processes()
        by_pid = {p.pid: p for p in processes}
        tree = [self._supervisor_node(r, r.name or r.pid, by_pid) for r in self._roots(processes)]
        busiest = sorted(processes, key=lambda p: (-len(p.mailbox), p.pid))[:PROCESSES_SHOWN]
        agents = [p for p in processes if p.kind == "agent"]
        labels = _labels(tree)
        live = {repr(p) for p in by_pid}
        with self._lock:
            events = [_labelled(e, labels) for e in reversed(self._events)]
            restarts_total = sum(self._restarts.values())
            for pid in [p for p in self._restarts_of_pid if p not in live]:
                del self._restarts_of_pid[pid]
        snapshot = {
            "taken_at": now,
            "uptime_s": round(now - self.started, 1),
            "node": {
                "processes": len(processes),
                "schedulers": scheduler_count(),
                "mailbox_total": sum(len(p.mailbox) for p in processes),
            },
            "tree": tree,
            "processes": [_process_row(p, labels) for p in busiest],
            "stores": self._stores(processes, now),
            "agents": {"running": len(agents), **_without_buckets(self.meter.stats())},
            "events": events,
            "restarts_total": restarts_total,
        }
        self._latest = snapshot
        return snapshot

    def latest(self) -> dict[str, Any]:
        """The newest snapshot (taken now if there is none yet)."""
        latest = self._latest
        return latest if latest is not None else self.sample()

    # -- one process ------------------------------------------------------------------------

    def _find(self, pid: int) -> Process | None:
        return next((p for p in live_processes() if p.pid == pid and not p.dead), None)

    def process(self, pid: int) -> dict[str, Any] | None:
        """A live process's status and state (``sys.get_status``, asked of it between its
        messages) and its trace's last events; None if no process has ``pid``."""
        process = self._find(pid)
        if process is None:
            return None
        handle = Handle(process)
        row: dict[str, Any] = _process_row(process)
        try:
            row.update(otp_sys.get_status(handle, CALL_TIMEOUT))
        except CallTimeout:
            row["error"] = f"busy: it did not answer within {CALL_TIMEOUT} s"
        except ActorError as exc:
            row["error"] = type(exc).__name__
        row["trace"] = [event.to_json() for event in otp_sys.trace_log(handle)]
        return row

    def trace(self, pid: int, on: bool) -> bool:
        """Switch the trace of process ``pid`` on or off (its events are logged to
        ``otpmem.actors.sys`` and kept for ``process``); False if there is no such process."""
        process = self._find(pid)
        if process is None:
            return False
        try:
            otp_sys.trace(Handle(process), on, timeout=CALL_TIMEOUT)
        except ActorError:
            return False
        return True

    def metrics(self) -> dict[str, Any]:
        """Counters for exporters: events by (supervisor, kind), restarts, the meter."""
        with self._lock:
            return {
                "events": dict(self._event_counts),
                "restarts": dict(self._restarts),
                "meter": self.meter.stats(),
            }

    # -- sampling in the background ---------------------------------------------------------

    def start(self, interval: float = 0.5) -> Observer:
        """Sample every ``interval`` s on a thread of the observer's own."""
        return super().start(interval)

    def close(self) -> None:
        """Stop sampling and unsubscribe from every supervisor still running."""
        self.stop_sampling(5.0)
        for handle in list(self._subscribed.values()):
            if handle.alive:
                # One that exited meanwhile has nothing left to unsubscribe from.
                with contextlib.suppress(ActorError):
                    handle.unsubscribe(self._on_event, CALL_TIMEOUT)
        self._subscribed.clear()

    def __enter__(self) -> Observer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_store_classes: dict[type[Handle], bool] = {}


def _is_store(handle_class: type[Handle]) -> bool:
    known = _store_classes.get(handle_class)
    if known is None:
        known = _store_classes[handle_class] = issubclass(handle_class, ChatMemory)
    return known


def _without_buckets(stats: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in stats.items() if k != "buckets"}
