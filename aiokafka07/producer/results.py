"""What a producer reports: each message's result, the counters, and the ledger of outcomes.

:class:`Outcomes` is the one place a message ends. Delivered or failed, it is counted once
(a batch is marked ended), its buffer space is given back, and a failure is kept, with
its cause, for :meth:`Producer.close` to name.

A failed outcome is true: the error either says the messages may be in the log
(:func:`maybe_appended`: a :class:`~aiokafka07.errors.KafkaConnectionError` whose
``maybe_delivered`` is True, such as :class:`~aiokafka07.errors.DeliveryUnknownError`),
or they are not. A batch an earlier attempt may have put in the log (``doubtful``) that
then fails for any other reason fails with a :class:`DeliveryUnknownError` whose cause
is that reason. Unknown outcomes are counted apart (``messages_unknown``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..errors import DeliveryUnknownError, KafkaConnectionError, ProducerClosedError
from ..supervisor import mark_retrieved
from .batch import Batch, track_futures, track_list

__all__ = ["EncodedMessage", "Outcomes", "ProduceResult", "ProducerMetrics", "maybe_appended"]

log = logging.getLogger("aiokafka07.producer")


class ProduceResult(NamedTuple):
    """Where a message went. ``confirmed``: the partition's log showed the bytes of the
    produce (confirm mode, :mod:`aiokafka07.confirm`); False without confirm, when
    delivered means written to the socket."""

    topic: str
    broker_id: int
    partition: int
    confirmed: bool


@dataclass
class ProducerMetrics:
    """Counters a user can read (``producer.metrics``: a snapshot taken when read).

    ``messages_failed`` counts messages that failed and are not in the log;
    ``messages_unknown`` those that failed with an outcome nobody could settle (their
    error's ``maybe_delivered`` is True: they may be in the log, once). ``settled``
    counts the messages whose connection closed before they were confirmed and whose
    outcome the log ends read afterwards decided (appended or absent).
    """

    messages_sent: int = 0
    bytes_sent: int = 0
    batches_sent: int = 0
    requests_sent: int = 0
    retries: int = 0
    messages_failed: int = 0
    queued_messages: int = 0
    queued_bytes: int = 0
    messages_unknown: int = 0
    settled: int = 0


def maybe_appended(exc: BaseException) -> bool:
    """Whether a produce that failed with ``exc`` may be in the log all the same."""
    return isinstance(exc, KafkaConnectionError) and exc.maybe_delivered


class EncodedMessage(Protocol):
    """A message as a consumer hands it out (:class:`~aiokafka07.protocol.Message`,
    :class:`~aiokafka07.records.ConsumerRecord`): what :meth:`Producer.send_message`
    sends on unchanged."""

    @property
    def value(self) -> bytes: ...

    @property
    def magic(self) -> int: ...

    @property
    def attributes(self) -> int: ...


Where = tuple[str, int, int]


class Outcomes:
    """The ledger: every message accepted ends here exactly once.

    ``release(messages, bytes)`` gives buffer space back (the accumulator's).
    """

    def __init__(self, metrics: ProducerMetrics, release: Callable[[int, int], None]) -> None:
        self.metrics = metrics
        self._release = release
        #: (topic, broker, partition) -> the last cause of a failure there.
        self.last_errors: dict[Where, BaseException] = {}
        #: (topic, broker, partition) -> cause (exception class) -> [messages, the first
        #: error of that class there, whose text the report quotes].
        self.failures: dict[Where, dict[type[BaseException], list[Any]]] = {}

    def deliver(self, batch: Batch, result: ProduceResult) -> None:
        """Every message of ``batch`` was delivered."""
        if batch.ended:
            return
        batch.ended = True
        futures = batch.futures
        track_futures(futures)  # back on the collector's lists before they are let go
        track_list(batch.values)
        try:
            for future in futures:
                future.set_result(result)
        except asyncio.InvalidStateError:  # a caller cancelled its future
            for future in futures:
                if not future.done():
                    future.set_result(result)
        m = self.metrics
        m.messages_sent += batch.count
        m.bytes_sent += batch.size
        m.batches_sent += 1
        self._release(batch.count, batch.size)

    def fail(self, batch: Batch, exc: BaseException) -> None:
        """Every message of ``batch`` failed with ``exc`` (made a
        :class:`DeliveryUnknownError` if an earlier attempt may have appended them)."""
        if batch.ended:
            return
        batch.ended = True
        if batch.doubtful and not maybe_appended(exc):
            unknown = DeliveryUnknownError(
                f"an earlier attempt may have appended these messages (its outcome was "
                f"unknown when they were sent again); the last one failed: {exc}",
                broker=getattr(exc, "broker", None),
            )
            unknown.__cause__ = exc
            exc = unknown
        track_futures(batch.futures)  # back on the collector's lists before they are let go
        track_list(batch.values)
        for future in batch.futures:
            if not future.done():
                future.set_exception(exc)
                # Nobody may be waiting for a failed message: close() reports it instead.
                mark_retrieved(future)
        if maybe_appended(exc):
            self.metrics.messages_unknown += batch.count
        else:
            self.metrics.messages_failed += batch.count
        self.last_errors[batch.where] = exc
        entry = self.failures.setdefault(batch.where, {}).setdefault(type(exc), [0, exc])
        entry[0] += batch.count
        self._release(batch.count, batch.size)

    @property
    def undelivered(self) -> int:
        return sum(count for causes in self.failures.values() for count, _ in causes.values())

    @property
    def unknown(self) -> int:
        """Of :attr:`undelivered`, the messages that may be in the log all the same."""
        return self.metrics.messages_unknown

    def report(self) -> ProducerClosedError | None:
        """The error :meth:`Producer.close` raises: for every place messages failed, how
        many failed of each cause (exception class), with the text of that cause's first
        error there; None when nothing failed."""
        if not self.failures:
            return None
        total = self.undelivered
        parts = []
        causes: dict[tuple[str, int | None, int], dict[str, int]] = {}
        for where in sorted(self.failures):
            topic, broker, partition = where
            counted = sorted(self.failures[where].values(), key=lambda entry: -entry[0])
            causes[where] = {type(exc).__name__: count for count, exc in counted}
            parts += [
                f"{topic}/{broker}-{partition}: {count} x {type(exc).__name__}: {exc}"
                for count, exc in counted
            ]
        unknown = self.unknown
        maybe = f", {unknown} of which may have been appended (outcome unknown)" if unknown else ""
        return ProducerClosedError(
            f"{total} messages were not delivered{maybe} ({'; '.join(parts)})",
            undelivered=total,
            errors={where: exc for where, exc in self.last_errors.items()},
            causes=causes,
            unknown=unknown,
        )
