"""The runtime's inside, for the packages that build on it (supervisors, stores, the
observer, the asyncio bridge): the process object, its run states, the name table, the
call envelope and reply slot, the tables' default heir, and what an observer counts.

Applications use ``otpmem.actors``; what is here may change with the runtime.
"""

from ._heirs import ChildTables, become_default_heir
from ._names import lookup
from ._process import Process
from ._scheduler import IDLE, QUEUED, RUNNING, scheduler_count
from ._signals import CallEnvelope
from ._waits import OneShot

__all__ = [
    "IDLE",
    "QUEUED",
    "RUNNING",
    "CallEnvelope",
    "ChildTables",
    "OneShot",
    "Process",
    "become_default_heir",
    "lookup",
    "scheduler_count",
]
