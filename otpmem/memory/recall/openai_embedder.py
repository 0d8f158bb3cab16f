"""OpenAIEmbedder: any OpenAI-compatible ``/v1/embeddings`` server (OpenAI, vLLM, Ollama,
llama.cpp, TEI), on httpx.

Batches of ``batch_size`` texts per request, a timeout on every request, retries on 408,
409, 429, 5xx and connection errors with exponential backoff that honours ``Retry-After``
(as the chat client does), and every answer checked: one vector per input, in input order
(the ``index`` field, not the order of ``data``), all of one length.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from ...llm.openai import EndpointFailed, openai_http, post_retrying
from .embedders import EmbedderError


class OpenAIEmbedder:
    """Embeddings from ``{base_url}/embeddings``::

    embedder = OpenAIEmbedder("text-embedding-3-small", dim=1536)      # OPENAI_API_KEY
    embedder = OpenAIEmbedder("nomic-embed-text", dim=768, base_url="http://localhost:11434/v1")
    index = RecallIndex.start_link(store, embedder)

    ``dim`` is what the model returns (sent as ``dimensions`` when ``send_dimensions``, for
    the models that can shorten their vectors). ``noise_floor`` is the cosine below which a
    match counts as noise (unrelated texts' cosines are well above 0 for most models).
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        dim: int,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        *,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        send_dimensions: bool = False,
        noise_floor: float = 0.0,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty str")
        if type(dim) is not int or dim < 1:
            raise ValueError(f"dim must be an int >= 1, got {dim!r}")
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if max_retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("max_retries and backoff must be >= 0, timeout > 0")
        self.model = model
        self.dim = dim
        self.url = base_url.rstrip("/") + "/embeddings"
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.send_dimensions = send_dimensions
        self.noise_floor = noise_floor
        self._sleep = sleep
        self._http = openai_http(api_key, headers, timeout, transport)

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, dim={self.dim}, {self.url!r})"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text; ``EmbedderError`` once retries are exhausted or on a 4xx."""
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self._batch(list(texts[start : start + self.batch_size]))
        return vectors

    def _batch(self, texts: list[str]) -> list[list[float]]:
        # An empty string is refused by some servers; it embeds to nothing anyway.
        body: dict[str, Any] = {"model": self.model, "input": [t or " " for t in texts]}
        if self.send_dimensions:
            body["dimensions"] = self.dim
        try:
            response = post_retrying(
                self._http,
                self.url,
                body,
                max_retries=self.max_retries,
                backoff=self.backoff,
                max_backoff=self.max_backoff,
                sleep=self._sleep,
            )
        except EndpointFailed as exc:
            raise EmbedderError(str(exc)) from None
        return self._parse(response, len(texts))

    def _parse(self, response: httpx.Response, count: int) -> list[list[float]]:
        try:
            data = response.json()["data"]
            ordered = sorted(data, key=lambda item: int(item["index"]))
            vectors = [[float(x) for x in item["embedding"]] for item in ordered]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"unexpected embeddings body: {response.text[:300]}") from exc
        if len(vectors) != count or [int(i["index"]) for i in ordered] != list(range(count)):
            raise EmbedderError(f"{self.url} returned {len(vectors)} embeddings for {count} texts")
        bad = [len(v) for v in vectors if len(v) != self.dim]
        if bad:
            raise EmbedderError(
                f"{self.url} returned vectors of {bad[0]} numbers; this embedder was told "
                f"dim={self.dim}"
            )
        return vectors
