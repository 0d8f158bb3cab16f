"""The vector keys of ``memory("vector")`` and ``memory("hybrid")`` (bx-ai's common vector
config), each wired or refused with a reason:

- ``embedding_provider``: ``hashing`` (the default: offline), ``openai``, ``ollama`` (an
  OpenAI-compatible server at localhost:11434), ``sentence-transformers`` (a local model
  directory); ``embedding_model`` the model (for sentence-transformers, its directory);
  ``dimensions`` the vectors' length (sent to models that can shorten theirs);
  ``embedding_options`` the embedder's other arguments (``base_url``, ``api_key``, ...).
- ``cache``: embeddings cached by text, so a repeated text is not embedded again;
  ``cache_name`` names the cache (memories naming one share it; default ``"default"``).
- ``collection``: the name of the documents' set; memories naming the same collection
  reach the same documents, two collections never see each other's.
- ``metric``: ``cosine``, ``euclidean`` or ``dot_product``. The index makes every vector
  unit length, and on unit vectors the three agree: the dot product is the cosine, and
  the Euclidean distance is ``sqrt(2 - 2 * cosine)``, which orders documents exactly as
  the cosine does. Recall fuses ranks, not raw similarities, so the hits and their
  scores are the same under all three; the key is checked and kept (``Memory.metric``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..messages import short_repr
from ._memory_config import InvalidConfiguration, snake_keys
from .recall import Embedder, EmbedderError
from .recall.cached_embedder import CachedEmbedder, embedding_cache

if TYPE_CHECKING:
    from .recall import HashingEmbedder

METRICS = ("cosine", "euclidean", "dot_product")
EMBEDDING_PROVIDERS = ("hashing", "openai", "ollama", "sentence-transformers")
EXTERNAL_STORES = (
    "chroma",
    "milvus",
    "mysql",
    "typesense",
    "postgres",
    "pgvector",
    "pinecone",
    "qdrant",
    "opensearch",
    "weaviate",
)
"""bx-ai's vector databases: services otpmem does not talk to (its vectors are a
RecallIndex over the conversation store)."""
OWN_STORES = ("boxvector", "vector")

KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "nomic-embed-text": 768,
    "mxbai-embed-large": 1024,
    "all-minilm": 384,
}
OPENAI_DEFAULTS = {
    "openai": ("https://api.openai.com/v1", "text-embedding-3-small"),
    "ollama": ("http://localhost:11434/v1", "nomic-embed-text"),
}


@dataclass
class VectorSettings:
    """What the vector keys come to: the embedder (None: the index's default), the
    collection, the metric, and what to close with the memory."""

    embedder: Embedder | None = None
    collection: str | None = None
    metric: str = "cosine"
    closing: list[Any] = field(default_factory=list)

    @property
    def default_index(self) -> bool:
        """Whether the shared index (its default embedder, no cache) serves this memory."""
        return self.embedder is None


def vector_settings(config: Mapping[str, Any], where: str) -> VectorSettings:
    """The vector keys of ``config`` checked and built (``where`` names them in errors)."""
    settings = VectorSettings(metric=_metric(config.get("metric", "cosine"), where))
    collection = config.get("collection")
    if collection is not None and (type(collection) is not str or not collection):
        raise InvalidConfiguration(
            f"{where}collection must be a non-empty str, got {short_repr(collection)}"
        )
    settings.collection = collection
    cache, cache_name = config.get("cache"), config.get("cache_name")
    if cache is not None and type(cache) is not bool:
        raise InvalidConfiguration(f"{where}cache must be True or False, got {short_repr(cache)}")
    if cache_name is not None and (type(cache_name) is not str or not cache_name):
        raise InvalidConfiguration(
            f"{where}cache_name must be a non-empty str, got {short_repr(cache_name)}"
        )
    if cache is False and cache_name is not None:
        raise InvalidConfiguration(f"{where}cache_name names an embedding cache, but cache=False")
    embedder = _embedder(config, where, settings)  # last: what it opens, closing holds
    if cache or cache_name is not None:
        cache_of = embedding_cache(cache_name or "default")
        embedder = CachedEmbedder(embedder or _hashing(), cache_of)
    settings.embedder = embedder
    return settings


def check_vector_provider(provider: object) -> None:
    """Hybrid's ``vector_provider``: otpmem's own (``boxvector``, the default) or refused."""
    if provider is None:
        return
    name = provider.lower() if isinstance(provider, str) else None
    if name in OWN_STORES:
        return
    if name in EXTERNAL_STORES:
        raise InvalidConfiguration(
            f"vector_provider {provider!r} is an external vector database otpmem does not "
            "talk to; leave vector_provider out (hybrid recalls with a RecallIndex over the "
            "conversation store) and put its embedding keys in vector_config"
        )
    raise InvalidConfiguration(
        f"vector_provider must be one of {', '.join(OWN_STORES)}, got {short_repr(provider)}"
    )


def _metric(metric: object, where: str) -> str:
    name = metric.lower() if isinstance(metric, str) else None
    if name not in METRICS:
        raise InvalidConfiguration(
            f"{where}metric must be one of {', '.join(METRICS)}, got {short_repr(metric)}"
        )
    return name


def _embedder(config: Mapping[str, Any], where: str, settings: VectorSettings) -> Embedder | None:
    given = config.get("embedder")
    keys = ("embedding_provider", "embedding_model", "dimensions", "embedding_options")
    named = [k for k in keys if config.get(k) is not None]
    if given is not None:
        if named:
            raise InvalidConfiguration(
                f"{where}embedder is an Embedder already: drop {', '.join(named)}"
            )
        if not isinstance(given, Embedder):
            raise InvalidConfiguration(
                f"{where}embedder must be an Embedder (dim, embed(texts)), got {short_repr(given)}"
            )
        return given
    if not named:
        return None
    provider = config.get("embedding_provider") or "hashing"
    name = provider.lower() if isinstance(provider, str) else None
    if name not in EMBEDDING_PROVIDERS:
        raise InvalidConfiguration(
            f"{where}embedding_provider must be one of {', '.join(EMBEDDING_PROVIDERS)} (or give "
            f"embedder=), got {short_repr(provider)}"
        )
    model = config.get("embedding_model")
    if model is not None and (type(model) is not str or not model):
        raise InvalidConfiguration(f"{where}embedding_model must be a non-empty str")
    dimensions = config.get("dimensions")
    if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
        raise InvalidConfiguration(
            f"{where}dimensions must be an int >= 1, got {short_repr(dimensions)}"
        )
    options = config.get("embedding_options")
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise InvalidConfiguration(f"{where}embedding_options must be a dict")
    options = snake_keys(options, f"{where}embedding_options")
    try:
        embedder = _build(name, model, dimensions, options, where)
    except InvalidConfiguration:
        raise
    except (TypeError, ValueError, EmbedderError) as exc:
        raise InvalidConfiguration(f"{where}embedding_provider {name!r}: {exc}") from None
    if callable(getattr(embedder, "close", None)):
        settings.closing.append(embedder)
    return embedder


def _hashing(*args: Any, **kwargs: Any) -> HashingEmbedder:
    # numpy is imported with the embedders, when a memory asks for one, not with otpmem.
    from .recall import HashingEmbedder

    return HashingEmbedder(*args, **kwargs)


def _build(
    name: str, model: str | None, dimensions: int | None, options: dict[str, Any], where: str
) -> Embedder:
    if name == "hashing":
        if model is not None:
            raise InvalidConfiguration(f"{where}the hashing embedder has no embedding_model")
        return _hashing(dimensions or 256, **options)
    if name == "sentence-transformers":
        if model is None:
            raise InvalidConfiguration(
                f"{where}sentence-transformers needs embedding_model: the model's directory"
            )
        from .recall import SentenceTransformerEmbedder

        local = SentenceTransformerEmbedder(model, **options)
        if dimensions is not None and dimensions != local.dim:
            raise InvalidConfiguration(
                f"{where}dimensions={dimensions}, but the model at {model!r} makes {local.dim}"
            )
        return local
    base_url, default_model = OPENAI_DEFAULTS[name]
    model = model or default_model
    dim = dimensions or KNOWN_DIMENSIONS.get(model)
    if dim is None:
        raise InvalidConfiguration(
            f"{where}dimensions is needed for {model!r}: how long are its vectors?"
        )
    options.setdefault("base_url", base_url)
    # text-embedding-3 models shorten their vectors when asked; others make their own size.
    options.setdefault(
        "send_dimensions", dimensions is not None and model.startswith("text-embedding-3")
    )
    from .recall import OpenAIEmbedder

    return OpenAIEmbedder(model, dim, **options)
