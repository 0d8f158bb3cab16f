"""``--model openai``: a client whose retries are seen as they happen, and a first check
that the server is there at all, so a run against no server stops at once, storing
nothing, and says which URL failed and how."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx

from ..llm import OpenAIClient
from .errors import CommandError

PROBE_ATTEMPTS = 3
PROBE_TIMEOUT = 5.0
PROBE_BACKOFF = 0.5


class _Watched(httpx.BaseTransport):
    """A transport that remembers, per thread, why the last request failed."""

    def __init__(self, inner: httpx.BaseTransport, last: threading.local) -> None:
        self.inner = inner
        self.last = last

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send; note the failure or the error status for the retry message."""
        try:
            response = self.inner.handle_request(request)
        except httpx.TransportError as exc:
            self.last.error = f"{request.url}: {describe(exc)}"
            raise
        if response.status_code != 200:
            self.last.error = f"{request.url} answered HTTP {response.status_code}"
        return response

    def close(self) -> None:
        """Close the pool underneath."""
        self.inner.close()


def describe(exc: BaseException) -> str:
    """``connection refused ([Errno 111] Connection refused)``: the kind, then the detail."""
    kinds: dict[type[BaseException], str] = {
        httpx.ConnectError: "cannot connect",
        httpx.ConnectTimeout: "connecting timed out",
        httpx.ReadTimeout: "no answer in time",
        httpx.RemoteProtocolError: "the server closed the connection",
    }
    kind = kinds.get(type(exc), type(exc).__name__)
    detail = str(exc)
    return f"{kind} ({detail})" if detail else kind


def openai_model(base_url: str, name: str, say: Callable[[str], None]) -> OpenAIClient:
    """An OpenAIClient whose every retry is announced through ``say``."""
    last = threading.local()

    def sleep(delay: float) -> None:
        why = getattr(last, "error", "the request failed")
        say(f"model: {why}; trying again in {delay:.1f} s")
        time.sleep(delay)  # the client's own backoff, made visible

    return OpenAIClient(
        name,
        base_url=base_url,
        sleep=sleep,
        transport=_Watched(httpx.HTTPTransport(), last),
    )


def probe(base_url: str, say: Callable[[str], None]) -> None:
    """Check that something answers HTTP at ``base_url`` (any status will do), trying a
    few times; a CommandError naming the URL and the last error otherwise."""
    url = base_url.rstrip("/") + "/models"
    error = ""
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        try:
            httpx.get(url, timeout=PROBE_TIMEOUT)
            return
        except httpx.TransportError as exc:
            error = describe(exc)
        except httpx.InvalidURL as exc:
            raise CommandError(f"--base-url {base_url!r} is not a URL: {exc}") from None
        if attempt < PROBE_ATTEMPTS:
            delay = PROBE_BACKOFF * 2 ** (attempt - 1)
            say(
                f"model: {base_url}: {error}; trying again in {delay:.1f} s "
                f"(attempt {attempt} of {PROBE_ATTEMPTS})"
            )
            time.sleep(delay)  # a server still starting may be there in a moment
    raise CommandError(
        f"cannot reach the model server at {base_url} (--base-url): {error}. "
        "Start it, or point --base-url at one; nothing was run or stored."
    )


__all__ = ["describe", "openai_model", "probe"]
