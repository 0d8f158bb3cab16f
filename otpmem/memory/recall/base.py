"""What recall shares without numpy: the Hit, filters, the Embedder protocol and its error.

Kept apart so that the handle, the provider and the server's shell import nothing heavy:
an application starts its RecallIndex without paying numpy's import (about 40 ms), which
the index pays on its first query instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ...messages import ROLES, Conv, freeze_value, short_repr

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Vector = Sequence[float] | npt.NDArray[np.float32]

Filter = Mapping[str, Any] | Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class Hit:
    """One recalled message: the message, its fused score in (0, 1], where it is."""

    message: dict[str, Any]
    score: float
    conv: Conv
    position: int


class EmbedderError(RuntimeError):
    """An embedder could not embed (server down, bad answer, model missing)."""


class FilterFailed(ValueError):
    """The caller's ``filter=`` raised while the index ran it: nothing was recalled."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of one fixed length ``dim``."""

    dim: int

    def embed(self, texts: Sequence[str]) -> Sequence[Vector]:
        """One vector per text, in order."""


def noise_floor(embedder: Embedder) -> float:
    """The cosine below which the embedder's matches are noise: its ``noise_floor``
    attribute if it has one (``HashingEmbedder``: 2/sqrt(dim)), else 0."""
    floor = getattr(embedder, "noise_floor", 0.0)
    return float(floor) if isinstance(floor, int | float) else 0.0


def check_filter(given: object) -> Callable[[Mapping[str, Any]], bool] | None:
    """Turn ``filter=`` into a predicate; ``ValueError`` naming what is wrong.

    A mapping matches roles and metadata fields: ``{"role": "user"}`` or ``{"role":
    ["user", "assistant"]}``, and every other key ``k: v`` means ``metadata[k] == v``
    (``v`` a list, tuple or set: ``metadata[k]`` is one of them). A callable gets the
    message and returns whether it may be recalled.
    """
    if given is None:
        return None
    if callable(given):
        return given
    if not isinstance(given, Mapping):
        raise ValueError(f"filter must be a dict or a callable, got {short_repr(given)}")
    wanted: dict[str, tuple[Any, ...]] = {}
    for key, value in given.items():
        if type(key) is not str or not key:
            raise ValueError(f"filter keys must be non-empty str, got {short_repr(key)}")
        choices = tuple(value) if isinstance(value, list | tuple | set | frozenset) else (value,)
        if key == "role":
            bad = [r for r in choices if type(r) is not str or r not in ROLES]
            if bad:
                raise ValueError(f"filter role {short_repr(bad[0])} is not a message role")
        # Values a stored message could hold: compared in the index with the messages',
        # so a value of the caller's own type never brings its __eq__ there.
        wanted[key] = tuple(freeze_value(choice, f"filter.{key}") for choice in choices)

    def matches(message: Mapping[str, Any]) -> bool:
        metadata = message.get("metadata")
        for key, choices in wanted.items():
            if key == "role":
                if message.get("role") not in choices:
                    return False
            elif (
                not isinstance(metadata, Mapping)
                or key not in metadata
                or metadata[key] not in choices
            ):
                return False
        return True

    return matches
