"""The bridge's Prometheus metrics: a ``prometheus_client`` collector over
:attr:`Bridge.metrics <aiokafka07.bridge.Bridge.metrics>`.

Read at scrape time from the snapshot (the copying only adds to plain counters; nothing
is counted twice and the hot path does no work for Prometheus). Every name starts with
``kafka07_bridge_``; :data:`METRICS` lists them (and the docs' table,
docs/operations/monitoring.md#bridge-metrics). Lag is in bytes, as 0.7 offsets are, per
0.7 broker-partition (labels ``topic``, ``broker``, ``partition``, as the exporter's):
a partition whose log end is unknown now has no lag sample (never 0) and is counted in
``kafka07_bridge_partitions_unknown``; a topic's sum is absent while any of its
partitions is unknown.

Counters count this process (they restart at 0 with it, as every Prometheus counter
does: ``rate()`` and ``increase()`` handle that). Restarts by systemd or a container
runtime show as a new ``process_start_time_seconds`` (the standard process collector,
which ``aiokafka07.bridge.server.BridgeMetricsServer`` adds);
``kafka07_bridge_recoveries_total`` counts the recoveries this process completed (one
per :meth:`Bridge.run <aiokafka07.bridge.Bridge.run>`: 1 for ``aiokafka07 bridge``, and
one more each time brokers registered more broker-partitions of the bridged topics).
Needs the ``prometheus`` extra (``prometheus-client``); the bridge itself does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .runner import Bridge

__all__ = ["METRICS", "BridgeCollector"]

#: Every metric family the collector yields: name (as exposed) → help text.
METRICS: dict[str, str] = {
    "kafka07_bridge_messages_copied_total": (
        "Messages written to the target in committed transactions, per topic"
    ),
    "kafka07_bridge_bytes_copied_total": (
        "Bytes (message values) written to the target in committed transactions, per topic"
    ),
    "kafka07_bridge_recovery_skipped_total": (
        "Messages read again from 0.7 that recovery found already on the target, "
        "not written again, per topic"
    ),
    "kafka07_bridge_lag_bytes": (
        "0.7 log end minus the offset copied up to (bytes); absent while the log end is unknown"
    ),
    "kafka07_bridge_topic_lag_bytes": (
        "Sum of the topic's partition lags (bytes); absent while any of them is unknown"
    ),
    "kafka07_bridge_partitions_unknown": (
        "Broker-partitions of the topic whose log end (hence lag) is unknown now"
    ),
    "kafka07_bridge_transactions_committed_total": "Transactions committed on the target",
    "kafka07_bridge_transactions_aborted_total": (
        "Transactions aborted after a failed write (the run then ends with the error)"
    ),
    "kafka07_bridge_last_commit_timestamp_seconds": (
        "Unix time of the last commit; absent until this process committed one"
    ),
    "kafka07_bridge_last_commit_age_seconds": (
        "Seconds since the last commit, or since the copying began when none since; "
        "absent while not copying"
    ),
    "kafka07_bridge_copying": "1 while the bridge copies (recovery done, not stopping)",
    "kafka07_bridge_recoveries_total": (
        "Recoveries this process completed (one per run, one per growth of the 0.7 cluster)"
    ),
    "kafka07_bridge_topics_not_copied": (
        "Topics the bridge's whitelist or blacklist chooses that it does not copy: the "
        "target cannot take them (the log says why)"
    ),
}


def _gauge(name: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=labels)


def _counter(name: str, labels: list[str] | None = None) -> CounterMetricFamily:
    # prometheus_client appends the _total itself.
    return CounterMetricFamily(name.removesuffix("_total"), METRICS[name], labels=labels)


class BridgeCollector(Collector):
    """Every ``kafka07_bridge_`` series of ``bridge``, from one snapshot of its
    :attr:`~aiokafka07.bridge.Bridge.metrics` per collect. Collect on the bridge's event
    loop (the snapshot reads state the copying changes)."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        metrics = self.bridge.metrics
        copied = _counter("kafka07_bridge_messages_copied_total", ["topic"])
        copied_bytes = _counter("kafka07_bridge_bytes_copied_total", ["topic"])
        skipped = _counter("kafka07_bridge_recovery_skipped_total", ["topic"])
        for topic, counts in metrics.topics.items():
            copied.add_metric([topic], counts.messages)
            copied_bytes.add_metric([topic], counts.bytes)
            skipped.add_metric([topic], counts.skipped)
        yield from (copied, copied_bytes, skipped)
        lag = _gauge("kafka07_bridge_lag_bytes", ["topic", "broker", "partition"])
        topic_lag = _gauge("kafka07_bridge_topic_lag_bytes", ["topic"])
        unknown = _gauge("kafka07_bridge_partitions_unknown", ["topic"])
        sums: dict[str, int | None] = {topic: 0 for topic in metrics.topics}
        missing = dict.fromkeys(metrics.topics, 0)
        for source, partition in sorted(metrics.partitions.items()):
            behind = partition.lag_bytes
            topic = source.topic
            total = sums.get(topic, 0)
            if behind is None:  # unknown is never summed as zero
                missing[topic] = missing.get(topic, 0) + 1
                sums[topic] = None
                continue
            lag.add_metric([topic, str(source.broker_id), str(source.partition)], behind)
            if total is not None:
                sums[topic] = total + behind
        for topic, total in sums.items():
            if total is not None:
                topic_lag.add_metric([topic], total)
        for topic, count in missing.items():
            unknown.add_metric([topic], count)
        yield from (lag, topic_lag, unknown)
        committed = _counter("kafka07_bridge_transactions_committed_total")
        committed.add_metric([], metrics.transactions)
        aborted = _counter("kafka07_bridge_transactions_aborted_total")
        aborted.add_metric([], metrics.aborted)
        stamp = _gauge("kafka07_bridge_last_commit_timestamp_seconds")
        if metrics.last_commit is not None:
            stamp.add_metric([], metrics.last_commit)
        age = _gauge("kafka07_bridge_last_commit_age_seconds")
        if metrics.commit_age is not None:
            age.add_metric([], metrics.commit_age)
        copying = _gauge("kafka07_bridge_copying")
        copying.add_metric([], int(metrics.phase == "copying"))
        recoveries = _counter("kafka07_bridge_recoveries_total")
        recoveries.add_metric([], metrics.recoveries)
        not_copied = _gauge("kafka07_bridge_topics_not_copied")
        not_copied.add_metric([], len(metrics.topics_not_copied))
        yield from (committed, aborted, stamp, age, copying, recoveries, not_copied)
