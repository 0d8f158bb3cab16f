"""Where the nodes of a multi-node simulation run: a ``Placement`` starts each node as an OS
process and can SIGKILL it; nothing else. Ownership and failover are decided through the
database (leases), never by the placement.

- ``LocalPlacement`` (the default): each node a subprocess of the coordinator,
  ``python -m otpmem.simulate._node``, its config on stdin, its stderr in ``nodes/NODE.log``.
  End of its stdin (the coordinator died) SIGKILLs it: no node outlives its run.
- ``RayPlacement`` (``--cluster ray``): each node a Ray actor process, on the local Ray it
  starts, or the cluster ``RAY_ADDRESS`` names (``--data`` then must be a directory every
  machine sees: the nodes write their ledgers there). Ray places and kills the processes;
  otpmem never manages a cluster itself.

Each placement hands back a ``NodeProcess``: ``poll()`` (None while it runs, else its exit
status, negative for a signal), ``kill()`` (SIGKILL of the whole process), ``stop()`` (end
after the turns in flight), ``close()``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Protocol

from ._files import RunRefused
from ._node import run_node
from ._node_config import NodeConfig

KILLED = -signal.SIGKILL
RAY_TIMEOUT = 60.0
REAP_TIMEOUT = 60.0


class NodeProcess(Protocol):
    """A running node, as its placement sees it."""

    node_id: str

    def poll(self) -> int | None:
        """None while the node runs; its exit status once it ended (-9: killed)."""

    def kill(self) -> None:
        """SIGKILL the whole node process."""

    def stop(self) -> None:
        """Ask the node to end after the turns in flight."""

    def close(self) -> None:
        """Release what the placement holds for it (killing it if it still runs)."""


class Placement(Protocol):
    """Starts nodes as processes."""

    name: str

    def start_node(self, config: NodeConfig) -> NodeProcess:
        """Start one node with ``config``."""

    def close(self) -> None:
        """Let go of every resource (a local Ray it started is shut down)."""


class LocalNode:
    """A node as a subprocess of this one."""

    def __init__(self, config: NodeConfig) -> None:
        self.node_id = config.node_id
        log_path = Path(config.data_dir) / "nodes" / f"{config.node_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self._log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        # The node imports the otpmem this process runs, whatever the working directory
        # holds (python -m puts it first on the path): it starts in the run's directory,
        # with this otpmem's parent first on its path.
        package_root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "otpmem.simulate._node"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            text=True,
            cwd=config.data_dir,
            env={**os.environ, "PYTHONPATH": path},
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(config.dumps() + "\n")
        self._proc.stdin.flush()

    @property
    def pid(self) -> int:
        """The node's OS process id."""
        return self._proc.pid

    def poll(self) -> int | None:
        """None while it runs, else its exit status."""
        return self._proc.poll()

    def kill(self) -> None:
        """SIGKILL it."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)

    def stop(self) -> None:
        """``stop`` on its stdin."""
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self._proc.stdin.write("stop\n")
            self._proc.stdin.flush()

    def close(self) -> None:
        """Kill it if it still runs, reap it, close its pipe and log."""
        self.kill()
        try:
            self._proc.wait(timeout=REAP_TIMEOUT)
        finally:
            assert self._proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, OSError):
                self._proc.stdin.close()
            self._log.close()

    def log_tail(self, lines: int = 5) -> str:
        """The last lines the node wrote on stderr."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


class LocalPlacement:
    """Every node a subprocess of the coordinator."""

    name = "local"

    def start_node(self, config: NodeConfig) -> LocalNode:
        """Start a node subprocess."""
        return LocalNode(config)

    def close(self) -> None:
        """Nothing to release: each node is closed on its own."""


class _RayNode:
    """The Ray actor: one node per actor process."""

    def __init__(self) -> None:
        self._stop = threading.Event()

    def run(self, config: str) -> int:
        """Run the node to its end; its exit status."""
        return run_node(NodeConfig.loads(config), self._stop)

    def stop(self) -> None:
        """End after the turns in flight."""
        self._stop.set()

    def where(self) -> tuple[str, int, str]:
        """The actor process's host, id, and the otpmem it imported."""
        import otpmem

        return socket.gethostname(), os.getpid(), str(otpmem.__file__)


class RayNode:
    """A node as a Ray actor process."""

    def __init__(self, ray: Any, actor_class: Any, config: NodeConfig) -> None:
        self.node_id = config.node_id
        self._ray = ray
        self._actor = actor_class.remote()
        host, pid, package = ray.get(self._actor.where.remote(), timeout=RAY_TIMEOUT)
        self.pid = int(pid)
        self._local = host == socket.gethostname()
        import otpmem

        if self._local and package != str(otpmem.__file__):
            self.close()
            raise RunRefused(
                f"Ray's worker imported otpmem from {package}, not {otpmem.__file__}: start "
                "Ray from a directory without another otpmem in it"
            )
        self._done = self._actor.run.remote(config.dumps())
        self._status: int | None = None

    def poll(self) -> int | None:
        """None while the actor runs its node, else the node's exit status (-9 if killed)."""
        if self._status is not None:
            return self._status
        ready, _ = self._ray.wait([self._done], timeout=0)
        if not ready:
            return None
        try:
            self._status = int(self._ray.get(self._done, timeout=RAY_TIMEOUT))
        except Exception:  # RayActorError and kin: the actor's process died under it
            self._status = KILLED
        return self._status

    def kill(self) -> None:
        """SIGKILL the actor's process here, or have Ray kill it on another machine (Ray
        reports the actor dead, and does not restart it)."""
        if self.poll() is not None:
            return
        if self._local:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # the node's own process, as a crash would
        else:
            self._ray.kill(self._actor, no_restart=True)

    def stop(self) -> None:
        """Ask the actor to end its node after the turns in flight."""
        with contextlib.suppress(Exception):  # a dead actor: nothing to stop
            self._actor.stop.remote()

    def close(self) -> None:
        """Kill the actor for good."""
        with contextlib.suppress(Exception):
            self._ray.kill(self._actor, no_restart=True)


def _init_ray(ray: Any, timeout: float = RAY_TIMEOUT) -> None:
    """``ray.init()``, or RunRefused naming Ray's error, or its silence past ``timeout``
    (Ray retries an unreachable RAY_ADDRESS for minutes)."""
    address = os.environ.get("RAY_ADDRESS")
    where = f"the Ray cluster at RAY_ADDRESS={address}" if address else "a local Ray"
    failed: list[BaseException] = []

    def init() -> None:
        try:
            if address:  # a cluster's own settings are its own
                ray.init(log_to_driver=False, logging_level="ERROR")
            else:
                ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except Exception as exc:  # ConnectionError, RuntimeError, ...: Ray's own words
            failed.append(exc)

    thread = threading.Thread(target=init, name="ray-init", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise RunRefused(f"--cluster ray: {where} did not answer within {timeout:g} s")
    if failed:
        raise RunRefused(f"--cluster ray: cannot start or reach {where}: {failed[0]}")


class RayPlacement:
    """Every node a Ray actor process; ``ray.init()`` joins ``RAY_ADDRESS`` or starts Ray."""

    name = "ray"

    def __init__(self) -> None:
        try:
            # Any: the extra is optional, and otpmem only calls init, remote, get, wait, kill.
            ray: Any = importlib.import_module("ray")
        except ImportError:
            raise RunRefused("--cluster ray needs Ray: pip install 'otpmem[cluster]'") from None
        self._ray = ray
        self._owns = not ray.is_initialized()
        if self._owns:
            _init_ray(ray)
        # num_cpus=0: a node is placed even where the CPUs are taken (it mostly waits on
        # PostgreSQL); max_concurrency=2: stop() runs while run() does.
        self._actor_class = ray.remote(num_cpus=0, max_concurrency=2, max_restarts=0)(_RayNode)

    def start_node(self, config: NodeConfig) -> RayNode:
        """Start a node as a new actor."""
        return RayNode(self._ray, self._actor_class, config)

    def close(self) -> None:
        """Shut down the Ray this placement started (not one it joined)."""
        if self._owns:
            self._ray.shutdown()


def placement(name: str) -> Placement:
    """The placement called ``name``: ``local`` or ``ray``."""
    if name == "local":
        return LocalPlacement()
    if name == "ray":
        return RayPlacement()
    raise RunRefused(f"no placement called {name!r}: choose local or ray")


__all__ = [
    "LocalPlacement",
    "NodeProcess",
    "Placement",
    "RayPlacement",
    "placement",
]
