"""Agents: LLM tool loops as supervised servers over conversation memory."""

from ._config import MEMORY_FORMS, Callbacks, ConversationBusy, resolve_memory
from .agent import Agent, AgentHandle, TurnResult
from .errors import TurnCleared, TurnFailed, TurnIdReused

__all__ = [
    "MEMORY_FORMS",
    "Agent",
    "AgentHandle",
    "Callbacks",
    "ConversationBusy",
    "TurnCleared",
    "TurnFailed",
    "TurnIdReused",
    "TurnResult",
    "resolve_memory",
]
