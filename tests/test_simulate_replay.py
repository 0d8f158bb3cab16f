"""Replayable chaos: a seed draws one fault schedule at any number of workers, ``run.json``
keeps it, and ``otpmem simulate --replay RUN`` runs it again with the same faults, restarts
and audit, fault for fault; each fault costs exactly one restart, whatever the interleaving;
a run that cannot be replayed is refused in one line."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otpmem
from otpmem.actors import ServerExited
from otpmem.agents import AgentHandle
from otpmem.cli import main
from otpmem.llm import ScriptedModel
from otpmem.simulate import (
    CRASH_PLAN,
    FAULT_LOG,
    FAULTS,
    PARAMS,
    Chaos,
    Fault,
    FaultLog,
    RunParams,
    Schedule,
    Simulation,
    SimulationReport,
)
from otpmem.supervisors import SupervisorEvent
from tests.cli_support import ledger_turns, simulate_args, tree_state
from tests.cli_support import otpmem as run_otpmem
from tests.support import Trace, run_threads

# A 6 x 6 run at chaos 0.35 with this seed: 14 faults of all four kinds, six of them agent
# kills of other workers' agents, and a crash plan after an agent's last turn (it never
# fires: 13 restarts).
AGENTS, TURNS, CHAOS, SEED = 6, 6, 0.35, 1
# What two runs of one schedule must agree on; retries and seconds follow the interleaving.
AGREED = (
    "faults",
    "restarts",
    "turns_done",
    "messages_acknowledged",
    "messages_stored",
    "lost",
    "duplicated",
    "ok",
)


def expected_restarts(schedule: Schedule, turns: int) -> int:
    """One restart per fault, but none for a crash plan after its agent's last turn."""
    return sum(1 for f in schedule if not (f.kind == CRASH_PLAN and f.turn == turns - 1))


def outcome(report: SimulationReport | dict[str, Any], data: Path) -> dict[str, Any]:
    """What a run of a schedule reproduces: the report's agreed figures, the schedule it
    recorded, and the faults it injected, sorted by their points."""
    figures = report if isinstance(report, dict) else report.as_dict()
    params = RunParams.load(data)
    assert params is not None and params.schedule is not None
    return {
        **{k: figures[k] for k in AGREED},
        "schedule": params.schedule,
        "injected": FaultLog.load(data / FAULT_LOG),
    }


def simulated(data: Path, workers: int) -> SimulationReport:
    """The test's run (6 x 6, chaos 0.35, seed 1) in ``data`` on ``workers`` threads."""
    return Simulation(AGENTS, TURNS, data, chaos=CHAOS, seed=SEED, workers=workers).run()


def test_a_seed_gives_the_same_faults_restarts_and_audit_at_one_worker_and_at_four(
    tmp_path: Path,
) -> None:
    one = outcome(simulated(tmp_path / "one", workers=1), tmp_path / "one")
    four = outcome(simulated(tmp_path / "four", workers=4), tmp_path / "four")

    assert one == four
    schedule = Schedule.draw(SEED, AGENTS, TURNS, CHAOS)
    assert one["schedule"] == schedule
    assert set(schedule.counts()) == set(FAULTS) and len(schedule) == 14
    assert one["injected"] == schedule.to_json()  # every scheduled fault hit its target
    assert one["faults"] == schedule.counts()
    assert one["restarts"] == expected_restarts(schedule, TURNS) == 13
    assert one["ok"] and one["messages_stored"] == one["messages_acknowledged"]


def test_two_replays_at_other_worker_counts_agree_with_the_run_fault_for_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tmp_path / "first"
    args = ["--agents", AGENTS, "--turns", TURNS, "--chaos", CHAOS, "--seed", SEED, "--json"]
    assert main(["simulate", *map(str, args), "--workers", "2", "--data", str(first)]) == 0
    reports = {"first": json.loads(capsys.readouterr().out)}
    for name, workers in (("one", 1), ("four", 4)):
        replay = ["--replay", str(first), "--workers", str(workers), "--json"]
        assert main(["simulate", *replay, "--data", str(tmp_path / name)]) == 0
        reports[name] = json.loads(capsys.readouterr().out)

    runs = {name: outcome(reports[name], tmp_path / name) for name in reports}
    assert runs["one"] == runs["first"] == runs["four"]
    assert len(runs["first"]["injected"]) == 14
    assert reports["one"]["replay_of"] == reports["four"]["replay_of"] == str(first.resolve())
    assert reports["first"]["replay_of"] == ""
    # The replay is a run of its own: its run.json says whose schedule it ran.
    assert json.loads((tmp_path / "one" / PARAMS).read_text())["replay_of"] == str(first.resolve())


def test_a_replay_runs_a_schedule_edited_by_hand_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Cutting faults out of a failing run's schedule is how its failure is narrowed down.
    first = tmp_path / "first"
    simulated(first, workers=2)
    kept = json.loads((first / PARAMS).read_text(encoding="utf-8"))
    kept["schedule"] = [f for f in kept["schedule"] if f["fault"] != "kill_store"]
    assert 0 < len(kept["schedule"]) < 14
    (first / PARAMS).write_text(json.dumps(kept), encoding="utf-8")

    replay = ["simulate", "--replay", str(first), "--workers", "3", "--json"]
    assert main([*replay, "--data", str(tmp_path / "edited")]) == 0

    report = json.loads(capsys.readouterr().out)
    edited = Schedule.from_json(kept["schedule"], AGENTS, TURNS)
    assert report["ok"]
    assert FaultLog.load(tmp_path / "edited" / FAULT_LOG) == kept["schedule"]
    assert report["faults"] == edited.counts() and "kill_store" not in report["faults"]
    assert report["restarts"] == expected_restarts(edited, TURNS)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(-(2**40), 2**40),
    agents=st.integers(1, 12),
    turns=st.integers(1, 12),
    chaos=st.floats(0.0, 1.0),
    more_turns=st.integers(0, 5),
    more_chaos=st.floats(0.0, 1.0),
)
def test_a_schedule_is_a_function_of_the_seed_and_each_point(
    seed: int, agents: int, turns: int, chaos: float, more_turns: int, more_chaos: float
) -> None:
    schedule = Schedule.draw(seed, agents, turns, chaos)

    assert schedule == Schedule.draw(seed, agents, turns, chaos)
    assert Schedule.from_json(json.loads(json.dumps(schedule.to_json())), agents, turns) == schedule
    for fault in schedule:
        assert 0 <= fault.agent < agents and 0 <= fault.turn < turns
        if fault.kind in ("kill_store", "crash_store"):
            assert fault.victim is None and fault.target == "store"
        elif fault.kind == CRASH_PLAN:
            assert fault.victim == fault.agent  # it fires on its own agent's next turn
        else:
            assert fault.victim is not None and 0 <= fault.victim < agents
    # A point's fault does not depend on how many turns the run has, and more chaos only
    # adds faults at other points: each point draws from its own numbers.
    longer = Schedule.draw(seed, agents, turns + more_turns, chaos)
    assert [f for f in longer if f.turn < turns] == schedule.faults
    low, high = sorted((chaos, more_chaos))
    fewer, more = (Schedule.draw(seed, agents, turns, c) for c in (low, high))
    assert set(fewer.faults) <= set(more.faults)


def test_a_fault_costs_one_restart_however_many_workers_inject_at_once(tmp_path: Path) -> None:
    trace = Trace()
    stopping = threading.Event()
    chaos = Chaos(agents=1, stopping=stopping)

    def heard(event: SupervisorEvent) -> None:
        trace(event)
        chaos.tree_changed()

    with otpmem.running(data_dir=tmp_path / "store", listeners=[heard]) as root:
        kinds = ["kill_store", "crash_store"]

        def inject(t: int) -> None:
            for n in range(3):
                chaos.inject(Fault(n, t, kinds[(t + n) % 2]), None)

        # Six threads at once, three faults each: some find the store still restarting
        # after another's fault, and wait for its next incarnation rather than miss.
        assert run_threads(6, inject) == []
        trace.wait_kind("restarted", 18)
        root.sync_tree()  # queued behind any exit still on its way: no restart is missing
        assert len(trace.kinds("restarted")) == 18
        assert otpmem.default_store().alive


def test_a_kill_before_a_planned_crash_fires_does_not_take_the_plan_with_it(
    tmp_path: Path,
) -> None:
    trace = Trace()
    chaos = Chaos(agents=1, stopping=threading.Event())

    def heard(event: SupervisorEvent) -> None:
        trace(event)
        chaos.tree_changed()

    with otpmem.running(listeners=[heard]):
        # Named as a simulation names its agent 0, which is where Chaos looks for it.
        otpmem.start_agent(llm=ScriptedModel(["ok"] * 5), name="otpmem.sim.agent-0")
        agent = AgentHandle.named("otpmem.sim.agent-0")  # whichever incarnation runs
        chaos.inject(Fault(0, 0, CRASH_PLAN, 0), 0)
        chaos.inject(Fault(0, 0, "kill_agent", 0), 0)  # kills the incarnation it was meant for
        trace.wait_kind("restarted", 1)

        with pytest.raises(ServerExited):  # the plan rode on the first call to the next one
            chaos.attempt(0, agent, lambda: agent.run("hi", timeout=10.0))
        trace.wait_kind("restarted", 2)
        assert chaos.attempt(0, agent, lambda: agent.run("hi", timeout=10.0)).content == "ok"
        assert len(trace.kinds("restarted")) == 2


def test_a_resumed_run_keeps_its_schedule_and_injects_the_rest_of_it(tmp_path: Path) -> None:
    data = tmp_path / "run"
    args = simulate_args(data, AGENTS, TURNS, "--chaos", CHAOS, "--seed", SEED, "--no-progress")
    killed = run_otpmem(*args, "--workers", 2, "--kill-self-after", 15)
    assert killed.returncode == -signal.SIGKILL, str(killed)
    kept = (data / PARAMS).read_bytes()
    before = ledger_turns(data)

    resumed = run_otpmem("simulate", "--data", data, "--resume", "--workers", 3, "--json")

    assert resumed.returncode == 0, str(resumed)
    assert (data / PARAMS).read_bytes() == kept
    schedule = Schedule.draw(SEED, AGENTS, TURNS, CHAOS)
    injected = FaultLog.load(data / FAULT_LOG)
    assert all(entry in schedule.to_json() for entry in injected)
    after = [
        f.to_json() for f in schedule if (f"sim-{f.agent}", f.turn) not in before
    ]  # the points the resumed run reached: every one of their faults was injected
    assert after and all(entry in injected for entry in after)
    report = json.loads(resumed.stdout)
    assert report["ok"] and report["turns_done"] == AGENTS * TURNS


@pytest.mark.parametrize(
    ("make", "extra", "fragments"),
    [
        pytest.param(
            lambda d: None,
            [],
            ["does not exist: --replay needs the directory of a run"],
            id="missing",
        ),
        pytest.param(
            lambda d: d.mkdir(),
            [],
            ["holds no run.json: it is not the directory of a run"],
            id="no-run-json",
        ),
        pytest.param(
            lambda d: _run_json(d, '{"format": "otpmem.simulation", "agents": '),
            [],
            ["run.json cannot be read"],
            id="corrupt",
        ),
        pytest.param(
            lambda d: _run_json(d, json.dumps({**_PARAMS, "schedule": None})),
            [],
            ["holds no fault schedule", "cannot be run again"],
            id="no-schedule",
        ),
        pytest.param(
            lambda d: _run_json(d, json.dumps(_CLUSTER)),
            [],
            ["is a run on PostgreSQL", "cannot be replayed", "only a LevelDB run can be"],
            id="cluster",
        ),
        pytest.param(
            lambda d: _run_json(d, json.dumps({**_PARAMS, "schedule": [_WRONG_TARGET]})),
            [],
            ["run.json is damaged: fault 0 of the schedule: kill_store hits the store"],
            id="bad-entry",
        ),
        pytest.param(
            lambda d: _run_json(d, json.dumps(_PARAMS)),
            ["--agents", "3"],
            ["--agents 3 contradicts the run's --agents 2", "--replay runs that run again"],
            id="contradicting-flag",
        ),
        pytest.param(
            lambda d: _run_json(d, json.dumps(_PARAMS)),
            ["--resume"],
            ["--replay runs another run again as a new run; --resume continues"],
            id="with-resume",
        ),
    ],
)
def test_what_cannot_be_replayed_is_refused_in_one_line_and_nothing_is_made(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Any,
    extra: list[str],
    fragments: list[str],
) -> None:
    run = tmp_path / "run"
    make(run)
    before = tree_state(run) if run.is_dir() else None
    new = tmp_path / "new"

    message = refused(capsys, "--replay", run, "--data", new, *extra)

    assert all(fragment in message for fragment in fragments), message
    assert not new.exists()
    assert (tree_state(run) if run.is_dir() else None) == before


def test_a_replay_into_the_run_it_replays_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    _run_json(run, json.dumps(_PARAMS))
    before = tree_state(run)

    message = refused(capsys, "--replay", run, "--data", run)

    assert f"--data {run} is the run --replay runs again; a replay is a new run" in message
    assert tree_state(run) == before


def refused(capsys: pytest.CaptureFixture[str], *args: object) -> str:
    """Run ``otpmem simulate args...`` here; assert a usage error in one line (a bug would
    raise out of ``main`` with its traceback) and return it."""
    status = main(["simulate", *map(str, args)])
    out, err = capsys.readouterr()
    assert (status, out) == (2, ""), err
    assert err.startswith("otpmem simulate: ") and err.count("\n") == 1, err
    return err


_PARAMS = {
    "format": "otpmem.simulation", "version": 1, "agents": 2, "turns": 2, "chaos": 0.5,
    "seed": 0, "model": {"kind": "scripted"}, "store": {"kind": "leveldb"}, "nodes": 1,
    "schedule": [{"agent": 1, "turn": 0, "fault": "kill_store", "target": "store"}],
}  # fmt: skip
_CLUSTER = {**_PARAMS, "nodes": 2, "schedule": None,
            "store": {"kind": "postgres", "dsn": "", "namespace": "otpmem_sim"}}  # fmt: skip
_WRONG_TARGET = {"agent": 1, "turn": 0, "fault": "kill_store", "target": "agent 1"}


def _run_json(run: Path, text: str) -> None:
    run.mkdir()
    (run / PARAMS).write_text(text, encoding="utf-8")
