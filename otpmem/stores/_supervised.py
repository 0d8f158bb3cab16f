"""What the stores that own a resource outside the process share: starting, and a
supervisor of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..actors import GenServer, Handle, InitFailed
from ..actors.faults import FaultPlan
from ..supervisors import ChildSpec, Supervisor, SupervisorEvent
from ._base import StoreError


def spawn_store(
    cls: type[GenServer],
    args: tuple[Any, ...],
    name: str | None,
    faults: FaultPlan | None,
    start_timeout: float | None,
) -> Handle:
    """Start a store linked to the caller; a ``StoreError`` its ``init`` raised (locked,
    unreachable, corrupt) reaches the caller as itself, not wrapped in ``InitFailed``."""
    try:
        return cls.spawn(args, {}, link=True, name=name, faults=faults, start_timeout=start_timeout)
    except InitFailed as failure:
        if isinstance(failure.reason, StoreError):
            raise failure.reason from None
        raise


def supervised_store(
    child_id: str,
    start: Callable[[], Handle],
    intensity: int,
    period: float,
    listeners: Iterable[Callable[[SupervisorEvent], None]],
) -> ChildSpec:
    """A store under a supervisor of its own (its one child is ``"store"``), which absorbs a
    burst of ``intensity`` crashes in ``period`` s before the supervisor above hears of it."""
    heard = list(listeners)

    def start_supervisor() -> Handle:
        return Supervisor.start_link(
            [ChildSpec("store", start=start)],
            intensity=intensity,
            period=period,
            listeners=heard,
        )

    return ChildSpec(child_id, start=start_supervisor, type="supervisor")
