"""How a process handles its mailbox: a batch at a time, each message by its kind.

``Process.run_batch`` runs this loop on a runner; a handler's error crashes the server
(OTP's rule) unless it is one of the server's declared caller errors, and a kill noticed
on the way ends the process without ``terminate``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ._errors import ExitReason, short_repr
from ._scheduler import BATCH, IDLE, RUNNING, requeue
from ._signals import (
    NO_REPLY,
    CallEnvelope,
    CastEnvelope,
    CrashRequest,
    Stop,
    StopRequest,
    Wake,
)
from ._sysmsg import TRACED, SysRequest, traced_dispatch

if TYPE_CHECKING:
    from ._process import Process

logger = logging.getLogger("otpmem.actors")


def run_batch(process: Process) -> None:
    """Handle messages until the mailbox is empty or ``BATCH`` are done (on a runner)."""
    if not process._initialized:
        process._initialized = True
        process._run_init()
    mailbox = process.mailbox
    for _ in range(BATCH):
        if process.dead:
            return
        if process.killed:
            process._exit(process.kill_reason, run_terminate=False)
            return
        if process._shutdown is not None:
            process._exit(process._shutdown, run_terminate=True)
            return
        if not mailbox:
            # Idle, then look again: a sender that saw us running appended before we
            # set IDLE, so its message is seen here; one that saw IDLE queued us.
            process.run_state = IDLE
            if not mailbox:
                return
            with process.run_lock:
                if process.run_state != IDLE:
                    return
                process.run_state = RUNNING
            continue
        process.run_state = RUNNING
        if TRACED and process in TRACED:
            traced_dispatch(process, mailbox.popleft(), _dispatch)
        else:
            _dispatch(process, mailbox.popleft())
    requeue(process)


def _dispatch(process: Process, message: Any) -> None:
    kind = type(message)
    server = process.server
    try:
        if kind is CallEnvelope:
            _handle_call(process, message)
        elif kind is CastEnvelope:
            if process.faults is not None:
                process.faults._before_message(process, message.payload)
            _after_handler(process, server.handle_cast(message.payload))
        elif kind is StopRequest:
            process._exit(message.reason, run_terminate=True)
        elif kind is CrashRequest:
            _crash(process, message.reason)
        elif kind is Wake:
            pass
        elif kind is SysRequest:
            message.answer(process)
        else:
            if process.faults is not None:
                process.faults._before_message(process, message)
            _after_handler(process, server.handle_info(message))
    except BaseException as exc:
        if process.killed:
            process._exit(process.kill_reason, run_terminate=False)
        else:
            _crash(process, exc)


def _handle_call(process: Process, envelope: CallEnvelope) -> None:
    slot = envelope.slot
    process.current_call = envelope
    try:
        if process.faults is not None:
            process.faults._before_message(process, envelope.payload)
        result = process.server.handle_call(envelope.payload)
    except process.server.caller_errors as exc:
        # The caller's mistake (a request that fails the server's checks): answer with the
        # error, keep serving.
        process.current_call = None
        if process.killed:
            return
        process.pending.discard(slot)
        slot.fail(exc)
        return
    process.current_call = None
    if process.killed:
        return  # killed mid-call: the exit path fails the slot, as OTP's caller sees 'killed'
    if result is NO_REPLY:
        return
    if type(result) is Stop:
        process.pending.discard(slot)
        slot.set(result.reply)
        process._exit(result.reason, run_terminate=True)
        return
    process.pending.discard(slot)
    slot.set(result)


def _after_handler(process: Process, result: Any) -> None:
    if type(result) is Stop:
        process._exit(result.reason, run_terminate=True)


def _crash(process: Process, reason: ExitReason) -> None:
    if isinstance(reason, BaseException):
        logger.error("%r crashed", process, exc_info=reason)
    else:
        logger.error("%r crashed with reason %s", process, short_repr(reason))
    process._exit(reason, run_terminate=True)
