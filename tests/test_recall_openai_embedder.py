"""OpenAIEmbedder against an OpenAI-compatible /v1/embeddings server on loopback."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from otpmem.memory.recall import EmbedderError, HashingEmbedder, OpenAIEmbedder, RecallIndex
from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from tests.support import loopback, send_json

DIM = 32
_reference = HashingEmbedder(dim=DIM)


class _Embeddings(BaseHTTPRequestHandler):
    """Embeds with a HashingEmbedder, answering ``data`` in reverse order (with ``index``).

    ``failures`` answers that many requests first with 503 (Retry-After: 0); ``status``
    answers every request with that status instead; ``hold`` delays answers until set.
    """

    requests: list[dict[str, Any]] = []
    failures = 0
    status = 200
    hold: threading.Event | None = None

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        cls = type(self)
        cls.requests.append({"body": body, "auth": self.headers.get("authorization")})
        if cls.hold is not None:
            cls.hold.wait(5.0)
        if cls.failures:
            cls.failures -= 1
            self._send(503, {"error": "busy"}, {"retry-after": "0"})
            return
        if cls.status != 200:
            self._send(cls.status, {"error": "bad request"})
            return
        vectors = _reference.embed(body["input"])
        data = [
            {"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
            for i, v in enumerate(vectors)
        ]
        self._send(200, {"object": "list", "data": list(reversed(data)), "model": body["model"]})

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        send_json(self, status, payload, headers)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Embeddings.requests = []
    _Embeddings.failures = 0
    _Embeddings.status = 200
    _Embeddings.hold = None
    with loopback(_Embeddings) as url:
        try:
            yield url
        finally:
            if _Embeddings.hold is not None:
                _Embeddings.hold.set()


def test_batches_in_input_order_with_the_key(server: str) -> None:
    embedder = OpenAIEmbedder("tiny", DIM, base_url=server, api_key="sk-test", batch_size=2)
    try:
        texts = ["peanut allergy", "lyon", "", "jazz", "gate b22"]
        vectors = embedder.embed(texts)
    finally:
        embedder.close()
    assert [r["body"]["input"] for r in _Embeddings.requests] == [
        ["peanut allergy", "lyon"],
        [" ", "jazz"],  # an empty text is sent as a space
        ["gate b22"],
    ]
    assert all(r["auth"] == "Bearer sk-test" for r in _Embeddings.requests)
    assert all(r["body"]["model"] == "tiny" for r in _Embeddings.requests)
    expected = _reference.embed(["peanut allergy", "lyon", " ", "jazz", "gate b22"])
    assert vectors == [[float(x) for x in v] for v in expected]  # by index, not data order


def test_retries_busy_answers_then_succeeds(server: str) -> None:
    _Embeddings.failures = 2
    delays: list[float] = []
    embedder = OpenAIEmbedder("tiny", DIM, base_url=server, sleep=delays.append)
    try:
        assert len(embedder.embed(["one"])) == 1
    finally:
        embedder.close()
    assert len(_Embeddings.requests) == 3
    assert delays == [0.0, 0.0]  # Retry-After: 0 honoured


def test_a_client_error_is_not_retried_and_says_what_came_back(server: str) -> None:
    _Embeddings.status = 400
    embedder = OpenAIEmbedder("tiny", DIM, base_url=server, sleep=lambda s: None)
    try:
        with pytest.raises(EmbedderError, match="HTTP 400"):
            embedder.embed(["one"])
    finally:
        embedder.close()
    assert len(_Embeddings.requests) == 1


def test_a_slow_server_times_out(server: str) -> None:
    _Embeddings.hold = threading.Event()
    embedder = OpenAIEmbedder("tiny", DIM, base_url=server, timeout=0.2, max_retries=1,
                              sleep=lambda s: None)  # fmt: skip
    try:
        with pytest.raises(EmbedderError, match="timed out"):
            embedder.embed(["one"])
    finally:
        _Embeddings.hold.set()
        embedder.close()
    assert len(_Embeddings.requests) == 2


def test_a_wrong_dimension_is_refused(server: str) -> None:
    embedder = OpenAIEmbedder("tiny", DIM + 1, base_url=server)
    try:
        with pytest.raises(EmbedderError, match="dim=33"):
            embedder.embed(["one"])
    finally:
        embedder.close()


def test_a_recall_index_with_an_http_embedder(server: str) -> None:
    embedder = OpenAIEmbedder("tiny", DIM, base_url=server, batch_size=8)
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store, embedder)
    try:
        conv = Conv("ann", "c")
        store.add(conv, [{"role": "user", "content": f"note {i}"} for i in range(20)])
        store.add(conv, [{"role": "user", "content": "my locker code is 9182"}])
        hits = index.get_relevant("locker code", user_id="ann", limit=1)
        assert hits[0].position == 20
        # 21 messages in batches of 8, then the query: four requests.
        assert len(_Embeddings.requests) == 4
        _Embeddings.status = 500
        _Embeddings.failures = 0
        embedder.max_retries = 0
        with pytest.raises(EmbedderError):
            index.get_relevant("anything else", user_id="ann")
        assert index.alive  # a failing embedder is the caller's error, not a crash
    finally:
        index.stop()
        store.stop()
        embedder.close()
