"""Memory policy: providers over stores, id-safe windows, strategies, token counting."""

from .longterm import (
    ExtractionFailed,
    ExtractionReport,
    FactExtractor,
    LongTermMemory,
    ModelFactExtractor,
    RuleFactExtractor,
)
from .pipeline import PRESETS, Pipeline, PrepareReport
from .provider import DefaultProvider, MemoryProvider, PipelineProvider
from .strategies import (
    SUMMARY_PREFIX,
    PrepareContext,
    SlidingWindow,
    Strategy,
    Summarization,
    TokenTruncation,
)
from .summarizers import ExtractiveSummarizer, ModelSummarizer, Summarizer
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

__all__ = [
    "CANCELLED",
    "DEFAULT_COUNTER",
    "PRESETS",
    "SUMMARY_PREFIX",
    "DefaultProvider",
    "ExtractionFailed",
    "ExtractionReport",
    "ExtractiveSummarizer",
    "FactExtractor",
    "HeuristicCounter",
    "LongTermMemory",
    "MemoryProvider",
    "ModelFactExtractor",
    "ModelSummarizer",
    "Pipeline",
    "PipelineProvider",
    "PrepareContext",
    "PrepareReport",
    "RuleFactExtractor",
    "SlidingWindow",
    "Strategy",
    "Summarization",
    "Summarizer",
    "TiktokenCounter",
    "TokenCounter",
    "TokenTruncation",
    "TokenizerUnavailable",
    "count_all",
    "drop_orphans",
    "is_pinned",
    "safe_window",
    "tiktoken_counter",
    "units",
    "valid_context",
]
