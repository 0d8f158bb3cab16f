"""When a turn was said: the time an extracted fact became true (``Fact.valid_from``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ...stores import Fact

TIME_KEYS = ("timestamp", "time", "date", "datetime", "created_at", "sent_at")
"""The metadata keys read as a message's time, first found wins (the ones recall reads;
not imported from it, whose module brings numpy): an ISO 8601 string or POSIX seconds."""


def turn_time(message: Mapping[str, Any]) -> float | None:
    """The time in a message's metadata, in seconds (a time without a zone read as UTC),
    or None when it has none that parses: the store then takes the time of the save."""
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    for key in TIME_KEYS:
        value = metadata.get(key)
        if isinstance(value, str):
            try:
                when = datetime.fromisoformat(value.strip())
            except ValueError:
                continue
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return None


def valid_from(
    messages: Sequence[Mapping[str, Any]], index: int, known: Fact | None
) -> float | None:
    """When the fact said in ``messages[index]`` became true: its turn's time, never before
    the known value it corrects began (a turn stamped out of order must not fail the
    extraction, whose cursor would then never move)."""
    said = turn_time(messages[index]) if 0 <= index < len(messages) else None
    began = None if known is None else known.valid_from
    if said is None or not isinstance(began, float | int):
        return said
    return max(said, float(began))
