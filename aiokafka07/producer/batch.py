"""Batches: messages for one (broker, topic, partition) that travel in one request.

:class:`Batch` is the producer's internal unit from accumulation to outcome. It keeps the
messages as parallel lists (payloads and futures), not one object per message, because
this is the hot path; what only some messages have (a key or a pinned partition to route
again by, an entry encoded already) is kept sparsely, by position.

:class:`BatchBuilder` is the public, aiokafka-shaped way to hand the producer a batch
built by the caller (:meth:`Producer.create_batch` / :meth:`Producer.send_batch`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..errors import InvalidConfigError, MessageTooLargeError
from ..protocol._accel import load_accelerator

__all__ = ["Batch", "BatchBuilder", "Route", "check_message_size", "implementation", "serialize"]

T = TypeVar("T")

log = logging.getLogger("aiokafka07.producer")

Route = tuple[Any, "tuple[int, int] | None"]
"""How a message was routed, to route it again on a retry: (key, pinned partition)."""


class _PureBatchCore:
    """The pure-Python twin of the C ``BatchCore`` (``_appender.c``): the fields of a
    :class:`Batch` that ``send()``'s hot path touches per message."""

    __slots__ = ("byte_cap", "count_cap", "futures", "size", "values")

    values: list[bytes]
    futures: list[asyncio.Future[Any]]
    size: int
    count_cap: int
    byte_cap: int


#: The C module ``_appender`` (None: the pure twins), chosen and logged once, at import,
#: as the codec's accelerator is.
_appender_module = load_accelerator("aiokafka07.producer._appender", "the producer's hot path", log)


def implementation() -> str:
    """``"c"`` when the producer's hot path (``BatchBuilder.append``, the batches'
    fields, keeping pending futures off the garbage collector's lists) runs on the C
    accelerator ``_appender``, ``"python"`` on its pure twins: what
    :func:`aiokafka07.protocol.implementation` says for the codec."""
    return "python" if _appender_module is None else "c"


def _accelerated(name: str, twin: T) -> T:
    """The C type or function ``name`` of ``_appender`` when it was built (and
    ``AIOKAFKA07_PURE`` is not set), else its pure-Python ``twin``: chosen once, at
    import, as the codec's accelerator is."""
    if _appender_module is None:
        return twin
    return cast("T", getattr(_appender_module, name))


if TYPE_CHECKING:
    _BatchCore = _PureBatchCore
else:
    _BatchCore = _accelerated("BatchCore", _PureBatchCore)


def _leave_tracked(_: object, /) -> None:
    """The pure twin of ``_appender``'s ``untrack_future``, ``track_futures``,
    ``untrack_list`` and ``track_list``: Python cannot take an object off the cyclic
    garbage collector's lists, so it leaves every object as it is."""


#: A message's future, held pending by its batch, is kept off the cyclic garbage
#: collector's lists until the producer completes it (``_appender.c`` says why: under
#: confirm mode's wait for the broker's flush, the collector walked tens of thousands of
#: them per pass); ``track_futures`` puts a batch's back first (and the list itself). So
#: are a sealed batch's lists (values, futures), once a request takes the batch, until
#: the producer completes it. All are no-ops in pure mode.
untrack_future: Callable[[object], None] = _accelerated("untrack_future", _leave_tracked)
track_futures: Callable[[list[Any]], None] = _accelerated("track_futures", _leave_tracked)
untrack_list: Callable[[list[Any]], None] = _accelerated("untrack_list", _leave_tracked)
track_list: Callable[[list[Any]], None] = _accelerated("track_list", _leave_tracked)


class Batch(_BatchCore):
    """Messages for one (broker, topic, partition), in the order they were accepted.

    ``values`` are payloads, or at the positions in ``raw`` whole encoded entries
    (:meth:`Producer.send_message`). A batch of :meth:`Producer.send_arrow` holds its
    ``encoded_count`` messages as one uncompressed message set already encoded from the
    Arrow buffers (``encoded``; ``values`` stays empty): no bytes object per message.
    ``futures`` has one future per message, or a single one for the whole batch
    (``whole``: a :class:`BatchBuilder`, or a message set of an Arrow array). ``routes`` maps the
    position of a message sent with a key or an explicit partition to its :data:`Route`.
    ``isolated`` batches go alone in a request (retried after a refused multi-entry
    request). ``ended`` is set once the outcome of every message was decided, so no
    message is ever counted twice. ``created`` (``time.monotonic()``) is when its first
    message was accepted: the batch ends within the producer's delivery timeout of it.
    ``doubtful``: an earlier attempt may have put it in the log (it was sent again
    after an outcome nobody could settle), so a later failure cannot say "not appended";
    ``refusals`` counts the times a broker closed the connection on it while it went
    alone.

    While a batch is the *hot* batch of its topic (where keyless messages go, see
    :class:`~aiokafka07.producer.accumulator.Accumulator`), ``count_cap`` and
    ``byte_cap`` are the limits that keep it hot and ``base_count`` / ``base_size`` what
    the accumulator had counted when it became hot.
    """

    __slots__ = (
        "attempts",
        "base_count",
        "base_size",
        "broker_id",
        "created",
        "doubtful",
        "encoded",
        "encoded_count",
        "ended",
        "isolated",
        "last_error",
        "partition",
        "raw",
        "refusals",
        "routes",
        "topic",
        "whole",
    )

    def __init__(
        self, topic: str, broker_id: int, partition: int, *, isolated: bool = False
    ) -> None:
        self.topic = topic
        self.broker_id = broker_id
        self.partition = partition
        self.isolated = isolated
        self.values: list[bytes] = []
        self.futures: list[asyncio.Future[Any]] = []
        self.size = 0
        self.routes: dict[int, Route] | None = None
        self.raw: set[int] | None = None
        self.encoded: bytes | None = None
        self.encoded_count = 0
        self.whole = False
        self.attempts = 0
        self.last_error: BaseException | None = None
        self.ended = False
        self.created = time.monotonic()
        self.doubtful = False
        self.refusals = 0
        self.count_cap = 0
        self.byte_cap = 0
        self.base_count = 0
        self.base_size = 0

    def __repr__(self) -> str:
        return (
            f"<Batch {self.topic}/{self.broker_id}-{self.partition}: {self.count} "
            f"messages, {self.size} bytes{', isolated' if self.isolated else ''}>"
        )

    @property
    def count(self) -> int:
        """Messages in the batch."""
        return len(self.values) if self.encoded is None else self.encoded_count

    @property
    def where(self) -> tuple[str, int, int]:
        """(topic, broker id, partition): how failures are reported."""
        return self.topic, self.broker_id, self.partition

    def add(
        self,
        value: bytes,
        future: asyncio.Future[Any],
        route: Route | None = None,
        *,
        raw: bool = False,
    ) -> None:
        """Append one message (the general path; the hot path is HotPath.append)."""
        position = len(self.values)
        self.values.append(value)
        self.futures.append(future)
        self.size += len(value)
        if route is not None:
            if self.routes is None:
                self.routes = {}
            self.routes[position] = route
        if raw:
            if self.raw is None:
                self.raw = set()
            self.raw.add(position)

    def pending(self) -> list[asyncio.Future[Any]]:
        """The futures of this batch not resolved yet."""
        return [f for f in self.futures if not f.done()]

    def regroup(
        self, target_of: Callable[[Route | None], tuple[int, int]]
    ) -> list[tuple[tuple[int, int] | Exception, Batch]]:
        """The messages regrouped by where they go now, for routing again:
        ``target_of(route)`` is the (broker, partition) for a message's route (None: a
        keyless message; one target for all of them). The messages going to one target
        form one batch, in their order: a retry of keyed messages travels as few
        batches as it has targets, not one per message. A message whose route raises
        goes alone, with the exception in place of its target. Each batch keeps this
        batch's attempts, isolation, last error, creation time and doubt; a
        :attr:`whole` batch stays whole."""
        if self.whole or not self.routes:
            # A whole batch is routed as one; its route, if any, is kept at position 0.
            route = self.routes.get(0) if self.whole and self.routes else None
            try:
                self.broker_id, self.partition = target_of(route)
            except Exception as exc:
                return [(exc, self)]
            return [((self.broker_id, self.partition), self)]
        groups: dict[tuple[int, int], Batch] = {}
        failed: list[tuple[tuple[int, int] | Exception, Batch]] = []
        keyless: tuple[int, int] | Exception | None = None
        for position, (value, future) in enumerate(zip(self.values, self.futures, strict=True)):
            route = self.routes.get(position)
            raw = self.raw is not None and position in self.raw
            target: tuple[int, int] | Exception
            try:
                if route is not None:
                    target = target_of(route)
                else:
                    keyless = target = target_of(None) if keyless is None else keyless
            except Exception as exc:
                target = exc
            if isinstance(target, Exception):
                if route is None:
                    keyless = target
                one = self._part(self.broker_id, self.partition)
                one.add(value, future, route, raw=raw)
                failed.append((target, one))
                continue
            group = groups.get(target)
            if group is None:
                group = groups[target] = self._part(*target)
            group.add(value, future, route, raw=raw)
        return [*groups.items(), *failed]

    def _part(self, broker_id: int, partition: int) -> Batch:
        """An empty batch for some of this batch's messages (see :meth:`regroup`)."""
        part = Batch(self.topic, broker_id, partition, isolated=self.isolated)
        part.attempts = self.attempts
        part.last_error = self.last_error
        part.created = self.created
        part.doubtful = self.doubtful
        part.refusals = self.refusals
        return part


class _PureAppender:
    """The pure-Python twin of the C ``Appender`` (``_appender.c``): the fields
    :class:`BatchBuilder` keeps, and ``append`` as the full check in ``_append_slow``."""

    __slots__ = ("_limit", "_max_bytes", "_max_message", "_plain", "size_bytes", "values")

    _limit: int
    _max_bytes: int
    _max_message: int
    _plain: bool
    size_bytes: int
    values: list[bytes]

    if TYPE_CHECKING:  # defined by the subclass (_BatchBuilderMethods), as for the C type

        def _append_slow(
            self, value: Any, *, key: Any = None, timestamp: Any = None
        ) -> int | None: ...

    def append(self, value: Any, *, key: Any = None, timestamp: Any = None) -> int | None:
        """Add a message; its position, or None if the batch is full (or closed)."""
        return self._append_slow(value, key=key, timestamp=timestamp)


class _BatchBuilderMethods:
    """What :class:`BatchBuilder` adds to its appender (kept apart so the tests can build
    the same class on the pure twin: :func:`pure_batch_builder`)."""

    if not TYPE_CHECKING:  # (its subclasses hold the fields; a type checker sees them here)
        __slots__ = ()

    _limit: int
    _max_bytes: int
    _max_message: int
    _plain: bool
    _closed: bool
    _serialize: Callable[[Any], bytes] | None
    size_bytes: int
    values: list[bytes]

    def __init__(
        self,
        *,
        max_count: int,
        max_bytes: int,
        max_message_size: int,
        serializer: Callable[[Any], bytes] | None,
    ) -> None:
        #: Appends refused from this many messages on (0 once closed).
        self._limit = max_count
        self._max_bytes = max_bytes
        self._max_message = max_message_size
        self._serialize = serializer
        self._plain = serializer is None
        self._closed = False
        #: Payload bytes appended so far.
        self.size_bytes = 0
        #: The payloads appended so far, in order.
        self.values = []

    def __len__(self) -> int:
        return len(self.values)

    def _append_slow(self, value: Any, *, key: Any = None, timestamp: Any = None) -> int | None:
        """``append`` with every check: all of it in the pure twin; in C only what the
        C path does not take (keywords, a value to serialise, an oversized one)."""
        if key is not None or timestamp is not None:
            raise InvalidConfigError(
                "a 0.7 message has no key or timestamp: pass key= to send_batch() to route "
                "the batch"
            )
        values = self.values
        count = len(values)
        if count >= self._limit:
            return None
        if type(value) is not bytes or self._serialize is not None:
            value = serialize(value, self._serialize)
        size = len(value)
        if size > self._max_message:
            check_message_size(size, self._max_message)
        total = self.size_bytes + size
        if total > self._max_bytes and count:
            return None
        values.append(value)
        self.size_bytes = total
        return count

    def record_count(self) -> int:
        """Messages appended."""
        return len(self.values)

    def size(self) -> int:
        """Payload bytes appended."""
        return self.size_bytes

    def close(self) -> None:
        """Refuse further appends (:meth:`Producer.send_batch` closes it too)."""
        self._closed = True
        self._limit = 0

    @property
    def closed(self) -> bool:
        return self._closed


if TYPE_CHECKING:
    _Appender = _PureAppender
else:
    _Appender = _accelerated("Appender", _PureAppender)


class BatchBuilder(_BatchBuilderMethods, _Appender):
    """Messages collected by the caller, sent as one message set by
    :meth:`Producer.send_batch` (aiokafka's ``create_batch`` / ``send_batch`` shape).

    :meth:`append` takes a value (serialised with the producer's ``value_serializer``)
    and returns its position in the batch, or None once the batch is full (``batch_size``
    messages or ``batch_bytes`` of payload, as the producer's own batches). 0.7 messages
    carry no key and no timestamp: the key given to :meth:`Producer.send_batch` routes the
    whole batch, so ``append`` refuses them rather than drop them silently. ``append`` is
    the hot path of ``send_batch``: plain bytes are appended in C when the accelerator was
    built.
    """

    __slots__ = ("_closed", "_serialize")


if not TYPE_CHECKING and _Appender is not _PureAppender:
    from . import _appender

    # The C append as BatchBuilder's own method: called on an instance of a subclass of
    # its type, an inherited C method is not specialised by the interpreter (a generic
    # call with a subtype check, ~35 ns a message; see append_method in _appender.c).
    BatchBuilder.append = _appender.append_method(BatchBuilder)


def pure_batch_builder() -> type[BatchBuilder]:
    """:class:`BatchBuilder` on the pure-Python appender whatever was built (for tests
    that hold the two twins to one contract)."""

    class PureBatchBuilder(_BatchBuilderMethods, _PureAppender):
        __slots__ = ("_closed", "_serialize")

    return PureBatchBuilder  # type: ignore[return-value]


def check_message_size(size: int, max_message_size: int) -> None:
    """Refuse a payload of ``size`` bytes over ``max_message_size`` (at ``send()``)."""
    if size > max_message_size:
        raise MessageTooLargeError(
            f"a message of {size} bytes exceeds max.message.size {max_message_size}; "
            "a 0.7 broker would drop it silently"
        )


def serialize(value: Any, serializer: Callable[[Any], bytes] | None) -> bytes:
    """A value as the payload bytes to send: ``serializer(value)``, or without one bytes
    (and bytes-like) as they are and ``str`` as UTF-8. Anything else is refused here, at
    ``send()``, not later in the sender."""
    if serializer is not None:
        payload: object = serializer(value)
        if type(payload) is bytes:
            return payload
        if isinstance(payload, (bytearray, memoryview)):
            return bytes(payload)
        raise TypeError(f"the value_serializer returned a {type(payload).__name__}, not bytes")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(
        f"cannot send a {type(value).__name__} value without a value_serializer "
        "(bytes and str are sent as they are)"
    )
