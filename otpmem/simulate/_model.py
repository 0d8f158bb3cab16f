"""The simulation's model: the scripted default, and how a model that is down is told
from a fault of the run's own chaos.

The run stops asking after ``budget`` turns in a row failed on the model (each after the
model client's own retries), or at once when the model refused a turn (a 4xx: retrying
cannot help).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from ..llm import ModelError, OpenAIClient, tool_call


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def scripted_arithmetic(messages: list[dict[str, Any]], tools: Any) -> Any:
    """The default model: a question with numbers gets the add tool, its result an answer."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"The answer is {last['content']}."
    text = str(last.get("content") or "")
    if last["role"] == "user" and "+" in text:
        left, right = text.rsplit(" ", 1)[-1].rstrip("?").split("+")
        arguments = json.dumps({"a": int(left), "b": int(right)})
        call = tool_call(f"add-{len(messages)}", "add", arguments)  # unique in the conversation
        return {"content": "Let me add that.", "tool_calls": [call]}
    return f"Noted: {text}"


class ModelFailed(RuntimeError):
    """The run stopped because the model failed turn after turn, or refused one outright."""

    def __init__(self, message: str, error: ModelError, failures: int) -> None:
        super().__init__(message)
        self.error = error
        self.failures = failures


def model_error(exc: BaseException) -> ModelError | None:
    """The ModelError behind a failed turn (``TurnFailed`` wraps it), if the model failed."""
    current: BaseException | None = exc
    for _ in range(5):
        if current is None:
            return None
        if isinstance(current, ModelError):
            return current
        current = current.__cause__ or current.__context__
    return None


class ModelWatch:
    """Counts turns that failed on the model, in a row across every worker::

    watch = ModelWatch(budget=3, on_retry=print)
    failure = watch.failed("agent 0, turn 4", exc)  # a ModelFailed once the budget is spent
    watch.answered()                                 # a turn went through: the count restarts
    """

    def __init__(self, budget: int, on_retry: Callable[[str], None] | None = None) -> None:
        if budget < 1:
            raise ValueError(f"the model failure budget must be >= 1, got {budget}")
        self.budget = budget
        self.on_retry = on_retry
        self._lock = threading.Lock()
        self._in_a_row = 0

    def answered(self) -> None:
        """A turn went through: the model is up."""
        with self._lock:
            self._in_a_row = 0

    def failed(self, where: str, exc: BaseException) -> ModelFailed | None:
        """A turn attempt failed with ``exc``: the ModelFailed that ends the run, or None
        (not the model's fault, or budget left: the turn is tried again)."""
        error = model_error(exc)
        if error is None:
            return None
        if not error.retryable:
            return ModelFailed(f"the model refused a turn: {error}", error, 1)
        with self._lock:
            self._in_a_row += 1
            failures = self._in_a_row
        if failures >= self.budget:
            return ModelFailed(
                f"the model failed {failures} turns in a row; the last error: {error}",
                error,
                failures,
            )
        if self.on_retry is not None:
            self.on_retry(
                f"{where}: {error}; trying the turn again "
                f"({failures} of {self.budget} model failures in a row)"
            )
        return None


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


__all__ = [
    "ModelFailed",
    "ModelWatch",
    "add",
    "describe",
    "model_error",
    "openai_model",
    "scripted_arithmetic",
]
