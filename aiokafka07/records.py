"""What consumers hand out: one record per message, with where it came from."""

from __future__ import annotations

from typing import NamedTuple

from .protocol import Compression

__all__ = ["ConsumerRecord", "TopicPartition"]


class TopicPartition(NamedTuple):
    """A partition of a topic: in 0.7, a partition number on one broker.

    ``name`` is the ``"<broker>-<partition>"`` form of ZooKeeper paths.
    """

    topic: str
    broker_id: int
    partition: int

    @property
    def name(self) -> str:
        return f"{self.broker_id}-{self.partition}"

    @classmethod
    def parse(cls, topic: str, name: str) -> TopicPartition:
        """From a topic and a ``"b-p"`` name."""
        broker, dash, partition = name.partition("-")
        if not dash or not broker.isdigit() or not partition.isdigit():
            raise ValueError(f"{name!r} is not a <broker>-<partition> name")
        return cls(topic, int(broker), int(partition))


class ConsumerRecord(NamedTuple):
    """A consumed message.

    In 0.7 a partition is a (broker, partition-on-that-broker) pair; ``broker_id`` is None
    when the consumer knows the broker only by address. ``offset`` is the 0.7.2 "next
    offset": where to fetch from so this message is not delivered again, the value to
    commit (inside a compressed wrapper: the wrapper's start, its end for the last one).
    Records are built by the codec's decoder in one pass (see ``decode_messages_into``).
    """

    topic: str
    broker_id: int | None
    partition: int
    offset: int
    value: bytes
    magic: int = 1
    attributes: int = 0

    @property
    def compression(self) -> Compression:
        """The codec of a shallow-iterated wrapper (NONE for ordinary messages)."""
        return Compression(self.attributes & 3)
