"""What otpmem.telemetry costs an agent turn: with OpenTelemetry absent, present with no
provider set, and recording into the SDK.

Each mode runs in a subprocess of its own (absence is an import hook installed before
otpmem is imported, so it cannot share a process): one agent on its own MemoryStore, a
``DefaultProvider`` window of 20, a ``ScriptedModel`` answering "ok" inline, turns from the
calling thread. A turn passes four hooks (the turn, its model call, two store writes). The
modes alternate, rotated, in every repeat; each reports the median per-turn time of its
chunks, and the figures are ratios to the absent mode of the same repeat.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, statistics, sys, time
MODE, TURNS, CHUNKS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if MODE == "absent":
    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(name)
            return None
    sys.meta_path.insert(0, Refuse())
from otpmem import telemetry
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import DefaultProvider
from otpmem.stores import MemoryStore
if MODE == "sdk":
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.use(tracer, MeterProvider(metric_readers=[InMemoryMetricReader()]))
store = MemoryStore.start_link()
model = ScriptedModel(lambda messages, tools: "ok", usage=False, blocks=False)
agent = Agent.start_link(llm=model, memory=DefaultProvider(store, 20))
text = "x" * 160
for _ in range(200):
    agent.run(text)
times = []
for _ in range(CHUNKS):
    started = time.perf_counter()
    for _ in range(TURNS):
        agent.run(text)
    times.append((time.perf_counter() - started) / TURNS * 1e6)
    if MODE == "sdk":
        spans.clear()
agent.stop()
store.stop()
print(json.dumps([telemetry.ENABLED, statistics.median(times)]))
"""

MODES = ("absent", "no provider", "sdk")


def run_mode(mode: str, turns: int, chunks: int) -> float:
    """The median per-turn time (us) of ``mode``, from a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, mode.split()[0], str(turns), str(chunks)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    enabled, per_turn = json.loads(child.stdout.splitlines()[-1])
    assert enabled is (mode != "absent"), (mode, enabled)
    return float(per_turn)


def main(quick: bool) -> list[str]:
    """Rows: per-turn time in each mode, and its ratio to the absent mode."""
    repeats, turns, chunks = (3, 500, 5) if quick else (5, 2000, 7)
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    for repeat in range(repeats):
        order = MODES[repeat % 3 :] + MODES[: repeat % 3]
        for mode in order:
            results[mode].append(run_mode(mode, turns, chunks))
    absent = results["absent"]
    rows = []
    for mode in MODES:
        median = statistics.median(results[mode])
        ratios = [value / base for value, base in zip(results[mode], absent, strict=True)]
        rows.append(
            f"agent turn, OpenTelemetry {mode}: {median:.1f} us "
            f"(x{statistics.median(ratios):.3f} the absent mode, same repeats)"
        )
    return rows


if __name__ == "__main__":
    for line in main(quick="--quick" in sys.argv):
        print(line)
