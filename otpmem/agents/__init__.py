"""Agents: LLM tool loops as supervised servers over conversation memory."""

from ._approval import PendingCall
from ._config import MEMORY_FORMS, Callbacks, ConversationBusy, resolve_memory
from ._handle import IDLE_EXIT, AgentHandle, TurnResult, agent_name, set_activation
from ._options import AgentOptions
from .agent import Agent
from .errors import (
    AgentAlreadyStarted,
    TurnCleared,
    TurnFailed,
    TurnIdReused,
    TurnNotSuspended,
    TurnSuspended,
)

__all__ = [
    "IDLE_EXIT",
    "MEMORY_FORMS",
    "Agent",
    "AgentAlreadyStarted",
    "AgentHandle",
    "AgentOptions",
    "Callbacks",
    "ConversationBusy",
    "PendingCall",
    "TurnCleared",
    "TurnFailed",
    "TurnIdReused",
    "TurnNotSuspended",
    "TurnResult",
    "TurnSuspended",
    "agent_name",
    "resolve_memory",
    "set_activation",
]
