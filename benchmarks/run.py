"""Run the otpmem benchmarks: ``python benchmarks/run.py [--quick] [module ...]``.

Every benchmark module listed in ``MODULES`` exposes ``main(quick: bool) -> list[str]`` and
returns one line per measurement. Each line carries the figure against a baseline measured in
the same run (a ratio, paired per repeat), because this shared 2-core box swings up to 2x
between periods: absolute numbers are printed for context only (see
/work/shared/reference/perf_anchors.md). To add a benchmark, drop ``bench_<name>.py`` next to
this file with such a ``main`` and add ``<name>`` to ``MODULES``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path

# Run as a script, the benchmarks directory is sys.path[0]; imported (e.g. by a test), it is not.
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODULES: list[str] = [
    "runtime",
    "stores",
    "bigdb",
    "durable",
    "restart",
    "memory",
    "context",
    "summary_turns",
    "agents",
    "telemetry",
    "scale",
    "activation",
    "recall",
    "postgres",
    "longterm",
    "blocks",
    "scopes",
    "checkpoint",
    "nodes",
    "soak",
]
"""Benchmark modules in run order: ``<name>`` is ``benchmarks/bench_<name>.py``."""


def _machine_line() -> str:
    """One line that says what the figures were measured on."""
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        pykka_version = metadata.version("pykka")
    except metadata.PackageNotFoundError:
        pykka_version = "?"
    return (
        f"# python {platform.python_version()} | pykka {pykka_version} | "
        f"{os.cpu_count()} cpus | loadavg {load} | switch interval "
        f"{sys.getswitchinterval() * 1000:.0f} ms"
    )


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run (< 20 s)")
    parser.add_argument(
        "modules",
        nargs="*",
        metavar="module",
        help=f"modules to run (default: all of {', '.join(MODULES)})",
    )
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    return args


def _leftovers() -> str | None:
    """Describe otpmem processes or pykka actors a benchmark left running, if any."""
    import pykka

    from otpmem.actors import live_processes

    procs, actors = len(live_processes()), len(pykka.ActorRegistry.get_all())
    if procs or actors:
        return f"# WARNING: left running: {procs} otpmem processes, {actors} pykka actors"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmark modules and print their result lines."""
    args = _parse(argv)
    selected = args.modules or MODULES
    print(_machine_line(), "| quick" if args.quick else "", flush=True)
    started = time.perf_counter()
    for name in selected:
        module = importlib.import_module(f"bench_{name}")
        print(f"## {name}", flush=True)
        t0 = time.perf_counter()
        for line in module.main(args.quick):
            print(line, flush=True)
        print(f"# {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        warning = _leftovers()
        if warning is not None:
            print(warning, flush=True)
    print(f"# total {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
