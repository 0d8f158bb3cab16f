"""A simulation's own records stay flat: its model keeps no call, its timeline a bounded
number of slots, however many turns it runs (structure, not RSS: RSS is the soak
benchmark's, ``benchmarks/bench_soak.py``)."""

from __future__ import annotations

from collections.abc import Sized
from pathlib import Path
from typing import Any

import pytest

from otpmem.llm import ScriptedModel
from otpmem.simulate import Simulation, SimulationReport
from otpmem.simulate import _simulation as simulation_module
from otpmem.simulate._timeline import MAX_SLOTS

AGENTS = 4
K = 6


def sizes(model: ScriptedModel) -> dict[str, int]:
    """The length of every container the model holds."""
    return {name: len(value) for name, value in vars(model).items() if isinstance(value, Sized)}


def run(
    tmp_path: Path, turns: int, made: list[ScriptedModel]
) -> tuple[Simulation, SimulationReport]:
    """A run under chaos with the simulation's own default model."""
    simulation = Simulation(
        agents=AGENTS, turns=turns, data_dir=tmp_path / f"run-{turns}", chaos=0.2, seed=3
    )
    report = simulation.run()
    assert report.ok, report.lines()
    assert len(made) == 1, "the simulation made one model"
    return simulation, report


def test_the_simulations_model_and_timeline_do_not_grow_with_its_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[ScriptedModel] = []

    class Counted(ScriptedModel):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(simulation_module, "ScriptedModel", Counted)
    held: list[dict[str, int]] = []
    for turns in (K, 4 * K):
        simulation, report = run(tmp_path, turns, made)
        model = made.pop()
        assert model.call_count >= AGENTS * turns  # every turn asked it at least once
        assert not hasattr(model, "calls"), "the simulation's model records its calls"
        held.append(sizes(model))
        timeline = simulation.timeline
        assert timeline.slots <= MAX_SLOTS
        buckets = timeline.buckets(end=report.seconds)
        assert sum(b.turns for b in buckets) == report.turns_this_run == AGENTS * turns
        assert sum(sum(b.faults.values()) for b in buckets) == sum(report.faults.values())
        assert sum(b.restarts for b in buckets) == report.restarts
    assert held[0] == held[1], f"the model's containers grew: {held[0]} -> {held[1]}"
