"""Agents: LLM tool loops as supervised servers over conversation memory."""

from ._config import MEMORY_FORMS, Callbacks, ConversationBusy, resolve_memory
from .agent import Agent, AgentHandle, TurnFailed, TurnResult

__all__ = [
    "MEMORY_FORMS",
    "Agent",
    "AgentHandle",
    "Callbacks",
    "ConversationBusy",
    "TurnFailed",
    "TurnResult",
    "resolve_memory",
]
