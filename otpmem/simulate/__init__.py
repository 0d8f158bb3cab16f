"""Simulations: many agents under chaos, every acknowledged message audited against a ledger.

::

    report = Simulation(RunParams(agents=20, turns=10, chaos=0.1), data_dir).run()
    print("\\n".join(report.lines()))

``Simulation`` runs one node in this process; ``ClusterSimulation`` runs several node
processes over one PostgreSQL database (needs the ``postgres`` extra, so it is imported on
first use). ``Timeline`` and ``Bucket`` are the per-second series a report plots.
``Schedule`` is a run's faults at their logical points, drawn from the seed or replayed::

    params = replayable(Path("run"))   # run.json's parameters and schedule
    Simulation(params.agents, params.turns, Path("again"), schedule=params.schedule).run()
"""

from typing import TYPE_CHECKING, Any

from ._chaos import Chaos, ChaosStuck
from ._conventions import USER_ID
from ._files import (
    FAULT_LOG,
    LEDGER,
    PARAMS,
    FaultLog,
    Ledger,
    RunMismatch,
    RunParams,
    RunRefused,
    replayable,
)
from ._model import ModelFailed, ModelWatch, describe, openai_model, scripted_arithmetic
from ._report import SimulationReport
from ._schedule import CRASH_PLAN, FAULTS, Fault, Schedule
from ._simulation import Simulation
from ._timeline import Bucket, Timeline

if TYPE_CHECKING:
    from ._cluster import EMBEDDED_NAMESPACE, ClusterSimulation, merge_ledgers

_CLUSTER = ("ClusterSimulation", "EMBEDDED_NAMESPACE", "merge_ledgers")


def __getattr__(name: str) -> Any:
    """The cluster's names, imported on first use (they need psycopg)."""
    if name in _CLUSTER:
        from . import _cluster

        return getattr(_cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CRASH_PLAN",
    "EMBEDDED_NAMESPACE",
    "FAULTS",
    "FAULT_LOG",
    "LEDGER",
    "PARAMS",
    "USER_ID",
    "Bucket",
    "Chaos",
    "ChaosStuck",
    "ClusterSimulation",
    "Fault",
    "FaultLog",
    "Ledger",
    "ModelFailed",
    "ModelWatch",
    "RunMismatch",
    "RunParams",
    "RunRefused",
    "Schedule",
    "Simulation",
    "SimulationReport",
    "Timeline",
    "describe",
    "merge_ledgers",
    "openai_model",
    "replayable",
    "scripted_arithmetic",
]
