"""What a consumer does when a fetch at one offset brings no complete message.

A 0.7 fetch returns raw log bytes from any offset, so two situations look alike: the
first message at the offset is larger than the fetch (fetch again, larger), or the
offset is not where a message starts, or the data is corrupt (the "size" read there is
noise). Growing for noise never ends: the issue that led here measured a fetch every
10-15 ms, forever. :class:`FetchSizer` tells them apart, in one place for every consumer
(:class:`~aiokafka07.simple.SimpleConsumer`, the group consumer, the console tools and
the Spark source), with no I/O of its own. The caller supplies what a fetch and an
OFFSETS request said.

The first entry of a fetched set declares ``size``; the entry needs ``size + 4`` bytes:

1. The broker sent fewer bytes than asked: it sent everything up to the end of the
   segment (a fetch never crosses one, and the flushed end is always a message
   boundary), so an entry longer than that is not a message. Typed error.
2. The entry would end past the log end known from OFFSETS (asked only when the fetch
   came back full): not a message either. Typed error.
3. The entry needs more than ``max_fetch_size``: :class:`MessageTooLargeError` naming
   the offset and the size.
4. Otherwise fetch again with at least ``size + 4`` bytes (twice the current size if
   that is more, capped at ``max_fetch_size``).

Whatever happens, at most :data:`MAX_REFETCHES` fetches follow one at the same offset
before the typed error. An error from inside a compressed wrapper, or any other corrupt
entry, is never a matter of size (:meth:`FetchSizer.incomplete_first` returns None for
it): the consumer raises it at once, naming topic, partition and offset.
"""

from __future__ import annotations

from .errors import InvalidMessageSizeError, MessageTooLargeError, ProtocolError
from .protocol.compression import DEFAULT_MAX_DECOMPRESSED
from .validation import check_int

__all__ = ["MAX_REFETCHES", "FetchSizer", "decompression_bound"]

#: Fetches that may follow one at the same offset that brought no complete message.
#: One is enough for any real message (rule 4 jumps straight to its size); the others
#: are slack, never a loop.
MAX_REFETCHES = 2

_LENGTH_FIELD = 4


def decompression_bound(max_fetch_size: int, configured: int | None = None) -> int:
    """A consumer's ``max_decompressed_bytes``: the most bytes decompressing one fetched
    set may produce. ``configured`` if given, else the larger of ``max_fetch_size`` (a
    compressed fetch decodes to no more than the largest fetch could carry uncompressed)
    and 64 MiB (so that every set a broker with default limits accepts, at most 64 x its
    ``max.message.size`` of 1,000,000, is readable)."""
    if configured is None:
        return max(max_fetch_size, DEFAULT_MAX_DECOMPRESSED)
    return check_int("max_decompressed_bytes", configured, minimum=1)


class FetchSizer:
    """The fetch size of one partition, and the decision after a fetch that brought no
    complete message (see the module docstring)."""

    __slots__ = ("_offset", "_refetches", "max_size", "partition", "size", "topic")

    def __init__(self, topic: str, partition: int | str, size: int, max_size: int) -> None:
        if size <= 0 or max_size < size:
            raise ValueError(f"need 0 < fetch size ({size}) <= max fetch size ({max_size})")
        self.topic = topic
        self.partition = partition
        #: The size of the next fetch.
        self.size = size
        self.max_size = max_size
        self._offset: int | None = None
        self._refetches = 0

    def __repr__(self) -> str:
        return f"<FetchSizer {self.topic}/{self.partition} size={self.size}>"

    @staticmethod
    def incomplete_first(error: ProtocolError) -> int | None:
        """The size the first entry of a fetched set declares, if ``error`` says that
        entry is incomplete (the only error a larger fetch can cure); else None."""
        if (
            isinstance(error, InvalidMessageSizeError)
            and error.available is not None
            and error.position == 0
            and error.size is not None
        ):
            return error.size
        return None

    def needs_log_end(self, received: int) -> bool:
        """Whether the decision needs the log end from OFFSETS: only when the fetch came
        back full (rule 1 decides otherwise)."""
        return received >= self.size

    def check(self, offset: int, declared: int | None, received: int, log_end: int | None) -> None:
        """Raise if the first entry at ``offset``, declaring ``declared`` bytes (None:
        fewer than 4 bytes came), cannot be a message, given that ``received`` bytes
        came back and the log ends at ``log_end`` (None: not asked)."""
        needed = _LENGTH_FIELD + (declared or 0)
        if received < self.size:
            where = f"only {received} bytes follow it in its segment"
        elif log_end is not None and offset + needed > log_end:
            where = f"the log ends at {log_end}"
        else:
            return
        what = "a cut entry" if declared is None else f"an entry of {declared} bytes"
        raise InvalidMessageSizeError(
            f"{self._name} at offset {offset}: {what} starts there, but {where}: "
            f"{offset} is not the offset of a message, or the log is corrupt",
            position=0,
            size=declared,
        )

    def grow(self, offset: int, declared: int | None, received: int, log_end: int | None) -> int:
        """:meth:`check`, then set and return the size of the next fetch at ``offset``;
        raise MessageTooLargeError, or the typed error once fetches at one offset pass
        :data:`MAX_REFETCHES`."""
        self.check(offset, declared, received, log_end)
        if offset != self._offset:
            self._offset, self._refetches = offset, 0
        self._refetches += 1
        needed = _LENGTH_FIELD + (declared or 0)
        if needed > self.max_size:
            raise MessageTooLargeError(
                f"{self._name}: the message at offset {offset} is {declared} bytes, and "
                f"needs a fetch of {needed} bytes, above max_fetch_size {self.max_size}",
                offset=offset,
                size=declared,
            )
        if self._refetches > MAX_REFETCHES:
            raise InvalidMessageSizeError(
                f"{self._name} at offset {offset}: still no complete message after "
                f"{self._refetches} fetches of up to {self.size} bytes",
                position=0,
                size=declared,
            )
        self.size = min(self.max_size, max(needed, 2 * self.size))
        return self.size

    @property
    def _name(self) -> str:
        return f"{self.topic}/{self.partition}"
