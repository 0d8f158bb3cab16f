"""An agent's memory blocks: rendered into every model call, edited by the model's tools.

``blocks=("persona", "team/notes", "agent/persona")``: a bare label is a block of the
agent's user; ``agent/``, ``run/`` and ``team/`` a block of the agent's own scope of that
kind (``agent_id=``, ``run_id=``, ``team=``), ``team:<name>/`` one of another team of its
user. Another user's blocks are never an agent's. Every model call is sent each
block as a pinned system message after the system prompt (read then, so another agent's edit
shows on the next call; never stored), and the model gets ``core_memory_append``,
``core_memory_replace`` and ``memory_search`` (plus ``conversation_search`` over the
conversation, and ``fact_search`` over the user's facts with long-term memory). An edit is
keyed by the turn and the tool call (``turn:<turn_id>:<call id>``): a retried turn's edit
applies once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..kernel import Tool, current_tool_request, tool
from ..memory.longterm import line_of
from ..messages import short_repr
from ..protocols import conforms
from ..stores import Who
from ..stores.blocks import DEFAULT_BLOCK_LIMIT, BlockStore, check_label
from ..stores.ranking import attached
from ..stores.scopes import canonical
from ._scopes import AgentScopes


class AgentBlocks:
    """The blocks an agent was started with, over its store."""

    def __init__(self, store: Any, names: dict[str, tuple[Who, str]], scopes: AgentScopes) -> None:
        self.store = store
        self.names = names  # the name the model uses -> (owner, label)
        self.conv = scopes.conv
        self.view = scopes.view

    def messages(self) -> list[dict[str, Any]]:
        """One pinned system message per block, as it is now (an absent block: empty)."""
        sent = []
        for name, (owner, label) in self.names.items():
            block = self.store.get_block(owner, label)
            value = "" if block is None else block.value
            limit = DEFAULT_BLOCK_LIMIT if block is None else block.limit
            sent.append(
                {
                    "role": "system",
                    "content": f'<memory_block name="{name}" chars="{len(value)}/{limit}">\n'
                    f"{value}\n</memory_block>",
                }
            )
        return sent

    def _find(self, name: str) -> tuple[Who, str]:
        found = self.names.get(name)
        if found is None:
            raise ValueError(f"no memory block named {name!r}; the blocks: {sorted(self.names)}")
        return found

    def tools(self, recall: bool, ltm: Any) -> list[Tool]:
        """The model's tools over these blocks (and the conversation, and the facts)."""

        def core_memory_append(block: str, text: str) -> str:
            """Append a line of text to one of your memory blocks."""
            owner, label = self._find(block)
            edited = self.store.append_block(owner, label, text, key=_edit_key())
            return f"appended; {block} holds {len(edited.value)}/{edited.limit} chars"

        def core_memory_replace(block: str, old: str, new: str) -> str:
            """Replace text that occurs once in a memory block (new may be empty)."""
            owner, label = self._find(block)
            edited = self.store.replace_block(owner, label, old, new, key=_edit_key())
            return f"replaced; {block} holds {len(edited.value)}/{edited.limit} chars"

        def memory_search(query: str) -> list[str]:
            """Lines of your memory blocks that contain the query (case-insensitive)."""
            wanted = query.lower()
            return [
                f"{name}: {line}"
                for name, (owner, label) in self.names.items()
                if (found := self.store.get_block(owner, label)) is not None
                for line in found.value.split("\n")
                if wanted in line.lower()
            ]

        def conversation_search(query: str, limit: int = 5) -> list[str]:
            """Earlier messages of this conversation that match the query, best first."""
            hits = self.store.search(query, self.conv.user_id, self.conv, limit)
            return [f"[{h.index}] {h.message.get('content')}" for h in hits]

        def fact_search(query: str, limit: int = 5) -> list[str]:
            """Facts known about the user (and your team, your run), most relevant first."""
            hits = ltm.get_relevant(query, user_id=self.view, limit=limit)
            return [line_of(h.fact)[2:] for h in hits]

        made: list[Callable[..., Any]] = [core_memory_append, core_memory_replace, memory_search]
        if recall:
            made.append(conversation_search)
        if ltm is not None and self.conv.user_id is not None:
            made.append(fact_search)
        # Inline, not on the blocking pool: the edit key is read from the running call.
        return [_inline(tool(fn)) for fn in made]


def _inline(built: Tool) -> Tool:
    return Tool(built.name, built.description, built.parameters, built.fn, blocks=False)


def _edit_key() -> str | None:
    """``turn:<turn_id>:<call id>`` for a call of an agent's turn, else None (not keyed)."""
    request = current_tool_request()
    if request is None:
        return None
    turn_id = request.context.vars.get("turn_id")
    call_id = request.call.get("id")
    if not isinstance(turn_id, str) or not isinstance(call_id, str):
        return None
    return f"turn:{turn_id}:{call_id}"


def agent_blocks(blocks: Iterable[str], store: object, scopes: AgentScopes) -> AgentBlocks | None:
    """The ``blocks`` option checked against the agent's store and scopes; None for none."""
    if isinstance(blocks, str):
        raise TypeError(f"blocks takes a tuple of block names, got the str {blocks!r}")
    names: dict[str, tuple[Who, str]] = {}
    for name in blocks:
        if type(name) is not str:
            raise TypeError(f"a block name is a str ('label' or 'owner/label'), got {name!r}")
        owner, _, label = name.rpartition("/")
        check_label(label)
        names[name] = (canonical(scopes.owner(owner)), label)
    if not names:
        return None
    if store is None or not conforms(store, BlockStore):
        raise ValueError(
            f"blocks live in the agent's store: give the agent memory over a store that "
            f"keeps blocks (MemoryStore, LevelDBStore, PostgresStore), not {short_repr(store)}"
        )
    return AgentBlocks(store, names, scopes)


def block_tools(blocks: AgentBlocks | None, provider: object, ltm: object) -> list[Tool]:
    """The tools ``blocks`` give the model (none without blocks): conversation search when
    the agent has a RecallIndex (its provider's, or one attached to its store)."""
    if blocks is None:
        return []
    recall = getattr(provider, "index", None) is not None or attached(blocks.store) is not None
    return blocks.tools(recall, ltm)
