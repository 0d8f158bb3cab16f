"""Models: the ChatModel protocol and what a model answers."""

from .base import ChatModel, ChatResponse

__all__ = ["ChatModel", "ChatResponse"]
