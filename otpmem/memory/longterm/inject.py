"""What long-term memory puts in front of a context: pinned system messages, capped.

The profile comes first ("User profile:\\n..."), then the facts ("User context:\\n- k: v"),
as many as fit in the token cap, in the order they are wanted (``inject_mode="relevant"``:
the ones most relevant to the newest user message, then the newest; ``"newest"``: the most
recently updated) and shown most recently updated first, so the text changes only when
the facts chosen do. They are marked ``metadata.long_term_memory`` and ``pinned``, built
fresh for every call, and never stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...messages import text_of
from ...stores import Fact, Profile, Scope
from ...stores.scopes import SCOPE_FIELDS
from ..tokens import TokenCounter
from .relevant import newest_first

PROFILE_HEADER = "User profile:"
FACTS_HEADER = "User context:"
MARK = "long_term_memory"


def pinned_system(text: str, kind: str) -> dict[str, Any]:
    """A pinned system message of long-term memory (``kind``: profile or facts)."""
    return {"role": "system", "content": text, "metadata": {"pinned": True, MARK: kind}}


def is_injected(message: Mapping[str, Any]) -> bool:
    """Whether a message is one long-term memory injected (it must never be stored)."""
    metadata = message.get("metadata")
    return isinstance(metadata, Mapping) and metadata.get(MARK) is not None


def question_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the newest user message ("" if there is none): what facts are chosen for."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return text_of(message)
    return ""


def render(
    profile: Profile | None, facts: Sequence[Fact], max_tokens: int, counter: TokenCounter
) -> tuple[list[dict[str, Any]], int]:
    """The profile message (if it fits) and the facts message, at most ``max_tokens``
    together by ``counter``; and how many facts it holds. ``facts`` come in the order
    they are wanted: the first that fit in what the profile left are kept, shown most
    recently updated first."""
    out: list[dict[str, Any]] = []
    left = max_tokens
    if profile is not None and profile.summary.strip():
        message = pinned_system(f"{PROFILE_HEADER}\n{profile.summary.strip()}", "profile")
        cost = counter.count(message)
        if cost <= left:
            out.append(message)
            left -= cost
    if not facts:
        return out, 0
    lines = [line_of(f) for f in facts]
    # Grow by each line's own cost, then check the whole (a counter need not be additive).
    empty = counter.count(pinned_system("", "facts"))
    used = counter.count(pinned_system(FACTS_HEADER, "facts"))
    kept = 0
    for line in lines:
        cost = max(1, counter.count(pinned_system(line, "facts")) - empty)
        if used + cost > left:
            break
        used += cost
        kept += 1
    while kept:
        shown = [line_of(f) for f in newest_first(facts[:kept])]
        message = pinned_system("\n".join([FACTS_HEADER, *shown]), "facts")
        if counter.count(message) <= left:
            out.append(message)
            break
        kept -= 1
    return out, kept


def line_of(fact: Fact) -> str:
    """A fact as the model reads it (one of a scope beyond the user's says whose)."""
    if type(fact.user_id) is Scope:
        return f"- {fact.key}: {fact.value} ({scope_label(fact.user_id)})"
    return f"- {fact.key}: {fact.value}"


def scope_label(scope: Scope) -> str:
    """Whose a scope beyond the user's is, as the model reads it: ``team alpha``."""
    return ", ".join(
        f"{name} {getattr(scope, name)}" for name in SCOPE_FIELDS if getattr(scope, name)
    )
