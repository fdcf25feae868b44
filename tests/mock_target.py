"""librdkafka's mock cluster (the bridge tests' target) in a process of its own.

``python tests/mock_target.py TOPIC ...`` starts a 3-broker mock cluster (it lives inside
the process that created the librdkafka client), creates the topics, prints
``ready <bootstrap servers>`` and keeps it alive until stdin closes or a signal ends it.
Lines on stdin control it: ``down ID`` takes broker ID down (its connections closed, new
ones refused, its partitions keep it as leader: as a broker process that died and is
being restarted), ``up ID`` brings it back; each is answered ``ok``.

It is a test double written by librdkafka's authors for their client's tests, not a
Kafka broker: it does not filter aborted transactions from read_committed reads, and its
metadata names a controller that is not one of its brokers, so admin requests
(CreateTopics) go nowhere; topics are created by asking for their metadata, with the
mock's default of 4 partitions.

confluent-kafka creates a mock cluster (``test.mock.num.brokers``) but gives Python no
handle on it, so this process drives the same librdkafka that confluent-kafka's wheel
ships through ctypes: ``rd_kafka_handle_mock_cluster`` and
``rd_kafka_mock_broker_set_down`` / ``_set_up``, librdkafka's public mock API
(rdkafka_mock.h).
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import confluent_kafka

#: What the mock cluster gives a topic it creates.
PARTITIONS = 4
_PRODUCER = 0  # RD_KAFKA_PRODUCER


def librdkafka() -> ctypes.CDLL:
    """The librdkafka confluent-kafka's wheel ships (the mock cluster is part of it)."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    (path,) = sorted(libs.glob("librdkafka*.so*"))
    lib = ctypes.CDLL(str(path))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.rd_kafka_conf_set.argtypes += [ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = ctypes.c_void_p
    lib.rd_kafka_handle_mock_cluster.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    for name in ("rd_kafka_mock_broker_set_down", "rd_kafka_mock_broker_set_up"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_int32]
        getattr(lib, name).restype = ctypes.c_int
    return lib


def main() -> None:
    lib = librdkafka()
    error = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for key, value in (("test.mock.num.brokers", "3"), ("log_level", "0")):
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), error, 512) != 0:
            raise SystemExit(f"{key}: {error.value.decode()}")
    handle = lib.rd_kafka_new(_PRODUCER, conf, error, 512)
    if not handle:
        raise SystemExit(f"rd_kafka_new: {error.value.decode()}")
    cluster = lib.rd_kafka_handle_mock_cluster(handle)
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode()
    # Topics are created by a metadata request of a client of the cluster.
    client = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
    for topic in sys.argv[1:]:
        created = client.list_topics(topic=topic, timeout=30).topics[topic]
        if created.error is not None or len(created.partitions) != PARTITIONS:
            raise SystemExit(f"creating {topic} failed: {created.error}")
    sys.stdout.write(f"ready {bootstrap}\n")
    sys.stdout.flush()
    for line in sys.stdin:  # until the test closes the pipe (or kills the process)
        command, _, broker = line.partition(" ")
        call = {"down": lib.rd_kafka_mock_broker_set_down, "up": lib.rd_kafka_mock_broker_set_up}
        status = call[command](cluster, int(broker))
        sys.stdout.write("ok\n" if status == 0 else f"error {status}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
