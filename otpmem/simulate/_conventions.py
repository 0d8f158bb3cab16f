"""What every part of a simulation agrees on: whose conversations they are, how each
conversation and its agent are named, how a read waits out a store's restart, and how a
worker is told to leave its turns. The one-process run, its nodes and the coordinator of
many nodes all use these."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ..actors import NoProcess

T = TypeVar("T")

USER_ID = "sim"
"""The user every conversation of a run belongs to."""


class Stopped(Exception):
    """A worker leaves its turns: the run is stopping (Ctrl-C, or the model is down)."""


def conv_id(i: int) -> str:
    """The conversation of agent ``i``: ``sim-7``."""
    return f"sim-{i}"


def agent_index(conversation_id: str) -> int:
    """The agent of a conversation: ``sim-7`` -> 7."""
    return int(conversation_id.rsplit("-", 1)[1])


def agent_name(i: int) -> str:
    """The registered name of agent ``i``."""
    return f"otpmem.sim.agent-{i}"


def retrying(read: Callable[[], T], attempts: int = 500) -> T:
    """A read that a store restart may interrupt, tried again until the store is back."""
    for _ in range(attempts - 1):
        try:
            return read()
        except NoProcess:
            time.sleep(0.01)  # the store is restarting; nothing to wait on from here
    return read()


__all__ = ["USER_ID", "Stopped", "agent_index", "agent_name", "conv_id", "retrying"]
