"""Memory policy: providers over stores, id-safe windows, strategies, token counting;
recall (a ranked index, hybrid memory) and bx-ai's memory API.

The recall names and the facade's are imported on first use (``__getattr__`` below): they
bring numpy, and an agent or the command that never recalls does without it (about 80 ms
of ``import otpmem``). ``from otpmem.memory import HybridProvider`` works as usual.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .apply import apply_memory
from .longterm import (
    ExtractionFailed,
    ExtractionReport,
    FactExtractor,
    FactHit,
    LongTermMemory,
    ModelFactExtractor,
    RuleFactExtractor,
)
from .pipeline import PRESETS, InvalidPipeline, Pipeline, PrepareReport
from .prepare_context import CallOptions
from .provider import (
    BasicMemoryProvider,
    DefaultProvider,
    MemoryProvider,
    PipelineProvider,
    StoreProvider,
    check_provider,
)
from .reads import History
from .strategies import (
    SUMMARY_PREFIX,
    PrepareContext,
    SlidingWindow,
    Strategy,
    Summarization,
    TokenTruncation,
)
from .summarizers import (
    ExtractiveSummarizer,
    FunctionSummarizer,
    ModelSummarizer,
    Summarizer,
    as_summarizer,
)
from .tokens import (
    DEFAULT_COUNTER,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerUnavailable,
    count_all,
    tiktoken_counter,
)
from .window import CANCELLED, drop_orphans, is_pinned, safe_window, units, valid_context

if TYPE_CHECKING:
    from .facade import InvalidConfiguration, InvalidMemoryType, Memory, memory
    from .recall import (
        Embedder,
        EmbedderError,
        HashingEmbedder,
        Hit,
        HybridProvider,
        OpenAIEmbedder,
        RecallIndex,
        RecallIndexHandle,
        SentenceTransformerEmbedder,
        ranked_search,
    )
    from .recall.cached_embedder import CachedEmbedder, EmbeddingCache, embedding_cache
    from .sessions import current_session, session_scope
    from .token_summary import TokenSummarization

_LAZY = {
    **dict.fromkeys(
        [
            "Embedder",
            "EmbedderError",
            "HashingEmbedder",
            "Hit",
            "HybridProvider",
            "OpenAIEmbedder",
            "RecallIndex",
            "RecallIndexHandle",
            "SentenceTransformerEmbedder",
            "ranked_search",
        ],
        ".recall",
    ),
    **dict.fromkeys(["InvalidConfiguration", "InvalidMemoryType", "Memory", "memory"], ".facade"),
    **dict.fromkeys(
        ["CachedEmbedder", "EmbeddingCache", "embedding_cache"], ".recall.cached_embedder"
    ),
    **dict.fromkeys(["current_session", "session_scope"], ".sessions"),
    "TokenSummarization": ".token_summary",
}


def __getattr__(name: str) -> Any:
    """The recall and facade names, imported when first asked for (see the docstring)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    """The module's names, the lazy ones included."""
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CANCELLED",
    "DEFAULT_COUNTER",
    "PRESETS",
    "SUMMARY_PREFIX",
    "BasicMemoryProvider",
    "CachedEmbedder",
    "CallOptions",
    "DefaultProvider",
    "Embedder",
    "EmbedderError",
    "EmbeddingCache",
    "ExtractionFailed",
    "ExtractionReport",
    "ExtractiveSummarizer",
    "FactExtractor",
    "FactHit",
    "FunctionSummarizer",
    "HashingEmbedder",
    "HeuristicCounter",
    "History",
    "Hit",
    "HybridProvider",
    "InvalidConfiguration",
    "InvalidMemoryType",
    "InvalidPipeline",
    "LongTermMemory",
    "Memory",
    "MemoryProvider",
    "ModelFactExtractor",
    "ModelSummarizer",
    "OpenAIEmbedder",
    "Pipeline",
    "PipelineProvider",
    "PrepareContext",
    "PrepareReport",
    "RecallIndex",
    "RecallIndexHandle",
    "RuleFactExtractor",
    "SentenceTransformerEmbedder",
    "SlidingWindow",
    "StoreProvider",
    "Strategy",
    "Summarization",
    "Summarizer",
    "TiktokenCounter",
    "TokenCounter",
    "TokenSummarization",
    "TokenTruncation",
    "TokenizerUnavailable",
    "apply_memory",
    "as_summarizer",
    "check_provider",
    "count_all",
    "current_session",
    "drop_orphans",
    "embedding_cache",
    "is_pinned",
    "memory",
    "ranked_search",
    "safe_window",
    "session_scope",
    "tiktoken_counter",
    "units",
    "valid_context",
]
