"""What a turn raises to its caller."""

from __future__ import annotations


class TurnFailed(RuntimeError):
    """A turn could not finish (model error, too many tool rounds); history stays valid."""


class TurnCleared(TurnFailed):
    """The conversation was cleared (or its user forgotten) while the turn ran: the turn's
    writes after that were refused, so the cleared conversation stays cleared."""


class TurnIdReused(ValueError):
    """A ``turn_id`` given again with another message: a retry must repeat its turn."""
