"""The kernel: a model behind onion filters, with tools and a tool loop."""

from .filters import (
    ChatRequest,
    Context,
    Filter,
    ToolRequest,
    memory_filter,
    system_prompt_filter,
)
from .guard import guardrails_filter
from .kernel import (
    ApprovalRequired,
    Kernel,
    KernelError,
    MaxToolIterations,
    current_tool_request,
)
from .tools import Tool, encode_result, needs_approval, refusal, tool, tool_error, toolset

__all__ = [
    "ApprovalRequired",
    "ChatRequest",
    "Context",
    "Filter",
    "Kernel",
    "KernelError",
    "MaxToolIterations",
    "Tool",
    "ToolRequest",
    "current_tool_request",
    "encode_result",
    "guardrails_filter",
    "memory_filter",
    "needs_approval",
    "refusal",
    "system_prompt_filter",
    "tool",
    "tool_error",
    "toolset",
]
