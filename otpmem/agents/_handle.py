"""An agent's handle is its identity, not a pid: the registered name of its conversation.

Every agent registers under a name: the one it was given, else ``agent_name(conv)``. A
handle looks the name up at each call, so it follows the agent across restarts as a
registered name does in OTP. When nobody holds the name, a call does not fail at once:

- if a supervisor is restarting the agent (its last incarnation died under one), the call
  waits for the supervisor to finish with that exit, then finds the new incarnation;
- if the application knows the agent (``otpmem.start_agent``/``define_agent``), the call
  activates it: a new process from the stored options, its history from the store;
- only then does it raise ``NoProcess``. All of it is bounded by the call's timeout.

A call is sent again only when its message never reached a handler: the process was dead
before the message was queued, or it stopped as idle (an idle stop happens between
messages, so whatever was queued behind it was never handled).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from ..actors import CallingSelf, CallTimeout, ExitReason, Handle, NoProcess, ServerExited
from ..actors.runtime import Process, lookup
from ..llm import ChatResponse
from ..messages import Conv, ConvLike, as_conv
from ..supervisors import SupervisorHandle
from ._approval import PendingCall
from ._turn import check_turn_id

RUN_TIMEOUT = 300.0
IDLE_EXIT: ExitReason = ("shutdown", "idle")
"""The exit reason of an agent stopped for idleness: a clean exit, never restarted."""
DEPARTURES_KEPT = 10_000
"""Agents that died under a supervisor and have not come back yet, remembered so that a
handle made after the death still waits for the restart; the oldest are forgotten first."""

Activation = Callable[[str, float | None], bool]
"""Bring the agent of a name up within a timeout; False if the name is not known."""

_lock = threading.Lock()
_departed: dict[str, Process] = {}
_activation: Activation | None = None


def agent_name(conv: ConvLike) -> str:
    """The name an agent of conversation ``conv`` registers under unless given one."""
    user_id, conversation_id = as_conv(conv)
    # Quoted, so that no user id can make two conversations share a name.
    conversation = quote(conversation_id, safe="")
    if user_id is None:
        return f"agent:{conversation}"
    return f"agent:{quote(user_id, safe='')}/{conversation}"


def conversation_of(name: str) -> Conv | None:
    """The conversation an ``agent_name`` names; None for a name of another making."""
    if not name.startswith("agent:"):
        return None
    user, _, conversation = name[len("agent:") :].rpartition("/")
    conv = Conv(unquote(user) if user else None, unquote(conversation))
    return conv if conv.conversation_id and agent_name(conv) == name else None


def set_activation(activation: Activation | None) -> Activation | None:
    """Install how a call brings up a known agent that is not running (the application's);
    returns the one it replaces."""
    global _activation
    with _lock:
        previous, _activation = _activation, activation
    return previous


def arrived(name: str) -> None:
    """An incarnation of ``name`` registered: no restart of it is pending any more."""
    if _departed:
        with _lock:
            _departed.pop(name, None)


def departed(name: str, process: Process) -> None:
    """``process``, holding ``name``, is exiting; remembered if a supervisor may restart it."""
    parent = process.parent
    if parent is None or parent.dead or parent.kind != "supervisor":
        return
    with _lock:
        _departed.pop(name, None)
        _departed[name] = process
        while len(_departed) > DEPARTURES_KEPT:
            del _departed[next(iter(_departed))]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


@dataclass(frozen=True)
class TurnResult:
    """A turn's outcome: the answer, and every message the turn added, in order; or, when
    the model called a tool that needs approval, the calls ``pending`` a human's decision
    (``content`` None; continue with ``agent.resume(result.turn_id, approve=...)``)."""

    content: str | None
    messages: list[dict[str, Any]]
    response: ChatResponse
    iterations: int
    tool_calls: int = 0
    healed: list[str] = field(default_factory=list)
    turn_id: str | None = None
    pending: tuple[PendingCall, ...] = ()

    @property
    def suspended(self) -> bool:
        """Whether the turn waits for a human to approve or refuse its ``pending`` calls."""
        return bool(self.pending)


class AgentHandle(Handle):
    """A handle to an agent by its identity: ``run`` a turn, read or clear its conversation.

    It follows the agent across restarts and activations (see the module docstring);
    ``pid``, ``alive`` and ``wait`` speak of the incarnation running now, or else of the
    last one this handle reached.
    """

    __slots__ = ()

    def __init__(self, process: Process | None = None, name: str | None = None) -> None:
        if name is None and process is not None:
            name = process.name  # an agent always has a name: its identity
        super().__init__(None if name is not None else process, name)
        self._process = process  # the last incarnation seen, kept beside the name

    @classmethod
    def of(cls, conv: ConvLike) -> AgentHandle:
        """The handle of the agent of conversation ``conv`` (started without a ``name``)."""
        return cls.named(agent_name(conv))

    def process_or_none(self) -> Process | None:
        """The incarnation holding the name now, else the last one this handle reached."""
        assert self._name is not None
        process = lookup(self._name)
        if process is not None:
            self._process = process
            return process
        return self._process

    def resolve(self) -> Process:
        """The incarnation holding the name now; ``NoProcess`` if none (no waiting)."""
        assert self._name is not None
        process = lookup(self._name)
        if process is None:
            raise NoProcess(self._name)
        self._process = process
        return process

    def call(self, message: Any, timeout: float | None = 5.0) -> Any:
        """``Handle.call``, to whichever incarnation holds the identity: waits for a restart
        or activates a known agent first (see the module docstring), within ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            process = self._reach(deadline)
            try:
                return Handle(process).call(message, _left(deadline))
            except NoProcess:
                if not process.dead:
                    raise
            except ServerExited as exited:
                if exited.reason != IDLE_EXIT:
                    raise  # the message may have been handled: only the caller may retry
            # That incarnation never handled the message: send it to the next one.

    def _reach(self, deadline: float | None) -> Process:
        name = self._name
        assert name is not None
        process = lookup(name)
        if process is None and self._restarted(name, deadline):
            process = lookup(name)
        if process is None:
            activation = _activation
            if activation is not None and activation(name, _left(deadline)):
                process = lookup(name)
        if process is None:
            raise NoProcess(name)
        self._process = process
        return process

    def _restarted(self, name: str, deadline: float | None) -> bool:
        """Wait until the supervisor of the agent's last incarnation has dealt with its
        exit; True if there was such an exit to wait for."""
        with _lock:
            last = _departed.get(name)
        if last is None and self._process is not None and self._process.dead:
            last = self._process
        if last is None or last.parent is None or last.parent.kind != "supervisor":
            return False
        # The exit signal is in the supervisor's mailbox once `exited` is set; a call queued
        # behind it is answered after the restart (or the decision not to restart).
        if not last.exited.wait(_left(deadline)):
            raise CallTimeout(name, _left(deadline), what="wait for the restart of")
        supervisor = last.parent
        try:
            SupervisorHandle(supervisor).count_children(_left(deadline))
        except (NoProcess, ServerExited):
            # It gave up: once it is gone, its own supervisor has its exit in the mailbox,
            # so an activation that asks that one next finds it restarted.
            supervisor.exited.wait(_left(deadline))
        except CallingSelf:
            pass  # this very supervisor calls: it restarts nobody before it answers
        with _lock:
            if _departed.get(name) is last:
                del _departed[name]
        return True

    # -- the agent's API ------------------------------------------------------------------

    def run(
        self, text: str, timeout: float | None = RUN_TIMEOUT, turn_id: str | None = None
    ) -> TurnResult:
        """Run one turn with user message ``text``; ``TurnFailed`` if it cannot finish.

        Give a ``turn_id`` to make the turn safe to retry: run again with the same id after
        ``ServerExited`` or ``CallTimeout``, the turn continues from what it stored (a turn
        that finished answers again without calling the model) and stores nothing twice.
        """
        result: TurnResult = self.call(("run", text, check_turn_id(turn_id)), timeout)
        return result

    def resume(
        self,
        turn_id: str,
        approve: bool | Mapping[str, bool],
        timeout: float | None = RUN_TIMEOUT,
    ) -> TurnResult:
        """Continue a turn suspended on tool calls awaiting approval (``result.pending``):
        ``approve`` True runs them all, False refuses them all (each answers the model that
        the human refused), a dict decides each call id; then the tool loop goes on.

        The suspension is in the store: resume after the agent or the node restarted.
        Retried after it went through, it applies once (the turn answers as it stands); a
        dict of call ids makes that exact also when the turn suspended again since.
        """
        result: TurnResult = self.call(("resume", check_turn_id(turn_id), approve), timeout)
        return result

    def messages(self, timeout: float | None = 5.0) -> list[dict[str, Any]]:
        """The conversation's stored messages ([] without memory)."""
        result: list[dict[str, Any]] = self.call(("messages",), timeout)
        return result

    def add_message(self, message: Mapping[str, Any], timeout: float | None = 5.0) -> None:
        """Store one message in the conversation (nothing without memory)."""
        self.call(("add_message", message), timeout)

    def clear_messages(self, timeout: float | None = 5.0) -> None:
        """Forget the conversation."""
        self.call(("clear",), timeout)

    def info(self, timeout: float | None = 5.0) -> dict[str, Any]:
        """Conversation, turn count and settings."""
        result: dict[str, Any] = self.call(("info",), timeout)
        return result

    def __repr__(self) -> str:
        return f"AgentHandle({self._name!r})"
