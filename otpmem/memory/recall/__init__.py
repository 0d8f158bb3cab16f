"""Recall: a ranked, tenant-safe index of a store's messages, and hybrid memory over it."""

from .embedders import (
    Embedder,
    EmbedderError,
    HashingEmbedder,
    SentenceTransformerEmbedder,
)
from .fusion import RRF_K, Hit
from .handle import RecallIndexHandle, ranked_search
from .hybrid import HybridProvider
from .index import RecallIndex
from .openai_embedder import OpenAIEmbedder

__all__ = [
    "RRF_K",
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
]
