"""librdkafka's mock cluster (the bridge tests' target) in a process of its own.

``python tests/mock_target.py TOPIC ...`` starts a 3-broker mock cluster (it lives inside
the process that created the librdkafka client), creates the topics, prints
``ready <bootstrap servers>`` and keeps it alive until stdin closes or a signal ends it.
It is a test double written by librdkafka's authors for their client's tests, not a
Kafka broker: it does not filter aborted transactions from read_committed reads, and its
metadata names a controller that is not one of its brokers, so admin requests
(CreateTopics) go nowhere; topics are created by asking for their metadata, with the
mock's default of 4 partitions.
"""

from __future__ import annotations

import sys

from confluent_kafka import Producer

#: What the mock cluster gives a topic it creates.
PARTITIONS = 4


def main() -> None:
    holder = Producer({"test.mock.num.brokers": 3, "log_level": 0})
    metadata = holder.list_topics(timeout=30)
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    for topic in sys.argv[1:]:
        created = holder.list_topics(topic=topic, timeout=30).topics[topic]
        if created.error is not None or len(created.partitions) != PARTITIONS:
            raise SystemExit(f"creating {topic} failed: {created.error}")
    sys.stdout.write(f"ready {bootstrap}\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the test closes the pipe (or kills the process)


if __name__ == "__main__":
    main()
