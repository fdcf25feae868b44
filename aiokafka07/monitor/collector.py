"""The exporter's metrics: ``prometheus_client`` collectors over a :class:`ClusterMonitor`.

Two parts, because they change at different paces:

* :class:`StateCollector`: what one refresh found (brokers, partitions, groups, their
  lag and statuses), from an immutable :class:`~aiokafka07.monitor.cluster_state.ClusterState`
  and the verdicts judged for it: thousands of series, formatted once per refresh (the
  server keeps the text; a scrape never formats them again);
* :class:`HealthCollector`: the exporter's own state (the state's age, staleness, the
  ZooKeeper connection, errors): a dozen series, formatted at every scrape.

:class:`ClusterCollector` is both at once (what a scrape answers). Nothing here talks to
the cluster. Register a collector on a registry of its own (:func:`registry_for`) and
format with ``prometheus_client.generate_latest``. The names are in :data:`METRICS` (and
in the docs' table, docs/operations/monitoring.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from ..records import TopicPartition
from .cluster_state import ClusterMonitor, ClusterState
from .lag import PartitionLag, worst
from .status import LagTracker

__all__ = [
    "METRICS",
    "ClusterCollector",
    "ConstantLabels",
    "HealthCollector",
    "StateCollector",
    "Verdicts",
    "cluster_name",
    "judge",
    "registry_for",
]

_PARTITION = ["topic", "broker", "partition"]
_GROUP_PARTITION = ["group", *_PARTITION]

#: Every metric family the collector yields: name (as exposed) → help text.
METRICS: dict[str, str] = {
    "kafka07_brokers": "Brokers registered in ZooKeeper now",
    "kafka07_broker_registered": "1 while the broker's /brokers/ids node exists",
    "kafka07_broker_up": "1 when the broker answered the last OFFSETS probe",
    "kafka07_broker_probe_duration_seconds": "How long the last probe of the broker took",
    "kafka07_topic_partition_oldest_offset": "Log start of the broker-partition (bytes)",
    "kafka07_topic_partition_newest_offset": "Log end of the broker-partition (bytes)",
    "kafka07_topic_partition_in_bytes_per_second": (
        "Bytes appended to the broker-partition per second, between the last two refreshes"
    ),
    "kafka07_group_members": "Live members of the consumer group",
    "kafka07_group_rebalances_total": "Changes of the group's member list the exporter saw",
    "kafka07_group_lag_bytes": (
        "Sum of the group's partition lags (bytes); absent while any partition's is unknown"
    ),
    "kafka07_group_lag_messages": (
        "Sum of the group's partition lags in messages, per topic; absent while any of "
        "them is unknown"
    ),
    "kafka07_group_partitions_unknown": (
        "Partitions of the group whose lag cannot be known now (broker not answering, "
        "offset unreadable): ERR, and left out of no sum"
    ),
    "kafka07_group_status": (
        "The group's lag status, its worst partition's: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR"
    ),
    "kafka07_group_partition_status": (
        "The partition's lag status: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR"
    ),
    "kafka07_group_partition_committed_offset": "Offset the group committed (bytes)",
    "kafka07_group_partition_owner_info": "The consumer thread owning the partition",
    "kafka07_group_partition_lag_bytes": "Log end minus committed offset (bytes)",
    "kafka07_group_partition_lag_messages": (
        "Messages between the committed offset and the log end, wrappers' inner ones "
        'included: method="exact" (counted) or "estimate" (recent mean message size); '
        "absent when unknown"
    ),
    "kafka07_group_partition_offset_unmoved_seconds": (
        "Seconds since the committed offset last changed, as of the last refresh (from the "
        "znode's write time when the exporter first saw it)"
    ),
    "kafka07_exporter_scrape_duration_seconds": "How long the previous scrape took to answer",
    "kafka07_exporter_render_duration_seconds": (
        "How long formatting the last refresh's series took (once per refresh, off the event loop)"
    ),
    "kafka07_exporter_refresh_duration_seconds": "How long the last refresh of the state took",
    "kafka07_exporter_state_age_seconds": "Seconds since the state served was read",
    "kafka07_exporter_refreshes_total": "Successful refreshes of the state",
    "kafka07_exporter_zookeeper_connected": "1 while the ZooKeeper session is connected",
    "kafka07_exporter_stale": "1 while the values served may be out of date (see the docs)",
    "kafka07_exporter_errors_total": "Errors met while refreshing, by kind",
}


def _gauge(name: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=labels)


Verdicts = Mapping[str, Mapping[TopicPartition, PartitionLag]]
"""Each group's partition verdicts (group name -> partition -> verdict)."""

Family = GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily


def judge(monitor: ClusterMonitor, tracker: LagTracker, now_ms: int | None = None) -> Verdicts:
    """The verdicts on every group partition of the monitor's state, at ``now_ms``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return {g.group: tracker.evaluate(g, now) for g in monitor.state.groups}


class StateCollector(Collector):
    """The series of one refresh: ``state`` and its ``verdicts`` (from :func:`judge`).
    Holds only immutable values, so it may be formatted in another thread."""

    def __init__(self, state: ClusterState, verdicts: Verdicts) -> None:
        self.state = state
        self.verdicts = verdicts

    def collect(self) -> Iterator[Family]:
        state = self.state
        yield from self._brokers()
        oldest = _gauge("kafka07_topic_partition_oldest_offset", _PARTITION)
        newest = _gauge("kafka07_topic_partition_newest_offset", _PARTITION)
        rate = _gauge("kafka07_topic_partition_in_bytes_per_second", _PARTITION)
        for p in state.partitions:
            labels = [p.tp.topic, str(p.tp.broker_id), str(p.tp.partition)]
            oldest.add_metric(labels, p.log_start)
            newest.add_metric(labels, p.log_end)
            if p.bytes_in_per_second is not None:
                rate.add_metric(labels, p.bytes_in_per_second)
        yield from (oldest, newest, rate)
        yield from self._groups()

    def _brokers(self) -> Iterator[GaugeMetricFamily]:
        brokers = self.state.brokers
        count = _gauge("kafka07_brokers")
        count.add_metric([], sum(b.registered for b in brokers))
        registered = _gauge("kafka07_broker_registered", ["broker"])
        up = _gauge("kafka07_broker_up", ["broker"])
        probe = _gauge("kafka07_broker_probe_duration_seconds", ["broker"])
        for b in brokers:
            label = [str(b.broker_id)]
            registered.add_metric(label, int(b.registered))
            up.add_metric(label, int(b.up))
            if b.probe_seconds is not None:
                probe.add_metric(label, b.probe_seconds)
        yield from (count, registered, up, probe)

    def _groups(self) -> Iterator[Family]:
        members = _gauge("kafka07_group_members", ["group"])
        rebalances = CounterMetricFamily(
            "kafka07_group_rebalances",
            METRICS["kafka07_group_rebalances_total"],
            labels=["group"],
        )
        total = _gauge("kafka07_group_lag_bytes", ["group"])
        unknown = _gauge("kafka07_group_partitions_unknown", ["group"])
        committed = _gauge("kafka07_group_partition_committed_offset", _GROUP_PARTITION)
        owner = InfoMetricFamily(
            "kafka07_group_partition_owner",
            METRICS["kafka07_group_partition_owner_info"],
            labels=_GROUP_PARTITION,
        )
        lag = _gauge("kafka07_group_partition_lag_bytes", _GROUP_PARTITION)
        lag_messages = _gauge("kafka07_group_partition_lag_messages", [*_GROUP_PARTITION, "method"])
        topic_messages = _gauge("kafka07_group_lag_messages", ["group", "topic"])
        unmoved = _gauge("kafka07_group_partition_offset_unmoved_seconds", _GROUP_PARTITION)
        status = _gauge("kafka07_group_status", ["group"])
        partition_status = _gauge("kafka07_group_partition_status", _GROUP_PARTITION)
        for g in self.state.groups:
            verdicts = self.verdicts.get(g.group, {})
            status.add_metric([g.group], int(worst(v.status for v in verdicts.values())))
            members.add_metric([g.group], g.members)
            rebalances.add_metric([g.group], g.rebalances)
            unknown.add_metric([g.group], g.unknown)
            group_lag = g.total_lag
            if group_lag is not None:  # unknown is never summed as zero
                total.add_metric([g.group], group_lag)
            for topic in g.topics:
                summed = g.lag_messages(topic)
                if summed is not None:  # unknown is never summed as zero
                    topic_messages.add_metric([g.group, topic], summed.messages)
            for p in g.partitions:
                labels = [g.group, p.tp.topic, str(p.tp.broker_id), str(p.tp.partition)]
                if p.committed is not None:
                    committed.add_metric(labels, p.committed)
                if p.owner is not None:
                    owner.add_metric(labels, {"owner": p.owner})
                if p.lag is not None:
                    lag.add_metric(labels, p.lag)
                if p.lag_messages is not None and p.lag_messages_method is not None:
                    lag_messages.add_metric([*labels, p.lag_messages_method], p.lag_messages)
                if p.unmoved_seconds is not None:
                    unmoved.add_metric(labels, p.unmoved_seconds)
                verdict = verdicts.get(p.tp)
                if verdict is not None:
                    partition_status.add_metric(labels, int(verdict.status))
        yield from (members, rebalances, total, topic_messages, unknown, status, committed, owner)
        yield from (lag, lag_messages, unmoved)
        yield partition_status


class HealthCollector(Collector):
    """The exporter's own series, read live from ``monitor`` at every collect."""

    def __init__(self, monitor: ClusterMonitor) -> None:
        self.monitor = monitor
        #: Seconds the last formatting of a refresh's series took (set by the server).
        self.render_seconds: float | None = None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        monitor = self.monitor
        state = monitor.state
        scrape = _gauge("kafka07_exporter_scrape_duration_seconds")
        if monitor.scrape_seconds is not None:
            scrape.add_metric([], monitor.scrape_seconds)
        render = _gauge("kafka07_exporter_render_duration_seconds")
        if self.render_seconds is not None:
            render.add_metric([], self.render_seconds)
        refresh = _gauge("kafka07_exporter_refresh_duration_seconds")
        age = _gauge("kafka07_exporter_state_age_seconds")
        if state.refresh_seconds is not None and state.refreshed_at is not None:
            refresh.add_metric([], state.refresh_seconds)
            age.add_metric([], max(time.time() - state.refreshed_at, 0.0))
        refreshes = CounterMetricFamily(
            "kafka07_exporter_refreshes", METRICS["kafka07_exporter_refreshes_total"]
        )
        refreshes.add_metric([], monitor.refreshes)
        connected = _gauge("kafka07_exporter_zookeeper_connected")
        connected.add_metric([], int(monitor.zookeeper_connected))
        stale = _gauge("kafka07_exporter_stale")
        stale.add_metric([], int(monitor.is_stale))
        errors = CounterMetricFamily(
            "kafka07_exporter_errors", METRICS["kafka07_exporter_errors_total"], labels=["kind"]
        )
        for kind, count in sorted(monitor.errors.items()):
            errors.add_metric([kind], count)
        yield from (scrape, render, refresh, age, refreshes, connected, stale, errors)


class ClusterCollector(Collector):
    """Every series of one cluster at once, judged at collect time: a
    :class:`StateCollector` of ``monitor``'s state (with ``tracker``'s verdicts), then a
    :class:`HealthCollector`. (The server formats the two apart: the first once per
    refresh.)"""

    def __init__(self, monitor: ClusterMonitor, tracker: LagTracker) -> None:
        self.monitor = monitor
        self.tracker = tracker
        self.health = HealthCollector(monitor)

    def collect(self) -> Iterator[Family]:
        state = StateCollector(self.monitor.state, judge(self.monitor, self.tracker))
        yield from state.collect()
        yield from self.health.collect()


#: What a ``cluster`` label's value may be: a name, as a Prometheus job's or a target's.
_CLUSTER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def cluster_name(text: str) -> str:
    """``text`` as the value of a ``cluster`` label (``--cluster``): 1 to 128 letters,
    digits, ``.``, ``_``, ``:`` or ``-``, starting with a letter or digit; a
    :class:`ValueError` otherwise. (Any text is a valid label value; a name that needs no
    quoting in a PromQL matcher or a YAML file is what an operator types.)"""
    if not _CLUSTER.fullmatch(text):
        raise ValueError(
            f"cluster name {text!r}: 1 to 128 letters, digits, '.', '_', ':' or '-', "
            "starting with a letter or digit"
        )
    return text


class ConstantLabels(Collector):
    """``collector``'s series, each with ``labels`` added (e.g. ``cluster="prod"``):
    what lets one Prometheus hold several clusters' series apart without relabelling.
    A label a series has already keeps its value."""

    def __init__(self, collector: Collector, labels: Mapping[str, str]) -> None:
        self.collector = collector
        self.labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self.collector.collect():
            family.samples = [
                sample._replace(labels={**self.labels, **sample.labels})
                for sample in family.samples
            ]
            yield family


def registry_for(*collectors: Collector, cluster: str | None = None) -> CollectorRegistry:
    """A registry of its own holding only ``collectors`` (no process or platform metrics
    unless given: the exporter reports on the cluster, and ``generate_latest`` of it is
    the scrape). ``cluster`` adds a constant ``cluster`` label to every series
    (:class:`ConstantLabels`)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(
            collector if cluster is None else ConstantLabels(collector, {"cluster": cluster})
        )
    return registry
