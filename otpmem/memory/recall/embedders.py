"""Embedders: text to unit vectors. ``HashingEmbedder`` is the offline default.

An ``Embedder`` has a ``dim`` and ``embed(texts) -> list of vectors`` (one per text, each
of length ``dim``). The index normalises what it is given, so an embedder need not.

``HashingEmbedder`` needs no model and no network: it hashes words, word pairs and the
character n-grams of each word into ``dim`` signed buckets (the "hashing trick"), so two
texts that share words or word stems ("allergy", "allergic") point the same way. It is
deterministic across processes and machines (crc32, not Python's salted ``hash``).
"""

from __future__ import annotations

import math
import os
import re
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .base import Embedder, EmbedderError, noise_floor
from .lexical import STOPWORDS

Vector = Sequence[float] | npt.NDArray[np.float32]

__all__ = [
    "CACHE_WORDS",
    "Embedder",
    "EmbedderError",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "as_matrix",
    "noise_floor",
]

WORD = re.compile(r"(?u)\b\w\w+\b")
CACHE_WORDS = 50_000


class HashingEmbedder:
    """Deterministic, offline embeddings by feature hashing::

    embedder = HashingEmbedder(dim=256)
    a, b = embedder.embed(["peanut allergy", "allergic to peanuts"])
    float(np.dot(a, b))  # high: they share the word and the stems
    """

    name = "hashing"

    def __init__(self, dim: int = 256, ngrams: tuple[int, int] = (3, 5)) -> None:
        if type(dim) is not int or dim < 8:
            raise ValueError(f"dim must be an int >= 8, got {dim!r}")
        low, high = ngrams
        if not 1 <= low <= high:
            raise ValueError(f"ngrams must be (low, high) with 1 <= low <= high, got {ngrams!r}")
        self.dim = dim
        self.ngrams = (low, high)
        # Unrelated texts' cosines scatter around 0 with a spread of about 1/sqrt(dim)
        # (collisions of random buckets); below two spreads a match is taken for noise.
        self.noise_floor = 2.0 / math.sqrt(dim)
        self._cache: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim}, ngrams={self.ngrams})"

    def word_features(self, word: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """One word's buckets and signed weights: the word 1.0, its n-grams 1.0 shared."""
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        low, high = self.ngrams
        padded = f"<{word}>"
        grams = [
            padded[i : i + n] for n in range(low, high + 1) for i in range(len(padded) - n + 1)
        ]
        # A long word has many n-grams: they share one word's weight, so a text's direction
        # is set by its words, not by how long they are.
        share = 1.0 / math.sqrt(len(grams)) if grams else 0.0
        features = [("w:" + word, 1.0)] + [("g:" + g, share) for g in grams]
        hashes = [zlib.crc32(f.encode()) for f, _ in features]
        cols = np.array([h % self.dim for h in hashes], dtype=np.int64)
        # The top bit picks the sign, so collisions cancel out on average.
        weights = np.array(
            [-w if h & 0x80000000 else w for h, (_, w) in zip(hashes, features, strict=True)],
            dtype=np.float32,
        )
        if len(self._cache) >= CACHE_WORDS:
            self._cache.clear()  # a crude bound; words are Zipf-distributed, it refills fast
        self._cache[word] = (cols, weights)
        return cols, weights

    def embed(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Unit vectors (a text with no words embeds to zeros)."""
        cols: list[npt.NDArray[np.int64]] = []
        weights: list[npt.NDArray[np.float32]] = []
        counts = np.zeros(len(texts), dtype=np.int64)
        for row, text in enumerate(texts):
            n = 0
            for word in WORD.findall(text.lower().replace("'", "")):
                if word not in STOPWORDS:
                    c, w = self.word_features(word)
                    cols.append(c)
                    weights.append(w)
                    n += len(c)
            counts[row] = n
        size = len(texts) * self.dim
        if cols:
            flat = np.repeat(np.arange(len(texts), dtype=np.int64) * self.dim, counts)
            flat += np.concatenate(cols)
            summed = np.bincount(flat, weights=np.concatenate(weights), minlength=size)
            out = summed.astype(np.float32).reshape(len(texts), self.dim)
        else:
            out = np.zeros((len(texts), self.dim), dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return list(out)


class SentenceTransformerEmbedder:
    """A local sentence-embedding model, loaded from a directory you give; never downloaded.

    Needs ``pip install sentence-transformers`` (and its torch)::

        embedder = SentenceTransformerEmbedder("/models/all-MiniLM-L6-v2")
    """

    name = "sentence-transformers"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        batch_size: int = 64,
        loader: Callable[[str], Any] | None = None,
    ) -> None:
        where = os.fspath(path)
        if not os.path.isdir(where):
            raise EmbedderError(
                f"no model directory at {where!r}: give the path of a sentence-transformers "
                "model saved on disk (this embedder never downloads one)"
            )
        if loader is None:
            loader = _load_sentence_transformer
        self.model = loader(where)
        self.path = where
        self.batch_size = batch_size
        dim = self.model.get_sentence_embedding_dimension()
        if type(dim) is not int or dim < 1:
            raise EmbedderError(f"the model at {where!r} does not say its embedding size")
        self.dim = dim

    def __repr__(self) -> str:
        # What a recall snapshot is keyed by: vectors of another model are not reused.
        return f"SentenceTransformerEmbedder({self.path!r}, dim={self.dim})"

    def embed(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """Unit vectors from the model."""
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True
        )
        return list(np.asarray(vectors, dtype=np.float32))


def _load_sentence_transformer(path: str) -> Any:
    # Offline for certain: a path that is not a complete model must fail, not fetch one.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    except ImportError as exc:
        raise EmbedderError(
            "SentenceTransformerEmbedder needs sentence-transformers: "
            "pip install sentence-transformers"
        ) from exc
    try:
        return SentenceTransformer(path, local_files_only=True)
    except Exception as exc:
        raise EmbedderError(f"cannot load the model at {path!r}: {exc}") from exc


def as_matrix(vectors: Sequence[Vector], dim: int, count: int) -> npt.NDArray[np.float32]:
    """Check an embedder's answer (``count`` vectors of ``dim``) and return unit rows."""
    if len(vectors) != count:
        raise EmbedderError(f"the embedder returned {len(vectors)} vectors for {count} texts")
    if count == 0:
        return np.zeros((0, dim), dtype=np.float32)
    try:
        matrix = np.asarray(vectors, dtype=np.float32).reshape(count, -1)
    except (ValueError, TypeError) as exc:
        raise EmbedderError(f"the embedder returned vectors that are not numbers: {exc}") from exc
    if matrix.shape[1] != dim:
        raise EmbedderError(f"the embedder returned vectors of {matrix.shape[1]}, not {dim}")
    if not np.all(np.isfinite(matrix)):
        raise EmbedderError("the embedder returned a vector with NaN or infinity")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix
