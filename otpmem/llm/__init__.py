"""Models: the ChatModel protocol, a scripted model, and an OpenAI-compatible client."""

from .base import ChatModel, ChatResponse, ModelError
from .openai import OpenAIClient
from .pricing import Pricing, normalize_usage
from .scripted import ScriptedModel, as_response, tool_call

__all__ = [
    "ChatModel",
    "ChatResponse",
    "ModelError",
    "OpenAIClient",
    "Pricing",
    "ScriptedModel",
    "as_response",
    "normalize_usage",
    "tool_call",
]
