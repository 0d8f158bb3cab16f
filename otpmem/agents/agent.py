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
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from .. import telemetry
from ..actors import (
    AlreadyStarted,
    ExitReason,
    GenServer,
    Stop,
    Timer,
    cancel_timer,
    current,
    on_exit,
    send_after,
    split_request,
)
from ..guardrails import PolicyViolation
from ..memory import CANCELLED
from ..messages import InvalidMessage, short_repr, validate
from ..protocols import method_parameters_of
from ._approval import (
    check_approve,
    refuse_new_turn,
    refuse_while_suspended,
    resume_point,
)
from ._config import ConversationBusy
from ._handle import IDLE_EXIT, RUN_TIMEOUT, AgentHandle, TurnResult, arrived, departed
from ._options import AgentConfig, AgentOptions, configure
from ._rounds import build, run_rounds
from ._turn import TurnWriter, check_retry, check_turn_id, dangling, messages_from
from ._writers import writer_key, writers
from .errors import AgentAlreadyStarted, TurnFailed, TurnIdReused, TurnNotSuspended, TurnSuspended

_IDLE_CHECK = ("otpmem.agent", "idle?")
_PASSED_THROUGH = (
    TurnFailed,
    InvalidMessage,
    TurnIdReused,
    PolicyViolation,
    TurnSuspended,
    TurnNotSuspended,
)
"""What a turn raises to its caller as it is; anything else is wrapped in TurnFailed."""
_REQUESTS = {
    "run": (1, 2),
    "resume": (2,),
    "messages": (0,),
    "add_message": (1,),
    "clear": (0,),
    "info": (0,),
}
"""The operations ``handle_call`` takes, and how many arguments each."""


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
        return cls._start(AgentOptions(*args, **kwargs), link=True)

    @classmethod
    @method_parameters_of(AgentOptions)
    def start(cls, *args: Any, **kwargs: Any) -> AgentHandle:
        """Like ``start_link`` (the same parameters), without the link: nobody is told when
        it exits."""
        return cls._start(AgentOptions(*args, **kwargs), link=False)

    @classmethod
    def _start(cls, options: AgentOptions, link: bool) -> AgentHandle:
        config = configure(options)
        try:
            spawned = cls.spawn((config,), {}, link=link, name=config.name)
        except AlreadyStarted as taken:
            raise AgentAlreadyStarted(config.name, taken.holder) from None
        # By identity: the handle follows the agent across restarts and activations.
        handle = AgentHandle.named(config.name)
        handle._process = spawned.process_or_none()
        return handle

    def init(self, config: AgentConfig) -> None:
        self.config = config
        self.turns = 0
        process = current()
        assert process is not None
        name = config.name
        # Idleness is checked when a timer fires, not re-armed on every call: an agent that
        # is busy costs one timer per idle_timeout, whatever its rate of calls.
        self.last_call = time.monotonic()
        self.idle_timer: Timer | None = None
        self.idled = False  # set by the idle stop, read by the exit's cleanup
        arrived(name)
        on_exit(lambda: self._exiting(name, process))
        if config.idle_timeout is not None:
            self.idle_timer = send_after(config.idle_timeout, self.handle, _IDLE_CHECK)
        # Turn ids of our own making: this incarnation's random prefix and a count, unique
        # as uuid4s are (a restarted agent draws a new prefix) at a fraction of the cost.
        # Drawn at the first turn: an idle agent (a million of them) holds none of it.
        self.turn_ids: Iterator[str] | None = None

    def _exiting(self, name: str, process: Any) -> None:
        if self.idle_timer is not None:
            cancel_timer(self.idle_timer)
        if not self.idled:  # an idle stop is never restarted: nothing to wait for
            departed(name, process)

    def handle_info(self, message: Any) -> Any:
        if message is _IDLE_CHECK and self.config.idle_timeout is not None:
            idle_for = time.monotonic() - self.last_call
            if idle_for >= self.config.idle_timeout and not self._process.mailbox:
                self.idled = True
                return Stop(IDLE_EXIT)
            # Busy (a call is queued) or not idle long enough: look again when it could be.
            left = self.config.idle_timeout - idle_for
            self.idle_timer = send_after(
                left if left > 0 else self.config.idle_timeout, self.handle, _IDLE_CHECK
            )
            return None
        return super().handle_info(message)

    def terminate(self, reason: ExitReason) -> None:
        ltm = self.config.sending.ltm
        if ltm is not None:
            ltm.notify("close", self.config.conv)  # trigger="on_close"; never raises

    def handle_call(self, message: Any) -> Any:
        # The door: a tuple of a known operation and its arguments, compared as exact types.
        kind, args = split_request(message, "Agent", _REQUESTS)
        provider, conv = self.config.provider, self.config.conv
        self.last_call = time.monotonic()
        if kind == "run":
            return self._turn(*args)
        if kind == "resume":
            return self._resume(*args)
        if kind == "messages":
            keyed = self.config.keyed
            if keyed is not None:
                # The whole conversation, also when the provider reads only a tail per turn.
                return messages_from(keyed, conv, 0)
            return provider.history(conv) if provider is not None else []
        if kind == "add_message":
            if provider is not None:
                refuse_while_suspended(self.config.keyed, conv)
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
        return self._guarded(
            turn_id, lambda meta: self._loop(text, meta, turn_id, retry=given is not None)
        )

    def _resume(self, turn_id: Any, approve: Any) -> TurnResult:
        given = check_turn_id(turn_id)
        if given is None:
            raise ValueError("resume needs the turn_id of the suspended turn (result.turn_id)")
        decided = check_approve(approve)
        return self._guarded(given, lambda meta: self._continue(meta, given, decided), True)

    def _guarded(
        self, turn_id: str, body: Callable[[dict[str, Any]], TurnResult], resume: bool = False
    ) -> TurnResult:
        """Run a turn's ``body`` as its conversation's writer, with the turn's callbacks."""
        config = self.config
        if telemetry.ENABLED:
            return telemetry.turn(
                lambda: self._writing(turn_id, body), config.conv, turn_id, config.name, resume
            )
        return self._writing(turn_id, body)

    def _writing(self, turn_id: str, body: Callable[[dict[str, Any]], TurnResult]) -> TurnResult:
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
                result = body(meta)
            finally:
                if key is not None:
                    writers.release(key)
                config.sending.settle()  # a hold a failed call left
        except Exception as exc:
            config.callbacks.fire("on_turn_error", meta, exc)
            if isinstance(exc, _PASSED_THROUGH):
                raise
            raise TurnFailed(f"the turn failed: {exc}") from exc
        if not result.pending:  # a suspended turn is not over: it counts once, when it is
            self.turns += 1
        config.callbacks.fire("on_turn_end", meta, result)
        if config.sending.ltm is not None and not result.pending:
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
        provider, conv = config.provider, config.conv
        writer = TurnWriter(provider, config.keyed, conv, turn_id)
        # A turn id of our own making is new: no earlier attempt to look for.
        earlier = writer.earlier() if retry else None
        first: tuple[list[Any], str | None] | None = None
        if earlier is None:
            history = provider.history(conv) if provider is not None else []
            refuse_new_turn(conv, history)  # its calls are the human's to decide first
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
            first = build(config, history, [])
            writer.store(added)
        else:
            healed = check_retry(earlier, text, turn_id)
            assert provider is not None  # earlier() found the turn in the provider's store
            history = provider.history(conv)  # the newest messages: the turn's own among them
            added = list(earlier)
        return run_rounds(config, writer, meta, history, added, healed, first, None)

    def _continue(
        self, meta: dict[str, Any], turn_id: str, approve: bool | dict[str, bool]
    ) -> TurnResult:
        """Resume turn ``turn_id`` from the store: decide its pending calls, go on."""
        config = self.config
        writer = TurnWriter(config.provider, config.keyed, config.conv, turn_id)
        earlier, healed, decided = resume_point(writer, approve)
        assert config.provider is not None  # the turn was found in the provider's store
        history = config.provider.history(config.conv)
        return run_rounds(config, writer, meta, history, earlier, healed, None, decided)


__all__ = ["RUN_TIMEOUT", "Agent", "AgentHandle", "TurnResult"]
