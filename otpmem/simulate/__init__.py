"""Simulations: many agents under chaos, every acknowledged message audited against a ledger.

::

    report = Simulation(RunParams(agents=20, turns=10, chaos=0.1), data_dir).run()
    print("\\n".join(report.lines()))

``Simulation`` runs one node in this process; ``ClusterSimulation`` runs several node
processes over one PostgreSQL database (needs the ``postgres`` extra, so it is imported on
first use). ``Timeline`` and ``Bucket`` are the per-second series a report plots.
"""

from typing import TYPE_CHECKING, Any

from ._conventions import USER_ID
from ._files import LEDGER, PARAMS, Ledger, RunMismatch, RunParams, RunRefused
from ._model import ModelFailed, ModelWatch, describe, openai_model, scripted_arithmetic
from ._report import SimulationReport
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
    "EMBEDDED_NAMESPACE",
    "LEDGER",
    "PARAMS",
    "USER_ID",
    "Bucket",
    "ClusterSimulation",
    "Ledger",
    "ModelFailed",
    "ModelWatch",
    "RunMismatch",
    "RunParams",
    "RunRefused",
    "Simulation",
    "SimulationReport",
    "Timeline",
    "describe",
    "merge_ledgers",
    "openai_model",
    "scripted_arithmetic",
]
