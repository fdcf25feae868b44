"""Client metrics for Prometheus: a ``prometheus_client`` collector over the snapshots a
:class:`~aiokafka07.Producer` and a group :class:`~aiokafka07.Consumer` keep
(``metrics``, and ``pool_metrics`` for their broker connections).

It needs the ``prometheus`` extra (in a checkout: ``python -m pip install -e
'.[prometheus]'``); nothing else in aiokafka07 imports this module, so the library works
without it. An application
registers its clients in one line each::

    import aiokafka07.prometheus

    aiokafka07.prometheus.register(producer=producer, consumer=consumer, client_id="orders")

The samples are read at scrape time, from the snapshots: nothing is counted twice and the
hot paths do no extra work. One :class:`ClientCollector` serves each registry; every
client in it is told apart by its ``client_id`` label. Clients are held weakly: one that
is garbage-collected leaves the output. A closed client keeps reporting its last values
until :func:`unregister` removes it. A snapshot that raises (a client in the middle of
something the collector cannot read) is logged once with its traceback and that client is
left out of that scrape; the rest of the scrape is served.

Scrape from the event loop's thread (``prometheus_client.generate_latest`` in an aiohttp
handler, as ``examples/aiohttp_app.py`` does): the snapshots read state the loop changes.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from .errors import InvalidConfigError
from .group import Consumer
from .group.state import ConsumerMetrics
from .pool import PoolMetrics
from .producer import Producer
from .producer.results import ProducerMetrics

__all__ = ["PREFIX", "ClientCollector", "register", "unregister"]

log = logging.getLogger("aiokafka07.prometheus")

#: Every metric name starts with it.
PREFIX = "aiokafka07_"

Role = Literal["producer", "consumer"]

#: Producer counters: (ProducerMetrics field, metric name without the prefix, help).
_Table = tuple[tuple[str, str, str], ...]

_PRODUCER_COUNTERS: _Table = (
    ("messages_sent", "producer_messages_sent", "Messages delivered to a broker."),
    ("bytes_sent", "producer_payload_bytes", "Bytes of the payloads delivered (uncompressed)."),
    ("batches_sent", "producer_batches_sent", "Message sets (batches) delivered."),
    ("requests_sent", "producer_requests_sent", "PRODUCE requests written to a broker."),
    ("retries", "producer_retried_messages", "Messages sent again after a failure."),
    ("messages_failed", "producer_messages_failed", "Messages that failed and are not in the log."),
    (
        "messages_unknown",
        "producer_messages_unknown",
        "Messages that failed with an outcome nobody could settle: they may be in the log.",
    ),
    (
        "settled",
        "producer_settled_messages",
        "Messages whose connection closed before they were confirmed, settled from the log end.",
    ),
)
_PRODUCER_GAUGES: _Table = (
    ("queued_messages", "producer_queued_messages", "Messages accepted and not yet ended."),
    ("queued_bytes", "producer_queued_bytes", "Bytes of the messages accepted and not ended."),
)
#: Consumer counters: (ConsumerMetrics field, metric name without the prefix, help).
_CONSUMER_COUNTERS: _Table = (
    ("records", "consumer_records", "Records handed out to the application."),
    ("rebalances", "consumer_rebalances", "Rebalances this member completed."),
    ("listener_errors", "consumer_listener_errors", "Rebalance-listener calls that failed."),
    ("fetcher_crashes", "consumer_fetcher_crashes", "Fetcher tasks that crashed (restarted)."),
    ("commit_failures", "consumer_commit_failures", "Commits that could not be written."),
    ("session_expiries", "consumer_session_expiries", "ZooKeeper sessions this member lost."),
)
_CONSUMER_GAUGES: _Table = (
    ("generation", "consumer_generation", "Rebalances that changed the assignment."),
    ("buffered_bytes", "consumer_buffered_bytes", "Bytes fetched, not yet handed out."),
)
#: Per owned partition: (PartitionMetrics field, metric name without the prefix, help).
#: Offsets are 0.7 byte offsets; a value not known yet (None) has no sample.
_PARTITION_GAUGES: _Table = (
    ("position", "consumer_position_offset", "Next offset to consume (what a commit writes)."),
    ("committed", "consumer_committed_offset", "Last offset committed (or read) for it."),
    ("highwater", "consumer_log_end_offset", "The partition's log end as last fetched."),
    ("lag", "consumer_lag_bytes", "Bytes from the position to the last known log end."),
    ("fetch_size", "consumer_fetch_size_bytes", "Bytes the next fetch asks for."),
    ("paused", "consumer_partition_paused", "1 while the application paused it."),
)
_CLIENT = ["client_id"]
_GROUP = ["client_id", "group"]
_PARTITION = ["client_id", "group", "topic", "broker", "partition"]
_BROKER = ["client_id", "role", "broker"]


@dataclass(frozen=True)
class _Snapshot:
    """What one client reported in one scrape (taken whole before any sample is added)."""

    client_id: str
    role: Role
    metrics: ProducerMetrics | ConsumerMetrics
    pool: PoolMetrics
    group: str


class ClientCollector(Collector):
    """A ``prometheus_client`` collector over aiokafka07 clients (see the module's text).

    Add clients with :meth:`add` (or :func:`register`), remove them with :meth:`remove`.
    Two clients of one role may not share a ``client_id``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a registry may collect from another thread
        self._clients: dict[tuple[str, Role], weakref.ReferenceType[Producer | Consumer]] = {}
        self._failing: set[tuple[str, Role]] = set()

    def add(self, client: Producer | Consumer, client_id: str | None = None) -> None:
        """Report ``client`` under ``client_id`` (default: ``producer`` for a producer,
        the consumer id for a consumer). :class:`~aiokafka07.errors.InvalidConfigError`
        if another live client of its role has that id; adding the same client again
        only renames it."""
        role: Role
        if isinstance(client, Producer):
            role, default = "producer", "producer"
        elif isinstance(client, Consumer):
            role, default = "consumer", client.consumer_id
        else:
            raise InvalidConfigError(f"expected a Producer or a group Consumer, not {client!r}")
        key = (client_id if client_id is not None else default, role)
        if not isinstance(key[0], str) or not key[0]:
            raise InvalidConfigError(f"client_id must be a non-empty string, not {client_id!r}")
        with self._lock:
            held = self._clients.get(key)
            if held is not None and held() is not None and held() is not client:
                raise InvalidConfigError(
                    f"another {role} is registered as client_id {key[0]!r}: "
                    "give each client its own client_id"
                )
            self._forget(client)
            self._clients[key] = weakref.ref(client)

    def remove(self, client: Producer | Consumer) -> bool:
        """Stop reporting ``client``; whether it was reported."""
        with self._lock:
            return self._forget(client)

    def _forget(self, client: Producer | Consumer) -> bool:
        keys = [key for key, ref in self._clients.items() if ref() is client]
        for key in keys:
            del self._clients[key]
            self._failing.discard(key)
        return bool(keys)

    def __len__(self) -> int:
        """Clients reported (live ones)."""
        with self._lock:
            return sum(ref() is not None for ref in self._clients.values())

    def describe(self) -> Iterable[Metric]:
        """The families :meth:`collect` yields, without samples: a registry refuses a
        second collector that would report the same names."""
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        """Every family, with a sample set per client from a snapshot taken now."""
        families = self._families()
        for snapshot in self._snapshots():
            _add_samples(families, snapshot)
        return list(families.values())

    def _snapshots(self) -> Iterator[_Snapshot]:
        with self._lock:
            clients = list(self._clients.items())
        for key, ref in clients:
            client = ref()
            if client is None:
                with self._lock:
                    if self._clients.get(key) is ref:
                        del self._clients[key]
                continue
            client_id, role = key
            try:
                if isinstance(client, Producer):
                    metrics: ProducerMetrics | ConsumerMetrics = client.metrics
                    group = ""
                else:
                    metrics = client.metrics
                    group = client.group or ""
                pool = client.pool_metrics
            except Exception:
                if key not in self._failing:
                    self._failing.add(key)
                    log.exception(
                        "cannot read the metrics of %s %s; left out of the scrape until it "
                        "can be read again",
                        role,
                        client_id,
                    )
                continue
            self._failing.discard(key)
            yield _Snapshot(client_id, role, metrics, pool, group)

    @staticmethod
    def _families() -> dict[str, CounterMetricFamily | GaugeMetricFamily]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for table, labels in ((_PRODUCER_COUNTERS, _CLIENT), (_CONSUMER_COUNTERS, _GROUP)):
            for _, name, text in table:
                families[name] = CounterMetricFamily(PREFIX + name, text, labels=labels)
        for table, labels in (
            (_PRODUCER_GAUGES, _CLIENT),
            (_CONSUMER_GAUGES, _GROUP),
            (_PARTITION_GAUGES, _PARTITION),
        ):
            for _, name, text in table:
                families[name] = GaugeMetricFamily(PREFIX + name, text, labels=labels)
        families["broker_connections"] = GaugeMetricFamily(
            PREFIX + "broker_connections", "Connections to the broker open now.", labels=_BROKER
        )
        families["broker_connects"] = CounterMetricFamily(
            PREFIX + "broker_connects", "Connections to the broker opened.", labels=_BROKER
        )
        families["broker_connect_failures"] = CounterMetricFamily(
            PREFIX + "broker_connect_failures",
            "Connection attempts to the broker that failed.",
            labels=_BROKER,
        )
        return families


def _add_samples(
    families: dict[str, CounterMetricFamily | GaugeMetricFamily], snapshot: _Snapshot
) -> None:
    """One client's samples, from its snapshot."""
    metrics = snapshot.metrics
    if isinstance(metrics, ProducerMetrics):
        labels = [snapshot.client_id]
        for field, name, _ in (*_PRODUCER_COUNTERS, *_PRODUCER_GAUGES):
            families[name].add_metric(labels, getattr(metrics, field))
    else:
        labels = [snapshot.client_id, snapshot.group]
        for field, name, _ in (*_CONSUMER_COUNTERS, *_CONSUMER_GAUGES):
            families[name].add_metric(labels, getattr(metrics, field))
        for tp, partition in sorted(metrics.partitions.items()):
            where = [*labels, tp.topic, str(tp.broker_id), str(tp.partition)]
            for field, name, _ in _PARTITION_GAUGES:
                value = getattr(partition, field)
                if value is not None:
                    families[name].add_metric(where, float(value))
    for broker, counts in sorted(snapshot.pool.brokers.items()):
        where = [snapshot.client_id, snapshot.role, broker]
        families["broker_connections"].add_metric(where, counts.connections)
        families["broker_connects"].add_metric(where, counts.connects)
        families["broker_connect_failures"].add_metric(where, counts.connect_failures)


#: The collector serving each registry (a registry takes one: the names would clash).
_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, ClientCollector] = (
    weakref.WeakKeyDictionary()
)
_COLLECTORS_LOCK = threading.Lock()


def register(
    *,
    producer: Producer | None = None,
    consumer: Consumer | None = None,
    registry: CollectorRegistry | None = None,
    client_id: str | None = None,
) -> ClientCollector:
    """Report ``producer`` and/or ``consumer`` to ``registry`` (default:
    ``prometheus_client.REGISTRY``) under ``client_id`` (see
    :meth:`~aiokafka07.prometheus.ClientCollector.add`); returns the registry's
    :class:`~aiokafka07.prometheus.ClientCollector`, created and registered by the first
    call. Call it once per client or pair of clients, and
    :func:`~aiokafka07.prometheus.unregister` when a client closes (a garbage-collected
    one leaves by itself)."""
    if producer is None and consumer is None:
        raise InvalidConfigError("register() needs a producer, a consumer or both")
    target = REGISTRY if registry is None else registry
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(target)
        if collector is None:
            collector = ClientCollector()
            target.register(collector)
            _COLLECTORS[target] = collector
    for client in (producer, consumer):
        if client is not None:
            collector.add(client, client_id)
    return collector


def unregister(
    *,
    producer: Producer | None = None,
    consumer: Consumer | None = None,
    registry: CollectorRegistry | None = None,
) -> None:
    """Stop reporting the clients given (all of them when none is given). The collector
    leaves the registry with its last client."""
    target = REGISTRY if registry is None else registry
    with _COLLECTORS_LOCK:
        collector = _COLLECTORS.get(target)
        if collector is None:
            return
        clients = [c for c in (producer, consumer) if c is not None]
        if clients:
            for client in clients:
                collector.remove(client)
            if len(collector):
                return
        target.unregister(collector)
        del _COLLECTORS[target]
