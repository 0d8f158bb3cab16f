"""Two host programs share conversations through PostgreSQL, each with its own store.

    python examples/shared_postgres.py            # an embedded PostgreSQL, two programs
    python examples/shared_postgres.py DSN        # your server, e.g. postgresql://u@db/app

The parent starts a PostgreSQL of its own (pgserver: PostgreSQL 16 from a wheel) unless
given a DSN, then runs two child programs at once. Each child is a separate OS process
with its own otpmem store on the same schema, and both write the same conversations of
user "ann", turn after turn, each turn keyed (so a retry would be stored once). PostgreSQL
makes them take turns per conversation: the parent reads every conversation back and
checks that no turn was split, none lost, none stored twice, and that each program's turns
kept their order. It prints ``2 programs, 2 conversations, 120 turns: 0 split, 0 lost, 0
twice`` and exits 0.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile

from otpmem.messages import Conv
from otpmem.stores.postgres import PostgresStore, embedded_dsn

TURNS = 30
CONVERSATIONS = [Conv("ann", "support"), Conv("ann", "billing")]


def child(dsn: str, name: str) -> None:
    """One host program: its own store, writing both conversations."""
    store = PostgresStore.start_link(dsn, namespace="shared_demo")
    try:
        for turn in range(TURNS):
            for conv in CONVERSATIONS:
                pair = [
                    {"role": "user", "content": f"{name} {turn}: a question"},
                    {"role": "assistant", "content": f"{name} {turn}: an answer"},
                ]
                store.add(conv, pair, idempotency_key=f"{name}:{turn}")
    finally:
        store.stop()


def main() -> int:
    """Run two programs on one PostgreSQL and audit what they wrote."""
    where = None
    if len(sys.argv) > 1:
        dsn = sys.argv[1]
    else:
        where = tempfile.mkdtemp(prefix="otpmem-shared-pg-")
        dsn = embedded_dsn(where)
    store = PostgresStore.start_link(dsn, namespace="shared_demo")
    try:
        for conv in CONVERSATIONS:
            store.clear(conv)
        programs = [
            subprocess.Popen([sys.executable, __file__, "--child", dsn, name])
            for name in ("north", "south")
        ]
        if any(program.wait(timeout=120) != 0 for program in programs):
            print("a program failed")
            return 1
        split = lost = twice = 0
        for conv in CONVERSATIONS:
            stored = [m["content"] for m in store.get(conv)]
            pairs = zip(stored[::2], stored[1::2], strict=True)  # an odd count: a split batch
            turns = [(a.split(":")[0], b.split(":")[0]) for a, b in pairs]
            split += sum(1 for a, b in turns if a != b)
            seen = [a for a, _ in turns]
            for name in ("north", "south"):
                mine = [t for t in seen if t.startswith(name)]
                lost += TURNS - len(set(mine))
                twice += len(mine) - len(set(mine))
                if mine != sorted(set(mine), key=lambda t: int(t.split()[1])):
                    split += 1  # a program's turns out of order
        total = len(CONVERSATIONS) * TURNS * 2
        print(
            f"2 programs, {len(CONVERSATIONS)} conversations, {total} turns: "
            f"{split} split, {lost} lost, {twice} twice"
        )
        return 0 if split == lost == twice == 0 else 1
    finally:
        store.stop()
        if where is not None:
            import pgserver

            pgserver.get_server(where).cleanup()
            shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
