"""An OpenAI-compatible chat client (OpenAI, vLLM, Ollama, llama.cpp servers) on httpx.

Timeouts on every request; retries on 429 and 5xx (and on connection errors) with
exponential backoff that honours ``Retry-After``; tool calls and usage mapped into
``ChatResponse``. Message metadata never goes on the wire.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from .base import ChatResponse, ModelError
from .pricing import as_cost

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
WIRE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")


class OpenAIClient:
    """``chat(messages, tools=None, **options)`` against ``{base_url}/chat/completions``::

    model = OpenAIClient("gpt-4o-mini")                          # OPENAI_API_KEY from env
    model = OpenAIClient("llama3", base_url="http://localhost:11434/v1")
    """

    def __init__(
        self,
        model: str,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        headers: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty str")
        if max_retries < 0 or backoff < 0 or timeout <= 0:
            raise ValueError("max_retries and backoff must be >= 0, timeout > 0")
        self.model = model
        self.name = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        self._http = openai_http(api_key, headers, timeout, transport)

    def __repr__(self) -> str:
        return f"OpenAIClient({self.model!r}, {self.url!r})"

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        """Send the messages; raise ``ModelError`` once retries are exhausted or on a 4xx."""
        # Options never replace the model or the messages this client was asked to send.
        body: dict[str, Any] = {
            **options,
            "model": self.model,
            "messages": [wire(m) for m in messages],
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = options.get("tool_choice", "auto")
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
            raise ModelError(str(exc), status=exc.status, retryable=exc.retryable) from None
        return parse(response)


class EndpointFailed(Exception):
    """An OpenAI-compatible endpoint answered no 200: after the retries (``retryable``), or
    at once with a status that retrying cannot change."""

    def __init__(self, message: str, status: int | None, retryable: bool) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


def openai_http(
    api_key: str | None,
    headers: Mapping[str, str] | None,
    timeout: float,
    transport: httpx.BaseTransport | None,
) -> httpx.Client:
    """The HTTP client of an OpenAI-compatible endpoint: JSON, the bearer key (argument,
    else ``OPENAI_API_KEY``), a timeout on every request."""
    key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
    all_headers = {"content-type": "application/json", **(headers or {})}
    if key:
        all_headers["authorization"] = f"Bearer {key}"
    return httpx.Client(timeout=timeout, headers=all_headers, transport=transport)


def post_retrying(
    http: httpx.Client,
    url: str,
    body: Mapping[str, Any],
    *,
    max_retries: int,
    backoff: float,
    max_backoff: float,
    sleep: Callable[[float], None],
) -> httpx.Response:
    """POST ``body`` until a 200 comes back; retries on ``RETRY_STATUS`` and connection
    errors with exponential backoff that honours ``Retry-After`` (``EndpointFailed`` else)."""
    last_error = "no attempt made"
    last_status: int | None = None
    for attempt in range(max_retries + 1):
        retry_after: str | None = None
        try:
            response = http.post(url, json=body)
        except httpx.TimeoutException as exc:
            last_error = f"timed out: {exc}"
        except httpx.TransportError as exc:
            last_error = f"connection failed: {exc}"
        else:
            if response.status_code == 200:
                return response
            last_error = f"HTTP {response.status_code}: {response.text[:300]}"
            last_status = response.status_code
            if response.status_code not in RETRY_STATUS:
                raise EndpointFailed(f"{url} answered {last_error}", last_status, False)
            retry_after = response.headers.get("retry-after")
        if attempt < max_retries:
            asked = retry_after_seconds(retry_after)
            sleep(
                min(asked, max_backoff)
                if asked is not None
                else min(backoff * 2**attempt, max_backoff)
            )
    raise EndpointFailed(
        f"{url} failed after {max_retries + 1} attempt(s): {last_error}", last_status, True
    )


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def wire(message: Mapping[str, Any]) -> dict[str, Any]:
    """The message as the API takes it: known fields only (metadata stays home)."""
    return {k: message[k] for k in WIRE_FIELDS if k in message}


def parse(response: httpx.Response) -> ChatResponse:
    """Map a chat-completions body into a ChatResponse; ``ModelError`` if it is not one."""
    try:
        return _parse(response.json())
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ModelError(f"unexpected response body: {response.text[:300]}") from exc


def _parse(data: Any) -> ChatResponse:
    choice = data["choices"][0]
    message = choice["message"]
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            {
                "id": str(call.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(function.get("name") or ""),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                },
            }
        )
    usage = data.get("usage") or None
    if usage:
        # The API's own names, the ones stores sum; a cost some gateways add is kept.
        reported = usage
        usage = {
            "prompt_tokens": int(reported.get("prompt_tokens") or 0),
            "completion_tokens": int(reported.get("completion_tokens") or 0),
            "total_tokens": int(reported.get("total_tokens") or 0),
        }
        cost = as_cost(reported.get("cost"))
        if cost is not None:
            usage["cost"] = str(cost)
    return ChatResponse(
        content=message.get("content"),
        tool_calls=tuple(calls),
        usage=usage,
        finish_reason=choice.get("finish_reason") or "stop",
    )
