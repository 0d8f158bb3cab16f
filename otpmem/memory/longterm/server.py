"""The extraction server: long-term memory's ``mode="async"``, supervised, with a durable
queue.

The queue is the store's job list: ``LongTermMemory.extract`` records a job
(``request_extraction(conv, upto)``) before it answers, then tells the server. The server
works the jobs one at a time; a job is done when its extraction's ``save_facts`` moves the
cursor to ``upto``, in the same write as the facts (the store then drops the job). So a
crash or a kill -9 of the server, or of the whole process, loses no job (the restarted
server, or the next process, reads the job list again) and repeats none (the cursor moved
with the facts, or neither did). An extraction that fails stays pending and is tried again
on the next request for its conversation, on ``retry()``, or at the next start.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from typing import Any

from ...actors import (
    NO_REPLY,
    GenServer,
    Handle,
    NoProcess,
    ReplyTo,
    ServerExited,
    is_tagged,
    reply,
    sleep,
    split_request,
    whereis,
)
from ...messages import Conv
from ...supervisors import ChildSpec

logger = logging.getLogger("otpmem.memory")

APP_SUPERVISOR = "otpmem"
"""The application root's registered name (``otpmem.app.APP_NAME``): an async long-term
memory with no supervisor of its own puts its server there while the application runs."""
WORK = ("work",)
RESTART_POLL = 0.01
"""How often ``flush`` looks for a server its supervisor is restarting."""
_ids = itertools.count(1)


class ExtractionServer(GenServer):
    """Works a LongTermMemory's pending extractions, one at a time, in its own process."""

    caller_errors = (ValueError,)

    def init(self, ltm: Any) -> None:
        self.ltm = ltm
        self.queue: dict[Conv, int] = {}
        self.failed: dict[Conv, str] = {}
        self.waiters: list[ReplyTo] = []
        self.kicked = False
        self.loaded = False
        # Read the job list in the first message, not in init: a store that is restarting
        # must not fail this server's start (and count against its supervisor).
        self._kick()

    def handle_cast(self, message: Any) -> None:
        if is_tagged(message, "request", 3):
            conv, upto = message[1], message[2]
            if type(conv) is not Conv or type(upto) is not int:
                super().handle_cast(message)  # not a job: a warning, no crash
                return
            self.failed.pop(conv, None)
            self.queue[conv] = max(upto, self.queue.get(conv, 0))
        elif is_tagged(message, "retry", 1):
            self.loaded = False
            self.failed.clear()
        else:
            super().handle_cast(message)
            return
        self._kick()

    def handle_call(self, message: Any) -> Any:
        kind, _ = split_request(message, "ExtractionServer", {"flush": (0,), "status": (0,)})
        if kind == "flush":
            if not self.queue and self.loaded:
                return dict(self.failed)
            self.waiters.append(self.caller())
            self._kick()
            return NO_REPLY
        return {"queued": dict(self.queue), "failed": dict(self.failed), "loaded": self.loaded}

    def handle_info(self, message: Any) -> None:
        if message is not WORK:  # our own kick, the one object: compared by identity
            super().handle_info(message)
            return None
        self.kicked = False
        if not self.loaded:
            self._load()
        if self.queue:
            conv = next(iter(self.queue))
            del self.queue[conv]
            self._work(conv)
        if self.queue:
            self._kick()
        elif self.loaded:
            for waiter in self.waiters:
                reply(waiter, dict(self.failed))
            self.waiters.clear()
        return None

    def _load(self) -> None:
        try:
            pending = self.ltm.store.pending_extractions()
        except (NoProcess, ServerExited) as exc:
            logger.warning("extraction server: the store is not there (%s); retrying later", exc)
            return
        for conv, upto in pending:
            if conv not in self.failed:
                self.queue[conv] = max(upto, self.queue.get(conv, 0))
        self.loaded = True

    def _work(self, conv: Conv) -> None:
        try:
            report = self.ltm.extract_now(conv)
        except Exception as exc:  # a broken extractor must not crash-loop the supervisor
            logger.exception("extraction of %s failed; it stays pending", conv)
            self.failed[conv] = f"{type(exc).__name__}: {exc}"
            return
        if report.error is not None:
            logger.warning("extraction of %s failed (%s); it stays pending", conv, report.error)
            self.failed[conv] = report.error

    def _kick(self) -> None:
        if not self.kicked:
            self.kicked = True
            self.handle.send(WORK)


class ServerClient:
    """How a LongTermMemory reaches its server: by name (so across restarts), and how it
    stops it again."""

    def __init__(self, name: str, supervisor: Any, child_id: str | None) -> None:
        self.name = name
        self.handle = ExtractionServer.named(name)
        self.supervisor = supervisor
        self.child_id = child_id

    def request(self, conv: Conv, upto: int) -> None:
        """Tell the server about a job already recorded in the store."""
        # Restarting: the new server reads the job list itself.
        with contextlib.suppress(NoProcess):
            self.handle.cast(("request", conv, upto))

    def flush(self, timeout: float) -> dict[Conv, str]:
        """Wait until nothing is queued; the failed extractions. A server that is being
        restarted meanwhile is waited for (its successor reads the job list again)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                failed: dict[Conv, str] = self.handle.call(("flush",), max(left, 0.001))
                return failed
            except (NoProcess, ServerExited):
                if left <= 0:
                    raise
            sleep(min(RESTART_POLL, max(left, 0.0)))

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """What is queued and what failed."""
        status: dict[str, Any] = self.handle.call(("status",), timeout)
        return status

    def retry(self) -> None:
        """Try the failed extractions again (the job list is read anew)."""
        self.handle.cast(("retry",))

    def shutdown(self, timeout: float) -> None:
        """Stop the server (and take it off its supervisor)."""
        if self.supervisor is not None and self.child_id is not None:
            try:
                self.supervisor.terminate_child(self.child_id)
                self.supervisor.delete_child(self.child_id)
            except (NoProcess, ServerExited):
                pass  # the supervisor is gone, and its children with it
            return
        process = whereis(self.name)
        if process is not None:
            process.stop(timeout=timeout)


def start_server(ltm: Any, supervisor: Any) -> ServerClient:
    """Start ``ltm``'s server under ``supervisor``, else under the running application,
    else on its own (with a warning: nothing restarts it)."""
    number = next(_ids)
    name = f"otpmem.ltm.extractor.{number}"
    if supervisor is None:
        supervisor = whereis(APP_SUPERVISOR)
        if supervisor is None:
            logger.warning(
                "async long-term memory without a supervisor or a running otpmem app: "
                "its extraction server is not supervised (pending jobs wait in the store)"
            )
            ExtractionServer.start(ltm, name=name)
            return ServerClient(name, None, None)
    if not isinstance(supervisor, Handle) or not hasattr(supervisor, "start_child"):
        raise TypeError(f"supervisor must be a Supervisor handle, got {supervisor!r}")
    child_id = f"ltm-extractor-{number}"
    supervisor.start_child(
        ChildSpec(child_id, start=lambda: ExtractionServer.start_link(ltm, name=name))
    )
    return ServerClient(name, supervisor, child_id)
