"""What consumers hand out: one record per message, with where it came from."""

from __future__ import annotations

from typing import NamedTuple

from .protocol import Compression

__all__ = ["ConsumerRecord"]


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
