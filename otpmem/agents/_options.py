"""An agent's start options, written once: ``AgentOptions``, and what they are checked and
built into (``configure``) before any process exists.

``Agent.start_link``, ``Agent.start``, ``otpmem.start_agent`` and ``otpmem.aio.start_agent``
take ``AgentOptions``' parameters (``otpmem.protocols.parameters_of``), so a parameter added
here is a parameter of all four, typed, with its default.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, cast

from ..kernel import Filter, Kernel, Tool
from ..llm import ChatModel, Pricing
from ..memory import BasicMemoryProvider, MemoryProvider
from ..messages import Conv, as_conv, check_user_id
from ..protocols import conforms
from ._blocks import agent_blocks, block_tools
from ._config import Callbacks, as_callbacks, bound_conversation, resolve_memory
from ._context import TurnContext, turn_context
from ._handle import agent_name
from ._scopes import agent_scopes


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """What an agent is started with; every option is checked at start, not later.

    ``llm``: the model. ``memory``: one of ``MEMORY_FORMS`` (the shared default store when
    omitted). ``conversation_id`` (a fresh ``conv-...`` when None) and ``user_id`` name the
    conversation; a ``Memory`` given as ``memory`` names it instead (they may repeat it).
    ``system_prompt``: sent first in every model call, never stored.
    ``tools``: functions or ``Tool``s. ``max_tool_iterations``: model calls of one turn, at
    most. ``filters``: the kernel's onion filters. ``callbacks``: hooks into a turn (a
    ``Callbacks`` or a dict of them). ``on_busy``: what a turn does while another turn
    writes the conversation, ``"wait"`` (up to ``busy_timeout`` s) or ``"refuse"``.
    ``agent_name``: the agent's name in callbacks and ``info()``. ``guardrails``: policies
    checked before every model call (``PolicyViolation`` to the caller, the agent stays
    up). ``long_term_memory``: a ``LongTermMemory`` injected before the history and
    extracted per its trigger. ``pricing``: the cost recorded with each answer's usage
    when the model reports none. ``name``: the agent's identity, the name its process
    registers under (None: ``agent_name(conversation)``, so the handle of a conversation's
    agent follows it across restarts). ``idle_timeout``: seconds without a call after
    which the agent stops (None: never); an agent the application knows is activated
    again by its next call, with its history from the store. ``blocks``: memory blocks
    (``"label"``: the user's; ``"agent/label"``, ``"run/label"``, ``"team/label"``: the
    agent's own scope's; ``"team:<name>/label"``: another team's of its user) sent after the
    system prompt in every call and edited by the model's tools (see ``_blocks``).
    ``agent_id``, ``run_id``, ``team``: the agent's, run's and team's scopes (within its
    user) its conversation joins; long-term memory is read over all of them (see
    ``_scopes``).
    """

    llm: ChatModel
    memory: Any = "default"
    conversation_id: str | None = None
    user_id: str | None = None
    system_prompt: str | None = None
    tools: Iterable[Callable[..., Any] | Tool] = ()
    max_tool_iterations: int = 10
    _: KW_ONLY
    filters: Iterable[Filter] = ()
    callbacks: Callbacks | Mapping[str, Any] | None = None
    on_busy: str = "wait"
    busy_timeout: float = 60.0
    agent_name: str = "agent"
    guardrails: Iterable[Any] = ()
    long_term_memory: Any = None
    pricing: Pricing | None = None
    name: str | None = None
    idle_timeout: float | None = None
    blocks: Iterable[str] = ()
    agent_id: str | None = None
    run_id: str | None = None
    team: str | None = None

    def __post_init__(self) -> None:
        # A Memory is one conversation: the agent over it is that conversation's agent (its
        # identity, found again after a restart), so the ids come from it.
        bound = bound_conversation(self.memory)
        if bound is None:
            return
        for field_name, value in (
            ("user_id", bound.user_id),
            ("conversation_id", bound.conversation_id),
        ):
            given = getattr(self, field_name)
            if given is not None and given != value:
                raise ValueError(
                    f"{field_name}={given!r}, but memory= is bound to {bound}: drop "
                    f"{field_name}, or make the memory with it (memory(kind, "
                    f"{field_name}=...))"
                )
            object.__setattr__(self, field_name, value)


@dataclass
class AgentConfig:
    """An agent's options, checked and built: what its server runs turns with."""

    kernel: Kernel
    provider: BasicMemoryProvider | None
    keyed: MemoryProvider | None  # the provider, when it keeps the exactly-once contract
    conv: Conv
    system_prompt: str | None
    sending: TurnContext
    callbacks: Callbacks
    on_busy: str
    busy_timeout: float
    agent_name: str
    name: str
    idle_timeout: float | None


IDENTITY_FIELDS = ("conversation_id", "user_id", "name")
"""The options that say which agent this is; the others say how it runs."""


def conversation_of(options: AgentOptions) -> Conv:
    """The conversation the options name (a fresh ``conv-...`` id when they name none)."""
    conv_id = options.conversation_id or f"conv-{uuid.uuid4().hex[:16]}"
    return as_conv(Conv(check_user_id(options.user_id), conv_id))


def identity(options: AgentOptions) -> str:
    """The name the agent of ``options`` registers under (its conversation must be set)."""
    return _check_name(options.name, conversation_of(options))


def configure(options: AgentOptions) -> AgentConfig:
    """Every option checked and built, before any process exists."""
    provider = resolve_memory(options.memory)
    conv = conversation_of(options)
    prompt = _check_prompt(options.system_prompt)
    store = getattr(provider, "store", None)
    scopes = agent_scopes(conv, options.agent_id, options.run_id, options.team, store)
    blocks = agent_blocks(options.blocks, store, scopes)
    kernel = Kernel(
        options.llm,
        options.filters,
        [*options.tools, *block_tools(blocks, provider, options.long_term_memory)],
        options.max_tool_iterations,
        pricing=options.pricing,
    )
    keyed = provider is not None and conforms(provider, MemoryProvider)
    config = AgentConfig(
        kernel=kernel,
        provider=provider,
        keyed=cast(MemoryProvider, provider) if keyed else None,
        conv=conv,
        system_prompt=prompt,
        sending=turn_context(
            provider, scopes, prompt, options.long_term_memory, options.guardrails, blocks
        ),
        callbacks=as_callbacks(options.callbacks),
        on_busy=_check_busy(options.on_busy),
        busy_timeout=options.busy_timeout,
        agent_name=options.agent_name,
        name=_check_name(options.name, conv),
        idle_timeout=_check_idle(options.idle_timeout),
    )
    asking = sorted(t.name for t in kernel.tools.values() if t.needs_approval)
    if asking and config.keyed is None:
        raise ValueError(
            f"tool(s) {', '.join(asking)} need a human's approval, and a turn waiting for it "
            "is kept in the store: give the agent memory with keys (a MemoryProvider; every "
            "memory form but False/None is one), or drop needs_approval"
        )
    if config.provider is not None and config.kernel.memory is not None:
        raise ValueError(
            "a memory_filter in an agent's filters would store every message twice; "
            "give the agent memory=... or the filter, not both"
        )
    return config


def _check_prompt(prompt: Any) -> str | None:
    if prompt is None or prompt == "":
        return None
    if not isinstance(prompt, str):
        raise TypeError(f"system_prompt must be a str, got {prompt!r}")
    return prompt


def _check_name(name: Any, conv: Conv) -> str:
    if name is None:
        return agent_name(conv)
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str (the agent's identity), got {name!r}")
    return name


def _check_idle(idle_timeout: Any) -> float | None:
    if idle_timeout is None:
        return None
    if (
        isinstance(idle_timeout, bool)
        or not isinstance(idle_timeout, int | float)
        or not math.isfinite(idle_timeout)
        or idle_timeout <= 0
    ):
        raise ValueError(f"idle_timeout must be None or seconds > 0, got {idle_timeout!r}")
    return float(idle_timeout)


def _check_busy(on_busy: Any) -> str:
    if on_busy not in ("wait", "refuse"):
        raise ValueError(f"on_busy must be 'wait' or 'refuse', got {on_busy!r}")
    return str(on_busy)
