"""What each model call of a turn is sent: prepare's output, the user's long-term memory
in front of it, checked against the guardrails before anything goes out.

The order, for every call of a turn (tool rounds included): ``provider.prepare(history)``
(pure), then the profile and facts as pinned system messages before it (never stored:
they exist only in the list sent), then the guardrails over exactly what would be sent,
the system prompt included. A violation raises before the model is called. The budgets'
share of the call is held in the store from then until ``settle``: the agent settles once
the call's answer is stored, or the turn ends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..guardrails import Guardrails, Held, Policy, Request, UsageReader, check_policies
from ..guardrails import check_store as check_usage_store
from ..memory import BasicMemoryProvider, LongTermMemory, StoreProvider
from ..messages import Conv, short_repr
from ..stores import Scope
from ._blocks import AgentBlocks
from ._scopes import AgentScopes


class TurnContext:
    """Builds the messages of one model call (see the module docstring)."""

    __slots__ = (
        "blocks",
        "conv",
        "guard",
        "held",
        "inject",
        "ltm",
        "policies",
        "provider",
        "store",
        "system_prompt",
        "view",
    )

    def __init__(
        self,
        provider: BasicMemoryProvider | None,
        conv: Conv,
        system_prompt: str | None,
        ltm: LongTermMemory | None,
        policies: Sequence[Policy],
        store: UsageReader | None,
        blocks: AgentBlocks | None = None,
        view: Sequence[Scope] = (),
    ) -> None:
        self.blocks = blocks
        self.view = tuple(view)
        self.provider = provider
        self.conv = conv
        self.system_prompt = system_prompt
        self.ltm = ltm
        # A provider that injects long-term memory itself (PipelineProvider(...,
        # long_term_memory=ltm)) does it in prepare: injecting here too would send it twice.
        self.inject = ltm is not None and _own_ltm(provider) is None
        self.policies = tuple(policies)
        self.store = store
        self.guard = None if store is None else Guardrails(self.policies, store)
        self.held: Held | None = None  # the hold of the call last built, until settled

    def build(self, history: Sequence[Mapping[str, Any]]) -> tuple[list[Any], str | None]:
        """The messages to send and the system prompt to put first; ``PolicyViolation``
        if a guardrail refuses them. The call's budgets are held until ``settle``."""
        self.settle()  # the call before this one has answered
        provider = self.provider
        to_send = list(provider.prepare(self.conv, history) if provider else history)
        if self.inject:
            assert self.ltm is not None
            to_send = self.ltm.inject(to_send, self.view or self.conv.user_id)
        if self.blocks is not None:  # read for every call: another agent's edit shows
            to_send = [*self.blocks.messages(), *to_send]
        if not self.policies:
            return to_send, self.system_prompt
        assert self.guard is not None
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        request = Request([*head, *to_send], self.conv)
        admitted = self.guard.admit(request)
        self.held = admitted.held
        checked = admitted.request
        if checked is request:
            return to_send, self.system_prompt
        # A policy rewrote the messages: send exactly what it returned, prompt included.
        return list(checked.messages), None

    def settle(self) -> None:
        """Release the hold of the call last built: its answer is stored, or it failed."""
        held, self.held = self.held, None
        if held is not None:
            held.release()


def _own_ltm(provider: BasicMemoryProvider | None) -> LongTermMemory | None:
    return provider.long_term_memory if isinstance(provider, StoreProvider) else None


def turn_context(
    provider: BasicMemoryProvider | None,
    scopes: AgentScopes,
    system_prompt: str | None,
    long_term_memory: object,
    guardrails: Iterable[object],
    blocks: AgentBlocks | None = None,
) -> TurnContext:
    """The start arguments ``long_term_memory`` and ``guardrails`` checked against the
    agent's memory and user; a clear error now, not at the first turn. Both need the
    store a ``StoreProvider`` is over (another provider's store is its own business)."""
    conv = scopes.conv
    store = provider.store if isinstance(provider, StoreProvider) else None
    ltm: LongTermMemory | None = None
    if long_term_memory is not None:
        if not isinstance(long_term_memory, LongTermMemory):
            raise TypeError(
                f"long_term_memory must be a LongTermMemory, got {short_repr(long_term_memory)}"
            )
        ltm = long_term_memory
        if conv.user_id is None:
            raise ValueError("long_term_memory is kept per user: give the agent a user_id")
        if provider is None:
            raise ValueError(
                "long_term_memory extracts from the stored conversation: give the agent memory"
            )
        if store is not None and store != ltm.store:
            raise ValueError(
                "long_term_memory reads another store than the agent's memory writes: give "
                "both the same store"
            )
        own = _own_ltm(provider)
        if own is not None and own is not ltm:
            raise ValueError(
                "the agent's provider injects another LongTermMemory: give the agent the same "
                "one (or none)"
            )
    policies = check_policies(guardrails)
    usage: UsageReader | None = None
    if policies:
        if store is None:
            raise ValueError(
                "guardrails read the usage a store records: give the agent memory with a "
                'store (memory="default", {"store": store}, or a StoreProvider over a store)'
            )
        usage = check_usage_store(store)
    return TurnContext(provider, conv, system_prompt, ltm, policies, usage, blocks, scopes.view)
