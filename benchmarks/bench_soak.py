"""Soak: a simulation under chaos for minutes on end, its memory and its counts sampled.

``python benchmarks/bench_soak.py [--minutes 10] [--every 5]``: the default simulation (20
agents, 8 workers, the scripted model, LevelDB under a scratch directory) at chaos 0.2, for
``--minutes``; every ``--every`` s it samples RSS (after a collection and a malloc_trim),
OS threads, greenlet objects, open file descriptors, and the objects the GC tracks (to tell
a leak of Python objects from native memory). After the warm-up (the first quarter) the
run must hold still: RSS grows <= 1 KiB per turn and each count's trend adds less than one
over the run (least-squares slopes over the samples, so that transients, a store's
committer thread overlapping the next one's, average out). The baselines are the same
run's: its warm-up's growth, and its throughput early on against late (a leak slows a run
before it fills memory). Under ``run.py`` (``make bench``) it runs 3 minutes, not 10, since
the other modules together take ~11 (``--quick``: half a minute); the lines say how long
it ran.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from _common import memory_kib, scratch, verdict
from greenlet import greenlet

from otpmem.simulate import Simulation, SimulationReport

RUN_PY_MINUTES = 3.0
QUICK_MINUTES = 0.5
CHAOS = 0.2
AGENTS = 20
WORKERS = 8  # the simulation's default
MESSAGES_PER_TURN = 4  # the most a scripted turn stores: question, tool call, result, answer
GOAL_KIB_PER_TURN = 1.0
WARMUP_SHARE = 0.25
CEILING_TURNS_PER_S = 600
"""Twice what this box does: turns are planned for the run to outlast its minutes here (a
run plans its faults for every planned turn up front, so it is not planned endless)."""


@dataclass(frozen=True)
class Sample:
    """One reading: when, after how many turns, and what the process held."""

    seconds: float
    turns: int
    rss_kib: int
    threads: int
    greenlets: int
    fds: int
    objects: int


class Turns:
    """The turns acknowledged so far, counted from the simulation's progress callback."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, n: int) -> None:
        with self._lock:
            self.count += n


def os_threads() -> int:
    """Threads of this process, native ones included (LevelDB's, the blocking pool's)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return threading.active_count()


def sample(started: float, turns: Turns) -> Sample:
    """Read RSS (``memory_kib`` collects first), threads, greenlets and descriptors."""
    rss, _ = memory_kib()
    objects = gc.get_objects()
    alive = sum(1 for o in objects if isinstance(o, greenlet))
    fds = len(os.listdir("/proc/self/fd"))
    seconds = time.monotonic() - started
    return Sample(seconds, turns.count, rss, os_threads(), alive, fds, len(objects))


def trend(samples: list[Sample], field: str) -> float:
    """How much ``field`` grows per turn: the least-squares slope of it over turns."""
    if len(samples) < 2 or samples[-1].turns == samples[0].turns:
        return 0.0
    turns = [s.turns for s in samples]
    return statistics.linear_regression(turns, [getattr(s, field) for s in samples]).slope


def rate(samples: list[Sample]) -> float:
    """Turns per second between the first and the last of ``samples``."""
    seconds = samples[-1].seconds - samples[0].seconds
    return (samples[-1].turns - samples[0].turns) / seconds if seconds > 0 else 0.0


def run_soak(minutes: float, every: float, root: Path) -> tuple[list[Sample], SimulationReport]:
    """The simulation on a thread for ``minutes``, sampled every ``every`` s from here."""
    turns = Turns()
    simulation = Simulation(
        agents=AGENTS,
        turns=math.ceil(minutes * 60 * CEILING_TURNS_PER_S / AGENTS),
        data_dir=root / "run",
        chaos=CHAOS,
        seed=1,
        workers=WORKERS,
        progress=turns,
    )
    outcome: list[SimulationReport | BaseException] = []

    def drive() -> None:
        try:
            outcome.append(simulation.run())
        except BaseException as exc:  # reported by the sampling thread
            outcome.append(exc)

    runner = threading.Thread(target=drive, name="soak-simulation")
    started = time.monotonic()
    runner.start()
    samples = [sample(started, turns)]
    deadline = started + minutes * 60
    while time.monotonic() < deadline and runner.is_alive():
        runner.join(min(every, max(0.0, deadline - time.monotonic())))
        samples.append(sample(started, turns))
    simulation.stop()  # the turns in flight finish; the audit then reads every conversation
    runner.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return samples, result


def report_lines(samples: list[Sample], report: SimulationReport) -> list[str]:
    """The soak's result lines: the run, RSS growth per turn, the counts, the throughput."""
    warm_until = samples[-1].seconds * WARMUP_SHARE
    warm = [s for s in samples if s.seconds <= warm_until]
    after = [s for s in samples if s.seconds >= warm_until]
    growth, warm_growth = trend(after, "rss_kib"), trend(warm, "rss_kib")
    span = after[-1].turns - after[0].turns
    faults = sum(report.faults.values())
    in_flight = WORKERS * MESSAGES_PER_TURN
    lines = [
        f"soak {samples[-1].seconds / 60:.1f} min at chaos {CHAOS} ({AGENTS} agents, the "
        f"default simulation{'' if report.interrupted else '; every planned turn done'}): "
        f"{report.turns_this_run:,} turns, {faults:,} faults, {report.restarts:,} restarts; "
        f"lost {report.lost}, extra {report.duplicated} (goal: none lost; extra only from the "
        f"turns in flight at the stop, stored in part and never acknowledged) -> "
        f"{verdict(report.lost == 0 and report.duplicated <= in_flight and not report.errors)}",
        f"RSS after warm-up ({warm_until:.0f} s, {after[0].turns:,} turns): "
        f"{growth:+.3f} KiB/turn over {span:,} turns "
        f"({len(after)} samples; goal <= {GOAL_KIB_PER_TURN:g} KiB/turn) -> "
        f"{verdict(growth <= GOAL_KIB_PER_TURN)} | warm-up {warm_growth:+.3f} KiB/turn | "
        f"{after[0].rss_kib / 1024:.1f} -> {after[-1].rss_kib / 1024:.1f} MiB | objects the "
        f"GC tracks {trend(after, 'objects') * 1000:+.1f} per 1,000 turns",
    ]
    counts = []
    flat = True
    for field in ("threads", "greenlets", "fds"):
        # Transients (a store's committer thread while the next one starts) average out
        # of a trend; a leak adds up in it.
        rise = trend(after, field) * span
        flat &= rise < 1.0
        counts.append(
            f"{field} {getattr(after[0], field)} -> {getattr(after[-1], field)} "
            f"(trend {rise:+.2f}, range {min(getattr(s, field) for s in after)}.."
            f"{max(getattr(s, field) for s in after)})"
        )
    lines.append(
        f"counts after warm-up, trend over its {span:,} turns (goal < 1 each): "
        + ", ".join(counts)
        + f" -> {'flat' if flat else 'CLIMBING'} {verdict(flat)}"
    )
    quarter = max(2, len(after) // 4)
    early, late = rate(after[:quarter]), rate(after[-quarter:])
    ratio = f"{late / early:.2f}x" if early > 0 else "n/a"
    lines.append(
        f"throughput after warm-up, last quarter / first: {ratio} "
        f"({late:.1f} / {early:.1f} turns/s)"
    )
    return lines


def soak(minutes: float, every: float = 5.0) -> list[str]:
    """Run the soak for ``minutes`` in a scratch directory; its result lines."""
    with scratch("bench-soak-") as root:
        samples, report = run_soak(minutes, every, root)
    return report_lines(samples, report)


def main(quick: bool) -> list[str]:
    """The soak as ``run.py`` runs it: 3 minutes (``--quick``: half a minute)."""
    return soak(QUICK_MINUTES if quick else RUN_PY_MINUTES)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    args = parser.parse_args()
    if args.minutes <= 0 or args.every <= 0:
        parser.error("--minutes and --every must be > 0")
    for line in soak(args.minutes, args.every):
        print(line, flush=True)
