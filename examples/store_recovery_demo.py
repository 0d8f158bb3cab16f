"""Recovery after a crash, twice: a supervised MemoryStore and a LevelDBStore killed with -9.

Run with ``make demo`` (after the supervision demo) or ``python examples/store_recovery_demo.py``.

1. A MemoryStore under its supervisor is crashed while four writers add to it. Its table
   heir keeps the table; the restarted store adopts it; every acknowledged add is there.
2. A child process appends to a LevelDBStore with ``sync=True`` and is killed with SIGKILL
   mid-stream. Reopening the directory shows every acknowledged batch, none half-written.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from otpmem.actors import NoProcess, ServerExited, faults
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import Supervisor

WRITER = """
import sys
from otpmem.stores import LevelDBStore
store = LevelDBStore.start_link(sys.argv[1])
for i in range(100000):
    store.add("log", [{"role": "user", "content": f"batch {i} part {p}"} for p in range(3)])
    print(i, flush=True)
"""


def memory_scene() -> None:
    """Crash a supervised MemoryStore under load; count what survived."""
    print("1. MemoryStore under a supervisor, crashed 20 times while 4 writers add")
    sup = Supervisor.start_link([MemoryStore.child_spec("memory", intensity=100)])
    store = MemoryStore.named("memory")
    stop = threading.Event()
    acknowledged = [0] * 4

    def writer(w: int) -> None:
        while not stop.is_set():
            try:
                store.add(
                    Conv(f"user{w}", "chat"), [{"role": "user", "content": str(acknowledged[w])}]
                )
                acknowledged[w] += 1
            except (NoProcess, ServerExited):
                stop.wait(0.001)  # restarting; the same message is sent again

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    pair = sup.child("memory")
    for _ in range(20):
        with contextlib.suppress(NoProcess):
            faults.crash(store, RuntimeError("injected"))
        if pair is not None:
            pair.sync()
    stop.set()
    for thread in threads:
        thread.join(5.0)
    for w in range(4):
        kept = {m["content"] for m in store.get(Conv(f"user{w}", "chat"))}
        lost = [i for i in range(acknowledged[w]) if str(i) not in kept]
        print(f"  user{w}: {acknowledged[w]} acknowledged adds, {len(lost)} lost")
    sup.stop()


def leveldb_scene() -> None:
    """SIGKILL a process writing to LevelDB; reopen and check every acknowledged batch."""
    print("2. LevelDBStore(sync=True) in a child process, killed with SIGKILL mid-stream")
    path = tempfile.mkdtemp(prefix="otpmem-demo-", dir=os.getcwd())
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, path], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    last_ack = -1
    deadline = time.monotonic() + 30
    while last_ack < 200 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        last_ack = int(line)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    store = LevelDBStore.start_link(path)
    messages = store.get("log")
    batches = len(messages) // 3
    print(
        f"  acknowledged batches: {last_ack + 1}; on disk after reopening: {batches} "
        f"({len(messages) % 3} stray messages: batches are all or nothing)"
    )
    print(f"  every acknowledged batch present: {batches >= last_ack + 1}")
    store.stop()
    shutil.rmtree(path)


if __name__ == "__main__":
    memory_scene()
    leveldb_scene()
