"""The text of a simulation's report: each figure says what it counts, and a verdict that
is never ``INCOMPLETE`` without its reasons. ``SimulationReport.lines()`` and
``verdict()`` call these."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._simulation import SimulationReport


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
        f"restarts:          {report.restarts} (by the supervisors: one restart may answer"
        " several faults, a crash-on-message plan none until it fires)",
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


__all__ = ["plural", "report_lines", "seconds", "verdict_lines"]
