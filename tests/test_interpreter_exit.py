"""A program that starts a tree and returns exits promptly, running terminate callbacks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    from otpmem.actors import GenServer
    from otpmem.supervisors import ChildSpec, Supervisor

    class Noisy(GenServer):
        def init(self, tag):
            self.tag = tag
        def terminate(self, reason):
            print("terminate", self.tag, reason, flush=True)

    def spec(tag):
        return ChildSpec(tag, start=lambda: Noisy.start_link(tag))

    sub = ChildSpec("sub", start=lambda: Supervisor.start_link([spec("c")]), type="supervisor")
    Supervisor.start([spec("a"), spec("b"), sub])
    print("main returns", flush=True)
    """
)


def test_program_exits_and_terminates_children_newest_first() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "main returns",
        "terminate c shutdown",
        "terminate b shutdown",
        "terminate a shutdown",
    ]


def test_stop_all_goes_through_the_exit_path() -> None:
    program = textwrap.dedent(
        """
        from otpmem.actors import GenServer, stop_all

        class Noisy(GenServer):
            def terminate(self, reason):
                print("terminate", reason, flush=True)

        h = Noisy.start(name="n")
        stop_all()
        print("alive after stop_all:", h.alive, flush=True)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["terminate shutdown", "alive after stop_all: False"]
