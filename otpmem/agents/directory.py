"""The agents an application knows, and their activation on demand (virtual actors).

Orleans calls them virtual actors; Elixir systems build them from a Registry and a
DynamicSupervisor. A known agent is an identity and the options to start it with; it runs
only while it is used. A call for a known agent that is not running starts it under the
directory's supervisor, from its options and its history in the store; an agent idle past
its ``idle_timeout`` stops and costs nothing but its entry here (its options, shared with
every other agent started from the same objects) and its stored conversation.

So an agent that crashed, was killed, idled out, or was lost with a supervisor that gave
up comes back at its next call, with its history: a burst of kills costs latency only.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from ..actors import NoProcess, ServerExited
from ..actors.runtime import lookup
from ..supervisors import SupervisorHandle
from ._handle import AgentHandle
from ._handle import conversation_of as conversation_of_name
from ._options import IDENTITY_FIELDS, AgentOptions, configure, identity
from .errors import AgentAlreadyStarted

START_ATTEMPTS = 3
"""Supervisors an activation tries, when the one it found was exiting."""

Supervisor = Callable[[float | None], SupervisorHandle | None]
"""Finds the supervisor agents are started under (waiting up to a timeout), or None."""


_HOW_FIELDS = tuple(
    f.name for f in dataclasses.fields(AgentOptions) if f.name not in IDENTITY_FIELDS
)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def option_values(options: AgentOptions) -> dict[str, Any]:
    """``options`` as the keyword arguments of ``Agent.start_link``."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}


class AgentDirectory:
    """Known agents by name: defined once, activated under ``supervisor`` when called."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._lock = threading.Lock()
        self._known: dict[str, AgentOptions] = {}
        self._template: AgentOptions | None = None

    def define(self, options: AgentOptions) -> tuple[str, AgentHandle]:
        """Know the agent of ``options`` (checked here); its name and handle. A known agent
        that is not running takes the new options; ``AgentAlreadyStarted`` if it runs."""
        if options.conversation_id is None:
            raise ValueError("a known agent needs its conversation_id: it is the identity")
        name = identity(options)
        template = self._template_for(options)
        # An agent named after its conversation is its name and the shared template; one
        # named otherwise keeps its own options (the name no longer says its conversation).
        entry = template if options.name is None else options
        with self._lock:
            running = lookup(name)
            if running is not None:
                raise AgentAlreadyStarted(name, running)
            self._known[name] = entry
        return name, AgentHandle.named(name)

    def _template_for(self, options: AgentOptions) -> AgentOptions:
        """The shared options of every agent defined from the same objects: checked once
        (``configure``), so that defining a million agents costs their names only."""
        template = self._template
        if template is not None and all(
            getattr(template, field) is getattr(options, field) for field in _HOW_FIELDS
        ):
            return template
        configure(options)  # every option checked now, not at activation
        template = dataclasses.replace(options, conversation_id=None, user_id=None, name=None)
        self._template = template
        return template

    def options(self, name: str) -> AgentOptions | None:
        """The options the known agent ``name`` starts with; None if it is not known."""
        entry = self._known.get(name)
        if entry is None or entry.conversation_id is not None:
            return entry
        conv = conversation_of_name(name)
        assert conv is not None
        return dataclasses.replace(
            entry, conversation_id=conv.conversation_id, user_id=conv.user_id
        )

    def activate(self, name: str, timeout: float | None) -> bool:
        """Start the known agent ``name`` unless it runs; False if ``name`` is not known."""
        return self.start(name, timeout) is not None or lookup(name) is not None

    def start(self, name: str, timeout: float | None) -> AgentHandle | None:
        """Start the known agent ``name``; None if it is unknown or another start won."""
        options = self.options(name)
        deadline = None if timeout is None else time.monotonic() + timeout
        for _ in range(START_ATTEMPTS):
            if options is None or lookup(name) is not None:
                return None
            supervisor = self._supervisor(_left(deadline))
            if supervisor is None:
                return None
            try:
                handle = supervisor.start_child((options,), _left(deadline))
            except (NoProcess, ServerExited):
                # It was giving up as we asked: once it is gone, its parent has heard of
                # its exit, and the supervisor found next is its successor.
                process = supervisor.process_or_none()
                if process is not None:
                    process.exited.wait(_left(deadline))
                continue
            return handle if isinstance(handle, AgentHandle) else None
        return None

    def forget(self, name: str) -> bool:
        """Forget the agent ``name`` (its conversation stays in the store); True if known."""
        with self._lock:
            return self._known.pop(name, None) is not None

    def names(self) -> list[str]:
        """Every known agent's name, in the order they became known."""
        with self._lock:
            return list(self._known)
