"""A run's fault schedule: which fault, at which logical point, on which process.

Chaos decides after each acknowledged turn whether to inject a fault there. The decision is
a function of the seed and of the point (agent ``i``, turn ``t``), never of the thread that
got there first: agent ``i``'s faults come from a random stream of its own, seeded by the
run's seed and ``i``, which gives three numbers per turn (whether, which kind, which
victim). So one seed draws one schedule at any ``--workers``; ``run.json`` keeps it, and
``--replay`` runs it again::

    schedule = Schedule.draw(seed=1, agents=20, turns=10, chaos=0.1)
    schedule.at(3, 4)    # Fault(turn=4, agent=3, kind='kill_agent', victim=7), or None
    Schedule.from_json(schedule.to_json(), agents=20, turns=10) == schedule

The four kinds, each after agent ``i`` acknowledged turn ``t``: ``kill_store`` and
``crash_store`` hit the default store; ``kill_agent`` kills agent ``victim`` (any of the
run's, perhaps in the middle of one of its turns); ``crash_agent_on_message`` plans a crash
of agent ``i`` itself on its next message, the first call of its turn ``t + 1`` (so a plan
at an agent's last turn never fires).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

KILL_STORE = "kill_store"
CRASH_STORE = "crash_store"
KILL_AGENT = "kill_agent"
CRASH_PLAN = "crash_agent_on_message"
FAULTS = (KILL_STORE, CRASH_STORE, KILL_AGENT, CRASH_PLAN)
STORE = "store"


@dataclass(frozen=True, order=True)
class Fault:
    """One fault of the schedule: after agent ``agent`` acknowledged turn ``turn``, ``kind``
    hits the store (``victim`` None) or agent ``victim``."""

    turn: int
    agent: int
    kind: str
    victim: int | None = None

    @property
    def target(self) -> str:
        """The process it hits, by its logical name: ``store`` or ``agent 7``."""
        return STORE if self.victim is None else f"agent {self.victim}"

    def to_json(self) -> dict[str, Any]:
        """``{"agent": 3, "turn": 0, "fault": "kill_agent", "target": "agent 7"}``."""
        return {"agent": self.agent, "turn": self.turn, "fault": self.kind, "target": self.target}

    @classmethod
    def from_json(cls, data: Any, agents: int, turns: int) -> Fault:
        """The fault ``to_json`` wrote; ``ValueError`` naming what does not fit the run."""
        if not isinstance(data, dict):
            raise ValueError(f"{data!r} is not an object with agent, turn, fault and target")
        agent, turn, kind, target = (data.get(k) for k in ("agent", "turn", "fault", "target"))
        if not isinstance(agent, int) or isinstance(agent, bool) or not 0 <= agent < agents:
            raise ValueError(
                f"agent {agent!r} is not one of the run's {agents} (0 to {agents - 1})"
            )
        if not isinstance(turn, int) or isinstance(turn, bool) or not 0 <= turn < turns:
            raise ValueError(f"turn {turn!r} is not one of the run's {turns} (0 to {turns - 1})")
        if kind not in FAULTS:
            raise ValueError(f"fault {kind!r} is none of {', '.join(FAULTS)}")
        fault = cls(turn, agent, kind, _victim(kind, agent, target, agents))
        return fault


def _victim(kind: str, agent: int, target: Any, agents: int) -> int | None:
    """The victim a target names, once it is one the kind may hit."""
    if kind in (KILL_STORE, CRASH_STORE):
        if target != STORE:
            raise ValueError(f"{kind} hits the store, not {target!r}")
        return None
    if kind == CRASH_PLAN:
        # The plan fires on the agent's own next turn, the one its worker drives: aimed at
        # another agent, whether it fires would depend on how far that one has got.
        if target != f"agent {agent}":
            raise ValueError(
                f"{kind} after agent {agent}'s turn hits agent {agent}, not {target!r}"
            )
        return agent
    words = str(target).split(" ")
    if len(words) != 2 or words[0] != "agent" or not words[1].isdigit():
        raise ValueError(f"{kind} hits an agent ('agent N'), not {target!r}")
    victim = int(words[1])
    if victim >= agents:
        raise ValueError(f"{target!r} is not one of the run's {agents} agents")
    return victim


class Schedule:
    """The faults of a run, at most one per (agent, turn); see the module docstring."""

    __slots__ = ("_at",)

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self._at: dict[tuple[int, int], Fault] = {}
        for fault in faults:
            point = (fault.agent, fault.turn)
            if point in self._at:
                raise ValueError(f"two faults after agent {point[0]}'s turn {point[1]}")
            self._at[point] = fault

    @classmethod
    def draw(cls, seed: int, agents: int, turns: int, chaos: float) -> Schedule:
        """The faults the seed gives: each point's chance of one is ``chaos``."""
        if chaos <= 0.0:
            return cls()
        drawn = []
        for i in range(agents):
            stream = random.Random(f"otpmem.simulate/{seed}/agent/{i}")
            for turn in range(turns):
                # All three numbers every turn: a point's draw never depends on another's.
                chance, which, victim = (
                    stream.random(),
                    stream.randrange(4),
                    stream.randrange(agents),
                )
                if chance < chaos:
                    kind = FAULTS[which]
                    hit = None if kind in (KILL_STORE, CRASH_STORE) else victim
                    drawn.append(Fault(turn, i, kind, i if kind == CRASH_PLAN else hit))
        return cls(drawn)

    def at(self, agent: int, turn: int) -> Fault | None:
        """The fault after agent ``agent``'s turn ``turn``, if the schedule holds one."""
        return self._at.get((agent, turn))

    @property
    def faults(self) -> list[Fault]:
        """Every fault, in the order of the points (turn, then agent)."""
        return sorted(self._at.values())

    def counts(self) -> dict[str, int]:
        """How many faults of each kind."""
        return dict(Counter(f.kind for f in self._at.values()))

    def check(self, agents: int, turns: int) -> None:
        """``ValueError`` unless every fault's point and victim is in a run of this size."""
        for fault in self.faults:
            Fault.from_json(fault.to_json(), agents, turns)

    def to_json(self) -> list[dict[str, Any]]:
        """The faults as ``run.json`` keeps them."""
        return [f.to_json() for f in self.faults]

    @classmethod
    def from_json(cls, data: Any, agents: int, turns: int) -> Schedule:
        """The schedule ``to_json`` wrote; ``ValueError`` naming the entry that is wrong."""
        if not isinstance(data, list):
            raise ValueError(f"the fault schedule is a list of faults, not {type(data).__name__}")
        faults = []
        for index, entry in enumerate(data):
            try:
                faults.append(Fault.from_json(entry, agents, turns))
            except ValueError as exc:
                raise ValueError(f"fault {index} of the schedule: {exc}") from None
        return cls(faults)

    def __iter__(self) -> Iterator[Fault]:
        return iter(self.faults)

    def __len__(self) -> int:
        return len(self._at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and self._at == other._at

    def __hash__(self) -> int:
        return hash(frozenset(self._at.values()))

    def __repr__(self) -> str:
        return f"Schedule({len(self)} faults: {self.counts()})"


__all__ = ["CRASH_PLAN", "CRASH_STORE", "FAULTS", "KILL_AGENT", "KILL_STORE", "Fault", "Schedule"]
