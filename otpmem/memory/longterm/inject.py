"""What long-term memory puts in front of a context: pinned system messages, capped.

The profile comes first ("User profile:\\n..."), then the facts ("User context:\\n- k: v"),
the most recently updated first, as many as fit in the token cap. They are marked
``metadata.long_term_memory`` and ``pinned``, built fresh for every call, and never stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...stores import Fact, Profile
from ..tokens import TokenCounter

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


def render(
    profile: Profile | None, facts: Sequence[Fact], max_tokens: int, counter: TokenCounter
) -> list[dict[str, Any]]:
    """The profile message (if it fits) and the facts message (the newest facts that fit
    in what is left), at most ``max_tokens`` together by ``counter``."""
    out: list[dict[str, Any]] = []
    left = max_tokens
    if profile is not None and profile.summary.strip():
        message = pinned_system(f"{PROFILE_HEADER}\n{profile.summary.strip()}", "profile")
        cost = counter.count(message)
        if cost <= left:
            out.append(message)
            left -= cost
    if not facts:
        return out
    ordered = sorted(facts, key=lambda f: (-f.updated_at, f.key))  # newest; ties by key
    lines = [f"- {f.key}: {f.value}" for f in ordered]
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
        message = pinned_system("\n".join([FACTS_HEADER, *lines[:kept]]), "facts")
        if counter.count(message) <= left:
            out.append(message)
            break
        kept -= 1
    return out
