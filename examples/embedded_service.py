"""otpmem embedded in a host program: a supervised subsystem, started and stopped cleanly.

Run with ``python examples/embedded_service.py [DATA_DIR]`` and type requests, one per
line: ``alice: 2+3`` (an agent per user answers, with its ``add`` tool), ``alice: hello``,
or ``stats``. Stop it with Ctrl-C (SIGINT), SIGTERM, or end of input.

What it shows: the host owns its process. It installs its signal handlers first, then
starts the otpmem tree (``otpmem.start(data_dir=...)``: the default store in LevelDB plus
the agents' supervisor) and prints ``ready``. Requests are served on a thread of the host;
each user gets an agent under otpmem's supervision, found again by its name. The main
thread just waits on an Event that the signal handlers set; then it lets the request in
flight finish, refuses new ones, stops otpmem (agents first, then the store, which closes
the database) and prints ``stopped cleanly``. Without ``DATA_DIR`` a temporary directory
is used.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import otpmem
from otpmem.actors import NoProcess, ServerExited
from otpmem.agents import AgentHandle, TurnFailed
from otpmem.llm import ScriptedModel, tool_call
from otpmem.messages import Conv


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def model(messages: list[dict[str, Any]], tools: Any) -> Any:
    """``a+b`` gets the add tool and then its result; anything else an acknowledgement."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"The sum is {last['content']}."
    text = str(last.get("content")).strip()
    left, plus, right = text.partition("+")
    if plus and left.strip().isdigit() and right.strip().isdigit():
        call = tool_call(f"add-{uuid.uuid4().hex[:8]}", "add", f'{{"a": {left}, "b": {right}}}')
        return {"content": None, "tool_calls": [call]}
    return f"Noted ({len(messages)} messages in view)."


class Service:
    """The host's request handling: one agent per user, started on first use."""

    def __init__(self) -> None:
        self.model = ScriptedModel(model)
        self.lock = threading.Lock()  # held while a request is served
        self.closed = False
        self.served = 0
        self.users: set[str] = set()

    def agent(self, user: str) -> AgentHandle:
        """The user's agent, by name: after a crash its supervisor restarts it."""
        name = f"embedded.agent.{user}"
        if user not in self.users:
            otpmem.start_agent(
                llm=self.model,
                tools=[add],
                memory={"window": 20},
                user_id=user,
                conversation_id="main",
                name=name,
            )
            self.users.add(user)
        return AgentHandle.named(name)

    def handle(self, line: str) -> str:
        """Serve one request line."""
        with self.lock:
            if self.closed:
                return "refused: shutting down"
            if line == "stats":
                store = otpmem.default_store()
                total = sum(store.count(Conv(user, "main")) for user in self.users)
                return f"stats: {self.served} requests, {len(self.users)} users, {total} messages"
            user, text = line.split(":", 1) if ":" in line else ("guest", line)
            try:
                answer = self.agent(user.strip() or "guest").run(text.strip(), timeout=30)
            except (TurnFailed, NoProcess, ServerExited, ValueError) as exc:
                return f"error: {exc}"
            self.served += 1
            return f"{user.strip()} <- {answer.content}"

    def close(self) -> None:
        """Wait for the request in flight, then refuse new ones."""
        with self.lock:
            self.closed = True


def serve_stdin(service: Service, stop: threading.Event) -> None:
    """Read requests from stdin until it ends; end of input stops the host too."""
    for raw in sys.stdin:
        line = raw.strip()
        if line:
            print(service.handle(line), flush=True)
    stop.set()


def main() -> int:
    """Start, serve until a signal (or end of input), stop; 0 when the stop was clean."""
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    with contextlib.ExitStack() as cleanup:
        if len(sys.argv) > 1:
            data_dir = Path(sys.argv[1])
        else:
            data_dir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="otpmem-")))
        otpmem.start(data_dir=data_dir)
        service = Service()
        threading.Thread(target=serve_stdin, args=(service, stop), daemon=True).start()
        print(f"ready: serving requests, data in {data_dir}", flush=True)
        stop.wait()  # no polling: a signal handler (or the end of input) sets it
        print(f"stopping ({received[0] if received else 'end of input'})", flush=True)
        service.close()
        try:
            otpmem.stop()
        except otpmem.AppError as exc:  # the tree gave up earlier (too many crashes)
            print(f"otpmem was not running: {exc}", flush=True)
            return 1
    print(f"stopped cleanly after {service.served} request(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
