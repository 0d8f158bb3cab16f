"""What a node of a multi-node simulation is told (``NodeConfig``, one JSON line) and
where it writes: its ledger beside the run's ``run.json``, its summary under ``nodes/``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class NodeConfig:
    """What a node needs to know: its place in the run, the database, the run's size."""

    index: int
    nodes: int
    node_id: str
    dsn: str
    namespace: str
    agents: int
    turns: int
    data_dir: str
    chaos: float = 0.0
    seed: int = 0
    workers: int = 8
    lease_ttl: float = 2.0
    incarnation: int = 0
    model: dict[str, str] = field(default_factory=lambda: {"kind": "scripted"})
    started_at: float | None = None
    """The run's second 0 (wall clock): the node's timeline counts from it, so that its
    slots line up with the run's and merge exactly."""

    def dumps(self) -> str:
        """One JSON line."""
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> NodeConfig:
        """The config ``dumps`` wrote."""
        return cls(**json.loads(text))

    @property
    def share(self) -> list[int]:
        """The agents this node claims first."""
        return list(range(self.index, self.agents, self.nodes))


def ledger_path(data_dir: str | Path, node_id: str) -> Path:
    """Where a node writes the turns it acknowledged."""
    return Path(data_dir) / f"ledger-{node_id}.jsonl"


def summary_path(data_dir: str | Path, node_id: str) -> Path:
    """Where a node that ends (not one that is killed) writes what it did."""
    return Path(data_dir) / "nodes" / f"{node_id}.json"


def write_summary(config: NodeConfig, summary: dict[str, Any]) -> None:
    """The node's summary, written whole (a kill mid-write leaves no file, never half)."""
    path = summary_path(config.data_dir, config.node_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(summary), encoding="utf-8")
    os.replace(partial, path)


__all__ = ["NodeConfig", "ledger_path", "summary_path", "write_summary"]
