"""The files of a simulation run, beside its store in the run's directory.

``ledger.jsonl``: every acknowledged turn, one fsynced line each, which the store never
sees (the audit's reference). ``run.json``: the run's parameters and its fault schedule,
so that ``--resume`` continues the run that was started, not one the flags of the second
command describe, and ``--replay`` runs it again. ``faults.jsonl``: each fault as it was
injected, one line each, to compare two runs fault for fault::

    RunParams(agents=20, turns=10, chaos=0.1, seed=1).save(Path("run"))
    RunParams.load(Path("run"))          # the same, or None for a run without run.json
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..stores.leveldb import files as store_files
from ._schedule import Fault, Schedule

LEDGER = "ledger.jsonl"
PARAMS = "run.json"
FAULT_LOG = "faults.jsonl"
FORMAT = "otpmem.simulation"


class RunRefused(ValueError):
    """A run cannot start: its directory or its parameters say no; the message says why."""


class RunMismatch(RunRefused):
    """A resumed run was given parameters that contradict the ones it was started with."""

    def __init__(self, differences: list[tuple[str, Any, Any]]) -> None:
        text = "; ".join(
            f"it was started with {name} {stored!r}, not {given!r}"
            for name, stored, given in differences
        )
        super().__init__(f"this run cannot be resumed with other parameters: {text}")
        self.differences = differences


@dataclass(frozen=True)
class RunParams:
    """What defines a run: its size, its chaos (the seed, and the schedule of faults drawn
    from it, or replayed), and the model it talks to."""

    agents: int
    turns: int
    chaos: float = 0.0
    seed: int = 0
    model: dict[str, str] = field(default_factory=lambda: {"kind": "scripted"})
    # {"kind": "leveldb"}, or {"kind": "postgres", "dsn": DSN without its password, or ""
    # for the embedded server under the run's directory, "namespace": the run's schema}.
    store: dict[str, str] = field(default_factory=lambda: {"kind": "leveldb"})
    nodes: int = 1
    # None: a run on many nodes, or one from before schedules were kept.
    schedule: Schedule | None = None
    replay_of: str | None = None  # the directory whose run.json the schedule came from

    def save(self, data_dir: Path) -> None:
        """Write ``run.json`` durably (the run's first write: a kill right after keeps it)."""
        path = data_dir / PARAMS
        data = {"format": FORMAT, "version": 1, **self._values()}
        data["schedule"] = None if self.schedule is None else self.schedule.to_json()
        if self.replay_of is None:
            del data["replay_of"]
        partial = path.with_suffix(".json.partial")
        with open(partial, "w", encoding="utf-8") as file:
            file.write(_dumps(data))
            file.flush()
            os.fsync(file.fileno())
        os.replace(partial, path)

    @classmethod
    def load(cls, data_dir: Path) -> RunParams | None:
        """The parameters a run was started with; None if it has no ``run.json``."""
        path = data_dir / PARAMS
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise RunRefused(f"{path} cannot be read: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RunRefused(f"{path} is not the parameters of an otpmem simulation")
        try:
            params = cls(
                agents=int(data["agents"]),
                turns=int(data["turns"]),
                chaos=float(data["chaos"]),
                seed=int(data["seed"]),
                model={str(k): str(v) for k, v in dict(data.get("model") or {}).items()},
                store={
                    str(k): str(v)
                    for k, v in dict(data.get("store") or {"kind": "leveldb"}).items()
                },
                nodes=int(data.get("nodes", 1)),
                replay_of=None if data.get("replay_of") is None else str(data["replay_of"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RunRefused(
                f"{path} is damaged ({exc!r}); it holds the run's parameters"
            ) from None
        if data.get("schedule") is None:
            return params
        try:
            schedule = Schedule.from_json(data["schedule"], params.agents, params.turns)
        except ValueError as exc:
            raise RunRefused(f"{path} is damaged: {exc}") from None
        return replace(params, schedule=schedule)

    def _values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def differences(self, other: RunParams) -> list[tuple[str, Any, Any]]:
        """``(name, self's value, other's value)`` for each parameter that differs; a DSN's
        password is not one (starred out in run.json, or left to libpq: the same server),
        nor the schedule and where it came from (a resumed run takes them from run.json)."""
        mine, theirs = self._values(), other._values()
        return [
            (k, mine[k], theirs[k])
            for k in mine
            if k not in ("schedule", "replay_of")
            and _compared(k, mine[k]) != _compared(k, theirs[k])
        ]


def _dumps(data: dict[str, Any]) -> str:
    """``run.json``'s text: a key a line, and a line per fault of the schedule."""
    lines = []
    for key, value in data.items():
        if key == "schedule" and value:
            faults = ",\n".join(f"  {json.dumps(fault)}" for fault in value)
            lines.append(f" {json.dumps(key)}: [\n{faults}\n ]")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def replayable(run_dir: Path) -> RunParams:
    """The parameters and fault schedule of the run in ``run_dir``, to run it again;
    ``RunRefused`` says why it cannot be."""
    if not run_dir.exists():
        raise RunRefused(f"{run_dir} does not exist: --replay needs the directory of a run")
    if not run_dir.is_dir():
        raise RunRefused(f"{run_dir} is a file: --replay needs the directory of a run")
    params = RunParams.load(run_dir)
    if params is None:
        raise RunRefused(f"{run_dir} holds no {PARAMS}: it is not the directory of a run")
    if params.nodes > 1 or params.store.get("kind", "leveldb") != "leveldb":
        raise RunRefused(
            f"{run_dir} is a run on PostgreSQL (--store postgres, {params.nodes} node(s)), "
            "which cannot be replayed: its node kills follow the coordinator's polls and its "
            "other faults land in whichever node holds a conversation then, so it keeps no "
            "schedule; only a LevelDB run can be replayed"
        )
    if params.schedule is None:
        raise RunRefused(
            f"{run_dir / PARAMS} holds no fault schedule: the run was made by an otpmem that "
            "did not record one, so its faults cannot be run again"
        )
    return params


def _compared(name: str, value: Any) -> Any:
    """A parameter as two runs are compared by: a store's DSN without its password."""
    if name != "store" or not value.get("dsn"):
        return value
    from ..stores.postgres import unredacted

    return {**value, "dsn": unredacted(value["dsn"])}


class Ledger:
    """Acknowledged turns, one fsynced JSON line each: the store never writes here."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def record(
        self,
        conversation: str,
        turn: int,
        messages: Sequence[Mapping[str, Any]],
        **extra: Any,
    ) -> None:
        """Write one acknowledged turn durably (``extra``: more JSON fields, e.g. its time)."""
        entry = {
            "conversation": conversation,
            "turn": turn,
            "messages": [[m.get("role"), m.get("content")] for m in messages],
            **extra,
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
        return read_json_lines(path)


class FaultLog:
    """The faults a run injected, a JSON line each, as they happen (flushed, not fsynced:
    a record to compare runs by, not a promise like the ledger's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def record(self, fault: Fault) -> None:
        """One injected fault."""
        with self._lock:
            self._file.write(json.dumps(fault.to_json()) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    @staticmethod
    def load(path: Path) -> list[dict[str, Any]]:
        """Every fault the log holds, in the order of their points (turn, then agent)."""
        return sorted(read_json_lines(path), key=lambda e: (e["turn"], e["agent"]))


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of ``path`` ([] if there is none): a torn last line from a
    kill -9 is skipped."""
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def ledger_paths(data: Path) -> list[Path]:
    """The run's ledgers: ``ledger.jsonl`` (one process), or one ``ledger-NODE.jsonl`` per
    node of a multi-node run (each node's incarnation writes its own)."""
    if not data.is_dir():
        return []
    return sorted(p for p in data.glob("ledger*.jsonl") if p.is_file())


def check_run_directory(data: Path, resume: bool) -> None:
    """Raise ``RunRefused`` unless ``data`` can hold this run: an earlier run to resume, or
    (for a new run) a directory that is missing or empty."""
    ledger = data / LEDGER
    if data.exists() and not data.is_dir():
        raise RunRefused(f"{data} is a file; a run needs a directory of its own")
    if resume:
        if not ledger_paths(data):
            raise RunRefused(f"nothing to resume: {ledger} does not exist")
        return
    if ledger_paths(data):
        raise RunRefused(
            f"{data} holds an earlier run; pass --resume to continue it, "
            "or choose an empty directory"
        )
    if data.exists() and any(data.iterdir()):
        what = "a store that is not a simulation run" if store_files.is_store(data) else ""
        raise RunRefused(
            f"{data} is not empty ({what or store_files.listing(data)}): a run needs a new "
            "or empty directory, so that nothing of yours is mixed into its store"
        )


__all__ = [
    "FAULT_LOG",
    "LEDGER",
    "PARAMS",
    "FaultLog",
    "Ledger",
    "RunMismatch",
    "RunParams",
    "RunRefused",
    "check_run_directory",
    "ledger_paths",
    "replayable",
]
