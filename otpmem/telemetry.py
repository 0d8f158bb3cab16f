"""OpenTelemetry spans and metrics of turns, model calls, tool calls and store writes.

On when ``opentelemetry-api`` is importable (the ``otel`` extra) and a tracer or meter
provider is set: the SDK's ``set_tracer_provider``/``set_meter_provider`` (what
``opentelemetry-instrument`` does), or ``use(...)``. When the API is absent nothing of it
is imported and every hook is one check of ``ENABLED``; when it is there with no provider
set, a hook also reads the two globals and calls straight through::

    from opentelemetry.sdk.trace import TracerProvider
    otpmem.telemetry.use(tracer_provider=TracerProvider(), meter_provider=...)

Spans: ``otpmem.turn`` (a turn, or a resume of one) over ``chat {model}`` (each model
call), ``execute_tool {tool}`` (each tool call) and ``otpmem.store.add`` (each batch
written); attributes name the conversation (``otpmem.user_id``, ``otpmem.conversation_id``,
also ``gen_ai.conversation.id``), the turn (``otpmem.turn_id``), the tool
(``gen_ai.tool.name``, ``gen_ai.tool.call.id``) and the model (``gen_ai.request.model``).
Metrics, with no conversation or turn among their attributes (one series per conversation
would not scale): ``otpmem.turns`` and ``otpmem.turn.duration`` by outcome,
``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` by model,
``otpmem.tool.duration`` by tool, ``otpmem.store.write.duration`` by store.

A layer-0 module: it knows no otpmem type, and reads what it records by duck typing.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

R = TypeVar("R")

Attributes = dict[str, Any]


def _importable() -> bool:
    """Whether ``opentelemetry.trace`` and ``opentelemetry.metrics`` can be imported,
    found without importing them (a refusing import hook counts as absent)."""
    try:
        return (
            importlib.util.find_spec("opentelemetry") is not None
            and importlib.util.find_spec("opentelemetry.trace") is not None
            and importlib.util.find_spec("opentelemetry.metrics") is not None
        )
    except (ImportError, ValueError):
        return False


ENABLED: bool = _importable()
"""The cached flag every hook checks first: the OpenTelemetry API is importable."""


SECONDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""Buckets of the durations of turns, model and tool calls (the GenAI conventions')."""
TOKENS = tuple(4**n for n in range(14))
"""Buckets of token counts (the GenAI conventions': 1, 4, 16, ... 67M)."""
FAST = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
"""Buckets of store writes: a write is sub-millisecond in memory, an fsync a few ms."""


def _histograms(meter: Any) -> Callable[[str, str, str, Sequence[float]], Any]:
    """``meter.create_histogram`` with bucket advice (an API before 1.23 takes none)."""

    def create(name: str, unit: str, description: str, buckets: Sequence[float]) -> Any:
        try:
            return meter.create_histogram(
                name, unit, description, explicit_bucket_boundaries_advisory=list(buckets)
            )
        except TypeError:
            return meter.create_histogram(name, unit, description)

    return create


class _Instruments:
    """The tracer and the instruments, made from the providers in use."""

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.metrics import _internal as metrics_internal

        try:
            version: str | None = importlib.metadata.version("otpmem")
        except importlib.metadata.PackageNotFoundError:
            version = None  # a checkout on the path, not installed
        self.tracer = (tracer_provider or trace).get_tracer("otpmem", version)
        meter = (meter_provider or metrics).get_meter("otpmem", version)
        self.turns = meter.create_counter("otpmem.turns", "{turn}", "Agent turns, by outcome")
        histogram = _histograms(meter)
        self.turn_duration = histogram(
            "otpmem.turn.duration", "s", "How long an agent turn (or a resume) took", SECONDS
        )
        self.model_duration = histogram(
            "gen_ai.client.operation.duration", "s", "How long a model call took", SECONDS
        )
        self.tokens = histogram(
            "gen_ai.client.token.usage", "{token}", "Tokens a model call used, by type", TOKENS
        )
        self.tool_duration = histogram(
            "otpmem.tool.duration", "s", "How long a tool call took", SECONDS
        )
        self.store_write = histogram(
            "otpmem.store.write.duration", "s", "How long an add took, from its caller", FAST
        )
        self.explicit = tracer_provider is not None or meter_provider is not None
        self.trace, self.metrics = trace, metrics_internal
        self.from_environment = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ

    def globally_set(self) -> bool:
        """Whether a global tracer or meter provider is set."""
        # The API's own globals: get_tracer_provider() reads os.environ on every call while
        # none is set (about 4 us on every hook); these are two attribute reads. Should a
        # later API drop them, the default (True) keeps spans on.
        return (
            getattr(self.trace, "_TRACER_PROVIDER", True) is not None
            or getattr(self.metrics, "_METER_PROVIDER", True) is not None
            or self.from_environment
        )


_lock = threading.Lock()
_instruments: _Instruments | None = None
_providers: tuple[Any, Any] = (None, None)


def use(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Emit through these providers from now on (None for both: the global ones)."""
    global _instruments, _providers
    if not ENABLED:
        raise RuntimeError(
            "otpmem.telemetry.use needs opentelemetry-api: pip install 'otpmem[otel]'"
        )
    with _lock:
        _providers = (tracer_provider, meter_provider)
        _instruments = None


def _active() -> _Instruments | None:
    """The instruments if anyone listens (a provider given to ``use``, or set globally)."""
    global _instruments
    found = _instruments
    if found is None:
        with _lock:
            if _instruments is None:
                _instruments = _Instruments(*_providers)
            found = _instruments
    if found.explicit or found.globally_set():
        return found
    return None


def conversation(conv: Any) -> Attributes:
    """The attributes of a conversation (a ``Conv``: user id, conversation id; or an id)."""
    if isinstance(conv, tuple) and len(conv) == 2:
        user_id, conversation_id = conv
    else:
        user_id, conversation_id = None, str(conv)
    attributes: Attributes = {
        "otpmem.conversation_id": conversation_id,
        "gen_ai.conversation.id": conversation_id,
    }
    if user_id is not None:
        attributes["otpmem.user_id"] = user_id
    return attributes


def turn(call: Callable[[], R], conv: Any, turn_id: str, agent: str, resume: bool) -> R:
    """Run a turn's ``call`` inside an ``otpmem.turn`` span; count it and time it."""
    instruments = _active()
    if instruments is None:
        return call()
    attributes = {
        **conversation(conv),
        "otpmem.turn_id": turn_id,
        "gen_ai.agent.name": agent,
        "gen_ai.operation.name": "invoke_agent",
        "otpmem.turn.resume": resume,
    }
    started = time.perf_counter()
    outcome = "failed"
    with instruments.tracer.start_as_current_span("otpmem.turn", attributes=attributes) as span:
        try:
            result = call()
            outcome = "suspended" if getattr(result, "pending", None) else "answered"
            span.set_attribute("otpmem.turn.outcome", outcome)
            for name in ("iterations", "tool_calls"):
                value = getattr(result, name, None)
                if type(value) is int:
                    span.set_attribute(f"otpmem.turn.{name}", value)
            return result
        finally:
            labels = {"otpmem.turn.outcome": outcome}
            instruments.turns.add(1, labels)
            instruments.turn_duration.record(time.perf_counter() - started, labels)


def model_call(call: Callable[[], R], model: str | None, conv: Any, turn_id: Any) -> R:
    """Run a model ``call`` inside a ``chat {model}`` span; time it, count its tokens."""
    instruments = _active()
    if instruments is None:
        return call()
    attributes: Attributes = {"gen_ai.operation.name": "chat"}
    labels: Attributes = {"gen_ai.operation.name": "chat"}
    if model:
        attributes["gen_ai.request.model"] = labels["gen_ai.request.model"] = model
    if conv is not None:
        attributes.update(conversation(conv))
    if isinstance(turn_id, str):
        attributes["otpmem.turn_id"] = turn_id
    started = time.perf_counter()
    name = f"chat {model}" if model else "chat"
    with instruments.tracer.start_as_current_span(name, attributes=attributes) as span:
        try:
            result = call()
        except BaseException as exc:
            labels["error.type"] = type(exc).__name__
            raise
        finally:
            instruments.model_duration.record(time.perf_counter() - started, labels)
        usage = getattr(result, "usage", None)
        if isinstance(usage, Mapping):
            for field, kind, key in (
                ("prompt_tokens", "input", "gen_ai.usage.input_tokens"),
                ("completion_tokens", "output", "gen_ai.usage.output_tokens"),
            ):
                count = usage.get(field)
                if type(count) is int:
                    span.set_attribute(key, count)
                    instruments.tokens.record(count, {**labels, "gen_ai.token.type": kind})
        return result


def tool_call(call: Callable[[], R], tool: str, call_id: Any, conv: Any, turn_id: Any) -> R:
    """Run a tool ``call`` inside an ``execute_tool {tool}`` span; time it."""
    instruments = _active()
    if instruments is None:
        return call()
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.call.id": str(call_id),
    }
    if conv is not None:
        attributes.update(conversation(conv))
    if isinstance(turn_id, str):
        attributes["otpmem.turn_id"] = turn_id
    started = time.perf_counter()
    try:
        with instruments.tracer.start_as_current_span(
            f"execute_tool {tool}", attributes=attributes
        ):
            return call()
    finally:
        instruments.tool_duration.record(time.perf_counter() - started, {"gen_ai.tool.name": tool})


def store_write(add: Callable[[Any, Any], R], checked: Any, timeout: Any, store: str) -> R:
    """Run a store's ``add(checked, timeout)`` inside an ``otpmem.store.add`` span (``checked``:
    the conversation, the batch, its key, the key it follows); time it."""
    instruments = _active()
    if instruments is None:
        return add(checked, timeout)
    conv, batch, key = checked[0], checked[1], checked[2]
    store = store.removesuffix("Handle")  # MemoryStoreHandle: the MemoryStore's
    attributes: Attributes = {
        **conversation(conv),
        "otpmem.store": store,
        "otpmem.store.messages": len(batch),
    }
    if isinstance(key, str):
        attributes["otpmem.idempotency_key"] = key
    started = time.perf_counter()
    try:
        with instruments.tracer.start_as_current_span("otpmem.store.add", attributes=attributes):
            return add(checked, timeout)
    finally:
        instruments.store_write.record(time.perf_counter() - started, {"otpmem.store": store})
