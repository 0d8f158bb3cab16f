"""What a simulation did: the audit of every acknowledged message against the store, the
report it fills, and the report's text (each figure says what it counts, and a verdict
that is never ``INCOMPLETE`` without its reasons)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..messages import Conv
from ._conventions import USER_ID, retrying


@dataclass
class SimulationReport:
    """What a run did, and whether anything acknowledged was lost."""

    agents: int
    turns_done: int
    turns_planned: int
    messages_acknowledged: int
    messages_stored: int
    lost: int
    faults: dict[str, int]
    restarts: int
    seconds: float
    resumed_from: int = 0
    duplicated: int = 0
    lost_examples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    data_dir: str = ""
    retries: int = 0
    interrupted: bool = False
    stopped_by_budget: int = 0
    turns_over_budget: int = 0
    nodes: int = 1
    store: str = "leveldb"
    continued: int = 0
    """Turns a killed node had half-stored, finished by the node that took its lease."""
    replay_of: str = ""
    """The run whose fault schedule this one ran again (``--replay``), if any."""

    @property
    def complete(self) -> bool:
        """True when every planned turn was done (or not run: its agent's budget was spent)."""
        return self.turns_done + self.turns_over_budget == self.turns_planned

    @property
    def ok(self) -> bool:
        """True when every turn was done and every acknowledged message is stored, once."""
        return self.lost == 0 and self.duplicated == 0 and self.complete and not self.errors

    @property
    def turns_this_run(self) -> int:
        """Turns acknowledged by this run (not by the one it resumed)."""
        return self.turns_done - self.resumed_from

    @property
    def turns_per_s(self) -> float:
        """This run's turns over its wall time, as its progress bar counts them."""
        return self.turns_this_run / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        """The report, as printed by ``otpmem simulate``: each figure says what it counts."""
        return report_lines(self)

    def verdict(self) -> list[str]:
        """The last lines: OK, or LOST and INCOMPLETE, each followed by its reasons."""
        return verdict_lines(self)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            **self.__dict__,
            "complete": self.complete,
            "ok": self.ok,
            "turns_this_run": self.turns_this_run,
            "turns_per_s": self.turns_per_s,
        }


@dataclass(frozen=True)
class Audit:
    """What the store holds of the acknowledged turns: ``acknowledged`` messages (in
    ``turns_done`` turns), ``stored`` read back, ``lost`` missing, and a few of the lost."""

    turns_done: int
    acknowledged: int
    stored: int
    lost: int
    lost_examples: list[str]


def audit(entries: list[dict[str, Any]], store: Any) -> Audit:
    """Read every conversation of the ledger's ``entries`` back from ``store`` and find each
    acknowledged message in it, in order."""
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        by_conv.setdefault(entry["conversation"], []).append(entry)
    acknowledged = lost = stored = 0
    examples: list[str] = []
    for conv_id, conv_entries in sorted(by_conv.items()):
        conv_entries.sort(key=lambda e: e["turn"])
        key = Conv(USER_ID, conv_id)
        stored_messages = retrying(lambda: store.get(key))  # noqa: B023 - called at once
        history = [[m.get("role"), m.get("content")] for m in stored_messages]
        stored += len(history)
        position = 0
        for entry in conv_entries:
            for expected in entry["messages"]:
                acknowledged += 1
                found = _find(history, expected, position)
                if found is None:
                    lost += 1
                    if len(examples) < 5:
                        examples.append(f"{conv_id} turn {entry['turn']}: {expected}")
                else:
                    position = found + 1
    turns_done = len({(e["conversation"], e["turn"]) for e in entries})
    return Audit(turns_done, acknowledged, stored, lost, examples)


def _find(history: list[list[Any]], expected: list[Any], start: int) -> int | None:
    for index in range(start, len(history)):
        if history[index] == expected:
            return index
    return None


def plural(count: int, noun: str) -> str:
    """``1 turn``, ``2 turns``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def seconds(value: float) -> str:
    """``0.035``, ``12.3``: three decimals for a short run, where they matter."""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def report_lines(report: SimulationReport) -> list[str]:
    """``key: value (what it means)`` lines, then an example line per lost message."""
    injected = ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items())) or "none"
    stored = "read back from the store; every retry reused its turn id, so equal to acked"
    resumed = f" ({report.resumed_from} before resuming)" if report.resumed_from else ""
    lines = [
        *([f"data:              {report.data_dir}"] if report.data_dir else []),
        *(
            [f"replay of:         {report.replay_of} (its parameters and fault schedule)"]
            if report.replay_of
            else []
        ),
        *(
            [
                f"store:             {report.store}",
                f"nodes:             {report.nodes} (OS processes, each with its own tree"
                " and a share of the agents; leases in the database say which owns which)",
            ]
            if report.nodes > 1 or report.store != "leveldb"
            else []
        ),
        f"agents:            {report.agents}",
        f"turns done:        {report.turns_done} of {report.turns_planned}{resumed}",
        f"messages acked:    {report.messages_acknowledged} (every message of each"
        " acknowledged turn, from the ledger)",
        f"messages stored:   {report.messages_stored} ({stored})",
        f"faults injected:   {sum(report.faults.values())} ({injected})",
        f"restarts:          {report.restarts} (by the supervisors: one per fault, but none"
        " for a crash-on-message plan whose agent had no turn left to crash on)",
        f"turn retries:      {report.retries} (turn attempts a fault broke, tried again)",
        *(
            [
                f"turns continued:   {report.continued} (half-stored by a killed node,"
                " finished under the same turn id by the node that took its lease)"
            ]
            if report.nodes > 1 or report.store != "leveldb"
            else []
        ),
        f"messages lost:     {report.lost} (acked, but not in the store)",
        f"messages extra:    {report.duplicated} (stored, but in no acknowledged turn)",
        f"throughput:        {report.turns_per_s:.1f} turns/s"
        f" ({plural(report.turns_this_run, 'turn')} of this run over"
        f" {seconds(report.seconds)} s of wall time)",
    ]
    if report.stopped_by_budget:
        lines.append(
            f"budget stops:      {plural(report.stopped_by_budget, 'agent')} stopped by"
            f" --budget-tokens ({plural(report.turns_over_budget, 'later turn')} not run)"
        )
    lines += [f"  lost: {example}" for example in report.lost_examples]
    return lines


def verdict_lines(report: SimulationReport) -> list[str]:
    """``OK: ...``, or ``LOST: ...`` and ``INCOMPLETE: ...`` each followed by its reasons."""
    if report.ok:
        return ["OK: every acknowledged message is in the store, once"]
    lines = []
    if report.lost:
        lines.append(f"LOST: {plural(report.lost, 'acknowledged message')} missing from the store")
    if report.duplicated and report.complete:
        lines.append(
            f"DUPLICATED: {plural(report.duplicated, 'stored message')} in no acknowledged "
            "turn (stored twice, or by a turn never acknowledged)"
        )
    if not report.complete or report.errors or report.interrupted:
        missing = report.turns_planned - report.turns_done
        lines.append(f"INCOMPLETE: {missing} of {plural(report.turns_planned, 'turn')} not done:")
        if report.interrupted:
            where = f" --data {report.data_dir}" if report.data_dir else ""
            lines.append(f"  - interrupted (Ctrl-C); continue: otpmem simulate{where} --resume")
        lines += [f"  - {error}" for error in report.errors]
        if not report.interrupted and not report.errors:
            lines.append("  - no worker reported an error: this is a bug, please report it")
    return lines


__all__ = [
    "Audit",
    "SimulationReport",
    "audit",
    "plural",
    "report_lines",
    "seconds",
    "verdict_lines",
]
