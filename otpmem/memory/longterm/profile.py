"""A user's profile, written by a model from the facts known (seed 004's update_profile)."""

from __future__ import annotations

from typing import Any

from ...actors import blocking
from ...llm import ChatModel
from ...messages import InvalidMessage, freeze_value, short_repr
from ...stores import Profile
from .extractors import ExtractionFailed, fact_lines, parse_json

PROFILE_PROMPT = "You are updating a user profile based on known facts."
PROFILE_RULE = (
    "Generate a concise user profile summary (2-3 sentences) and structured metadata. "
    'Return JSON: {"summary": "...", "metadata": {...}}\nOutput ONLY the JSON object.'
)


def profile_prompt(store: Any, user_id: str) -> list[dict[str, Any]]:
    """The messages that ask for the profile: the current one, the facts, the JSON rule."""
    current = store.get_profile(user_id)
    system = PROFILE_PROMPT
    if current is not None:
        system += f"\n\nCurrent profile:\n{current.summary}"
    system += f"\n\nUser facts:\n{fact_lines(store.get_facts(user_id))}\n\n{PROFILE_RULE}"
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "Generate the updated profile."},
    ]


def update_profile(store: Any, user_id: str, llm: ChatModel) -> Profile:
    """Ask ``llm`` for the user's profile, save it and return it as stored; a reply that is
    not ``{"summary", "metadata"}`` raises ``ExtractionFailed`` and saves nothing."""
    if not isinstance(llm, ChatModel):
        raise TypeError(f"update_profile needs a ChatModel, got {short_repr(llm)}")
    prompt = profile_prompt(store, user_id)
    # A model call holds its thread for seconds: off the schedulers with it.
    response = blocking(llm.chat, prompt) if getattr(llm, "blocks", True) else llm.chat(prompt)
    data = parse_json(response.content, dict, "a JSON profile object")
    summary, metadata = data.get("summary"), data.get("metadata", {})
    if not isinstance(summary, str) or not summary.strip():
        raise ExtractionFailed("the profile has no summary (a non-empty str)", response.content)
    if not isinstance(metadata, dict):
        raise ExtractionFailed("the profile's metadata is not an object", response.content)
    try:
        freeze_value(metadata, "metadata")  # the rule every store applies (NaN, nesting)
    except InvalidMessage as exc:
        raise ExtractionFailed(f"the profile cannot be stored: {exc}", response.content) from None
    saved: Profile = store.save_profile(Profile(user_id, summary.strip(), metadata))
    return saved
