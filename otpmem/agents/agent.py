"""The Agent: a server that runs turns of a tool loop over its conversation's memory.

A turn, in beamai's order (read-your-writes throughout): load history, heal any dangling
tool calls a failed turn left, store the user message, then repeat prepare -> model ->
store the assistant message (its text kept beside any tool calls) -> run the tools -> store
their results (with ``name``), until the model answers. Writes are incremental, so a turn
that fails leaves a valid history behind it; each is keyed by the turn's id and step, so a
turn retried with its ``turn_id`` continues from what it stored and stores nothing twice.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..actors import ExitReason, GenServer, Handle
from ..guardrails import PolicyViolation
from ..kernel import Context, MaxToolIterations
from ..llm import ChatResponse
from ..memory import CANCELLED
from ..messages import InvalidMessage, short_repr, validate
from ..protocols import method_parameters_of
from ._config import ConversationBusy
from ._options import AgentConfig, AgentOptions, configure
from ._turn import TurnWriter, check_retry, check_turn_id, dangling, messages_from
from ._writers import writer_key, writers
from .errors import TurnFailed, TurnIdReused

RUN_TIMEOUT = 300.0


@dataclass(frozen=True)
class TurnResult:
    """A finished turn: the answer, and every message the turn added, in order."""

    content: str | None
    messages: list[dict[str, Any]]
    response: ChatResponse
    iterations: int
    tool_calls: int = 0
    healed: list[str] = field(default_factory=list)


class AgentHandle(Handle):
    """A handle to an Agent: ``run`` a turn, read or clear its conversation."""

    __slots__ = ()

    def run(
        self, text: str, timeout: float | None = RUN_TIMEOUT, turn_id: str | None = None
    ) -> TurnResult:
        """Run one turn with user message ``text``; ``TurnFailed`` if it cannot finish.

        Give a ``turn_id`` to make the turn safe to retry: run again with the same id after
        ``ServerExited`` or ``CallTimeout``, the turn continues from what it stored (a turn
        that finished answers again without calling the model) and stores nothing twice.
        """
        result: TurnResult = self.call(("run", text, check_turn_id(turn_id)), timeout)
        return result

    def messages(self, timeout: float | None = 5.0) -> list[dict[str, Any]]:
        """The conversation's stored messages ([] without memory)."""
        result: list[dict[str, Any]] = self.call(("messages",), timeout)
        return result

    def add_message(self, message: Mapping[str, Any], timeout: float | None = 5.0) -> None:
        """Store one message in the conversation (nothing without memory)."""
        self.call(("add_message", message), timeout)

    def clear_messages(self, timeout: float | None = 5.0) -> None:
        """Forget the conversation."""
        self.call(("clear",), timeout)

    def info(self, timeout: float | None = 5.0) -> dict[str, Any]:
        """Conversation, turn count and settings."""
        result: dict[str, Any] = self.call(("info",), timeout)
        return result


class Agent(GenServer[AgentHandle]):
    """An LLM agent as a supervised server::

    agent = Agent.start_link(llm=ScriptedModel(["hi"]), memory={"window": 20})
    agent.run("hello").content   # "hi"
    agent.messages()             # [user hello, assistant hi]
    """

    caller_errors = (
        TurnFailed,
        ConversationBusy,
        InvalidMessage,
        PolicyViolation,
        ValueError,
        TypeError,
    )
    handle_class = AgentHandle
    kind = "agent"

    @classmethod
    @method_parameters_of(AgentOptions)
    def start_link(cls, *args: Any, **kwargs: Any) -> AgentHandle:
        """Start an agent linked to the caller, with ``AgentOptions``' parameters: every
        one is checked here, not later."""
        options = AgentOptions(*args, **kwargs)
        config, name = configure(options), options.name
        return cls.spawn((config,), {}, link=True, name=name)

    @classmethod
    @method_parameters_of(AgentOptions)
    def start(cls, *args: Any, **kwargs: Any) -> AgentHandle:
        """Like ``start_link`` (the same parameters), without the link: nobody is told when
        it exits."""
        options = AgentOptions(*args, **kwargs)
        config, name = configure(options), options.name
        return cls.spawn((config,), {}, link=False, name=name)

    def init(self, config: AgentConfig) -> None:
        self.config = config
        self.turns = 0
        # Turn ids of our own making: this incarnation's random prefix and a count, unique
        # as uuid4s are (a restarted agent draws a new prefix) at a fraction of the cost.
        # Drawn at the first turn: an idle agent (a million of them) holds none of it.
        self.turn_ids: Iterator[str] | None = None

    def terminate(self, reason: ExitReason) -> None:
        ltm = self.config.sending.ltm
        if ltm is not None:
            ltm.notify("close", self.config.conv)  # trigger="on_close"; never raises

    def handle_call(self, message: Any) -> Any:
        if not isinstance(message, tuple) or not message:
            raise ValueError(f"Agent does not understand {short_repr(message)}")
        kind, *args = message
        provider, conv = self.config.provider, self.config.conv
        if kind == "run":
            return self._turn(*args)
        if kind == "messages":
            keyed = self.config.keyed
            if keyed is not None:
                # The whole conversation, also when the provider reads only a tail per turn.
                return messages_from(keyed, conv, 0)
            return provider.history(conv) if provider is not None else []
        if kind == "add_message":
            if provider is not None:
                provider.append(conv, [validate(args[0])])
            return None
        if kind == "clear":
            if provider is not None:
                provider.clear(conv)
            return None
        if kind == "info":
            return {
                "agent_name": self.config.agent_name,
                "conversation": conv,
                "turn_count": self.turns,
                "memory": repr(provider),
                "max_tool_iterations": self.config.kernel.max_tool_iterations,
            }
        raise ValueError(f"Agent does not understand {short_repr(message)}")

    # -- a turn -----------------------------------------------------------------------------

    def _turn(self, text: Any, turn_id: Any = None) -> TurnResult:
        if not isinstance(text, str) or not text:
            raise ValueError(f"run needs a non-empty str, got {short_repr(text)}")
        given = check_turn_id(turn_id)
        turn_id = given or self._new_turn_id()
        config = self.config
        meta = {
            "agent_name": config.agent_name,
            "agent_pid": self.pid,
            "conversation": config.conv,
            "turn_count": self.turns,
            "run_id": turn_id,
        }
        config.callbacks.fire("on_turn_start", meta)
        key = self._claim_writer()
        try:
            try:
                result = self._loop(text, meta, turn_id, retry=given is not None)
            finally:
                if key is not None:
                    writers.release(key)
                config.sending.settle()  # a hold a failed call left
        except Exception as exc:
            config.callbacks.fire("on_turn_error", meta, exc)
            if isinstance(exc, TurnFailed | InvalidMessage | TurnIdReused | PolicyViolation):
                raise
            raise TurnFailed(f"the turn failed: {exc}") from exc
        self.turns += 1
        config.callbacks.fire("on_turn_end", meta, result)
        if config.sending.ltm is not None:
            config.sending.ltm.notify("turn", config.conv)  # trigger="per_turn"
        return result

    def _new_turn_id(self) -> str:
        if self.turn_ids is None:
            self.turn_ids = map(f"{uuid.uuid4().hex}.{{}}".format, itertools.count())
        return next(self.turn_ids)

    def _claim_writer(self) -> Hashable | None:
        provider = self.config.provider
        if provider is None:
            return None
        key = writer_key(self.config.conv)
        timeout = self.config.busy_timeout if self.config.on_busy == "wait" else 0.0
        if not writers.acquire(key, timeout):
            raise ConversationBusy(
                f"conversation {self.config.conv} is being written by another turn "
                f"(on_busy={self.config.on_busy!r})"
            )
        return key

    def _loop(self, text: str, meta: dict[str, Any], turn_id: str, retry: bool) -> TurnResult:
        config = self.config
        provider, conv, kernel = config.provider, config.conv, config.kernel
        writer = TurnWriter(provider, config.keyed, conv, turn_id)
        # A turn id of our own making is new: no earlier attempt to look for.
        earlier = writer.earlier() if retry else None
        first: tuple[list[Any], str | None] | None = None
        if earlier is None:
            history = provider.history(conv) if provider is not None else []
            unanswered = dangling(history)
            healed = [call_id for call_id, _ in unanswered]
            repairs = [
                {"role": "tool", "tool_call_id": call_id, "name": name, "content": CANCELLED}
                for call_id, name in unanswered
            ]
            added: list[dict[str, Any]] = [*repairs, {"role": "user", "content": text}]
            history.extend(added)
            # The first call is built (and checked) before the user message is stored: a
            # guardrail that refuses the turn leaves nothing a later turn would send.
            first = self._build(history, [])
            writer.store(added)
        else:
            healed = check_retry(earlier, text, turn_id)
            assert provider is not None  # earlier() found the turn in the provider's store
            history = provider.history(conv)  # the newest messages: the turn's own among them
            added = list(earlier)
        context = Context(conversation_id=conv)
        iterations = sum(1 for m in added if m.get("role") == "assistant")
        calls = sum(1 for m in added if m.get("role") == "tool") - len(healed)
        response: ChatResponse | None = None
        while True:
            last = added[-1]
            if last.get("role") == "assistant" and last.get("tool_calls"):
                results = []
                for call in last["tool_calls"]:
                    config.callbacks.fire("on_tool_call", meta, call)
                    result = kernel.run_tool(call, context)
                    config.callbacks.fire("on_tool_result", meta, result)
                    results.append(result)
                calls += len(results)
                self._store(writer, results, history, added)
                continue
            answered = response is not None and not response.tool_calls  # empty: not stored
            if last.get("role") == "assistant" or answered:
                if response is None:  # finished by an earlier attempt: answer from the store
                    response = ChatResponse(content=last.get("content"))
                return TurnResult(response.content, added, response, iterations, calls, healed)
            if iterations >= kernel.max_tool_iterations:
                raise TurnFailed(str(MaxToolIterations(kernel.max_tool_iterations, calls)))
            iterations += 1
            # Guardrails are checked before every model call: a refusal mid-turn ends the
            # turn like a failed model call (what it stored is a valid history).
            to_send, system_prompt = first or self._build(history, added)
            first = None
            config.callbacks.fire("on_model_call", meta, to_send)
            response, context = kernel.chat(to_send, context, system_prompt)
            config.callbacks.fire("on_model_result", meta, response)
            if response.content is not None or response.tool_calls:
                self._store(writer, [response.to_message()], history, added)
            config.sending.settle()  # the answer's usage is recorded: its hold goes

    def _build(
        self, history: list[Any], stored: list[dict[str, Any]]
    ) -> tuple[list[Any], str | None]:
        try:
            return self.config.sending.build(history)
        except PolicyViolation as violation:
            violation.stored = list(stored)  # what the refused turn leaves in the store
            raise

    @staticmethod
    def _store(
        writer: TurnWriter,
        messages: list[dict[str, Any]],
        history: list[Any],
        added: list[dict[str, Any]],
    ) -> None:
        writer.store(messages)
        history.extend(messages)
        added.extend(messages)
