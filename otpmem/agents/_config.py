"""What an agent is made of, checked at start: its memory forms, its callbacks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..llm import ChatResponse
from ..memory import BasicMemoryProvider, DefaultProvider, MemoryProvider, check_provider
from ..memory.recall.default import default_index
from ..memory.recall.hybrid import HybridProvider
from ..messages import Conv
from ..protocols import conforms
from ..stores import ChatMemory, default_store

if TYPE_CHECKING:
    from ..memory import Memory

logger = logging.getLogger("otpmem.agents")

MEMORY_FORMS = (
    'omitted or "default" (the shared default store), {"window": n}, {"store": store}, '
    '{"recall": True} or {"window": n, "recall": True} (recall over the default store), '
    "a MemoryProvider (or a BasicMemoryProvider), a Memory (otpmem.memory.memory(...): its "
    "store, policy and conversation), or False/None (no memory)"
)


def as_memory(memory: Any) -> Memory | None:
    """``memory`` if it is a ``Memory`` (the facade's), else None."""
    if not (hasattr(memory, "conv") and hasattr(memory, "provider")):
        return None  # not one: the facade need not be imported to say so
    from ..memory import Memory

    return memory if isinstance(memory, Memory) else None


def bound_conversation(memory: Any) -> Conv | None:
    """The conversation a ``Memory`` given as ``memory=`` binds the agent to, else None."""
    bound = as_memory(memory)
    return None if bound is None else bound.conv


def resolve_memory(memory: Any) -> BasicMemoryProvider | None:
    """Turn one of beamai's five memory forms (or a recall form) into a provider; anything
    else raises now (a provider lacking a member of the contract: a TypeError naming it)."""
    if memory is None or memory is False:
        return None
    if as_memory(memory) is not None:
        if memory.closed:
            raise ValueError(f"memory={memory!r} is closed: give the agent an open Memory")
        return check_provider(memory.provider)
    if isinstance(memory, str):
        if memory == "default":
            return DefaultProvider(default_store())
        raise ValueError(f"memory={memory!r} is not understood; memory takes {MEMORY_FORMS}")
    if isinstance(memory, Mapping):
        if "recall" in memory and set(memory) <= {"window", "recall"}:
            return _recall_memory(memory)
        if set(memory) == {"window"}:
            window = memory["window"]
            if type(window) is not int or window < 1:
                raise ValueError(f'memory={{"window": n}} needs an int n >= 1, got {window!r}')
            return DefaultProvider(default_store(), window)
        if set(memory) == {"store"}:
            store = memory["store"]
            if not conforms(store, ChatMemory):
                raise TypeError(f'memory={{"store": ...}} needs a ChatMemory store, got {store!r}')
            return DefaultProvider(store)
        raise ValueError(f"memory={memory!r} is not understood; memory takes {MEMORY_FORMS}")
    if conforms(memory, BasicMemoryProvider) or any(
        hasattr(memory, name) for name in ("history", "prepare")
    ):
        return check_provider(memory)
    raise TypeError(f"memory={memory!r} is not understood; memory takes {MEMORY_FORMS}")


def _recall_memory(memory: Mapping[str, Any]) -> MemoryProvider:
    """``{"recall": True}`` (with ``"window": n``): a HybridProvider over the default store
    and the shared RecallIndex (the application's, or one started for it): the pinned
    messages, up to 5 older ones relevant to the newest question, then the newest n (5)."""
    recall, window = memory["recall"], memory.get("window")
    if type(recall) is not bool:
        raise ValueError(f'memory={{"recall": ...}} takes True or False, got {recall!r}')
    if window is not None and (type(window) is not int or window < 1):
        raise ValueError(f'memory={{"window": n, ...}} needs an int n >= 1, got {window!r}')
    if not recall:
        return DefaultProvider(default_store(), window)
    index = default_index()  # first: without an application it warns once for both
    store = default_store()
    if window is None:
        return HybridProvider(store, index)
    # The window stays whole: recall adds its places beside it (total_limit is both).
    return HybridProvider(store, index, recent_limit=window, total_limit=window + 5)


@dataclass
class Callbacks:
    """Hooks into a turn; their exceptions are logged, never raised into the turn.

    Each receives ``meta`` (agent, conversation, turn, run id) first.
    """

    on_turn_start: Callable[[dict[str, Any]], Any] | None = None
    on_turn_end: Callable[[dict[str, Any], Any], Any] | None = None
    on_turn_error: Callable[[dict[str, Any], BaseException], Any] | None = None
    on_model_call: Callable[[dict[str, Any], list[Any]], Any] | None = None
    on_model_result: Callable[[dict[str, Any], ChatResponse], Any] | None = None
    on_tool_call: Callable[[dict[str, Any], Mapping[str, Any]], Any] | None = None
    on_tool_result: Callable[[dict[str, Any], Mapping[str, Any]], Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def fire(self, name: str, *args: Any) -> None:
        """Call hook ``name`` if set; log what it raises."""
        hook = getattr(self, name, None)
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:
            logger.exception("agent callback %s raised; the turn goes on", name)


def as_callbacks(callbacks: Callbacks | Mapping[str, Any] | None) -> Callbacks:
    """Callbacks from a Callbacks, a dict of hooks, or None."""
    if callbacks is None:
        return Callbacks()
    if isinstance(callbacks, Callbacks):
        return callbacks
    if isinstance(callbacks, Mapping):
        known = set(Callbacks.__dataclass_fields__) - {"extra"}
        unknown = set(callbacks) - known
        if unknown:
            raise ValueError(f"unknown callbacks {sorted(unknown)}; known: {sorted(known)}")
        return Callbacks(**callbacks)
    raise TypeError(f"callbacks must be a Callbacks or a dict of hooks, got {callbacks!r}")


class ConversationBusy(RuntimeError):
    """Another turn is writing this conversation (``on_busy="refuse"``, or the wait ran out)."""
