"""The supervisor: OTP's restart state machine as a GenServer that traps exits.

It applies its policy (``_policy``: the restart table, the intensity, the strategies) to its
child table (``_children``: starting, stopping and finding children), and answers the admin
requests (``_requests`` checks them) as its ``_api_*`` methods.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable, Hashable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..actors import (
    SHUTDOWN,
    Exit,
    ExitReason,
    GenServer,
    Handle,
    Pid,
    Stop,
    is_normal_exit,
    on_exit,
)
from ..reprs import short_repr
from ._children import Child, Children
from ._handle import SupervisorHandle
from ._policy import RestartIntensity, auto_shutdown, restart_action, restart_round
from ._requests import parse_request
from ._spec import (
    ChildAlreadyPresent,
    ChildAlreadyStarted,
    ChildCounts,
    ChildInfo,
    ChildNotFound,
    ChildRestarting,
    ChildRunning,
    ChildSpec,
    Flags,
    InvalidChildSpec,
    Listener,
    StartChildFailed,
    SupervisorError,
    SupervisorEvent,
    check_spec,
    same_id,
    start_arguments,
)

logger = logging.getLogger("otpmem.supervisor")

P = ParamSpec("P")
C = TypeVar("C")
R = TypeVar("R")


class _TryAgain:
    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key


def _parameters_of(
    of: Callable[P, object],
) -> Callable[[Callable[Concatenate[C, ...], R]], Callable[Concatenate[C, P], R]]:
    """Give the decorated method (``cls`` first) the parameters of ``of``, for type checkers
    and for ``help``: one signature, however many entry points take it."""

    def decorate(method: Callable[Concatenate[C, ...], R]) -> Callable[Concatenate[C, P], R]:
        first = inspect.Parameter("cls", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        parameters = [first, *inspect.signature(of).parameters.values()]
        returns = inspect.signature(method).return_annotation
        method.__signature__ = inspect.Signature(parameters, return_annotation=returns)  # type: ignore[attr-defined]
        return method

    return decorate


class Supervisor(GenServer[SupervisorHandle]):
    """Starts children, watches them, and restarts them by OTP's rules::

        sup = Supervisor.start_link([ChildSpec("a", start=lambda: Worker.start_link())])
        sup.which_children()
        sup.stop()

    See ``start_link`` for the flags. Every event (started, exited, restarted, ...) goes to
    the ``otpmem.supervisor`` logger and to the subscribed listeners.
    """

    trap_exits = True
    # Its shutdown timeouts must fire even while a child blocks a shared scheduler's thread.
    dedicated_thread = True
    caller_errors = (SupervisorError, InvalidChildSpec)
    handle_class = SupervisorHandle
    kind = "supervisor"

    @classmethod
    @_parameters_of(start_arguments)
    def start_link(cls, *args: Any, **kwargs: Any) -> SupervisorHandle:
        """Start a supervisor linked to the caller, with its children started in order.

        ``intensity`` restarts within ``period`` s are allowed; one more terminates every
        child (newest first) and exits the supervisor with ``shutdown``. Raises
        ``InvalidChildSpec``/``InvalidSupervisorFlags`` before starting anything, and
        ``InitFailed`` if a child fails to start (the ones started are stopped again).
        """
        init_args, name, start_timeout = start_arguments(*args, **kwargs)
        return cls.spawn(init_args, {}, link=True, name=name, start_timeout=start_timeout)

    @classmethod
    @_parameters_of(start_arguments)
    def start(cls, *args: Any, **kwargs: Any) -> SupervisorHandle:
        """Like ``start_link`` without the link: a root supervisor."""
        init_args, name, start_timeout = start_arguments(*args, **kwargs)
        return cls.spawn(init_args, {}, link=False, name=name, start_timeout=start_timeout)

    # -- init and terminate -----------------------------------------------------------------

    def init(
        self,
        specs: list[ChildSpec],
        flags: Flags,
        clock: Callable[[], float],
        listeners: list[Listener],
    ) -> None:
        self.flags = flags
        self.intensity = RestartIntensity(flags, clock)
        self.listeners = listeners
        self.dynamic = flags.strategy == "simple_one_for_one"
        self.kids = Children(self._process, self.dynamic, self._emit, self._label)
        on_exit(self.kids.kill_all)
        self.template = specs[0] if self.dynamic else None
        self._keys = itertools.count()
        if self.dynamic:
            return
        for spec in specs:
            child = Child(spec.id, spec)
            outcome, reason = self.kids.start(child)
            if outcome == "error":
                self.kids.terminate_all()
                raise StartChildFailed(spec.id, reason) from _as_cause(reason)
            if outcome == "ok" or spec.restart != "temporary":
                self.kids.items.append(child)
            else:
                self.kids.discard(child)

    def terminate(self, reason: ExitReason) -> None:
        self.kids.terminate_all()
        self._emit("shutdown", None, None, reason)

    # -- messages ---------------------------------------------------------------------------

    def handle_info(self, message: Any) -> Any:
        if isinstance(message, Exit) and type(message.pid) is Pid:
            return self._child_exited(message.pid, message.reason)
        if isinstance(message, _TryAgain):
            child = self.kids.find(message.key)
            if child is not None and child.status == "restarting":
                return self._restart(child)
            return None
        return super().handle_info(message)

    def handle_call(self, message: Any) -> Any:
        operation, args = parse_request(type(self), message)
        return getattr(self, f"_api_{operation}")(*args)

    # -- exits and restarts -----------------------------------------------------------------

    def _child_exited(self, pid: Pid, reason: ExitReason) -> Any:
        child = self.kids.exited(pid)
        if child is None:
            return None  # a stale exit: that incarnation was already terminated by us
        child.process = None
        child.handle = None
        child.status = "undefined"
        child.last_pid = pid
        self._emit("exited", child, pid, reason)
        action = restart_action(child.spec.restart, reason)
        if action == "restart":
            return self._restart(child)
        if action == "delete" or self.dynamic:
            self.kids.discard(child)
        if child.spec.significant and auto_shutdown(self.flags.auto_shutdown, self.kids.items):
            self._emit("auto_shutdown", child, pid, reason)
            return Stop(SHUTDOWN)
        return None

    def _restart(self, child: Child) -> Any:
        if not self.intensity.add():
            logger.error(
                "supervisor %s reached max restart intensity (%d in %s s) restarting %s; "
                "shutting down",
                self._label(),
                self.flags.intensity,
                self.flags.period,
                short_repr(child.spec.id),
            )
            self._emit("max_intensity", child, None, None)
            if not self.dynamic:
                self.kids.remove(child)  # not discard: its tables go up with ours
            return Stop(SHUTDOWN)
        stop, start = restart_round(self.flags.strategy, self.kids.items, child)
        for other in stop:
            self.kids.shutdown(other)
            if other.spec.restart == "temporary":
                self.kids.discard(other)
        self._restart_from(start)
        return None

    def _restart_from(self, round_: list[Child]) -> None:
        for child in round_:
            if child.process is not None:
                continue
            outcome, _ = self.kids.start(child, "restarted")
            if outcome == "ignore":
                if self.dynamic or child.spec.restart == "temporary":
                    self.kids.discard(child)
            elif outcome == "error":
                # Retried through the mailbox, so admin calls and shutdown get in between
                # attempts; each attempt counts against intensity (OTP's try_again_restart).
                child.status = "restarting"
                self._process.send(_TryAgain(child.key))
                return

    # -- admin API (each a handle_call) -----------------------------------------------------

    def _api_which_children(self) -> list[ChildInfo]:
        return self.kids.infos()

    def _api_count_children(self) -> ChildCounts:
        return self.kids.counts()

    def _api_start_child(self, spec_or_args: Any) -> Handle | None:
        if self.dynamic:
            assert self.template is not None
            if type(spec_or_args) is not tuple:
                raise InvalidChildSpec(
                    "args",
                    "simple_one_for_one takes a tuple of extra args, "
                    f"got {short_repr(spec_or_args)}",
                )
            child = Child(next(self._keys), self.template, spec_or_args)
        else:
            spec = check_spec(spec_or_args, self.flags)
            existing = self.kids.find(spec.id)
            if existing is not None:
                if existing.process is not None:
                    raise ChildAlreadyStarted(spec.id, existing.process.pid)
                raise ChildAlreadyPresent(spec.id)
            child = Child(spec.id, spec)
        outcome, reason = self.kids.start(child)
        if outcome == "error":
            self.kids.discard(child)  # the spec is not kept, so neither is what its init left
            raise StartChildFailed(child.spec.id, reason) from _as_cause(reason)
        if outcome == "ok" or (not self.dynamic and child.spec.restart != "temporary"):
            self.kids.items.append(child)
        else:
            self.kids.discard(child)
        return child.handle

    def _api_terminate_child(self, target: Any) -> None:
        if self.dynamic:
            child = self.kids.by_pid(target)
            self.kids.shutdown(child)
            self.kids.discard(child)
            return
        if isinstance(target, Pid | Handle):
            raise ChildNotFound(target)
        child = self.kids.by_id(target)
        self.kids.shutdown(child)
        if child.spec.restart == "temporary":
            self.kids.discard(child)

    def _api_restart_child(self, child_id: Hashable) -> Handle | None:
        child = self.kids.by_id(child_id, "restart_child")
        if child.status == "restarting":
            raise ChildRestarting(child_id)
        if child.process is not None:
            raise ChildRunning(child_id)
        outcome, reason = self.kids.start(child)
        if outcome == "error":
            raise StartChildFailed(child_id, reason) from _as_cause(reason)
        return child.handle

    def _api_delete_child(self, child_id: Hashable) -> None:
        child = self.kids.by_id(child_id, "delete_child")
        if child.status == "restarting":
            raise ChildRestarting(child_id)
        if child.process is not None:
            raise ChildRunning(child_id)
        self.kids.discard(child)

    def _api_get_childspec(self, target: Any) -> ChildSpec:
        if self.dynamic:
            return self.kids.by_pid(target).spec
        return self.kids.by_id(target).spec

    def _api_subscribe(self, listener: Listener) -> None:
        if not callable(listener):
            raise SupervisorError(
                f"subscribe takes a callable listener(event), got {short_repr(listener)}"
            )
        self.listeners.append(listener)

    def _api_unsubscribe(self, listener: Listener) -> None:
        for n, known in enumerate(self.listeners):
            if same_id(known, listener):  # never the caller's own __eq__ unguarded
                del self.listeners[n]
                return

    def _api_sync(self) -> None:
        return None

    def _api_info(self) -> dict[str, Any]:
        # For observers: the flags, and how much of the intensity the window holds now.
        return {
            "strategy": self.flags.strategy,
            "intensity": self.flags.intensity,
            "period": self.flags.period,
            "auto_shutdown": self.flags.auto_shutdown,
            "restarts_in_period": self.intensity.in_period(),
        }

    # -- reports ----------------------------------------------------------------------------

    def _label(self) -> str:
        return self._process.name or repr(self._process.pid)

    def _emit(self, kind: str, child: Child | None, pid: Pid | None, reason: ExitReason) -> None:
        child_id = None if child is None or self.dynamic else child.spec.id
        event = SupervisorEvent(kind, self._label(), child_id, pid, reason)
        level = logging.ERROR if kind == "exited" and not is_normal_exit(reason) else logging.INFO
        if logger.isEnabledFor(level):
            logger.log(
                level,
                "supervisor %s: %s child=%s pid=%r reason=%s",
                event.supervisor,
                kind,
                short_repr(child_id),
                pid,
                short_repr(reason),
            )
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                logger.exception(
                    "supervisor %s: event listener %s failed", self._label(), short_repr(listener)
                )


def _as_cause(reason: ExitReason) -> BaseException | None:
    return reason if isinstance(reason, BaseException) else None
