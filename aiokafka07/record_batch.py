"""Record batches: the messages of one fetch of one partition as columns.

:class:`FetchedColumns` holds what one fetch of one (topic, broker, partition) decoded into
:class:`~aiokafka07.protocol.columns.MessageColumns` (offsets, value ends, values: Arrow's
buffers), frozen (it holds a memoryview export of each bytearray, so none can be resized
while a batch or an Arrow consumer uses it). It reads as a sequence of
:class:`~aiokafka07.ConsumerRecord` built on demand, so a group member's streams hand out
records from it as from a list when the application mixes ``getmany`` and
``getmany_batches``.

:class:`RecordBatch` is a slice of one: what ``Consumer.getmany_batches`` and
``SimpleConsumer.record_batches`` hand out, with no Python object per message. It is an
Arrow PyCapsule producer: the C data interface's structs are built by the C accelerator
(``protocol/_speedups.c``) or its ctypes twin (:mod:`aiokafka07.arrow`), so
``pyarrow.record_batch(batch)`` and the like read its buffers without a copy, and pyarrow
is not needed to make one.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

from .protocol import _accel
from .protocol.columns import MessageColumns
from .records import ConsumerRecord

__all__ = ["BatchValues", "FetchedColumns", "RecordBatch", "offset_at"]


def _encode_metadata(pairs: dict[str, str]) -> bytes:
    """Arrow's binary key-value encoding of schema metadata: an int32 count, then an
    int32 length and the bytes of each key and value (native order)."""
    out = [struct.pack("=i", len(pairs))]
    for key, value in pairs.items():
        for text in (key.encode(), value.encode()):
            out += [struct.pack("=i", len(text)), text]
    return b"".join(out)


class FetchedColumns(Sequence[ConsumerRecord]):
    """The decoded messages of one fetch at ``base`` of one partition, as frozen columns
    (see the module docstring). ``offsets`` (int64) and ``value_ends`` (int32, one more:
    0 first) are memoryviews of the columns' bytearrays; ``values`` the payloads back to
    back."""

    __slots__ = (
        "_buffers",
        "_seq",
        "base",
        "broker_id",
        "offsets",
        "partition",
        "topic",
        "value_ends",
        "values",
    )

    def __init__(
        self, topic: str, broker_id: int | None, partition: int, columns: MessageColumns, base: int
    ) -> None:
        self.topic = topic
        self.broker_id = broker_id
        self.partition = partition
        self.base = base
        # The views hold exports of the bytearrays: from now on none can be resized.
        self.offsets = memoryview(columns.offsets).cast("q")
        self.value_ends = memoryview(columns.value_ends).cast("i")
        self.values = memoryview(columns.values)
        self._buffers = (columns.offsets, columns.value_ends, columns.values)
        self._seq: bytearray | None = None

    @classmethod
    def from_records(
        cls,
        records: Sequence[ConsumerRecord],
        topic: str,
        broker_id: int | None,
        partition: int,
        base: int,
    ) -> FetchedColumns:
        """Columns built from records already decoded (one copy of each value): what a
        partition fetched before batches were asked for becomes batches this way."""
        columns = MessageColumns()
        columns.offsets += array("q", [r.offset for r in records]).tobytes()
        columns.value_ends += array(
            "i", itertools.accumulate(len(r.value) for r in records)
        ).tobytes()
        columns.values += b"".join(r.value for r in records)
        return cls(topic, broker_id, partition, columns, base)

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[ConsumerRecord]: ...

    def __getitem__(self, index: int | slice) -> ConsumerRecord | list[ConsumerRecord]:
        if isinstance(index, slice):
            return [self._record(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("record index out of range")
        return self._record(index)

    def _record(self, i: int) -> ConsumerRecord:
        ends = self.value_ends
        value = bytes(self.values[ends[i] : ends[i + 1]])
        return ConsumerRecord(self.topic, self.broker_id, self.partition, self.offsets[i], value)

    @property
    def offset_seq(self) -> memoryview:
        """``offset_seq`` of every message (int32, computed on first use): 0 for a message
        that ends its entry, 1, 2, ... for the others of a compressed wrapper (see
        ``offset_seq`` in ``protocol/_pure.py``)."""
        if self._seq is None:
            self._seq = _accel.impl.offset_seq(self._buffers[0], self.base)
        return memoryview(self._seq).cast("i")

    def count_within(self, start: int, stop: int, budget: int) -> int:
        """How many messages from ``start`` (at most up to ``stop``) have values totalling
        at most ``budget`` bytes."""
        ends = self.value_ends
        limit = ends[start] + budget
        return bisect.bisect_right(ends, limit, start + 1, stop + 1) - start - 1

    def batch(self, start: int, stop: int) -> RecordBatch:
        """Messages ``start:stop`` as a :class:`RecordBatch` (no copy)."""
        return RecordBatch(self, start, stop)


def offset_at(records: Sequence[ConsumerRecord], index: int) -> int:
    """The offset of ``records[index]``, read from the columns without building the
    record (and copying its value) when ``records`` are :class:`FetchedColumns`."""
    if isinstance(records, FetchedColumns):
        offset: int = records.offsets[index]
        return offset
    return records[index].offset


class BatchValues(Sequence[bytes]):
    """The values of a :class:`RecordBatch`, read one at a time (each a new ``bytes``)
    or as views (:meth:`view`) without a copy."""

    __slots__ = ("_columns", "_start", "_stop")

    def __init__(self, columns: FetchedColumns, start: int, stop: int) -> None:
        self._columns = columns
        self._start = start
        self._stop = stop

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [bytes(self.view(i)) for i in range(*index.indices(len(self)))]
        return bytes(self.view(index))

    def view(self, index: int) -> memoryview:
        """Value ``index`` as a read-only memoryview of the batch's buffer (no copy)."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("value index out of range")
        i = self._start + index
        ends = self._columns.value_ends
        return self._columns.values[ends[i] : ends[i + 1]].toreadonly()

    def __iter__(self) -> Iterator[bytes]:
        for i in range(len(self)):
            yield bytes(self.view(i))


class RecordBatch:
    """The messages of one (topic, broker, partition) from one fetch, as columns: what
    ``Consumer.getmany_batches`` and ``SimpleConsumer.record_batches`` hand out.

    The columns are ``offset`` (int64: the 0.7.2 "next offset" of each message, as in
    :class:`~aiokafka07.ConsumerRecord`: the position after it, what a commit writes),
    ``offset_seq`` (int32: tells apart the messages of a compressed wrapper, which share
    an offset; ``(offset, offset_seq)`` is unique per partition) and ``value`` (binary).
    ``topic``, ``broker_id`` and ``partition`` are attributes. No Python object is built
    per message: :attr:`offsets` and :attr:`offset_seqs` are memoryviews of int64 / int32,
    :attr:`values` reads values on demand, and Arrow consumers take the columns through the
    PyCapsule interface (``__arrow_c_schema__``, ``__arrow_c_array__``,
    ``__arrow_c_stream__``) without a copy:
    ``pyarrow.record_batch(batch)``, ``pyarrow.table(batch)``, polars, duckdb. The Arrow
    schema is a struct of the three columns (none nullable), with ``topic``,
    ``broker_id`` and ``partition`` in its metadata.

    The buffers are shared with whatever the batch was exported to, and never change.
    """

    __slots__ = ("_columns", "_start", "_stop")

    def __init__(self, columns: FetchedColumns, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= len(columns):
            raise IndexError(f"rows {start}:{stop} are not within 0:{len(columns)}")
        self._columns = columns
        self._start = start
        self._stop = stop

    @classmethod
    def from_records(
        cls,
        records: Sequence[ConsumerRecord],
        *,
        topic: str,
        broker_id: int | None,
        partition: int,
        base_offset: int,
    ) -> RecordBatch:
        """A batch of ``records`` of one partition (values copied once), fetched from
        ``base_offset`` (the position before the first of them; ``offset_seq`` counts
        from it). Values must be bytes."""
        columns = FetchedColumns.from_records(records, topic, broker_id, partition, base_offset)
        return cls(columns, 0, len(columns))

    @property
    def topic(self) -> str:
        return self._columns.topic

    @property
    def broker_id(self) -> int | None:
        """The broker the partition lives on (None when a SimpleConsumer was given no
        ``broker_id``)."""
        return self._columns.broker_id

    @property
    def partition(self) -> int:
        """The partition's number on its broker."""
        return self._columns.partition

    def __len__(self) -> int:
        return self._stop - self._start

    def __repr__(self) -> str:
        return (
            f"<RecordBatch {self.topic}/{self.broker_id}-{self.partition}: {len(self)} "
            f"messages, {self.base_offset}..{self.next_offset}>"
        )

    @property
    def offsets(self) -> memoryview:
        """Each message's offset (the position after it), a read-only int64 memoryview."""
        return self._columns.offsets[self._start : self._stop].toreadonly()

    @property
    def offset_seqs(self) -> memoryview:
        """Each message's ``offset_seq``, a read-only int32 memoryview."""
        return self._columns.offset_seq[self._start : self._stop].toreadonly()

    @property
    def values(self) -> BatchValues:
        """The values, read on demand (``values[i]`` a ``bytes``, ``values.view(i)`` a
        memoryview without a copy)."""
        return BatchValues(self._columns, self._start, self._stop)

    @property
    def nbytes(self) -> int:
        """The bytes of all values together."""
        ends = self._columns.value_ends
        return ends[self._stop] - ends[self._start]

    @property
    def base_offset(self) -> int:
        """The position before the first message: where reading this batch started."""
        if self._start:
            offset: int = self._columns.offsets[self._start - 1]
            return offset
        return self._columns.base

    @property
    def last_offset(self) -> int | None:
        """The offset of the last message (None when empty): the consumer's position
        once the batch is handed out, what a commit after it writes."""
        if self._stop == self._start:
            return None
        offset: int = self._columns.offsets[self._stop - 1]
        return offset

    @property
    def next_offset(self) -> int:
        """The position after the batch: :attr:`last_offset`, or :attr:`base_offset`
        when empty."""
        last = self.last_offset
        return self.base_offset if last is None else last

    def to_records(self) -> list[ConsumerRecord]:
        """The messages as :class:`~aiokafka07.ConsumerRecord` objects (one per message:
        for code that wants records after all)."""
        return self._columns[self._start : self._stop]

    # -- the Arrow PyCapsule interface ---------------------------------------------------

    def _fields(self) -> list[tuple[str, str, tuple[Any, ...]]]:
        columns = self._columns
        offsets, ends, values = columns._buffers
        seq = columns.offset_seq.obj  # the bytearray under the view
        return [
            ("offset", "l", (offsets,)),
            ("offset_seq", "i", (seq,)),
            ("value", "z", (ends, values)),
        ]

    def _metadata(self) -> bytes:
        broker = self.broker_id
        return _encode_metadata(
            {
                "topic": self.topic,
                "broker_id": "" if broker is None else str(broker),
                "partition": str(self.partition),
            }
        )

    def __arrow_c_schema__(self) -> object:
        """An ``"arrow_schema"`` capsule: a struct of ``offset`` (int64), ``offset_seq``
        (int32) and ``value`` (binary)."""
        capsule: object = _accel.impl.arrow_schema(self._fields(), self._metadata())
        return capsule

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        """The schema and ``"arrow_array"`` capsules of the batch as a struct array whose
        children point at the batch's buffers (no copy). A ``requested_schema`` is not
        cast to: the batch's own schema comes back, which the PyCapsule interface allows."""
        fields = self._fields()
        impl = _accel.impl
        return (
            impl.arrow_schema(fields, self._metadata()),
            impl.arrow_array(fields, len(self), self._start, self),
        )

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """An ``"arrow_array_stream"`` capsule handing out the batch as one struct array
        (no copy), for consumers that read streams (polars, duckdb)."""
        capsule: object = _accel.impl.arrow_stream(
            self._fields(), self._metadata(), len(self), self._start, self
        )
        return capsule

    def buffer_addresses(self) -> dict[str, int]:
        """Where the columns' data buffers start in memory (an exported array points
        there): ``offset``, ``offset_seq``, ``value_ends`` and ``value``; for checks that
        a hand-over shares memory."""
        from . import arrow  # (ctypes: imported only when asked)

        keep: list[Any] = []
        offsets, ends, values = self._columns._buffers
        return {
            "offset": arrow.buffer_address(offsets, keep),
            "offset_seq": arrow.buffer_address(self._columns.offset_seq.obj, keep),
            "value_ends": arrow.buffer_address(ends, keep),
            "value": arrow.buffer_address(values, keep),
        }
