"""Client metrics for Prometheus (aiokafka07.prometheus) against embedded brokers and a real
ZooKeeper: what the collector exports, parsed with prometheus_client's own parser, equals
the truth read through the library (the brokers' log ends, the group's committed offsets,
the consumer's positions); a closed or collected client never breaks a scrape; the
library itself never imports prometheus_client.
"""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import aiokafka07.prometheus
from aiokafka07 import Producer
from aiokafka07.errors import InvalidConfigError, KafkaConnectionError, ProducerClosedError
from aiokafka07.group import Consumer

from .groups import FAST, TOPIC, produce

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of ``registry`` as the text format shows it, parsed back."""
    text = generate_latest(registry).decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def named(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def test_the_library_does_not_import_prometheus_client() -> None:
    code = (
        "import sys, aiokafka07, aiokafka07.group, aiokafka07.cli, aiokafka07.testing\n"
        "assert 'prometheus_client' not in sys.modules, 'imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


async def test_exported_values_equal_the_truth(
    kafka_cluster: Any, zookeeper: str, caplog: pytest.LogCaptureFixture
) -> None:
    count = 40  # per partition
    registry = CollectorRegistry()
    async with (
        kafka_cluster(1, zookeeper=zookeeper, num_partitions=2) as cluster,
        Producer(zookeeper=zookeeper, linger_ms=1) as producer,
    ):
        values = await produce(producer, TOPIC, [(0, 0), (0, 1)], count, "m", pad=11)
        options = {**FAST, "auto_commit": False}
        consumer = Consumer(TOPIC, group="metrics", zookeeper=zookeeper, **options)
        collector = aiokafka07.prometheus.register(
            producer=producer, consumer=consumer, registry=registry, client_id="app"
        )
        # Registering again reuses the registry's collector (and keeps the one sample set).
        again = aiokafka07.prometheus.register(
            producer=producer, registry=registry, client_id="app"
        )
        assert again is collector
        async with consumer:
            received = 0
            while received < len(values):
                batches = await consumer.getmany(timeout_ms=10_000)
                assert batches, f"only {received} of {len(values)} records arrived"
                received += sum(len(records) for records in batches.values())
            await consumer.commit()
            partitions = sorted(consumer.assignment())
            assert [tp.name for tp in partitions] == ["0-0", "0-1"]
            log_ends = await consumer.end_offsets(partitions)
            positions = {tp: await consumer.position(tp) for tp in partitions}
            committed = {tp: await consumer.committed(tp) for tp in partitions}

            samples = scrape(registry)

        # The producer: the brokers' logs grew by exactly the messages and payload bytes it
        # reports (0.7 offsets are byte offsets).
        sent = value(samples, "aiokafka07_producer_messages_sent_total", client_id="app")
        assert sent == len(values) == producer.metrics.messages_sent
        payload = value(samples, "aiokafka07_producer_payload_bytes_total", client_id="app")
        assert payload == sum(map(len, values)) == producer.metrics.bytes_sent
        # Each uncompressed message is its payload and a 10-byte header in the log.
        assert sum(log_ends.values()) == payload + 10 * len(values)
        assert value(samples, "aiokafka07_producer_messages_failed_total", client_id="app") == 0
        assert value(samples, "aiokafka07_producer_queued_messages", client_id="app") == 0
        requests = value(samples, "aiokafka07_producer_requests_sent_total", client_id="app")
        assert requests == producer.metrics.requests_sent > 0
        assert len(named(samples, "aiokafka07_producer_messages_sent_total")) == 1

        # The consumer: every partition where the consumer says it is.
        group = {"client_id": "app", "group": "metrics"}
        assert value(samples, "aiokafka07_consumer_records_total", **group) == len(values)
        assert value(samples, "aiokafka07_consumer_rebalances_total", **group) >= 1
        for tp in partitions:
            where = {**group, "topic": TOPIC, "broker": "0", "partition": str(tp.partition)}
            assert value(samples, "aiokafka07_consumer_position_offset", **where) == positions[tp]
            assert value(samples, "aiokafka07_consumer_committed_offset", **where) == committed[tp]
            assert committed[tp] == positions[tp] == log_ends[tp] > 0
            assert value(samples, "aiokafka07_consumer_log_end_offset", **where) == log_ends[tp]
            assert value(samples, "aiokafka07_consumer_lag_bytes", **where) == 0
        assert len(named(samples, "aiokafka07_consumer_position_offset")) == len(partitions)

        # The connection pools: each client connected to broker 0 and holds it open.
        for role in ("producer", "consumer"):
            where = {"client_id": "app", "role": role, "broker": "0"}
            assert value(samples, "aiokafka07_broker_connects_total", **where) >= 1
            assert value(samples, "aiokafka07_broker_connections", **where) >= 1
            assert value(samples, "aiokafka07_broker_connect_failures_total", **where) == 0

        # The consumer is closed now: its last values are still served, with the rest.
        closed = scrape(registry)
        assert value(closed, "aiokafka07_consumer_records_total", **group) == len(values)
        consumer_connections = {"client_id": "app", "role": "consumer", "broker": "0"}
        assert value(closed, "aiokafka07_broker_connections", **consumer_connections) == 0
        aiokafka07.prometheus.unregister(consumer=consumer, registry=registry)
        assert not named(scrape(registry), "aiokafka07_consumer_records_total")
        del cluster

    # Closed as well; then the collector leaves the registry with its last client.
    assert value(scrape(registry), "aiokafka07_producer_messages_sent_total", client_id="app")
    aiokafka07.prometheus.unregister(producer=producer, registry=registry)
    assert scrape(registry) == {}
    assert not [r for r in caplog.records if r.name == "aiokafka07.prometheus"]


async def test_connect_failures_are_counted_per_broker(kafka_cluster: Any, zookeeper: str) -> None:
    registry = CollectorRegistry()
    async with kafka_cluster(1, zookeeper=zookeeper, num_partitions=1) as cluster:
        # A static broker list: the producer keeps trying the stopped broker.
        producer = Producer(brokers=cluster.broker_list, retries=0, linger_ms=1)
        await producer.start()
        aiokafka07.prometheus.register(producer=producer, registry=registry)
        await producer.send_and_wait(TOPIC, b"first", partition=(0, 0))
        await cluster.stop_broker(0)
        with pytest.raises(KafkaConnectionError, match="cannot connect"):
            await producer.send_and_wait(TOPIC, b"lost", partition=(0, 0))
        samples = scrape(registry)
        where = {"client_id": "producer", "role": "producer", "broker": "0"}
        assert value(samples, "aiokafka07_broker_connects_total", **where) == 1
        assert value(samples, "aiokafka07_broker_connections", **where) == 0
        failures = value(samples, "aiokafka07_broker_connect_failures_total", **where)
        assert failures == producer.pool_metrics.brokers["0"].connect_failures >= 1
        failed = named(samples, "aiokafka07_producer_messages_failed_total")
        assert failed == {frozenset({("client_id", "producer")}): 1}
        with pytest.raises(ProducerClosedError):
            await producer.close()
        # Closed: the last values, and the scrape still answers.
        assert scrape(registry) == samples
    aiokafka07.prometheus.unregister(registry=registry)


def test_a_client_that_cannot_be_read_is_logged_once_and_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A consumer whose snapshot raises (here: one being read while a bug left its state
    broken, made by removing what the snapshot reads) is left out; the others are served."""
    registry = CollectorRegistry()
    producer = Producer(zookeeper=NOWHERE)
    consumer = Consumer(TOPIC, group="broken", zookeeper=NOWHERE)
    aiokafka07.prometheus.register(producer=producer, consumer=consumer, registry=registry)
    del consumer._coordinator  # the snapshot reads it: every scrape now fails to read it
    with caplog.at_level(logging.ERROR, logger="aiokafka07.prometheus"):
        for _ in range(3):
            samples = scrape(registry)
            sent = named(samples, "aiokafka07_producer_messages_sent_total")
            assert sent == {frozenset({("client_id", "producer")}): 0}
            assert not named(samples, "aiokafka07_consumer_records_total")
    errors = [r for r in caplog.records if r.name == "aiokafka07.prometheus"]
    assert len(errors) == 1
    assert errors[0].exc_info is not None
    assert "consumer" in errors[0].getMessage()
    aiokafka07.prometheus.unregister(registry=registry)


#: Clients that are never started connect nowhere.
NOWHERE = "127.0.0.1:1"


def test_clients_are_held_weakly_and_named_apart() -> None:
    registry = CollectorRegistry()
    first = Producer(zookeeper=NOWHERE)
    collector = aiokafka07.prometheus.register(producer=first, registry=registry)
    with pytest.raises(InvalidConfigError, match="client_id"):
        aiokafka07.prometheus.register(producer=Producer(zookeeper=NOWHERE), registry=registry)
    second = Producer(zookeeper=NOWHERE)
    aiokafka07.prometheus.register(producer=second, registry=registry, client_id="second")
    assert len(collector) == 2
    sent = named(scrape(registry), "aiokafka07_producer_messages_sent_total")
    assert sorted(dict(labels)["client_id"] for labels in sent) == ["producer", "second"]

    del first
    gc.collect()
    assert len(collector) == 1
    sent = named(scrape(registry), "aiokafka07_producer_messages_sent_total")
    assert [dict(labels)["client_id"] for labels in sent] == ["second"]
    # The name is free again.
    third = Producer(zookeeper=NOWHERE)
    aiokafka07.prometheus.register(producer=third, registry=registry)
    assert len(collector) == 2
    with pytest.raises(InvalidConfigError):
        aiokafka07.prometheus.register(registry=registry)
    aiokafka07.prometheus.unregister(registry=registry)
    assert scrape(registry) == {}


def test_a_registry_takes_one_collector() -> None:
    """The names are the same for every client: a second collector in one registry would
    repeat them, which the registry refuses (register() reuses the first)."""
    registry = CollectorRegistry()
    registry.register(aiokafka07.prometheus.ClientCollector())
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(aiokafka07.prometheus.ClientCollector())
