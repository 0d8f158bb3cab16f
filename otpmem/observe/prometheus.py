"""The observer's figures as Prometheus metrics (``pip install 'otpmem[prometheus]'``).

    from prometheus_client import REGISTRY, start_http_server
    register(Observer().start(), REGISTRY)     # or: serve() answers /metrics itself

Names (every one read from the observer's newest snapshot at scrape time):

=========================================  =========  ====================================
``otpmem_processes``                        gauge      live processes on the node
``otpmem_mailbox_messages``                 gauge      messages queued in all mailboxes
``otpmem_supervisor_events_total``          counter    supervisor events seen, by
                                                       ``supervisor`` and ``kind``
``otpmem_supervisor_restarts_total``        counter    restarts seen, by ``supervisor``
                                                       and ``child``
``otpmem_supervisor_restarts_in_period``    gauge      restarts the intensity window holds
``otpmem_supervisor_intensity``             gauge      restarts allowed in the window
``otpmem_supervisor_children``              gauge      children listed, by ``supervisor``
``otpmem_store_conversations``              gauge      conversations, by ``store``
``otpmem_store_messages``                   gauge      messages, by ``store``
``otpmem_store_fsyncs_total``               counter    LevelDB synced writes (groups and direct)
``otpmem_store_writes_total``               counter    LevelDB writes committed
``otpmem_agents``                           gauge      agents running
``otpmem_agent_turns_total``                counter    turns finished (``TurnMeter``)
``otpmem_agent_turn_errors_total``          counter    turns that failed
``otpmem_agent_turn_seconds``               histogram  turn latency, start to end
=========================================  =========  ====================================
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from ._source import Observer


class ObserverCollector(Collector):
    """A Prometheus collector over an ``Observer`` (its newest snapshot and counters)."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer

    def collect(self) -> Iterator[Metric]:
        """The metrics of the table in this module's docstring."""
        snapshot = self.observer.latest()
        counters = self.observer.metrics()
        node = snapshot["node"]
        yield _gauge("otpmem_processes", "Live processes on the node.", node["processes"])
        yield _gauge(
            "otpmem_mailbox_messages",
            "Messages queued in all mailboxes.",
            snapshot["node"]["mailbox_total"],
        )
        events = CounterMetricFamily(
            "otpmem_supervisor_events", "Supervisor events seen.", labels=["supervisor", "kind"]
        )
        for (supervisor, kind), count in sorted(counters["events"].items()):
            events.add_metric([supervisor, kind], count)
        yield events
        restarts = CounterMetricFamily(
            "otpmem_supervisor_restarts", "Restarts seen.", labels=["supervisor", "child"]
        )
        for (supervisor, child), count in sorted(counters["restarts"].items()):
            restarts.add_metric([supervisor, child], count)
        yield restarts
        yield from self._supervisors(snapshot["tree"])
        yield from self._stores(snapshot["stores"])
        yield from self._agents(snapshot["agents"], counters["meter"])

    def _supervisors(self, tree: list[dict[str, Any]]) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "otpmem_supervisor_restarts_in_period",
            "Restarts the supervisor's intensity window holds now.",
            labels=["supervisor"],
        )
        allowed = GaugeMetricFamily(
            "otpmem_supervisor_intensity",
            "Restarts the supervisor allows in its period.",
            labels=["supervisor"],
        )
        children = GaugeMetricFamily(
            "otpmem_supervisor_children", "Children of the supervisor.", labels=["supervisor"]
        )
        stack = list(tree)
        while stack:
            node = stack.pop()
            if node["kind"] != "supervisor":
                continue
            label = [node["label"]]
            if "intensity" in node:
                used.add_metric(label, node["restarts_in_period"])
                allowed.add_metric(label, node["intensity"])
            children.add_metric(label, len(node["children"]) + node["more_children"])
            stack.extend(node["children"])
        yield from (used, allowed, children)

    def _stores(self, stores: list[dict[str, Any]]) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {
            "conversations": GaugeMetricFamily(
                "otpmem_store_conversations", "Conversations held.", labels=["store"]
            ),
            "messages": GaugeMetricFamily(
                "otpmem_store_messages", "Messages held.", labels=["store"]
            ),
            "fsyncs": CounterMetricFamily(
                "otpmem_store_fsyncs", "Synced writes (groups and direct).", labels=["store"]
            ),
            "writes": CounterMetricFamily(
                "otpmem_store_writes", "Writes committed.", labels=["store"]
            ),
        }
        for store in stores:
            for field, family in families.items():
                if store.get(field) is not None:
                    family.add_metric([store["name"]], store[field])
        yield from families.values()

    def _agents(self, agents: dict[str, Any], meter: dict[str, Any]) -> Iterator[Metric]:
        yield _gauge("otpmem_agents", "Agents running.", agents["running"])
        yield CounterMetricFamily("otpmem_agent_turns", "Turns finished.", value=meter["turns"])
        yield CounterMetricFamily(
            "otpmem_agent_turn_errors", "Turns that failed.", value=meter["errors"]
        )
        cumulative, buckets = 0, []
        for bound, count in meter["buckets"]:
            cumulative += count
            buckets.append((str(bound), cumulative))
        yield HistogramMetricFamily(
            "otpmem_agent_turn_seconds",
            "Turn latency, from the turn's start to its end.",
            buckets=buckets,
            sum_value=meter["seconds_total"],
        )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def register(observer: Observer, registry: CollectorRegistry) -> ObserverCollector:
    """Add the observer's metrics to ``registry`` (e.g. ``prometheus_client.REGISTRY``)."""
    collector = ObserverCollector(observer)
    registry.register(collector)
    return collector


def registry_for(observer: Observer) -> CollectorRegistry:
    """A registry holding only the observer's metrics (what ``serve`` answers /metrics with)."""
    registry = CollectorRegistry(auto_describe=True)
    register(observer, registry)
    return registry


__all__ = ["ObserverCollector", "register", "registry_for"]
