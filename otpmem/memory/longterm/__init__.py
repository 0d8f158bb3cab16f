"""Long-term memory: facts and profiles per user, extracted and injected (seed 004)."""

from ._report import ExtractionBusy, ExtractionReport
from .extractors import (
    Decision,
    ExtractionFailed,
    FactExtractor,
    ModelFactExtractor,
    RuleFactExtractor,
    extraction_prompt,
    parse_decisions,
)
from .inject import is_injected, line_of
from .ltm import LongTermMemory
from .relevant import FactHit, FactIndex
from .server import ExtractionServer

__all__ = [
    "Decision",
    "ExtractionBusy",
    "ExtractionFailed",
    "ExtractionReport",
    "ExtractionServer",
    "FactExtractor",
    "FactHit",
    "FactIndex",
    "LongTermMemory",
    "ModelFactExtractor",
    "RuleFactExtractor",
    "extraction_prompt",
    "is_injected",
    "line_of",
    "parse_decisions",
]
