"""Child specs, supervisor flags and what a supervisor reports, validated at the door."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from ..actors import ActorError, ExitReason, Handle, Pid
from ..reprs import short_repr

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]
ChildType = Literal["worker", "supervisor"]
AutoShutdown = Literal["never", "any_significant", "all_significant"]
Shutdown = float | Literal["brutal_kill"] | None

STRATEGIES = ("one_for_one", "one_for_all", "rest_for_one", "simple_one_for_one")
RESTART_TYPES = ("permanent", "transient", "temporary")
CHILD_TYPES = ("worker", "supervisor")
AUTO_SHUTDOWNS = ("never", "any_significant", "all_significant")
WORKER_SHUTDOWN = 5.0


class InvalidChildSpec(ValueError):
    """A child spec is malformed; ``field`` names the culprit."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"invalid child spec ({field_name}): {message}")
        self.field = field_name


class InvalidSupervisorFlags(ValueError):
    """A supervisor flag (strategy, intensity, period, auto_shutdown) is malformed."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"invalid supervisor flag {flag}: {message}")
        self.flag = flag


class _Unset:
    def __repr__(self) -> str:
        return "<default>"


_UNSET: Any = _Unset()


@dataclass(frozen=True)
class ChildSpec:
    """How to start, restart and stop one child::

        ChildSpec("worker", start=lambda: Worker.start_link(), restart="permanent")

    ``start`` takes no arguments (under ``simple_one_for_one`` it takes the extra arguments
    given to ``start_child``) and returns a started handle, or None to mean OTP's ``ignore``.
    ``shutdown`` is seconds to wait for an orderly stop before killing, ``"brutal_kill"``,
    or None for "wait as long as it takes" (the default for supervisors, 5 s for workers).
    """

    id: Hashable
    start: Callable[..., Handle | None]
    restart: RestartType = "permanent"
    shutdown: Shutdown = field(default=_UNSET)
    type: ChildType = "worker"
    significant: bool = False

    def __post_init__(self) -> None:
        if self.id is None:
            raise InvalidChildSpec("id", "every child needs an id (missing_id)")
        try:
            hash(self.id)
        except Exception:  # the id's own __hash__ may raise anything
            raise InvalidChildSpec("id", f"{short_repr(self.id)} is not hashable") from None
        if not callable(self.start):
            raise InvalidChildSpec(
                "start", f"{short_repr(self.start)} is not callable (missing_start)"
            )
        if not _one_of(self.restart, RESTART_TYPES):
            raise InvalidChildSpec(
                "restart", f"{short_repr(self.restart)} is not one of {RESTART_TYPES}"
            )
        if not _one_of(self.type, CHILD_TYPES):
            raise InvalidChildSpec("type", f"{short_repr(self.type)} is not one of {CHILD_TYPES}")
        if self.shutdown is _UNSET:
            default = None if self.type == "supervisor" else WORKER_SHUTDOWN
            object.__setattr__(self, "shutdown", default)
        elif not _valid_shutdown(self.shutdown):
            raise InvalidChildSpec(
                "shutdown",
                f"{short_repr(self.shutdown)} must be seconds >= 0, 'brutal_kill' or None "
                "(infinity)",
            )
        if not isinstance(self.significant, bool):
            raise InvalidChildSpec("significant", f"{short_repr(self.significant)} is not a bool")
        if self.significant and self.restart == "permanent":
            raise InvalidChildSpec(
                "significant", "a permanent child cannot be significant (bad_combination)"
            )


def _one_of(value: object, choices: tuple[str, ...]) -> bool:
    # An exact str only: anything else would bring its own __eq__ to the comparison.
    return type(value) is str and value in choices


def same_id(a: object, b: object) -> bool:
    """Whether child ids ``a`` and ``b`` are one id: the same object, or equal hashable
    values. Never raises: an id whose ``__hash__`` or ``__eq__`` raises, or whose ``==``
    answers anything but a bool (a numpy array's does), is no other id."""
    if a is b:
        return True
    try:
        if hash(a) != hash(b):
            return False
        equal = a == b
    except Exception:
        return False
    return type(equal) is bool and equal


def _valid_shutdown(value: object) -> bool:
    if value is None or (type(value) is str and value == "brutal_kill"):
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class Flags:
    """A supervisor's flags, checked as OTP's ``supervisor`` checks them."""

    strategy: Strategy = "one_for_one"
    intensity: int = 1
    period: float = 5.0
    auto_shutdown: AutoShutdown = "never"

    def __post_init__(self) -> None:
        if not _one_of(self.strategy, STRATEGIES):
            raise InvalidSupervisorFlags(
                "strategy", f"{short_repr(self.strategy)} is not one of {STRATEGIES}"
            )
        if not isinstance(self.intensity, int) or isinstance(self.intensity, bool):
            raise InvalidSupervisorFlags(
                "intensity", f"{short_repr(self.intensity)} must be an int >= 0"
            )
        if self.intensity < 0:
            raise InvalidSupervisorFlags("intensity", f"{short_repr(self.intensity)} must be >= 0")
        if (
            not isinstance(self.period, int | float)
            or isinstance(self.period, bool)
            or not self.period > 0
            or self.period == float("inf")
        ):
            raise InvalidSupervisorFlags(
                "period", f"{short_repr(self.period)} must be a finite number > 0"
            )
        if not _one_of(self.auto_shutdown, AUTO_SHUTDOWNS):
            raise InvalidSupervisorFlags(
                "auto_shutdown", f"{short_repr(self.auto_shutdown)} is not one of {AUTO_SHUTDOWNS}"
            )
        if self.strategy == "simple_one_for_one" and self.auto_shutdown != "never":
            raise InvalidSupervisorFlags(
                "auto_shutdown", "simple_one_for_one supports only 'never' (bad_combination)"
            )


def check_specs(specs: Iterable[ChildSpec], flags: Flags) -> list[ChildSpec]:
    """Validate a whole child list against the flags; return it as a list."""
    if isinstance(specs, ChildSpec | str | bytes) or not isinstance(specs, Iterable):
        raise InvalidChildSpec("children", f"expected a list of ChildSpec, got {short_repr(specs)}")
    checked = list(specs)
    seen: set[Hashable] = set()
    for spec in checked:
        check_spec(spec, flags)
        try:
            duplicate = spec.id in seen
            seen.add(spec.id)
        except Exception:  # its __hash__ or __eq__ raised: not an id to tell others apart by
            raise InvalidChildSpec(
                "id", f"{short_repr(spec.id)} cannot be compared with the other ids"
            ) from None
        if duplicate:
            raise InvalidChildSpec(
                "id", f"duplicate child id {short_repr(spec.id)} (duplicate_child_name)"
            )
    if flags.strategy == "simple_one_for_one" and len(checked) != 1:
        raise InvalidChildSpec(
            "children", f"simple_one_for_one needs exactly one child spec, got {len(checked)}"
        )
    return checked


def start_arguments(
    children: Iterable[ChildSpec] = (),
    strategy: str = "one_for_one",
    intensity: int = 1,
    period: float = 5.0,
    auto_shutdown: str = "never",
    name: str | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    listeners: Iterable[Listener] = (),
    start_timeout: float | None = None,
) -> tuple[tuple[Any, ...], str | None, float | None]:
    """The parameters of ``Supervisor.start_link`` and ``start``, checked before anything
    starts: ``init``'s arguments, the name and the start timeout."""
    flags = Flags(strategy, intensity, period, auto_shutdown)  # type: ignore[arg-type]
    specs = check_specs(children, flags)
    return (specs, flags, clock, list(listeners)), name, start_timeout


def check_spec(spec: object, flags: Flags) -> ChildSpec:
    """Validate one spec against the flags."""
    if not isinstance(spec, ChildSpec):
        raise InvalidChildSpec("spec", f"expected a ChildSpec, got {short_repr(spec)}")
    if spec.significant and flags.auto_shutdown == "never":
        raise InvalidChildSpec(
            "significant",
            f"child {short_repr(spec.id)} is significant but auto_shutdown is 'never' "
            "(bad_combination)",
        )
    return spec


class ChildInfo(NamedTuple):
    """One row of ``which_children``: ``pid`` and ``handle`` are None unless running."""

    id: Hashable
    pid: Pid | None
    handle: Handle | None
    type: ChildType
    status: Literal["running", "restarting", "undefined"] = "running"


class ChildCounts(NamedTuple):
    """``count_children``: specs, running children, supervisor specs, worker specs."""

    specs: int
    active: int
    supervisors: int
    workers: int


@dataclass(frozen=True)
class SupervisorEvent:
    """A report of a supervisor: ``kind`` is started, exited, restarted, start_failed,
    terminated, shutdown_error, max_intensity, auto_shutdown or shutdown."""

    kind: str
    supervisor: str
    child_id: Hashable = None
    pid: Pid | None = None
    reason: ExitReason = None


Listener = Callable[[SupervisorEvent], None]
"""Hears a supervisor's events (``listeners=``, ``subscribe``), on the supervisor's thread."""


class SupervisorError(ActorError):
    """A supervisor refused an admin request; the supervisor keeps running."""


class ChildNotFound(SupervisorError):
    """No child has that id (or pid)."""

    def __init__(self, child: object, why: str | None = None) -> None:
        because = "" if why is None else f"; {why}"
        super().__init__(f"no child {short_repr(child)} under this supervisor (not_found){because}")
        self.child = child


class ChildRunning(SupervisorError):
    """The child is running; terminate it first."""

    def __init__(self, child_id: Hashable) -> None:
        super().__init__(f"child {short_repr(child_id)} is running; terminate_child it first")
        self.child_id = child_id


class ChildRestarting(SupervisorError):
    """The child is between failed restart attempts."""

    def __init__(self, child_id: Hashable) -> None:
        super().__init__(f"child {short_repr(child_id)} is being restarted (restarting)")
        self.child_id = child_id


class ChildAlreadyPresent(SupervisorError):
    """A spec with this id exists (not running): use restart_child or delete_child."""

    def __init__(self, child_id: Hashable) -> None:
        super().__init__(
            f"child {short_repr(child_id)} already has a spec (already_present); "
            "use restart_child or delete_child"
        )
        self.child_id = child_id


class ChildAlreadyStarted(SupervisorError):
    """A child with this id is already running."""

    def __init__(self, child_id: Hashable, pid: Pid | None) -> None:
        super().__init__(
            f"child {short_repr(child_id)} is already running as {pid!r} (already_started)"
        )
        self.child_id = child_id
        self.pid = pid


class StartChildFailed(SupervisorError):
    """The child's start function failed; ``reason`` is why."""

    def __init__(self, child_id: Hashable, reason: ExitReason) -> None:
        super().__init__(f"child {short_repr(child_id)} failed to start: {short_repr(reason)}")
        self.child_id = child_id
        self.reason = reason


class SimpleOneForOneOnly(SupervisorError):
    """The operation does not exist under simple_one_for_one (or only exists there)."""

    def __init__(self, operation: str) -> None:
        super().__init__(f"{operation} is not available for this strategy (simple_one_for_one)")
        self.operation = operation
