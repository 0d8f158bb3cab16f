"""What the benchmark modules share: paired-ratio statistics, memory readings, an echo actor,
the rotated-chunk races.

Kept to the few helpers more than one ``bench_*`` module uses; each module keeps its own
contenders and its own result lines.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pykka

from otpmem.actors import runtime_thread

BENCH_DIR = Path(os.environ.get("OTPMEM_BENCH_DIR") or Path(__file__).resolve().parent)
"""Where benchmarks put their databases: ``$OTPMEM_BENCH_DIR``, else this directory, on the
project's disk (not /tmp, which may be tmpfs and would make fsync free)."""


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A new directory under ``BENCH_DIR`` for the block, removed after it."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=BENCH_DIR))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


_LIBC_PATH = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_PATH) if _LIBC_PATH else None
if _LIBC is not None and not hasattr(_LIBC, "malloc_trim"):
    _LIBC = None  # not glibc


class EchoActor(pykka.ThreadingActor):
    """A bare pykka actor that answers every ask with the message."""

    def on_receive(self, message: Any) -> Any:
        """Return the message."""
        return message


# -- statistics -------------------------------------------------------------------------------


def percentile(ascending: Sequence[float], q: float) -> float:
    """Nearest-rank ``q`` percentile (0 < q <= 1) of an ascending sequence."""
    return ascending[max(0, math.ceil(q * len(ascending)) - 1)]


def ratio_summary(ratios: Sequence[float]) -> str:
    """Median and range of paired ratios, as ``1.05x [0.95..1.10]``."""
    return f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}..{max(ratios):.2f}]"


def safe_ratio(a: float, b: float) -> str:
    """``a / b`` as ``1.23x``, or ``n/a`` when ``b`` is not positive (RSS noise)."""
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def verdict(ok: bool) -> str:
    """The goal marker of a result line."""
    return "ok" if ok else "MISSED"


def rotated(items: Sequence[str], by: int) -> list[str]:
    """``items`` rotated left by ``by``, so each repeat starts with another contender."""
    k = by % len(items)
    return [*items[k:], *items[:k]]


def memory_kib() -> tuple[int, int]:
    """This process's (VmRSS, VmSize) in KiB after a GC and a malloc_trim, from /proc."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)  # hand freed heap back, so the previous round does not skew RSS
    fields: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmSize"):
                fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmSize"]


def join_new_threads(before: set[threading.Thread]) -> None:
    """Wait until every thread started since ``before`` has ended (untimed housekeeping).

    The runtime's own threads (schedulers, blocking pool) live as long as the runtime.
    """
    for thread in threading.enumerate():
        if thread in before or thread is threading.current_thread() or runtime_thread(thread):
            continue
        thread.join(30.0)


# -- timing ---------------------------------------------------------------------------------


def time_chunk(roundtrip: Callable[[int], Any], n: int, latencies: list[int]) -> int:
    """Run ``roundtrip`` n times, appending each latency (ns) to ``latencies``; return total ns."""
    clock = time.perf_counter_ns
    append = latencies.append
    started = clock()
    for i in range(n):
        t0 = clock()
        roundtrip(i)
        append(clock() - t0)
    return clock() - started


def time_loop(read: Callable[[], Any], n: int) -> int:
    """Call ``read`` n times; return the total ns (no per-call clock: reads take ~1 us)."""
    clock = time.perf_counter_ns
    started = clock()
    for _ in range(n):
        read()
    return clock() - started


def latency_race(
    contenders: Mapping[str, Callable[[int], Any]], n: int, chunk: int, repeats: int
) -> dict[str, list[tuple[float, float, float]]]:
    """Per repeat and contender: (p50 us, p99 us, calls per second) of ``n`` calls, timed one
    by one, in ``n // chunk`` chunks of ``chunk`` calls, order rotated per chunk (after one
    warm-up chunk each). The box's swings (up to 5x within seconds) hit all contenders alike."""
    names = list(contenders)
    for roundtrip in contenders.values():
        time_chunk(roundtrip, chunk, [])  # warm-up
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    for r in range(repeats):
        latencies: dict[str, list[int]] = {name: [] for name in names}
        total_ns = dict.fromkeys(names, 0)
        for k in range(n // chunk):
            for name in rotated(names, r + k):
                total_ns[name] += time_chunk(contenders[name], chunk, latencies[name])
        for name in names:
            lat = sorted(latencies[name])
            rate = n * 1e9 / total_ns[name]
            runs[name].append((percentile(lat, 0.5) / 1e3, percentile(lat, 0.99) / 1e3, rate))
    return runs


def race(
    contenders: Mapping[str, Callable[[], Any]],
    calls: Mapping[str, int],
    chunks: int,
    repeats: int,
    warmup: Mapping[str, int] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of every contender, per repeat: ``chunks`` rotated chunks of
    ``calls[name]`` calls each, timed as a whole (after a warm-up of ``warmup[name]`` calls,
    by default a fifth of a chunk)."""
    names = list(contenders)
    for name in names:
        time_loop(contenders[name], warmup[name] if warmup else max(1, calls[name] // 5))
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        total_ns = dict.fromkeys(names, 0)
        for k in range(chunks):
            for name in rotated(names, r + k):
                total_ns[name] += time_loop(contenders[name], calls[name])
        for name in names:
            times[name].append(total_ns[name] / (chunks * calls[name]) / 1e9)
    return times


# -- caller threads -------------------------------------------------------------------------


def drive(groups: Sequence[Sequence[Callable[[], Any]]], turns_per_thread: int) -> float:
    """Seconds for one thread per group to run ``turns_per_thread`` of its turns, in a cycle."""
    barrier = threading.Barrier(len(groups) + 1)
    errors: list[BaseException] = []

    def work(turns: Sequence[Callable[[], Any]]) -> None:
        """Cycle over ``turns``, one call each in turn."""
        barrier.wait()
        try:
            n = len(turns)
            for i in range(turns_per_thread):
                turns[i % n]()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(g,), daemon=True) for g in groups]
    for thread in threads:
        thread.start()
    barrier.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def split(turns: Sequence[Callable[[], Any]], threads: int) -> list[list[Callable[[], Any]]]:
    """``turns`` dealt round-robin over ``threads`` caller threads."""
    return [list(turns[t::threads]) for t in range(min(threads, len(turns)))]
