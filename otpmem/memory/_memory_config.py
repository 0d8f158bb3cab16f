"""``memory()``'s configuration, read the way bx-ai writes it: a ``config`` dict and/or
keyword arguments, in camelCase (``maxMessages``) or snake_case (``max_messages``), with
bx-ai's names for otpmem's keys (``directoryPath``: ``path``; ``datasource``: ``dsn``;
``table``: ``namespace``); every key wired or refused, with a reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..llm import ChatModel, OpenAIClient
from ..messages import short_repr
from .summarizers import ModelSummarizer, Summarizer, as_summarizer


class InvalidConfiguration(ValueError):
    """A memory's configuration cannot work; the message names the key and why."""


class InvalidMemoryType(ValueError):
    """``memory(kind)`` with a kind it does not know (the message lists the kinds), or a
    class path that names no ``Memory`` subclass (the message says why)."""


IDENTITY = ("key", "user_id", "conversation_id")
"""What names the memory; read from ``config`` too (bx-ai's ``configure`` reads them)."""

ALIASES = {
    "file": {"directory_path": "path"},
    "jdbc": {"datasource": "dsn", "table": "namespace"},
}
"""bx-ai's name for an otpmem key, per kind: the same meaning under otpmem's name."""

VECTOR_KEYS = frozenset(
    {
        "collection",
        "embedding_provider",
        "embedding_model",
        "dimensions",
        "embedding_options",
        "metric",
        "cache",
        "cache_name",
        "embedder",
    }
)

KEYS: dict[str, frozenset[str]] = {
    "window": frozenset({"max_messages"}),
    "session": frozenset({"max_messages"}),
    "cache": frozenset({"max_messages", "cache_name"}),
    "summary": frozenset(
        {
            "max_messages",
            "max_tokens",
            "summary_threshold",
            "summarizer",
            "summary_provider",
            "summary_model",
        }
    ),
    "file": frozenset({"path", "sync", "max_messages"}),
    "jdbc": frozenset({"dsn", "namespace", "pool_size", "data_dir", "max_messages"}),
    "vector": VECTOR_KEYS,
    "hybrid": frozenset(
        {"recent_limit", "semantic_limit", "total_limit", "recent_weight", "vector_provider"}
        | {"vector_config"}
        | VECTOR_KEYS
    ),
}
COMMON = frozenset({"store", "index"})

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake(name: str) -> str:
    """``maxMessages`` -> ``max_messages``, ``baseURL`` -> ``base_url``; snake stays."""
    return _CAMEL.sub("_", name).lower()


def snake_keys(config: Mapping[str, Any], where: str = "config") -> dict[str, Any]:
    """``config`` with every key in snake_case; two spellings of one key are refused."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for name, value in config.items():
        if type(name) is not str or not name:
            raise InvalidConfiguration(f"{where} keys are non-empty str, got {short_repr(name)}")
        key = snake(name)
        if key in out:
            raise InvalidConfiguration(
                f"{where} gives {key!r} twice ({spelled[key]!r} and {name!r}): give it once"
            )
        out[key] = value
        spelled[key] = name
    return out


def merged(config: object, options: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config`` dict and the keyword options as one snake_case dict."""
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise InvalidConfiguration(f"config must be a dict, got {short_repr(config)}")
    given = snake_keys(config)
    extra = snake_keys(options, "memory()")
    both = sorted(set(given) & set(extra))
    if both:
        raise InvalidConfiguration(f"{', '.join(both)} given in config and as an argument")
    return {**given, **extra}


def with_aliases(kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """bx-ai's names of the kind's keys turned into otpmem's."""
    for theirs, ours in ALIASES.get(kind, {}).items():
        if theirs in config:
            if ours in config:
                raise InvalidConfiguration(f"{theirs} and {ours} are one key: give one")
            config[ours] = config.pop(theirs)
    return config


def check_keys(kind: str, config: Mapping[str, Any], extra: frozenset[str] = frozenset()) -> None:
    """Refuse a key the kind does not read, listing the ones it does."""
    takes = COMMON | KEYS[kind] | extra
    unknown = set(config) - takes
    if unknown:
        raise InvalidConfiguration(
            f"memory({kind!r}) does not take {', '.join(sorted(unknown))}; it takes "
            f"{', '.join(sorted(takes))}"
        )


def int_key(config: Mapping[str, Any], key: str, default: int | None, low: int) -> int | None:
    """``config[key]`` (else ``default``), an int >= ``low``; None stays None."""
    value = config.get(key, default)
    if value is None:
        return None
    if type(value) is not int or value < low:
        raise InvalidConfiguration(f"{key} must be an int >= {low}, got {short_repr(value)}")
    return value


def window_size(config: Mapping[str, Any], default: int | None) -> int | None:
    """``max_messages`` as a window: bx-ai's 0 is no window (everything is sent)."""
    value = int_key(config, "max_messages", default, 0)
    return value or None


SUMMARY_PROVIDERS = {
    "openai": ("https://api.openai.com/v1", "gpt-4o-mini"),
    "ollama": ("http://localhost:11434/v1", "llama3.2"),
}
"""bx-ai's summary providers otpmem speaks to (OpenAI-compatible): base URL, default model."""


def model_summarizer(provider: object, model: object, what: str) -> tuple[Summarizer, Any]:
    """A ``ModelSummarizer`` of ``provider`` (a name, or a ``ChatModel``) and ``model``, and
    the client to close (None for a model of the caller's)."""
    if provider is None:
        provider = "openai"  # bx-ai's default provider
    if model is not None and (type(model) is not str or not model):
        raise InvalidConfiguration(f"{what} model must be a non-empty str, got {short_repr(model)}")
    if isinstance(provider, str):
        known = SUMMARY_PROVIDERS.get(provider.lower())
        if known is None:
            raise InvalidConfiguration(
                f"{what} provider {provider!r} is not built in; use one of "
                f"{', '.join(SUMMARY_PROVIDERS)}, or give a ChatModel (or a summarizer)"
            )
        client = OpenAIClient(model or known[1], base_url=known[0])
        return ModelSummarizer(client), client
    if isinstance(provider, ChatModel):
        if model is not None:
            raise InvalidConfiguration(
                f"{what} provider is a ChatModel: it knows its model; drop the model"
            )
        return ModelSummarizer(provider), None
    raise InvalidConfiguration(
        f"{what} provider must be a provider name or a ChatModel, got {short_repr(provider)}"
    )


def summarizer_of(config: Mapping[str, Any]) -> tuple[Summarizer | None, Any]:
    """The summary kind's summarizer (``summarizer``, or ``summary_provider`` and
    ``summary_model``; none: the offline extractive one) and a client to close."""
    given = config.get("summarizer")
    if given is not None:
        if "summary_provider" in config or "summary_model" in config:
            raise InvalidConfiguration(
                "give summarizer or summary_provider/summary_model, not both"
            )
        try:
            return as_summarizer(given), None
        except TypeError as exc:
            raise InvalidConfiguration(str(exc)) from None
    if "summary_provider" not in config and "summary_model" not in config:
        return None, None
    return model_summarizer(config.get("summary_provider"), config.get("summary_model"), "summary")
