"""What a turn raises to its caller."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..actors import AlreadyStarted
from ..messages import Conv
from ._config import ConversationBusy


class TurnFailed(RuntimeError):
    """A turn could not finish (model error, too many tool rounds); history stays valid."""


class TurnCleared(TurnFailed):
    """The conversation was cleared (or its user forgotten) while the turn ran: the turn's
    writes after that were refused, so the cleared conversation stays cleared."""


class TurnIdReused(ValueError):
    """A ``turn_id`` given again with another message: a retry must repeat its turn."""


class TurnSuspended(ConversationBusy):
    """The conversation awaits a human's approval of a turn's tool calls: a new turn would
    answer them without the human, so it is refused until ``agent.resume`` decides them."""

    def __init__(self, conv: Conv, turn_id: str, pending: Sequence[Any]) -> None:
        names = ", ".join(f"{c.name} ({c.id})" for c in pending) or "its calls"
        super().__init__(
            f"conversation {conv} awaits approval of turn {turn_id!r}: {names}; decide them "
            f"with agent.resume({turn_id!r}, approve=True|False|{{call_id: bool}}) first"
        )
        self.conv = conv
        self.turn_id = turn_id
        self.pending = tuple(pending)


class TurnNotSuspended(ValueError):
    """``resume`` named a turn that awaits no approval (none such, never suspended), or
    decisions that do not fit its pending calls; nothing was stored."""


class AgentAlreadyStarted(AlreadyStarted):
    """An agent of this identity (its name, or its conversation) is already running."""

    def __init__(self, name: str, holder: object) -> None:
        super().__init__(name, holder)
        self.args = (
            f"an agent named {name!r} is already running ({holder!r}): an agent is its "
            "identity, one process at a time; reach it with AgentHandle.named(name) (or "
            "AgentHandle.of(conversation)), or give another agent of the same "
            "conversation a name of its own",
        )
