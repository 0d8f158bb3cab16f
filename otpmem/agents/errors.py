"""What a turn raises to its caller."""

from __future__ import annotations

from ..actors import AlreadyStarted


class TurnFailed(RuntimeError):
    """A turn could not finish (model error, too many tool rounds); history stays valid."""


class TurnCleared(TurnFailed):
    """The conversation was cleared (or its user forgotten) while the turn ran: the turn's
    writes after that were refused, so the cleared conversation stays cleared."""


class TurnIdReused(ValueError):
    """A ``turn_id`` given again with another message: a retry must repeat its turn."""


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
