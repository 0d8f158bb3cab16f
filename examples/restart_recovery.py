"""Restart recovery: a process killed with SIGKILL mid-run loses no acknowledged message.

Run it twice with the same directory::

    python examples/restart_recovery.py DIR   # writes, then kills itself with SIGKILL
    python examples/restart_recovery.py DIR   # finds the earlier run and verifies it

The first run starts otpmem with ``data_dir=DIR`` (the default store in LevelDB, fsynced
writes) and has three agents talk in parallel. Each turn an agent acknowledges is written
to a ledger of this program's own (``DIR/acknowledged.jsonl``, fsynced per line), which
the store never sees. After some turns the process sends itself SIGKILL while the agents
are still writing: no shutdown, no flush, no ``terminate``.

The second run sees the ledger, starts otpmem on the same directory and reads every
conversation back: each acknowledged message must be there, in order. It prints
``recovered: N acknowledged messages, 0 lost`` and exits 0, or 1 if anything is missing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import otpmem
from otpmem.agents import AgentHandle
from otpmem.llm import ScriptedModel, tool_call
from otpmem.messages import Conv

AGENTS = 3
KILL_AFTER = 30  # acknowledged turns, across the agents
USER = "recovery"
LEDGER = "acknowledged.jsonl"


def double(n: int) -> int:
    """Twice n."""
    return 2 * n


def model(messages: list[dict[str, Any]], tools: Any) -> Any:
    """Even notes get a tool call first, so a turn writes two to four messages."""
    last = messages[-1]
    if last["role"] == "tool":
        return f"doubled: {last['content']}"
    n = int(str(last["content"]).rsplit(" ", 1)[-1])
    if n % 2 == 0:
        return {"content": None, "tool_calls": [tool_call(f"d-{n}", "double", f'{{"n": {n}}}')]}
    return f"noted {n}"


def key(message: Any) -> list[Any]:
    """A message as the ledger records it."""
    return [message["role"], message.get("content")]


class Ledger:
    """One fsynced JSON line per acknowledged turn."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")
        self.lock = threading.Lock()
        self.turns = 0

    def record(self, conversation: str, messages: list[Any]) -> int:
        """Write one acknowledged turn durably; the number of turns recorded so far."""
        line = json.dumps({"conversation": conversation, "messages": [key(m) for m in messages]})
        with self.lock:
            self.file.write(line + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())
            self.turns += 1
            return self.turns


def write_and_die(data_dir: Path) -> None:
    """The first run: agents write, every acknowledged turn goes to the ledger, then -9."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(data_dir / LEDGER)
    otpmem.start(data_dir=data_dir)  # never stopped: this process dies by SIGKILL
    agents = [
        otpmem.start_agent(
            llm=ScriptedModel(model),
            tools=[double],
            user_id=USER,
            conversation_id=f"notes-{i}",
        )
        for i in range(AGENTS)
    ]

    def talk(i: int, agent: AgentHandle) -> None:
        for n in range(1_000):
            turn = agent.run(f"agent {i} note {n}")
            if ledger.record(f"notes-{i}", turn.messages) >= KILL_AFTER:
                print(f"{KILL_AFTER} acknowledged turns; SIGKILL to myself now", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

    print(f"first run: writing to {data_dir}", flush=True)
    threads = [threading.Thread(target=talk, args=(i, a)) for i, a in enumerate(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sys.exit("not reached: the process should have been killed")


def verify(data_dir: Path) -> int:
    """The second run: every acknowledged message must be back, in order."""
    entries = []
    for line in (data_dir / LEDGER).read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line torn by the kill was never complete: it acknowledged nothing
    acknowledged = lost = stored_total = 0
    with otpmem.running(data_dir=data_dir):
        store = otpmem.default_store()
        for i in range(AGENTS):
            conversation = f"notes-{i}"
            stored = [key(m) for m in store.get(Conv(USER, conversation))]
            position = 0
            for entry in (e for e in entries if e["conversation"] == conversation):
                for expected in entry["messages"]:
                    acknowledged += 1
                    try:
                        position = stored.index(expected, position) + 1
                    except ValueError:
                        lost += 1
                        print(f"lost from {conversation}: {expected}")
            print(f"{conversation}: {len(stored)} messages stored")
            stored_total += len(stored)
    print(f"recovered: {acknowledged - lost} acknowledged messages, {lost} lost")
    # The other agents were mid-turn at the SIGKILL: what those turns stored is there, but
    # was never acknowledged (nor promised), and no one is left to run them again.
    print(f"and {stored_total - acknowledged + lost} stored by turns the kill cut short")
    if acknowledged == 0:
        print("the earlier run acknowledged nothing: nothing to verify")
        return 1
    return 0 if lost == 0 else 1


def main() -> int:
    """Write and die, or verify if an earlier run left its ledger in DIR."""
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    data_dir = Path(sys.argv[1])
    if (data_dir / LEDGER).exists():
        return verify(data_dir)
    write_and_die(data_dir)
    return 1


if __name__ == "__main__":
    sys.exit(main())
