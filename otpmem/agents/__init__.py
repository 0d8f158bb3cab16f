"""Agents: LLM tool loops as supervised servers over conversation memory."""

from ._config import MEMORY_FORMS, Callbacks, ConversationBusy, resolve_memory
from ._options import AgentOptions
from .agent import Agent, AgentHandle, TurnResult
from .errors import TurnCleared, TurnFailed, TurnIdReused

__all__ = [
    "MEMORY_FORMS",
    "Agent",
    "AgentHandle",
    "AgentOptions",
    "Callbacks",
    "ConversationBusy",
    "TurnCleared",
    "TurnFailed",
    "TurnIdReused",
    "TurnResult",
    "resolve_memory",
]
