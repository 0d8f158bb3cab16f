"""Supervisors: OTP's restart strategies over otpmem.actors; they know no store."""

from ._handle import SupervisorHandle
from ._spec import (
    ChildAlreadyPresent,
    ChildAlreadyStarted,
    ChildCounts,
    ChildInfo,
    ChildNotFound,
    ChildRestarting,
    ChildRunning,
    ChildSpec,
    InvalidChildSpec,
    InvalidSupervisorFlags,
    SimpleOneForOneOnly,
    StartChildFailed,
    SupervisorError,
    SupervisorEvent,
)
from ._supervisor import Supervisor

__all__ = [
    "ChildAlreadyPresent",
    "ChildAlreadyStarted",
    "ChildCounts",
    "ChildInfo",
    "ChildNotFound",
    "ChildRestarting",
    "ChildRunning",
    "ChildSpec",
    "InvalidChildSpec",
    "InvalidSupervisorFlags",
    "SimpleOneForOneOnly",
    "StartChildFailed",
    "Supervisor",
    "SupervisorError",
    "SupervisorEvent",
    "SupervisorHandle",
]
