"""Batches as message sets: compression, and the splitting that keeps wrappers legal.

A 0.7 broker silently drops a message whose payload exceeds ``max.message.size``; for a
compressed set that payload is the wrapper's compressed bytes. So a batch compresses to
one wrapper, split in halves while a wrapper would exceed the limit; a single message
whose wrapper is still too large (incompressible data near the limit) goes uncompressed,
which fits since ``send()`` checked its size. Entries of :meth:`Producer.send_message`
go out as they are. A batch of :meth:`Producer.send_arrow` is a message set encoded
already: it goes out as it is, or compressed, split at entry boundaries the same way.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable

from ..protocol import (
    Compression,
    encode_message_set,
    encode_multiproduce_request,
    encode_produce_request,
    encode_wrapper,
)
from ..protocol.messages import entry_size
from ..protocol.requests import encode_produce_frame
from .batch import Batch

__all__ = ["MessageSetEncoder"]

log = logging.getLogger("aiokafka07.producer")


class MessageSetEncoder:
    """Encodes batches with the producer's ``compression``, applied to
    ``compressed_topics`` (None: every topic)."""

    def __init__(
        self,
        compression: Compression,
        compressed_topics: frozenset[str] | None,
        max_message_size: int,
        compression_level: int | None = None,
    ) -> None:
        self.compression = compression
        self.compressed_topics = compressed_topics
        self.max_message_size = max_message_size
        #: gzip's level (None: the codec's default).
        self.compression_level = compression_level

    def compresses(self, topic: str) -> bool:
        return self.compression is not Compression.NONE and (
            self.compressed_topics is None or topic in self.compressed_topics
        )

    def frame(self, batches: list[Batch]) -> bytes:
        """The batches of one request as its PRODUCE (one entry) or MULTIPRODUCE frame."""
        if len(batches) == 1:  # the common case; in one buffer when uncompressed
            batch = batches[0]
            if batch.encoded is not None and not self.compresses(batch.topic):
                return encode_produce_request(batch.topic, batch.partition, batch.encoded)
            if not batch.raw and not self.compresses(batch.topic):
                return encode_produce_frame(batch.topic, batch.partition, batch.values, batch.size)
        entries = [
            (batch.topic, batch.partition, message_set)
            for batch in batches
            for message_set in self.encode(batch)
        ]
        if len(entries) == 1:
            return encode_produce_request(*entries[0])
        return encode_multiproduce_request(entries)

    def encode(self, batch: Batch) -> list[bytes]:
        """The batch as message sets, in order."""
        if batch.encoded is not None:
            if not self.compresses(batch.topic):
                return [batch.encoded]
            return self._compressed_set(batch.encoded, batch.encoded_count)
        raw = batch.raw
        if not raw:
            return self.payloads(batch.topic, batch.values)
        sets: list[bytes] = []
        positions = range(len(batch.values))
        for is_raw, run in itertools.groupby(positions, key=raw.__contains__):
            values = [batch.values[i] for i in run]
            sets.extend([b"".join(values)] if is_raw else self.payloads(batch.topic, values))
        return sets

    def payloads(self, topic: str, payloads: list[bytes]) -> list[bytes]:
        """Payloads as message sets: one uncompressed set, or wrappers."""
        if not self.compresses(topic):
            return [encode_message_set(payloads)]
        return self._compressed(payloads)

    def _compressed(self, payloads: list[bytes]) -> list[bytes]:
        plain = encode_message_set(payloads)
        wrapper = encode_wrapper(self.compression, plain, level=self.compression_level)
        if len(wrapper) - entry_size(0) <= self.max_message_size:
            return [wrapper]
        if len(payloads) == 1:
            log.debug(
                "a %d-byte message is sent uncompressed: compressed, it would exceed "
                "max.message.size %d",
                len(payloads[0]),
                self.max_message_size,
            )
            return [plain]
        half = len(payloads) // 2
        return self._compressed(payloads[:half]) + self._compressed(payloads[half:])

    def _compressed_set(self, plain: bytes, count: int) -> list[bytes]:
        """:meth:`_compressed` for a message set encoded already (``count`` entries):
        halves cut at an entry boundary."""
        wrapper = encode_wrapper(self.compression, plain, level=self.compression_level)
        if len(wrapper) - entry_size(0) <= self.max_message_size:
            return [wrapper]
        if count == 1:
            log.debug(
                "a %d-byte message is sent uncompressed: compressed, it would exceed "
                "max.message.size %d",
                len(plain) - entry_size(0),
                self.max_message_size,
            )
            return [plain]
        half = count // 2
        cut = _entries_end(plain, half)
        return self._compressed_set(plain[:cut], half) + self._compressed_set(
            plain[cut:], count - half
        )


def _entries_end(message_set: bytes, count: int) -> int:
    """Where the first ``count`` entries of ``message_set`` (encoded here) end."""
    position = 0
    for _ in range(count):
        position += 4 + int.from_bytes(message_set[position : position + 4], "big")
    return position


def topics_to_compress(topics: Iterable[str] | str | None) -> frozenset[str] | None:
    """``compressed_topics`` as a set (None: all topics). A string is one topic name, not
    its characters; an empty collection means all topics (CONFIG §2.1, as 0.7.2)."""
    if topics is None:
        return None
    if isinstance(topics, str):
        return frozenset([topics])
    return frozenset(topics) or None
